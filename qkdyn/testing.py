"""Tools for property-based tests of attention dynamics: hypothesis strategies and law assertions.

Strategies (bounds follow hypothesis's conventions: ``min_value`` / ``max_value``):

* :func:`setting_strategy` draws a :class:`~qkdyn.Setting` (K, D, N, m, n, s, eta_QK, eta_OV, qk0,
  ov0); each field a fixed value, a ``(min_value, max_value)`` pair or a hypothesis strategy.
  ``hypothesis.strategies.from_type(Setting)`` draws from it too (registered on import);
* :func:`params` draws a parameterisation (CACO, FACO, CAFO, FAFO, and optionally ``paper``);
  :func:`for_each_param` runs a test once per form instead, so no form is left untried however
  few examples hypothesis draws, and for any circuit specs given (``specs=[...]``);
* :func:`rhos` draws a learning-rate ratio rho = eta_QK / eta_OV, log-uniformly.

None of them is called ``settings``: ``from hypothesis import settings`` stays hypothesis's decorator.

Assertions on a :class:`~qkdyn.simulate.solve.Trajectory` (from :func:`qkdyn.solve`) or a spec's
:class:`~qkdyn.simulate.specsolve.SpecTrajectory` (``qkdyn.solve(setting, spec)``):

* :func:`assert_conserved` - every conserved quantity (the line Phi(qk) - rho Psi(ov) and the
  polynomial invariants; for a spec, the conserved polynomials its derivation found) stays constant to ``rel``;
* :func:`assert_grows_like` - a quantity (a name of :data:`QUANTITIES`, a reduced variable's name,
  or a function of the trajectory) grows like a law on a late window. A law is the text ``qkdyn
  derive`` prints (``"log t"``, ``"log t + log log t"``, ``"(log t)^2 log log t"``,
  ``"2 log log t + log log log t"``; see :class:`~qkdyn.simulate.growth.Law`) or an exponent p,
  meaning (log t)^p. Each criterion is checked on its own (:func:`check_growth`) and a failure
  names the criterion, the measured numbers and what would have passed.

Example (a pytest file)::

    from hypothesis import given, settings
    import qkdyn
    from qkdyn import testing

    @testing.for_each_param()
    @settings(max_examples=5, deadline=None)
    @given(setting=testing.setting_strategy(classes=(2, 4)), rho=testing.rhos(min_value=1, max_value=100))
    def test_ov_grows_like_log_t(param, setting, rho):
        tr = qkdyn.solve(setting.replace(eta_qk=rho * setting.eta_ov), param, t_max=1e40, points=200)
        testing.assert_grows_like(tr, "ov", qkdyn.derive(param).growth["ov"], window=(1e30, 1e40))
"""
from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from qkdyn.simulate.growth import RIVALS, Law, fit_law, local_exponent
from qkdyn.theory.setting import ALL_PARAMS, EXACT_PARAMS, Setting

if TYPE_CHECKING:
    from qkdyn.simulate.solve import Trajectory

#: default bounds of :func:`setting_strategy`, ``(min_value, max_value)``: wide enough to matter,
#: narrow enough to solve fast
SETTING_BOUNDS: dict[str, tuple[float, float]] = {
    "classes": (2, 8), "distinct": (1, 20), "commons": (1, 40), "m": (1, 20), "n": (1, 40),
    "scale": (0.3, 2.0), "eta_qk": (0.01, 100.0), "eta_ov": (0.1, 10.0), "qk0": (0.001, 1.0), "ov0": (0.001, 1.0),
}

#: quantities :func:`assert_grows_like` knows by name: name -> (description, y along a trajectory).
#: Any reduced variable of the trajectory (``trajectory.variables``) is accepted by its name too.
QUANTITIES: dict[str, tuple[str, Callable[[Trajectory], np.ndarray]]] = {
    "ov": ("output margin ov", lambda tr: tr.ov),
    "qk": ("attention logit gap qk", lambda tr: tr.qk),
    "attn": ("attention mass on the distinct tokens, m e^qk / (m e^qk + n)", lambda tr: tr.attn),
    "loss": ("population loss", lambda tr: tr.loss),
    "log_odds": ("log(attn / (1 - attn)) = qk + log(m/n)", lambda tr: tr.log_odds),
    "exp(qk)": ("e^qk (also spelled 'e^qk')", lambda tr: np.exp(tr.qk)),
    "e^qk": ("same as 'exp(qk)'", lambda tr: np.exp(tr.qk)),
    "odds": ("attention odds attn / (1 - attn) = (m/n) e^qk", lambda tr: np.exp(tr.log_odds)),
}

Bound = float | int | tuple | Any  # a value, a (min_value, max_value) pair, or a hypothesis strategy


def _draw(st, name: str, bound: Bound):
    """A strategy for one Setting field: a strategy as given, a fixed value, or a (min_value,
    max_value) range (integers for counts, log-uniform for rates)."""
    if hasattr(bound, "example") and hasattr(bound, "map"):  # already a hypothesis strategy
        return bound
    if not isinstance(bound, tuple):
        return st.just(bound)
    lo, hi = bound
    if not lo <= hi:
        raise ValueError(f"{name}: need min_value <= max_value, got ({lo!r}, {hi!r})")
    if name in ("classes", "distinct", "commons", "m", "n"):
        return st.integers(min_value=int(lo), max_value=int(hi))
    if name.startswith("eta_") and lo > 0:
        return st.floats(min_value=math.log(lo), max_value=math.log(hi)).map(lambda x: min(max(math.exp(x), lo), hi))
    return st.floats(min_value=float(lo), max_value=float(hi))


def setting_strategy(**bounds: Bound):
    """Strategy of :class:`~qkdyn.Setting`; override any bound of :data:`SETTING_BOUNDS` by field name
    with a fixed value, a ``(min_value, max_value)`` pair or a strategy, e.g.
    ``setting_strategy(classes=(2, 4), scale=1.0)``. Learning rates are drawn log-uniformly."""
    from hypothesis import strategies as st

    unknown = set(bounds) - set(SETTING_BOUNDS)
    if unknown:
        raise ValueError(f"unknown Setting fields {sorted(unknown)}; known: {sorted(SETTING_BOUNDS)}")
    merged = {**SETTING_BOUNDS, **bounds}
    return st.builds(Setting, **{name: _draw(st, name, bound) for name, bound in merged.items()})


def params(include_paper: bool = False):
    """Strategy of parameterisation names: the four exact forms, plus ``paper`` if asked.

    hypothesis may draw the same form several times before it tries another: with few examples
    some form can go untried. To cover every form, use :func:`for_each_param` instead."""
    from hypothesis import strategies as st

    return st.sampled_from(ALL_PARAMS if include_paper else EXACT_PARAMS)


def for_each_param(include_paper: bool = False, argname: str = "param", specs: Sequence = (), only_specs: bool = False):
    """Decorator: run the test once per parameterisation (``pytest.mark.parametrize``), so every form
    is tried whatever ``max_examples`` is; combine it with ``@given`` for the other arguments.
    ``specs``: circuit specs (:class:`~qkdyn.Spec`) to run it for as well (``only_specs``: for them
    alone), each shown by its name; :func:`qkdyn.solve` and :func:`qkdyn.sharpness` take a spec where
    they take a name."""
    import pytest

    names = [] if only_specs else list(ALL_PARAMS if include_paper else EXACT_PARAMS)
    values = names + list(specs)
    return pytest.mark.parametrize(argname, values, ids=[v if isinstance(v, str) else v.name for v in values])


def rhos(min_value: float = 1e-2, max_value: float = 1e2):
    """Strategy of rho = eta_QK / eta_OV, log-uniform in [min_value, max_value]."""
    from hypothesis import strategies as st

    if not 0 < min_value <= max_value:
        raise ValueError(f"need 0 < min_value <= max_value, got {min_value}, {max_value}")
    return st.floats(min_value=math.log(min_value), max_value=math.log(max_value)).map(
        lambda x: min(max(math.exp(x), min_value), max_value))


def assert_conserved(trajectory: Trajectory, rel: float = 1e-8) -> None:
    """Every conserved quantity of ``trajectory`` drifts by at most ``rel`` (relative; see
    :meth:`~qkdyn.simulate.solve.Trajectory.drifts`). The message names each one that fails, its
    drift and where it is largest."""
    drifts = trajectory.drifts()
    if not drifts:  # a spec whose derivation found nothing conserved (weight decay, an MLP coupling)
        raise AssertionError(f"{trajectory.param}: no conserved quantity to check: its derivation found none "
                             "(qkdyn derive --spec says why)")
    failed = {name: drift for name, drift in drifts.items() if not drift <= rel}
    if failed:
        raise AssertionError(
            f"{trajectory.param} (rho = {trajectory.setting.rho:g}): conserved quantities drift beyond rel = {rel:g} "
            f"over t in [0, {trajectory.t[-1]:g}]: " + ", ".join(f"{n} by {d:.3g}" for n, d in failed.items()))


@dataclasses.dataclass(frozen=True)
class Criterion:
    """One criterion of a growth check: its name, whether it passed, what was measured and what passes."""

    name: str
    passed: bool
    measured: str
    needed: str

    def __str__(self) -> str:
        return f"{self.name}: {'passed' if self.passed else 'FAILED'}: {self.measured} (passes if {self.needed})"


#: the criteria of a law given as text; an exponent p has the one criterion "exponent"
LAW_CRITERIA = ("slope", "fit", "rivals")


def quantity_values(trajectory: Trajectory, quantity: str | Callable) -> tuple[str, np.ndarray]:
    """(name, values along the trajectory) of a quantity given by name (:data:`QUANTITIES` or a reduced
    variable) or as a function of the trajectory."""
    if callable(quantity):
        return getattr(quantity, "__name__", "quantity"), np.asarray(quantity(trajectory), dtype=float)
    if quantity in QUANTITIES:
        return quantity, np.asarray(QUANTITIES[quantity][1](trajectory), dtype=float)
    if quantity in trajectory.variables:
        return quantity, np.asarray(trajectory.state[trajectory.variables.index(quantity)], dtype=float)
    raise ValueError(f"unknown quantity {quantity!r}; known: {', '.join(QUANTITIES)}, the reduced variables "
                     f"{', '.join(trajectory.variables)}, or a function of the trajectory")


def check_growth(trajectory: Trajectory, quantity: str | Callable, law: str | float | Law, *, rel: float = 0.05,
                 window: tuple[float, float | None] = (1e10, None), rival_margin: float = 1.1) -> list[Criterion]:
    """Every criterion of "``quantity`` grows like ``law`` on ``window``", each checked on its own.

    ``window`` = (t1, t2), t2 None: the last time; it must hold at least 5 rows (else ValueError). For a
    law given as text (a :class:`~qkdyn.simulate.growth.Law`), with the fit y = a phi(t) + c on the window:

    * ``slope``: a > 0 (the quantity grows with phi);
    * ``fit``: the relative rms residual (to the spread of y) is at most ``rel``;
    * ``rivals``: no law of a different leading order among :data:`~qkdyn.simulate.growth.RIVALS`
      (log log t, log t, log t log log t, (log t)^2, (log t)^2 log log t, (log t)^3) fits with a residual
      smaller than the law's divided by ``rival_margin`` (default 1.1: a rival must fit more than 10%
      better). Where the window cannot tell two orders apart (residuals within 10%) both pass: widen
      the window (t to 1e100 costs nothing in log time) to separate them.

    For an exponent p: ``exponent``: the local exponent d log y / d log log t stays within
    ``rel`` * max(|p|, 1) of p over the window.
    """
    name, values = quantity_values(trajectory, quantity)
    t1, t2 = window
    t2 = float(trajectory.t[-1]) if t2 is None else t2
    rows = (trajectory.t >= t1) & (trajectory.t <= t2)
    if rows.sum() < 5:
        raise ValueError(f"only {rows.sum()} rows of the trajectory lie in the window [{t1:g}, {t2:g}] for {name}; "
                         "solve with more points or a longer t_max")
    t, y = trajectory.t[rows], values[rows]
    if not isinstance(law, (str, Law)):
        p = float(law)
        if np.any(y <= 0):
            return [Criterion("exponent", False, f"{name} is not positive on the window (min {y.min():.4g})",
                              "y > 0, so that log y exists")]
        exponent = local_exponent(t, np.log(y))
        worst = int(np.argmax(np.abs(exponent - p)))
        allowed = rel * max(abs(p), 1.0)
        return [Criterion("exponent", bool(abs(exponent[worst] - p) <= allowed),
                          f"local exponent d log y / d log log t = {exponent[worst]:.4g} at t = {t[worst]:.3g} "
                          f"(range {exponent.min():.4g} to {exponent.max():.4g})",
                          f"it stays within {p:g} +- {allowed:.3g}")]
    law = law if isinstance(law, Law) else Law.parse(law)
    fit = fit_law(t, y, law)
    rivals = {str(r): fit_law(t, y, r)["rel_rms"] for r in RIVALS if r.leading != law.leading}
    closest = min(rivals, key=lambda name: rivals[name])
    return [
        Criterion("slope", fit["a"] > 0, f"fit y = a ({law}) + c has a = {fit['a']:.4g}", "a > 0"),
        Criterion("fit", fit["rel_rms"] <= rel, f"relative rms residual {fit['rel_rms']:.3g}",
                  f"it is at most rel = {rel:g}"),
        Criterion("rivals", rivals[closest] * rival_margin >= fit["rel_rms"],
                  f"closest rival {closest} fits with residual {rivals[closest]:.3g}, the law with {fit['rel_rms']:.3g}",
                  f"no rival's residual is below the law's / {rival_margin:g}"),
    ]


def assert_grows_like(trajectory: Trajectory, quantity: str | Callable, law: str | float | Law, *, rel: float = 0.05,
                      window: tuple[float, float | None] = (1e10, None), rival_margin: float = 1.1,
                      criteria: Sequence[str] | None = None) -> None:
    """Assert that ``quantity`` grows like ``law`` on ``window``: every criterion of :func:`check_growth`
    (or only those named in ``criteria``) passes. The message names each failed criterion, with the
    measured numbers and what would have passed.

    Typical use: ``assert_grows_like(tr, "odds", qkdyn.derive(param).growth["odds"], window=(1e30, 1e40))``.
    """
    results = check_growth(trajectory, quantity, law, rel=rel, window=window, rival_margin=rival_margin)
    if criteria is not None:
        unknown = set(criteria) - {c.name for c in results}
        if unknown:
            raise ValueError(f"unknown criteria {sorted(unknown)}; this law has {', '.join(c.name for c in results)}")
        results = [c for c in results if c.name in criteria]
    failed = [c for c in results if not c.passed]
    if failed:
        name = quantity if isinstance(quantity, str) else getattr(quantity, "__name__", "quantity")
        shown = law if isinstance(law, (str, Law)) else Law.log_power(float(law))
        t2 = trajectory.t[-1] if window[1] is None else window[1]
        raise AssertionError(
            f"{trajectory.param} (rho = {trajectory.setting.rho:g}): {name} does not grow like {shown} on t in "
            f"[{window[0]:g}, {t2:g}]; " + "; ".join(f"criterion {c.name!r} failed: {c.measured} (passes if {c.needed})"
                                                     for c in failed))


def _register() -> None:
    """``hypothesis.strategies.from_type(Setting)`` draws from :func:`setting_strategy`."""
    try:
        from hypothesis import strategies as st
    except ImportError:  # hypothesis is optional (the ``test`` extra); the assertions work without it
        return
    st.register_type_strategy(Setting, setting_strategy())


_register()
