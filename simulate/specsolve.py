"""Solve the reduced flow of a circuit spec (:class:`qkdyn.theory.spec.Spec`) in log-time.

The same integration as :func:`qkdyn.simulate.solve.solve` (log-time tau = log(1 + t), loss events,
output rows), on the numeric functions :mod:`qkdyn.theory.specnumeric` prints from the spec's
derivation; DOP853 is SciPy's here (there are no compiled kernels for a spec written as data), and
LSODA, Radau and BDF take the derived Jacobian. The right-hand side and the Jacobian run as Python until their
calls have cost about what compiling them costs, then compiled by numba (:mod:`qkdyn.theory.specjit`). The
reported qk, ov and attn are the spec's own: qk = s (a - b), ov = u - w (token-weighted means with token
weights), attn = the population mean of the attention mass on the distinct tokens (the query's own share is
not counted). ``loss`` is the data loss L (cross-entropy, or the spec's square loss), and loss events
(``until_loss``, ``record_losses``, matched loss) are levels of L; with weight decay the flow descends the
objective L + P, and the penalty P = sum_c (lambda_c / 2) sum_i w_i x_i^2 and the objective are their own
attributes and CSV columns (:mod:`qkdyn.theory.specflow`, step 4).

A flow with a finite minimum (weight decay, a square loss) settles exponentially, x(t) - x* ~ e^{J t}: in
log time its rate (1 + t) J grows without bound and an explicit step pays per unit of t; weight decay on one
circuit alone leaves the other growing, so the decayed circuit tracks a slowly moving balance at the same
stiff rate without ever settling. So, for such a spec (:func:`can_settle`), DOP853 runs step by step and every
few steps asks whether its step is held by stability (:func:`_stiff`); from there on SciPy's LSODA with the derived
Jacobian (its stiff BDF branch takes steps of the slow motion's size, whatever the fast rate) goes on at a tenth
of the tolerances (:data:`STIFF_RTOL`), restarted wherever a collapsed circuit's components have fallen below the
absolute tolerance onto an attracting invariant subspace, where they are set to exactly 0 (:func:`_vanished`: left
at their noise they cost the stiff solver three times the steps). Every few steps (after a check that found no
equilibrium near, once t has doubled) the solve asks whether the state has settled (:func:`_equilibrium`): Newton's method with the derived Jacobian finds a zero x* of the flow next to it,
J* = J(x*) has real eigenvalues, none positive (those of size below :data:`ZERO_MODE` of the largest
taken as the directions of a manifold of minima), and the quadratic remainder e = f(x) - J* (x - x*)
moves the remaining approach by less than the solver's tolerance. From there on the solution is the equilibrium's exact linear approach
x(t) = x* + V e^{mu (t - t_s)} V^{-1} (x(t_s) - x*) (:class:`Approach`), which costs nothing per unit of
t: the solve to t = 1e15 (or 1e300) costs what the transient does. ``stats["settled_t"]`` is t_s (None
where the flow did not settle within the horizon).
"""
from __future__ import annotations

import dataclasses
import functools
import math
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import ArrayLike
from qkdyn.simulate import logtime
from qkdyn.simulate.integrate import MAX_LOG_STEP
from qkdyn.simulate.logtime import DenseSolution
from qkdyn.simulate.solve import integrate_flow
from qkdyn.simulate.trajectory import TrajectoryExports
from qkdyn.theory.setting import Setting
from qkdyn.theory.spec import Spec

from qkdyn.errors import InputError

if TYPE_CHECKING:
    from qkdyn.simulate.sharpness import Sharpness


class _Field:
    """The spec's numeric functions in the shape integrate_flow reads (features -> the state itself)."""

    def __init__(self, spec: Spec):
        from qkdyn.theory.specnumeric import numeric

        self.numeric = numeric(spec)
        self.variables = self.numeric.variables

    def init(self, p, qk0, ov0):
        return self.numeric.init(np.asarray(p, dtype=float), qk0, ov0)

    def rhs(self, x, p):
        return self.numeric.rhs(x, np.asarray(p, dtype=float))

    def jac(self, x, p):
        return self.numeric.jac(x, np.asarray(p, dtype=float))

    def features(self, x, p):
        return (x,)

    def loss(self, x, p):
        return float(self.numeric.loss(x, np.asarray(p, dtype=float)))

    def state_loss(self, x, p):
        return self.loss(x, p)


@dataclasses.dataclass
class SpecTrajectory(TrajectoryExports):
    """A spec's solution sampled at times ``t``: the reduced state and the quantities of docs/setting.md,
    with the same exports as :class:`~qkdyn.simulate.trajectory.Trajectory` (the solution at any other time,
    :meth:`at` or ``tr(t)``, and :meth:`plot` among them)."""

    spec: Spec
    setting: Setting
    t: np.ndarray
    state: np.ndarray  # (dim, T)
    variables: tuple[str, ...]
    event_t: float | None
    stats: dict
    crossings: dict = dataclasses.field(default_factory=dict)  # loss level -> (t, state) where it is first reached
    # the solver's continuous solution (:meth:`at`); None for a trajectory not made by solve
    dense: DenseSolution | None = dataclasses.field(default=None, repr=False, compare=False)

    @property
    def param(self) -> str:
        """The spec's name (what reports and :mod:`qkdyn.testing` messages print)."""
        return self.spec.name

    @functools.cached_property
    def _values(self) -> dict[str, np.ndarray]:
        from qkdyn.theory.specnumeric import numeric

        p, functions = np.asarray(self.setting.numeric(), dtype=float), numeric(self.spec)
        qk, ov, attn = np.array([functions.features(x, p) for x in self.state.T]).reshape(-1, 3).T
        loss = np.array([float(functions.loss(x, p)) for x in self.state.T])
        penalty = np.array([float(_penalty(self.spec)(x, p)) for x in self.state.T])
        return {"qk": qk, "ov": ov, "attn": attn, "loss": loss, "penalty": penalty, "objective": loss + penalty}

    @property
    def qk(self) -> np.ndarray:
        return self._values["qk"]

    @property
    def ov(self) -> np.ndarray:
        return self._values["ov"]

    @property
    def attn(self) -> np.ndarray:
        return self._values["attn"]

    @property
    def loss(self) -> np.ndarray:
        """The data loss L (cross-entropy, or the spec's square loss), without the weight-decay penalty."""
        return self._values["loss"]

    @property
    def penalty(self) -> np.ndarray:
        """The weight decay P = sum_c (lambda_c / 2) sum_i w_i x_i^2 (0 without)."""
        return self._values["penalty"]

    @property
    def objective(self) -> np.ndarray:
        """L + P: what the flow descends (the loss itself without weight decay)."""
        return self._values["objective"]

    def columns(self) -> dict[str, np.ndarray]:
        """CSV columns: t, qk, ov, attn, loss, with weight decay penalty and objective, then the raw state."""
        cols = super().columns()
        if not _decayed(self.spec):
            return cols
        head = {name: cols.pop(name) for name in ("t", "qk", "ov", "attn", "loss")}
        return {**head, "penalty": self.penalty, "objective": self.objective, **cols}

    def drifts(self) -> dict[str, float]:
        """Largest relative drift of every conserved polynomial the spec's derivation found (none with
        weight decay or an MLP coupling): max_t |I(t) - I(0)| / max_t |x|^k for I of degree k, as
        :meth:`qkdyn.simulate.trajectory.Trajectory.drifts` (which also has the line, a closed form of the exact forms)."""
        import sympy as sp
        from qkdyn.theory.model import PARAMS
        from qkdyn.theory.specflow import derive_spec
        from qkdyn.theory.specnumeric import lambdify

        d = derive_spec(self.spec)
        p = np.asarray(self.setting.numeric(), dtype=float)
        x_scale = np.max(np.abs(self.state), axis=0)
        out = {}
        for circuit, found in d.invariants.items():
            for i, invariant in enumerate([] if isinstance(found, str) else found):
                value = lambdify([list(d.symbols), list(PARAMS)], invariant)
                values = np.array([float(value(x, p)) for x in self.state.T])
                degree = sp.Poly(invariant, *d.symbols).total_degree()
                scale = np.maximum(x_scale**degree, 1e-300)
                out[f"I_{circuit}{i + 1}"] = float(np.max(np.abs(values - values[0]) / scale))
        return out

    @property
    def log_odds(self) -> np.ndarray:
        """log(attn / (1 - attn)), from attn (the spec's attention need not be a logistic of qk)."""
        return np.asarray(np.log(self.attn) - np.log1p(-self.attn))



def _decayed(spec: Spec) -> bool:
    return any(cs.weight_decay for cs in (spec.qk, spec.ov))


@functools.cache
def _penalty(spec: Spec):
    """P(x, p) of ``spec`` as a numeric function (0 without weight decay, then no derivation is needed)."""
    if not _decayed(spec):
        return lambda x, p: 0.0
    from qkdyn.theory.model import PARAMS
    from qkdyn.theory.specflow import derive_spec
    from qkdyn.theory.specnumeric import lambdify

    d = derive_spec(spec)
    return lambdify([list(d.symbols), list(PARAMS)], d.penalty)


#: the stats that say whether a spec's solve began with its right-hand side and its Jacobian compiled
_RAN = {"field": "rhs", "jacobian": "jac"}


def solve_spec(setting: Setting, spec: Spec, *, t_max: float | None = None, until_loss: float | None = None,
               points: int = 200, at: Sequence[float] = (), rtol: float = 1e-11, atol: float = 1e-14,
               method: str = "DOP853", record_losses: Sequence[float] = (), settle: bool = True) -> SpecTrajectory:
    """The reduced flow of ``spec`` from its init (docs/setting.md, balanced factors of its depth) to
    ``t_max`` or the loss level ``until_loss`` (``record_losses`` too): the implementation behind the public
    verb ``qkdyn.solve(setting, spec, ...)``, which callers use. With DOP853 a spec that can have a finite
    minimum (:func:`can_settle`) hands over to LSODA once stiff and switches to the equilibrium's exact approach
    once it has settled (module docstring; ``stats["stiff_t"]`` is where LSODA took over, ``stats["method"]``
    then "DOP853+LSODA"); ``settle=False`` keeps DOP853 to the end (what
    ``make bench`` measures against). ``stats["field"]`` and ``stats["jacobian"]`` say whether the right-hand
    side and the Jacobian ran compiled ("compiled", :mod:`qkdyn.theory.specjit`) or as Python ("python") as the
    solve began."""
    if not isinstance(setting, Setting):
        raise InputError(f"must be a Setting, got {type(setting).__name__}", "setting")
    spec.check_setting(setting)
    options = dict(t_max=t_max, until_loss=until_loss, points=points, at=at, rtol=rtol, atol=atol, method=method,
                   record_losses=tuple(record_losses))
    field = _Field(spec)
    compiled = field.numeric.compiled()  # as the solve begins (the rent it pays may compile them on the way)
    if settle and method == "DOP853" and can_settle(spec):
        out = _settling_flow(spec.name, field, setting, **options)
    else:
        out = integrate_flow(spec.name, field, setting, kernels=False, **options)
    out[4].update({name: "compiled" if compiled[key] else "python" for name, key in _RAN.items()})
    return SpecTrajectory(spec, setting, *out)


#: eigenvalues of J* smaller than this fraction of the largest are zero modes (a manifold of minima)
ZERO_MODE = 1e-9
#: accepted steps between two settling (and stiffness) checks
CHECK_EVERY = 4
#: DOP853's step h times the flow's spectral radius in log time, e^tau max|eig J(x)|, beyond which its step is
#: held by stability, not accuracy: stiff. On a stiff stretch its step control keeps h times the radius at 1-3
#: and rising (its stability region reaches about -6 on the negative real axis, the controller stays inside),
#: while accuracy holds it below 0.7 on the transients of the decay specs at rtol 1e-11
STIFF_STEP = 1.5
#: ... or held above HELD_STEP (never below it for HELD_GROWTH-fold growth of t): the step in t, h e^tau, no longer
#: grows with t while the fast rate does. With QK decay alone DOP853's product stays at 0.62-0.76 from t = 4e2 to
#: 3e3 and reaches 1.5 only at t = 2.6e4, 700 steps later (handed over at t = 2e3 instead, the solve to 1e15 takes
#: 2187 steps instead of 2764, and 6052 evaluations of the flow instead of 15713)
HELD_STEP, HELD_GROWTH = 0.5, 8.0
#: LSODA's tolerances after the hand-over, as a fraction of the solve's: at the same rtol its global error is
#: larger than DOP853's (a rational first integral drifted 1.3e-8 by t = 1e3 against DOP853's 2e-11)
STIFF_RTOL = 0.1


def _stiff(jac: Callable[[np.ndarray], np.ndarray], stepper, held_since: float | None) -> tuple[bool, float | None]:
    """(whether DOP853's steps are held by stability, the t since which h e^tau max|eig J| has stayed above
    :data:`HELD_STEP`, None where it is below now): stiff where the product exceeds :data:`STIFF_STEP`, or has
    stayed above HELD_STEP while t grew :data:`HELD_GROWTH`-fold. From there on an explicit step pays per unit of
    t."""
    radius = float(np.abs(np.linalg.eigvals(jac(stepper.y))).max())
    t = math.expm1(stepper.t)
    product = stepper.step_size * math.exp(stepper.t) * radius
    if product <= HELD_STEP:
        return False, None
    since = t if held_since is None else held_since
    return product > STIFF_STEP or t >= HELD_GROWTH * since, since


def _vanished(rhs: Callable[[np.ndarray], np.ndarray], jac: Callable[[np.ndarray], np.ndarray], x: np.ndarray,
              atol: float) -> np.ndarray | None:
    """``x`` with its vanished components set to exactly 0, or None where none has newly vanished.

    A decayed circuit that collapses (QK under weight decay while OV grows) falls below the solver's absolute
    tolerance and, left there, hovers at its noise: the stiff solver's error test on that noise costs it three times
    the steps and can fail outright. Components vanish together where every one of them is within ``atol`` of 0
    (and some is not exactly 0), the flow leaves the subspace where they are 0 invariant (their rates are exactly
    0 there, so a solver keeps them at 0 exactly) and attracts to it (the block of J on them has eigenvalues of
    negative real part): setting them to 0 moves the state by less than the tolerance and follows the flow's own
    limit. (Were the block to stop attracting later, the true value's regrowth from below ``atol`` is not followed:
    no solver at that tolerance resolves it.)"""
    tiny = np.abs(x) <= atol
    fresh = tiny & (x != 0)
    if not fresh.any():
        return None
    snapped = np.where(tiny, 0.0, x)
    if np.any(rhs(snapped)[tiny] != 0):
        return None
    block = jac(snapped)[np.ix_(fresh, fresh)]
    return snapped if np.linalg.eigvals(block).real.max() < 0 else None


#: Newton iterations of a settling check, and the largest distance |x - x*| / (1 + |x|) it may move the state
NEWTON_ITERATIONS, NEWTON_REACH = 6, 1e-3


def can_settle(spec: Spec) -> bool:
    """Whether ``spec``'s flow can have a finite minimum: weight decay on a circuit or the square loss (a
    cross-entropy flow without decay only approaches its infimum 0 as the weights grow)."""
    return spec.loss == "square" or _decayed(spec)


@dataclasses.dataclass(frozen=True)
class Approach:
    """The dense solution of a settling solve: DOP853's interpolant (``early``, SciPy's ``OdeSolution``) up to
    the log-time ``tau_settled``, then the exact linear approach x* + V diag(e^{mu (t - t_s)}) c (``mu`` <= 0,
    zero modes exactly 0; c = V^{-1} (x(t_s) - x*)). Data only, so a trajectory that holds it pickles."""

    early: Callable[[np.ndarray], np.ndarray]
    tau_settled: float
    equilibrium: np.ndarray
    modes: np.ndarray  # V, (dim, dim)
    rates: np.ndarray  # mu, (dim,)
    amplitudes: np.ndarray  # c, (dim,)

    def __call__(self, taus) -> np.ndarray:
        query = np.asarray(taus, dtype=float)
        flat = query.ravel()
        out = np.empty((len(self.equilibrium), flat.size))
        early = flat <= self.tau_settled
        if early.any():
            out[:, early] = np.asarray(self.early(flat[early])).reshape(len(self.equilibrium), -1)
        late = ~early
        if late.any():
            elapsed = np.expm1(flat[late]) - math.expm1(self.tau_settled)
            decay = np.exp(np.multiply.outer(self.rates, elapsed))  # (dim, n)
            out[:, late] = self.equilibrium[:, None] + self.modes @ (self.amplitudes[:, None] * decay)
        return out.reshape(len(self.equilibrium), *query.shape)


def _equilibrium(field: _Field, p, x: np.ndarray, rtol: float, atol: float) -> tuple[tuple | None, float]:
    """((x*, V, mu, c), 0) where the flow has settled at ``x`` (module docstring), else (None, how much longer
    in t the remainder, ~ |x - x*|^2 ~ e^{2 mu_slowest t}, needs to come within the tolerance; 0 where unknown).

    x* is a zero of the flow found by Newton's method with the derived Jacobian (least squares, so a manifold
    of minima is no obstacle; each iterate within :data:`NEWTON_REACH` of ``x``, the last step far below the
    tolerance). J(x*) = V diag(mu) V^{-1} must have real mu <= 0 (a stable equilibrium; those below
    :data:`ZERO_MODE` of the largest are zero modes, set to 0). The linear approach from ``x`` must be within
    the tolerance: the quadratic remainder e = f(x) - J(x*) (x - x*) shifts the approach by about
    V diag(1 / |mu'|) V^{-1} e (mu' = mu, or 2 mu_slowest on a zero mode: the remainder decays like
    (x - x*)^2), less the remainder's round-off (the size of f(x*) as computed), and each component of that
    must stay below atol + rtol |x*_i|."""
    star = np.array(x, dtype=float)
    tolerance = atol + rtol * np.abs(star)
    for _ in range(NEWTON_ITERATIONS):
        step = np.linalg.lstsq(field.jac(star, p), field.rhs(star, p), rcond=None)[0]
        star = star - step
        if not np.all(np.isfinite(star)) or np.linalg.norm(star - x) > NEWTON_REACH * (1 + np.linalg.norm(x)):
            return None, 0.0
        if np.all(np.abs(step) <= 1e-3 * tolerance):
            break
    else:
        return None, 0.0
    jac = field.jac(star, p)
    rates, modes = np.linalg.eig(jac)
    largest = np.abs(rates).max()
    if largest == 0 or np.abs(rates.imag).max() > ZERO_MODE * largest or rates.real.max() > ZERO_MODE * largest:
        return None, 0.0
    rates, modes = rates.real, modes.real
    zero = np.abs(rates) <= ZERO_MODE * largest
    rates = np.where(zero, 0.0, rates)
    slowest = np.abs(rates[~zero]).min() if (~zero).any() else largest
    deviation = x - star
    remainder = field.rhs(x, p) - jac @ deviation
    size, noise = float(np.linalg.norm(remainder)), 4 * float(np.linalg.norm(field.rhs(star, p)))
    remainder = remainder * (max(size - noise, 0.0) / size if size > 0 else 0.0)
    if np.linalg.cond(modes) > 1 / np.finfo(float).eps:  # a defective J*: no basis of modes to approach along
        return None, 0.0
    shift = modes @ (np.linalg.solve(modes, remainder) / np.where(zero, 2 * slowest, np.abs(rates)))
    excess = float(np.max(np.abs(shift) / tolerance))
    if not excess <= 1:
        return None, math.log(excess) / (2 * slowest) if math.isfinite(excess) else 0.0
    return (star, modes, rates, np.linalg.solve(modes, deviation)), 0.0


def _settling_flow(name: str, field: _Field, setting: Setting, *, t_max, until_loss, points, at, rtol, atol, method,
                   record_losses) -> tuple:
    """(times, state, variables, event_t, stats, crossings, dense) of a :class:`SpecTrajectory`: SciPy's DOP853
    in log time, step by step, handed to LSODA once stiff (:func:`_stiff`; restarted where components vanish,
    :func:`_vanished`), until the flow has settled (:func:`_equilibrium`), the horizon or (``until_loss``) the target loss, then the exact linear approach
    (:class:`Approach`); loss levels are found on that dense solution. A failed step hands the whole solve to
    :func:`integrate_flow` (LSODA takes over there)."""
    from scipy.integrate import DOP853, LSODA, OdeSolution

    logtime.check_options(t_max, until_loss, points, at, method)
    p, x0, levels, horizon = logtime.start(field, setting, t_max, until_loss, at, record_losses)
    start = time.perf_counter()
    tau_end, log_levels = math.log1p(horizon), np.log(np.asarray(levels, dtype=float))

    rhs, jac = field.numeric.bound(p)

    def flow(tau, x):
        return rhs(x, math.exp(tau))

    stepper = DOP853(flow, 0.0, x0, tau_end, rtol=rtol, atol=atol, max_step=MAX_LOG_STEP)
    taus, pieces, settled, next_check, stiff_t, nfev, njev = [0.0], [], None, 0.0, None, 0, 0
    states = [np.asarray(x0, dtype=float)]  # the state at each of taus (the steps' ends)
    held_since: float | None = None
    while stepper.status == "running" and settled is None:
        stepper.step()
        if stepper.status == "failed":
            return integrate_flow(name, field, setting, t_max=t_max, until_loss=until_loss, points=points, at=at,
                                  rtol=rtol, atol=atol, method=method, record_losses=record_losses, kernels=False)
        taus.append(stepper.t)
        states.append(stepper.y.copy())
        pieces.append(stepper.dense_output())
        if until_loss is not None and math.log(field.loss(stepper.y, p)) <= log_levels[-1]:
            break
        if len(pieces) % CHECK_EVERY or stepper.t >= tau_end:
            continue
        restart = None
        if stiff_t is None:
            stiff, held_since = _stiff(jac, stepper, held_since)
            if stiff:
                stiff_t, restart = math.expm1(stepper.t), stepper.y
        else:
            restart = _vanished(rhs, jac, stepper.y, atol)
        if restart is not None:
            nfev, njev = nfev + stepper.nfev, njev + stepper.njev
            stepper = LSODA(flow, stepper.t, restart, tau_end, rtol=rtol * STIFF_RTOL, atol=atol * STIFF_RTOL,
                            jac=lambda tau, x: jac(x, math.exp(tau)))
        if next_check <= math.expm1(stepper.t):
            settled, wait = _equilibrium(field, p, stepper.y, rtol, atol)
            # no equilibrium near (a transient, or decay on one circuit alone): look again once t has doubled
            next_check = math.expm1(stepper.t) + (wait if wait > 0 else math.expm1(stepper.t))
    early = OdeSolution(taus, pieces)
    dense: Callable[[np.ndarray], np.ndarray] = early
    if settled is not None:
        dense = Approach(early, stepper.t, *settled)
        slowest = np.abs(settled[2][settled[2] < 0]).min(initial=np.inf)
        # the approach's own rows, where the loss levels are bracketed: e-folds of the slowest mode, then the end
        later = math.expm1(stepper.t) + np.arange(1, 65) / slowest
        approach = [math.log1p(t) for t in later if math.log1p(t) < tau_end] + [tau_end]
        taus += approach
        states += list(dense(np.asarray(approach)).T)
    sol = _Solution(np.asarray(taus), dense, np.array(states).T, 0, "settled" if settled else stepper.status,
                    nfev + stepper.nfev, njev + stepper.njev)
    events = [logtime.Crossing(lambda x: math.log(field.loss(x, p)), level, until_loss is not None and i == len(levels) - 1)
              for i, level in enumerate(log_levels)]
    run = logtime.crossings_on_dense(sol, events, until_loss is not None)
    run.steps = len(pieces)
    seconds = time.perf_counter() - start
    out = logtime.sample(name, field, setting, run, p, x0, horizon, until_loss, points, at, record_losses, seconds,
                         method if stiff_t is None else "DOP853+LSODA", False)
    out[4]["settled_t"] = math.expm1(stepper.t) if settled is not None else None
    out[4]["stiff_t"] = stiff_t
    return out


@dataclasses.dataclass
class _Solution:
    """What :func:`qkdyn.simulate.logtime.crossings_on_dense` reads of a solution (solve_ivp's fields)."""

    t: np.ndarray
    sol: Callable[[np.ndarray], np.ndarray]
    y: np.ndarray
    status: int
    message: str
    nfev: int
    njev: int


@dataclasses.dataclass
class SpecSharpness:
    """qk, ov, attn and t where the loss first reaches each level, shape (len(rhos), len(levels)); NaN
    where the solution does not reach a level."""

    rho: np.ndarray
    loss: np.ndarray
    qk: np.ndarray
    ov: np.ndarray
    attn: np.ndarray
    t: np.ndarray


def spec_sharpness(setting: Setting, spec: Spec, rhos: ArrayLike, levels: ArrayLike) -> SpecSharpness:
    """Matched-loss quantities of any spec from ODE events (:func:`qkdyn.sharpness` gives the exact forms
    in closed form): for each rho (eta_QK = rho eta_OV) one solve to the lowest level, the crossing of
    every other level located by the solver's event finder."""
    from qkdyn.theory.specnumeric import numeric

    rho_values, level_values = np.asarray(rhos, dtype=float), np.asarray(levels, dtype=float)
    lowest = float(level_values.min())
    out = {name: np.full((len(rho_values), len(level_values)), np.nan) for name in ("qk", "ov", "attn", "t")}
    p, functions = np.asarray(setting.numeric(), dtype=float), numeric(spec)
    for i, rho in enumerate(rho_values):
        tr = solve_spec(setting.replace(eta_qk=float(rho) * setting.eta_ov), spec, until_loss=lowest, points=4,
                        record_losses=tuple(float(v) for v in level_values if v != lowest))
        crossings = dict(tr.crossings)
        if tr.event_t is not None:
            crossings[lowest] = (tr.event_t, tr.state[:, -1])
        for j, level in enumerate(level_values):
            if float(level) in crossings:
                t, x = crossings[float(level)]
                out["qk"][i, j], out["ov"][i, j], out["attn"][i, j] = functions.features(x, p)
                out["t"][i, j] = t
    return SpecSharpness(rho_values, level_values, **out)


def events_sharpness(setting: Setting | Mapping, spec: Spec, rho, loss, *, time: bool = True,
                     grid: bool = False) -> Sharpness:
    """:func:`qkdyn.sharpness` for a spec without a closed form: ``rho`` and ``loss`` broadcast (or, with
    ``grid``, form their outer product) as there, each value from :func:`spec_sharpness` (one solve per
    distinct rho, every level's crossing from the event finder; NaN where a level is not reached)."""
    from qkdyn.simulate.grid import arrange
    from qkdyn.simulate.sharpness import Sharpness

    if not isinstance(setting, Setting):
        raise InputError(f"must be one Setting for a spec without a closed form (its matched loss comes from ODE "
                         f"events), got {type(setting).__name__}", "setting")
    _, rho, loss, axes = arrange(setting, rho, loss, grid)
    rho_a, loss_a = np.broadcast_arrays(np.asarray(rho, dtype=float), np.asarray(loss, dtype=float))
    if np.any(~np.isfinite(rho_a) | (rho_a < 0)) or np.any(~np.isfinite(loss_a) | (loss_a <= 0)):
        raise InputError("rho must be finite and >= 0 and every loss level finite and > 0", "rho")
    rhos, levels = np.unique(rho_a), np.unique(loss_a)
    found = spec_sharpness(setting, spec, rhos, levels)
    i, j = np.searchsorted(rhos, rho_a), np.searchsorted(levels, loss_a)
    return Sharpness(found.qk[i, j], found.ov[i, j], found.attn[i, j], found.t[i, j] if time else None, axes)
