"""Tools for property-based tests of attention dynamics: hypothesis strategies and law assertions.

Strategies (each bound is a ``(lo, hi)`` pair a user can narrow, or a fixed value):

* :func:`settings` draws a :class:`~qkdyn.Setting` (K, D, N, m, n, s, eta_QK, eta_OV, qk0, ov0);
* :func:`params` draws a parameterisation (CACO, FACO, CAFO, FAFO, and optionally ``paper``);
* :func:`rhos` draws a learning-rate ratio rho = eta_QK / eta_OV, log-uniformly.

Assertions on a :class:`~qkdyn.simulate.solve.Trajectory` (from :func:`qkdyn.solve`):

* :func:`assert_conserved` - every conserved quantity (the line Phi(qk) - rho Psi(ov) and the
  polynomial invariants) stays constant to ``rel``;
* :func:`assert_grows_like` - a quantity (``ov``, ``qk``, ``exp(qk)``, ``odds`` or a function of the
  trajectory) grows like a law (``"log t"``, ``"log^2 t"``, ``"log log t"``, or an exponent p meaning
  (log t)^p) on a late window.

Example (a pytest file)::

    from hypothesis import given, settings as run_settings
    import qkdyn
    from qkdyn import testing

    @run_settings(max_examples=5, deadline=None)
    @given(setting=testing.settings(classes=(2, 4)), rho=testing.rhos(1, 100))
    def test_ov_grows_like_log_t(setting, rho):
        tr = qkdyn.solve(setting.replace(eta_qk=rho * setting.eta_ov), "CACO", t_max=1e15)
        testing.assert_grows_like(tr, "ov", "log t", window=(1e10, 1e15))
"""
from __future__ import annotations

import math
from typing import Callable

import numpy as np

from qkdyn.simulate import growth
from qkdyn.theory.setting import ALL_PARAMS, EXACT_PARAMS, Setting

#: default bounds of :func:`settings`: wide enough to matter, narrow enough to solve fast
SETTING_BOUNDS = {
    "classes": (2, 8), "distinct": (1, 20), "commons": (1, 40), "m": (1, 20), "n": (1, 40),
    "scale": (0.3, 2.0), "eta_qk": (0.01, 100.0), "eta_ov": (0.1, 10.0), "qk0": (0.001, 1.0), "ov0": (0.001, 1.0),
}

#: quantities :func:`assert_grows_like` knows by name: name -> y along a trajectory (y > 0)
QUANTITIES: dict[str, Callable] = {
    "ov": lambda tr: tr.ov,
    "qk": lambda tr: tr.qk,
    "exp(qk)": lambda tr: np.exp(tr.qk),
    "odds": lambda tr: np.exp(tr.log_odds),
}


def _draw(st, name: str, bound):
    """A strategy for one Setting field: a fixed value, or a (lo, hi) range (rates log-uniform)."""
    if not isinstance(bound, tuple):
        return st.just(bound)
    lo, hi = bound
    if name in ("classes", "distinct", "commons", "m", "n"):
        return st.integers(int(lo), int(hi))
    if name.startswith("eta_") and lo > 0:
        return st.floats(math.log(lo), math.log(hi)).map(math.exp)
    return st.floats(float(lo), float(hi))


def settings(**bounds):
    """Strategy of :class:`~qkdyn.Setting`; override any bound of :data:`SETTING_BOUNDS` by field name,
    e.g. ``settings(classes=(2, 4), scale=1.0)``. Learning rates are drawn log-uniformly."""
    from hypothesis import strategies as st

    unknown = set(bounds) - set(SETTING_BOUNDS)
    if unknown:
        raise ValueError(f"unknown Setting fields {sorted(unknown)}; known: {sorted(SETTING_BOUNDS)}")
    merged = {**SETTING_BOUNDS, **bounds}
    return st.builds(Setting, **{name: _draw(st, name, bound) for name, bound in merged.items()})


def params(include_paper: bool = False):
    """Strategy of parameterisation names: the four exact forms, plus ``paper`` if asked."""
    from hypothesis import strategies as st

    return st.sampled_from(ALL_PARAMS if include_paper else EXACT_PARAMS)


def rhos(lo: float = 1e-2, hi: float = 1e2):
    """Strategy of rho = eta_QK / eta_OV, log-uniform in [lo, hi]."""
    from hypothesis import strategies as st

    if not 0 < lo <= hi:
        raise ValueError(f"need 0 < lo <= hi, got {lo}, {hi}")
    return st.floats(math.log(lo), math.log(hi)).map(lambda x: min(max(math.exp(x), lo), hi))


def assert_conserved(trajectory, rel: float = 1e-8) -> None:
    """Every conserved quantity of ``trajectory`` drifts by at most ``rel`` (relative; see
    :meth:`~qkdyn.simulate.solve.Trajectory.drifts`). The message names each one that fails, its
    drift and where it is largest."""
    drifts = trajectory.drifts()
    failed = {name: drift for name, drift in drifts.items() if not drift <= rel}
    if failed:
        raise AssertionError(
            f"{trajectory.param} (rho = {trajectory.setting.rho:g}): conserved quantities drift beyond rel = {rel:g} "
            f"over t in [0, {trajectory.t[-1]:g}]: " + ", ".join(f"{n} by {d:.3g}" for n, d in failed.items()))


def assert_grows_like(trajectory, quantity: str | Callable, law: str | float, *, rel: float = 0.05,
                      window: tuple[float, float | None] = (1e10, None)) -> None:
    """Assert that ``quantity`` grows like ``law`` on ``window`` = (t1, t2) (t2 None: the last time).

    ``law`` a family name (``"log t"``, ``"log^2 t"``, ``"log log t"``): the fit y = a phi(t) + c on
    the window must have a > 0 and a relative rms residual (to the spread of y) at most ``rel``, and
    no other family may fit better. ``law`` a number p: the local exponent d log y / d log log t must
    stay within ``rel`` * max(p, 1) of p over the window.
    """
    y_of = QUANTITIES[quantity] if isinstance(quantity, str) else quantity
    name = quantity if isinstance(quantity, str) else getattr(quantity, "__name__", "quantity")
    t1, t2 = window
    t2 = trajectory.t[-1] if t2 is None else t2
    rows = (trajectory.t >= t1) & (trajectory.t <= t2)
    if rows.sum() < 5:
        raise AssertionError(f"only {rows.sum()} rows of the trajectory lie in the window [{t1:g}, {t2:g}]; "
                             "solve with more points or a longer t_max")
    t, y = trajectory.t[rows], np.asarray(y_of(trajectory), dtype=float)[rows]
    where = f"{trajectory.param} (rho = {trajectory.setting.rho:g}), {name} on t in [{t1:g}, {t2:g}]"
    if isinstance(law, str):
        if law not in growth.FAMILIES:
            raise ValueError(f"unknown law {law!r}; known: {', '.join(growth.FAMILIES)} or an exponent p")
        fits = growth.fit_families(t, y)
        best = growth.best_family(fits)
        fit = fits[law]
        if not (fit["a"] > 0 and fit["rel_rms"] <= rel and best == law):
            raise AssertionError(f"{where} does not grow like {law}: fit a = {fit['a']:.4g}, relative rms "
                                 f"residual {fit['rel_rms']:.3g} (allowed {rel:g}); best family {best} "
                                 f"(residual {fits[best]['rel_rms']:.3g})")
        return
    exponent = growth.local_exponent(t, np.log(y))
    worst = int(np.argmax(np.abs(exponent - law)))
    if abs(exponent[worst] - law) > rel * max(abs(law), 1.0):
        raise AssertionError(f"{where} does not grow like (log t)^{law:g}: local exponent "
                             f"{exponent[worst]:.4g} at t = {t[worst]:.3g} (allowed {law:g} +- {rel * max(abs(law), 1.0):.3g})")
