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

Assertions on a :class:`~qkdyn.simulate.trajectory.Trajectory` (from :func:`qkdyn.solve`) or a spec's
:class:`~qkdyn.simulate.specsolve.SpecTrajectory` (``qkdyn.solve(setting, spec)``):

* :func:`assert_conserved` - every conserved quantity (the line Phi(qk) - rho Psi(ov) and the
  polynomial invariants; for a spec, the conserved polynomials its derivation found) stays constant to ``rel``;
* :func:`assert_grows_like` - a quantity (a name of :data:`QUANTITIES`, a reduced variable's name,
  or a function of the trajectory) grows like a law on a late window. A law is the text ``qkdyn
  derive`` prints (``"log t"``, ``"log t + log log t"``, ``"(log t)^2 log log t"``,
  ``"2 log log t + log log log t"``; see :class:`~qkdyn.simulate.growth.Law`) or an exponent p,
  meaning (log t)^p. Each criterion is checked on its own (:func:`check_growth`) and a failure
  names the criterion, the measured numbers and what would have passed. A window that cannot tell
  the law from a rival of another order is a third outcome, "cannot distinguish", never a failure;
  so is a window on which the trajectory is still in transit (its attention not yet at the limit the
  laws are derived for: :func:`regime_criterion`), "in transit". By default the draw is rejected
  (hypothesis draws another) or the test skipped (``on_indistinct="fail"`` raises
  :class:`CannotDistinguish`, or its subclass :class:`InTransit`, instead). :func:`verdict` reads one
  outcome off a check's criteria.

Example (a pytest file)::

    from hypothesis import given, settings
    import qkdyn
    from qkdyn import testing

    @testing.for_each_param()
    @settings(max_examples=5, deadline=None)
    @given(setting=testing.setting_strategy(classes=(2, 4)), rho=testing.rhos(min_value=1, max_value=100))
    def test_ov_grows_like_the_derived_law(param, setting, rho):
        tr = qkdyn.solve(setting.replace(eta_qk=rho * setting.eta_ov), param, t_max=1e300, points=300)
        testing.assert_grows_like(tr, "ov", qkdyn.derive(param).growth["ov"], window=(1e100, 1e300))
"""
from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, NoReturn

import numpy as np

from qkdyn.simulate.growth import RIVALS, Law, decisive_shares, fit_law, local_exponent
from qkdyn.theory.setting import ALL_PARAMS, EXACT_PARAMS, Setting

if TYPE_CHECKING:
    from qkdyn.simulate.trajectory import Trajectory

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
    :meth:`~qkdyn.simulate.trajectory.Trajectory.drifts`). The message names each one that fails, its
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


#: the outcomes of a criterion: it holds, it fails, the window cannot tell the law from a rival, or the trajectory
#: is still in transit on the window (the law's precondition does not hold there: it is not judged)
PASSED, FAILED, INDISTINCT, IN_TRANSIT = "passed", "failed", "cannot distinguish", "in transit"


class CannotDistinguish(AssertionError):
    """The window cannot tell the law from a rival of another order: the law neither holds nor fails there.
    :func:`assert_grows_like` raises it with ``on_indistinct="fail"``."""


class InTransit(CannotDistinguish):
    """The trajectory is still in transit on the window (:func:`regime_criterion`): the data there cannot tell the
    law's asymptotic behaviour from the transient, and the law neither holds nor fails. :func:`assert_grows_like`
    raises it with ``on_indistinct="fail"``."""


@dataclasses.dataclass(frozen=True)
class Criterion:
    """One criterion of a growth check: its name, its outcome (:data:`PASSED`, :data:`FAILED`, :data:`INDISTINCT`
    or :data:`IN_TRANSIT`), what was measured, what passes, and the window (t1, t2) it was checked on; where the
    trajectory is in transit there, ``own_outcome`` is what the criterion found on its own (None elsewhere)."""

    name: str
    outcome: str
    measured: str
    needed: str
    window: tuple[float, float]
    own_outcome: str | None = None

    @property
    def passed(self) -> bool:
        return self.outcome == PASSED

    def __str__(self) -> str:
        shown = {PASSED: "passed", FAILED: "FAILED", INDISTINCT: "CANNOT DISTINGUISH", IN_TRANSIT: "IN TRANSIT"}[
            self.outcome]
        own = f" (on its own: {self.own_outcome})" if self.own_outcome else ""
        return f"{self.name}: {shown}{own}: {self.measured} (passes if {self.needed})"


#: the criteria of a law given as text, after the precondition "regime" (:func:`regime_criterion`) that every check
#: has; an exponent p has the criteria "exponent" and "rivals"
LAW_CRITERIA = ("slope", "fit", "rivals")


def regime_criterion(trajectory: Trajectory, window: tuple[float, float], rel: float = 0.05) -> Criterion:
    """The precondition of every growth law, checked on the trajectory's rows in ``window``: outcome :data:`PASSED`,
    or :data:`IN_TRANSIT` where the trajectory is still in transit there.

    The laws (theory/asymptotics.py) are derived for the attention at its limit. The loss sees the margin through
    attn ov = ov - delta, and the laws take the margin the attention leaves unused, delta = (1 - attn) ov, at its
    limit c (0, or CAFO's constant, which the fitted constant absorbs), so that L ~ (K-1) e^{-(ov - c)} and attn ov
    grows as ov does. Where delta still moves, by d over the window, the margin the flow responds to departs from
    ov's shape by up to d; where d exceeds ``rel`` (the fit criterion's tolerance) times ov's own change over the
    window, that departure is larger than any residual a law's fit may leave, and the data on the window show the
    transient rather than the asymptotic law: the trajectory is in transit. 1 - attn is read off the log odds
    (exact where attn rounds to 1)."""
    rows = (trajectory.t >= window[0]) & (trajectory.t <= window[1])
    log_odds, ov = np.asarray(trajectory.log_odds)[rows], np.asarray(trajectory.ov)[rows]
    unused = np.exp(-np.logaddexp(0.0, log_odds)) * ov  # (1 - attn) ov
    drift, allowed = float(np.ptp(unused)), rel * float(np.ptp(ov))
    attn = np.exp(-np.logaddexp(0.0, -log_odds[[0, -1]]))
    return Criterion("regime", PASSED if drift <= allowed else IN_TRANSIT,
                     f"the margin the attention leaves unused, (1 - attn) ov, moves by {drift:.3g} over the window "
                     f"(from {unused[0]:.4g} to {unused[-1]:.4g}; attn from {attn[0]:.6g} to {attn[-1]:.6g}), ov by "
                     f"{np.ptp(ov):.4g}",
                     f"it moves by at most rel = {rel:g} times ov's change, {allowed:.3g}: the laws hold with the "
                     "attention at its limit, the unused margin settled", window)


def verdict(criteria: Sequence[Criterion]) -> str:
    """The outcome of a growth check (the criteria of :func:`check_growth`): :data:`IN_TRANSIT` where the trajectory
    is in transit on the window, else :data:`FAILED` where a criterion failed, else :data:`INDISTINCT` where one
    cannot distinguish, else :data:`PASSED`."""
    outcomes = {c.outcome for c in criteria}
    return next((outcome for outcome in (IN_TRANSIT, FAILED, INDISTINCT) if outcome in outcomes), PASSED)


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


def _outcome(passed: bool) -> str:
    return PASSED if passed else FAILED


def _exponent_criterion(t: np.ndarray, y: np.ndarray, name: str, p: float, rel: float,
                        window: tuple[float, float]) -> Criterion:
    if np.any(y <= 0):
        return Criterion("exponent", FAILED, f"{name} is not positive on the window (min {y.min():.4g})",
                         "y > 0, so that log y exists", window)
    exponent = local_exponent(t, np.log(y))
    worst = int(np.argmax(np.abs(exponent - p)))
    allowed = rel * max(abs(p), 1.0)
    return Criterion("exponent", _outcome(bool(abs(exponent[worst] - p) <= allowed)),
                     f"local exponent d log y / d log log t = {exponent[worst]:.4g} at t = {t[worst]:.3g} "
                     f"(range {exponent.min():.4g} to {exponent.max():.4g})",
                     f"it stays within {p:g} +- {allowed:.3g}", window)


def _rivals_criterion(t: np.ndarray, y: np.ndarray, law: Law, resolution: float,
                      window: tuple[float, float]) -> Criterion:
    shares = {rival: decisive_shares(t, y, law, rival) for rival in RIVALS if rival.leading != law.leading}
    best = min(shares, key=lambda rival: shares[rival][1])  # the rival that leaves least of its separation
    nearest = max(shares, key=lambda rival: shares[rival][0])  # the rival the law is least told apart from
    cut = 1.0 / resolution
    if shares[best][1] <= cut:
        outcome, rival = FAILED, best
    else:
        outcome, rival = (PASSED if shares[nearest][0] <= cut else INDISTINCT), nearest
    u_law, u_rival = shares[rival]
    return Criterion("rivals", outcome,
                     f"closest rival {rival} fits with residual {fit_law(t, y, rival)['rel_rms']:.3g}, the law with "
                     f"{fit_law(t, y, law)['rel_rms']:.3g}; at worst over the window, its later half and half a "
                     f"window ahead, the law leaves {u_law:.3g} of the separation between the two unexplained, the "
                     f"rival {u_rival:.3g}",
                     f"the law leaves at most 1/{resolution:g} of its separation from every rival unexplained; it "
                     "fails where a rival does", window)


def _law_criteria(t: np.ndarray, y: np.ndarray, law: Law, rel: float, resolution: float,
                  window: tuple[float, float]) -> list[Criterion]:
    fit = fit_law(t, y, law)
    return [
        Criterion("slope", _outcome(fit["a"] > 0), f"fit y = a ({law}) + c has a = {fit['a']:.4g}", "a > 0", window),
        Criterion("fit", _outcome(fit["rel_rms"] <= rel), f"relative rms residual {fit['rel_rms']:.3g}",
                  f"it is at most rel = {rel:g}", window),
        _rivals_criterion(t, y, law, resolution, window),
    ]


def check_growth(trajectory: Trajectory, quantity: str | Callable, law: str | float | Law, *, rel: float = 0.05,
                 window: tuple[float, float | None] = (1e10, None), resolution: float = 3.0,
                 extend: bool = True) -> list[Criterion]:
    """Every criterion of "``quantity`` grows like ``law`` on ``window``", each checked on its own, each with an
    outcome: :data:`PASSED`, :data:`FAILED` or :data:`INDISTINCT` (the window cannot tell the law from a rival);
    :func:`verdict` reads the check's outcome off them.

    The first criterion, ``regime``, is the laws' precondition measured on the same rows (:func:`regime_criterion`):
    where the trajectory is still in transit on the window, its outcome is :data:`IN_TRANSIT`, and so is every
    other criterion's (each keeps its measured numbers, and what it found on its own as ``own_outcome``): a law
    neither holds nor fails on data that are not yet in the regime it is stated for.

    ``window`` = (t1, t2), t2 None: the last time; it must hold at least 10 rows (else ValueError). With
    ``extend`` (default), where the trajectory runs past t2 and some criterion does not pass on [t1, t2], every
    criterion is checked again on [t1, last time] and that verdict is the answer (later data are nearer the
    asymptote); each criterion carries the window it was checked on. For a law given as text
    (a :class:`~qkdyn.simulate.growth.Law`), with the fit y = a phi(t) + c on the window:

    * ``slope``: a > 0 (the quantity grows with phi);
    * ``fit``: the relative rms residual (to the spread of y) is at most ``rel``;
    * ``rivals``: against each law of a different leading order among :data:`~qkdyn.simulate.growth.RIVALS`
      (log log t, log t, log t log log t, (log t)^2, (log t)^2 log log t, (log t)^3). With the constant
      fitted, the separation of the law phi from a rival psi on the window is s = |a| ||P_psi phi||, the rival's
      residual were the data exactly the fitted law (P_psi removes the span of {psi, 1}); the law's residual
      e_phi bounds how far the data's true residual against the rival can be from it: | ||e_psi|| - s |
      <= ||e_phi|| (:func:`~qkdyn.simulate.growth.unexplained_shares`). So u = ||e_phi|| / s, the share of the
      separation the law leaves unexplained, decides, and likewise the rival's share against the law: the
      law passes when u <= 1/``resolution`` (default 3) against every rival (then every rival's residual is at
      least ``resolution`` - 1 times the law's, whatever the corrections to the law), and fails when some
      rival's share is <= 1/``resolution`` (the law's residual is then at least ``resolution`` - 1 times that
      rival's); otherwise the data lie between the two shapes and the outcome is :data:`INDISTINCT`: the
      corrections to the leading order that the law's own residual shows are as large as what tells the two
      orders apart, and a rival fitting better is no evidence against the law. Each share is taken at its
      worst over the window, its later half and half a window ahead at the rate it moves
      (:func:`~qkdyn.simulate.growth.decisive_shares`), so that no verdict is drawn that the data are heading
      away from (a slowly converging quantity still approaching its law). ``resolution`` must exceed 2 (then
      at most one of the two verdicts holds).

    For an exponent p, meaning (log t)^p: ``exponent``: the local exponent d log y / d log log t stays within
    ``rel`` * max(|p|, 1) of p over the window; and ``rivals`` as above for the law (log t)^p.
    """
    if not resolution > 2:
        raise ValueError(f"resolution must exceed 2 (else a law and its rival can both be decided), got {resolution}")
    name, values = quantity_values(trajectory, quantity)
    end = float(trajectory.t[-1])
    t1, t2 = window[0], end if window[1] is None else window[1]
    rows = (trajectory.t >= t1) & (trajectory.t <= t2)
    if rows.sum() < 10:
        raise ValueError(f"only {rows.sum()} rows of the trajectory lie in the window [{t1:g}, {t2:g}] for {name}; "
                         "solve with more points or a longer t_max")

    def criteria(upto: float) -> list[Criterion]:
        inside = (trajectory.t >= t1) & (trajectory.t <= upto)
        t, y = trajectory.t[inside], values[inside]
        if not isinstance(law, (str, Law)):
            found = [_exponent_criterion(t, y, name, float(law), rel, (t1, upto)),
                     _rivals_criterion(t, y, Law.log_power(float(law)), resolution, (t1, upto))]
        else:
            found = _law_criteria(t, y, law if isinstance(law, Law) else Law.parse(law), rel, resolution, (t1, upto))
        regime = regime_criterion(trajectory, (t1, upto), rel)
        if regime.outcome == IN_TRANSIT:
            found = [dataclasses.replace(c, outcome=IN_TRANSIT, own_outcome=c.outcome) for c in found]
        return [regime, *found]

    results = criteria(t2)
    if extend and t2 < end and not all(c.passed for c in results):
        results = criteria(end)
    return results


def _skip(message: str, error: type[CannotDistinguish], why: str) -> NoReturn:
    """Skip an undecided check: inside a hypothesis test, reject the draw (hypothesis draws another and counts it
    as invalid; its statistics show the event ``why``); otherwise skip the pytest test (without pytest: raise
    ``error``)."""
    try:
        from hypothesis import event, reject
        from hypothesis.control import currently_in_test_context
    except ImportError:  # hypothesis is optional
        pass
    else:
        if currently_in_test_context():
            event(f"qkdyn.testing: {why}")
            reject()
    try:
        import pytest
    except ImportError:
        raise error(message) from None
    pytest.skip(message)


def assert_grows_like(trajectory: Trajectory, quantity: str | Callable, law: str | float | Law, *, rel: float = 0.05,
                      window: tuple[float, float | None] = (1e10, None), resolution: float = 3.0, extend: bool = True,
                      criteria: Sequence[str] | None = None, on_indistinct: str = "skip") -> None:
    """Assert that ``quantity`` grows like ``law`` on ``window``: every criterion of :func:`check_growth`
    (or only those named in ``criteria``; the precondition ``regime`` is always checked) passes. A failed criterion
    raises AssertionError, whose message names each failed criterion, with the measured numbers and what would have
    passed. Where the trajectory is still in transit on the window (:data:`IN_TRANSIT`, :func:`regime_criterion`),
    or none failed but the window cannot tell the law from a rival (:data:`INDISTINCT`), ``on_indistinct`` decides:
    ``"skip"`` (default) rejects the draw inside a hypothesis test (hypothesis draws another) and skips a plain
    pytest test; ``"fail"`` raises :class:`InTransit` or :class:`CannotDistinguish` (AssertionErrors). A true law
    is never failed for a rival that only fits as well as it does, nor on a window its trajectory has not reached
    the regime of the laws in.

    Typical use: ``assert_grows_like(tr, "odds", qkdyn.derive(param).growth["odds"], window=(1e100, 1e300))``
    on a trajectory solved to ``t_max=1e300`` (late windows cost nothing in log time and separate the orders best).
    """
    if on_indistinct not in ("skip", "fail"):
        raise ValueError(f"on_indistinct must be 'skip' or 'fail', got {on_indistinct!r}")
    results = check_growth(trajectory, quantity, law, rel=rel, window=window, resolution=resolution, extend=extend)
    t1, t2 = results[0].window
    name = quantity if isinstance(quantity, str) else getattr(quantity, "__name__", "quantity")
    shown = law if isinstance(law, (str, Law)) else Law.log_power(float(law))
    where = f"{trajectory.param} (rho = {trajectory.setting.rho:g})"
    regime, results = results[0], results[1:]
    if criteria is not None:
        unknown = set(criteria) - {c.name for c in results}
        if unknown:
            raise ValueError(f"unknown criteria {sorted(unknown)}; this law has {', '.join(c.name for c in results)}")
        results = [c for c in results if c.name in criteria]
    if regime.outcome == IN_TRANSIT:
        message = (f"{where}: on t in [{t1:g}, {t2:g}] the trajectory is still in transit, so whether {name} grows "
                   f"like {shown} is not judged there; criterion 'regime': {regime.measured} (passes if "
                   f"{regime.needed})")
        if on_indistinct == "fail":
            raise InTransit(message)
        _skip(message, InTransit, "the trajectory is still in transit on the window")
    failed = [c for c in results if c.outcome == FAILED]
    if failed:
        raise AssertionError(
            f"{where}: {name} does not grow like {shown} on t in [{t1:g}, {t2:g}]; "
            + "; ".join(f"criterion {c.name!r} failed: {c.measured} (passes if {c.needed})" for c in failed))
    undecided = [c for c in results if c.outcome == INDISTINCT]
    if undecided:
        message = (f"{where}: t in [{t1:g}, {t2:g}] cannot tell whether {name} grows like {shown}; "
                   + "; ".join(f"criterion {c.name!r} cannot distinguish: {c.measured} (passes if {c.needed})"
                               for c in undecided))
        if on_indistinct == "fail":
            raise CannotDistinguish(message)
        _skip(message, CannotDistinguish, "the window cannot tell the law from a rival")


def _register() -> None:
    """``hypothesis.strategies.from_type(Setting)`` draws from :func:`setting_strategy`."""
    try:
        from hypothesis import strategies as st
    except ImportError:  # hypothesis is optional (the ``test`` extra); the assertions work without it
        return
    st.register_type_strategy(Setting, setting_strategy())


_register()
