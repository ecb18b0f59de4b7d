"""Integrate the reduced gradient flow over long horizons, in log-time.

With tau = log(1 + t) the flow dx/dt = f(x) becomes dx/dtau = (1 + t) f(x). Late in training
f ~ 1/t, so the log-time field stays O(1): the solver takes O(log t_max) steps and reaches
t = 1e15 (or 1e300) without overflow, because every exponential in f is in stable
sigmoid/softplus form. In log-time the field is not stiff in practice, so the default solver is
explicit: DOP853, compiled with the generated right-hand side (:mod:`qkdyn.simulate.integrate`), which
reaches t = 1e15 in 75-150 steps (``make bench`` measures its time against plain scipy, jitted diffrax
and a vmapped diffrax sweep). SciPy's LSODA, Radau and BDF (with the analytic Jacobian of
:mod:`qkdyn.theory.compiled`) remain as options for stiff corners.

Frozen circuits (a rate of 0, :class:`~qkdyn.theory.setting.Setting`) need nothing special: every
right-hand side of that circuit carries its eta as a factor, so its variables stay *exactly* at their
initial values (eta_QK = 0: attention constant to the last bit). The line of claim A2 then degenerates
(rho = 0 or inf); written without the division, eta_OV Phi(qk) - eta_QK Psi(ov) = const, it still holds.
"""
from __future__ import annotations

import dataclasses
import functools
import math
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, overload

import numpy as np
from qkdyn.simulate import integrate
from qkdyn.simulate.coldstart import FIRST_SOLVES
from qkdyn.theory.compiled import Compiled, load
from qkdyn.theory.setting import ALL_PARAMS, Setting
from qkdyn.theory.spec import Spec
from scipy.integrate import quad, solve_ivp

from qkdyn.errors import InputError

if TYPE_CHECKING:
    from qkdyn.simulate.specsolve import SpecTrajectory

#: horizon for ``until_loss`` runs when no t_max is given
DEFAULT_T_CAP = 1e100
#: integrators: the compiled DOP853 (default), then SciPy's
METHODS = ("DOP853", "LSODA", "Radau", "BDF")


class TrajectoryExports:
    """The labelled exports of a sampled solution (:class:`Trajectory`, and a spec's
    :class:`~qkdyn.simulate.specsolve.SpecTrajectory`): it has ``t``, ``state``, ``variables``,
    ``param``, ``setting`` and the quantities ``qk``, ``ov``, ``attn``, ``loss``."""

    def columns(self) -> dict[str, np.ndarray]:
        """CSV columns: t, qk, ov, attn, loss, then the raw reduced state."""
        cols = {"t": self.t, "qk": self.qk, "ov": self.ov, "attn": self.attn, "loss": self.loss}
        cols.update({name: self.state[i] for i, name in enumerate(self.variables)})
        return cols

    def to_csv(self, path) -> None:
        """Write :meth:`columns` as CSV (header first, full precision) atomically: what ``qkdyn solve`` writes."""
        from qkdyn.csvio import write_columns

        write_columns(path, self.columns())

    def to_pandas(self):
        """:meth:`columns` as a ``pandas.DataFrame`` indexed by t; ``attrs`` holds ``param`` and the
        Setting's fields (needs the ``frames`` extra: ``pip install qkdyn[frames]``)."""
        import pandas as pd

        columns = self.columns()
        frame = pd.DataFrame({name: values for name, values in columns.items() if name != "t"},
                             index=pd.Index(columns["t"], name="t"))
        frame.attrs = {"param": self.param, **dataclasses.asdict(self.setting)}
        return frame


@dataclasses.dataclass
class Trajectory(TrajectoryExports):
    """A solution sampled at times ``t``; the quantities of docs/setting.md section 2 as properties, and
    labelled exports (:meth:`to_pandas`, :meth:`to_xarray`, :meth:`to_csv`)."""

    param: str
    setting: Setting
    t: np.ndarray  # (T,)
    state: np.ndarray  # (dim, T) reduced variables, names in ``variables``
    variables: tuple[str, ...]
    event_t: float | None  # time at which the loss target was reached, if one was set
    stats: dict
    crossings: dict = dataclasses.field(default_factory=dict)  # loss level -> (t, state) at crossing
    # (qk, ov) at the rows: given by a sweep (one vector call for all of its trajectories), else computed
    # from ``state`` when first read
    features: tuple[np.ndarray, np.ndarray] | None = dataclasses.field(default=None, repr=False, compare=False)

    @property
    def compiled(self) -> Compiled:
        return load(self.param)

    def _qk_ov(self) -> tuple[np.ndarray, np.ndarray]:
        if self.features is None:
            self.features = self.compiled.features(self.state, self.setting.numeric())
        return self.features

    @property
    def qk(self) -> np.ndarray:
        return self._qk_ov()[0]

    @property
    def ov(self) -> np.ndarray:
        return self._qk_ov()[1]

    @property
    def attn(self) -> np.ndarray:
        return self.compiled.attention(self.qk, self.setting.numeric())

    @property
    def loss(self) -> np.ndarray:
        return self.compiled.loss(self.qk, self.ov, self.setting.numeric())

    @property
    def log_odds(self) -> np.ndarray:
        """log(attn / (1 - attn)) = qk + log(m/n), exact even where attn rounds to 1."""
        return self.qk + math.log(self.setting.m / self.setting.n)

    def invariants(self) -> dict[str, np.ndarray]:
        """The derived conserved polynomials of the reduced state (factor balances, mean modes)."""
        names = self.compiled.invariant_names
        if not names:  # (the generated function of a form without invariants returns a placeholder 0)
            return {}
        return dict(zip(names, self.compiled.invariants(self.state, self.setting.numeric()), strict=True))

    def line(self) -> tuple[np.ndarray, np.ndarray]:
        """(Phi(qk), Psi(ov)) along the trajectory: the first integral is Phi - rho Psi = const (claim A2).

        Psi is closed form; Phi(qk) = int_0^qk (1 + (m/n) e^y) / M_QK(y) dy by adaptive quadrature of
        its derived integrand between consecutive rows (exact for collapsed QK, where M_QK is constant).
        """
        p = self.setting.numeric()
        kappa = float(self.compiled.kappa(self.state[:, 0], p))
        pieces = [quad(lambda x: float(self.compiled.dphi(x, kappa, p)), a, b, epsabs=0, epsrel=1e-13, limit=200)[0]
                  for a, b in zip(np.concatenate([[0.0], self.qk[:-1]]), self.qk, strict=True)]
        return np.cumsum(pieces), self.compiled.psi(self.ov, p)

    def drifts(self) -> dict[str, float]:
        """Largest relative drift of every conserved quantity along the trajectory.

        A polynomial invariant I of degree k drifts by max_t |I(t) - I(0)| / max_t |x|^k (x: the reduced
        state); the line by max_t |Phi - rho Psi - const| / max_t max(|Phi|, rho |Psi|).
        """
        x_scale = np.max(np.abs(self.state), axis=0)
        out = {name: float(np.max(np.abs(values - values[0]) / np.maximum(x_scale**degree, 1e-300)))
               for (name, values), degree in zip(self.invariants().items(), self.compiled.invariant_degrees, strict=True)}
        phi, psi = self.line()
        line = phi - self.setting.rho * psi
        out["line"] = float(np.max(np.abs(line - line[0])) / np.max(np.maximum(np.abs(phi), self.setting.rho * np.abs(psi))))
        return out


    def to_xarray(self):
        """:meth:`columns` as an ``xarray.Dataset`` over the dimension t; ``attrs`` as in :meth:`to_pandas`."""
        import xarray as xr

        columns = self.columns()
        attrs = {name: value for name, value in self.to_pandas().attrs.items() if value is not None}
        return xr.Dataset({name: ("t", values) for name, values in columns.items() if name != "t"},
                          coords={"t": columns["t"]}, attrs=attrs)


def output_times(t_end: float, points: int, at: Sequence[float] = ()) -> np.ndarray:
    """t = 0, ``points - 1`` log-spaced times up to t_end, and the exact ``at`` times, ascending."""
    return _output_times(t_end, points, tuple(at)).copy()


@functools.lru_cache(maxsize=64)  # a sweep asks for the same rows for every setting
def _output_times(t_end: float, points: int, at: tuple[float, ...]) -> np.ndarray:
    t_lo = min(1e-2, t_end / 1e3)
    if points > 2:  # geometric spacing with exact ends (np.geomspace, at a third of its cost)
        grid = np.exp(np.linspace(math.log(t_lo), math.log(t_end), points - 1))
        grid[0], grid[-1] = t_lo, t_end
    else:
        grid = np.array([t_lo if points == 2 else t_end])
    extra = [x for x in at if x <= t_end]
    return np.unique(np.concatenate([[0.0], grid, extra, [t_end]]))


def check_param(param: str) -> None:
    if param not in ALL_PARAMS:
        raise InputError(f"must be one of {', '.join(ALL_PARAMS)}, got {param!r}", "param")


@overload
def solve(
    setting: Setting,
    param: str,
    *,
    t_max: float | None = None,
    until_loss: float | None = None,
    points: int = 200,
    at: Sequence[float] = (),
    rtol: float = 1e-11,
    atol: float = 1e-14,
    method: str = "DOP853",
    record_losses: Sequence[float] = (),
) -> Trajectory: ...


@overload
def solve(
    setting: Setting,
    param: Spec,
    *,
    t_max: float | None = None,
    until_loss: float | None = None,
    points: int = 200,
    at: Sequence[float] = (),
    rtol: float = 1e-11,
    atol: float = 1e-14,
    method: str = "DOP853",
    record_losses: Sequence[float] = (),
) -> SpecTrajectory: ...


@overload
def solve(
    setting: list[Setting] | tuple[Setting, ...],
    param: str,
    *,
    t_max: float | None = None,
    until_loss: float | None = None,
    points: int = 200,
    at: Sequence[float] = (),
    rtol: float = 1e-11,
    atol: float = 1e-14,
    method: str = "DOP853",
    record_losses: Sequence[float] = (),
) -> list[Trajectory]: ...


@overload
def solve(
    setting: list[Setting] | tuple[Setting, ...],
    param: Spec,
    *,
    t_max: float | None = None,
    until_loss: float | None = None,
    points: int = 200,
    at: Sequence[float] = (),
    rtol: float = 1e-11,
    atol: float = 1e-14,
    method: str = "DOP853",
    record_losses: Sequence[float] = (),
) -> list[SpecTrajectory]: ...


def solve(
    setting: Setting | list[Setting] | tuple[Setting, ...],
    param: str | Spec,
    *,
    t_max: float | None = None,
    until_loss: float | None = None,
    points: int = 200,
    at: Sequence[float] = (),
    rtol: float = 1e-11,
    atol: float = 1e-14,
    method: str = "DOP853",
    record_losses: Sequence[float] = (),
) -> Trajectory | SpecTrajectory | list[Trajectory] | list[SpecTrajectory]:
    """Solve the reduced flow from the docs/setting.md init to ``t_max`` or until the loss reaches
    ``until_loss`` (whichever comes first; at least one must be given).

    ``param`` is a named form (CACO, FACO, CAFO, FAFO, paper: a :class:`Trajectory`) or a circuit spec
    (a :class:`~qkdyn.theory.spec.Spec`, e.g. ``qkdyn.SPECS["FACO"]`` or ``qkdyn.load_spec(path)``: its
    flow derived from its model definition, a :class:`~qkdyn.simulate.specsolve.SpecTrajectory` with the
    same columns and exports; SciPy's DOP853, there are no compiled kernels for a spec written as data).

    ``record_losses``: loss levels whose exact crossing (time and state, located by the solver's
    event finder) is stored in ``Trajectory.crossings``: the basis of matched-loss comparisons.

    Given a list (or tuple) of settings (a sweep), returns the list of their trajectories, each equal to
    its one-at-a-time solve: for a named form all of them are integrated in one call of the compiled
    integrator, in lockstep SIMD lanes (:func:`solve_many`; ``make bench`` compares it with a vmapped
    diffrax sweep); a sweep of a spec solves one setting at a time.
    """
    if isinstance(setting, (list, tuple)):
        if isinstance(param, Spec):
            return [_solve_spec(one, param, t_max=t_max, until_loss=until_loss, points=points, at=at, rtol=rtol,
                                atol=atol, method=method, record_losses=record_losses) for one in setting]
        return solve_many(setting, param, t_max=t_max, until_loss=until_loss, points=points, at=at, rtol=rtol,
                          atol=atol, method=method, record_losses=record_losses)
    if isinstance(param, Spec):
        return _solve_spec(setting, param, t_max=t_max, until_loss=until_loss, points=points, at=at, rtol=rtol,
                           atol=atol, method=method, record_losses=record_losses)
    if not isinstance(setting, Setting):
        raise InputError(f"must be a Setting or a list of them, got {type(setting).__name__}", "setting")
    check_param(param)
    return Trajectory(param, setting, *integrate_flow(param, load(param), setting, t_max=t_max, until_loss=until_loss,
                                                      points=points, at=at, rtol=rtol, atol=atol, method=method,
                                                      record_losses=record_losses))


def _solve_spec(setting: Setting, spec: Spec, **options) -> SpecTrajectory:
    """:func:`solve` for a circuit spec: its derived flow (:func:`qkdyn.simulate.specsolve.solve_spec`)."""
    from qkdyn.simulate.specsolve import solve_spec

    if not isinstance(setting, Setting):
        raise InputError(f"must be a Setting or a list of them, got {type(setting).__name__}", "setting")
    return solve_spec(setting, spec, **options)


def integrate_flow(name: str, compiled, setting: Setting, *, t_max, until_loss, points, at, rtol, atol, method,
                   record_losses, kernels: bool = True) -> tuple:
    """Validate the horizon, integrate the flow of ``compiled`` (a :class:`Compiled`, or any object with
    its ``init``, ``state_loss``, ``rhs``, ``jac``, ``features``, ``loss`` and ``variables``) from the
    setting's init and sample it: (times, state, variables, event_t, stats, crossings) of a
    :class:`Trajectory`. ``kernels``: DOP853 runs compiled (else SciPy's DOP853)."""
    _check_options(t_max, until_loss, points, at, method)
    p, x0, levels, horizon = _start(compiled, setting, t_max, until_loss, at, record_losses)
    start = time.perf_counter()
    on_kernels = method == "DOP853" and kernels
    on_compiled = on_kernels and FIRST_SOLVES.compiled_now(compiled)
    cold = on_kernels and not on_compiled  # SciPy's DOP853 for want of compiled code (qkdyn.simulate.coldstart)
    arguments = (compiled, p, x0, math.log1p(horizon), rtol, atol, np.log(levels), until_loss is not None, method)
    run = _compiled(*arguments) if on_compiled else _scipy(*arguments, plain=cold)
    if run.status < 0 and method == "DOP853":
        # the explicit step collapses on stiff stretches (e.g. ov crossing 0 at large rho, ov0 < 0):
        # the implicit-capable LSODA with the analytic Jacobian takes over, and the stats say so
        method, on_compiled = "LSODA", False
        run = _scipy(*arguments[:-1], method)
    seconds = time.perf_counter() - start
    if cold:
        FIRST_SOLVES.rent(seconds)
    return _sample(name, compiled, setting, run, p, x0, horizon, until_loss, points, at, record_losses, seconds, method,
                   on_compiled)


def _check_options(t_max, until_loss, points, at, method) -> None:
    if method not in METHODS:
        raise InputError(f"must be one of {', '.join(METHODS)}, got {method!r}", "method")
    if t_max is None and until_loss is None:
        raise InputError("give t_max or until_loss (or both)")
    if t_max is not None and not (math.isfinite(t_max) and t_max > 0):
        raise InputError(f"must be a positive finite number, got {t_max!r}", "t_max")
    if points < 1:
        raise InputError(f"must be at least 1, got {points}", "points")
    for value in at:
        if not (math.isfinite(value) and value >= 0):
            raise InputError(f"times must be finite and non-negative, got {value!r}", "at")


def _start(compiled, setting: Setting, t_max, until_loss, at, record_losses) -> tuple:
    """(parameter vector, initial state, loss levels, horizon) of one setting, its inputs checked."""
    p = setting.numeric()
    x0 = compiled.init(p, setting.qk0, setting.ov0)
    levels = list(record_losses)
    if until_loss is not None:
        loss0 = compiled.state_loss(x0, p)
        if not (math.isfinite(until_loss) and 0 < until_loss < loss0):
            raise InputError(f"must lie in (0, {loss0:.6g}) (the initial loss), got {until_loss!r}", "until_loss")
        levels.append(until_loss)
    horizon = t_max if t_max is not None else DEFAULT_T_CAP
    if max(at, default=0.0) > horizon:
        raise InputError(f"time {max(at)} lies beyond the horizon {horizon}", "at")
    return p, x0, levels, horizon


def _sample(name: str, compiled, setting: Setting, run: _Run, p, x0, horizon, until_loss, points, at, record_losses,
            seconds: float, method: str, on_compiled: bool) -> tuple:
    """The rows of a finished integration: (times, state, variables, event_t, stats, crossings)."""
    times, query, crossed, event_t = _rows(name, compiled, setting, run, p, horizon, until_loss, points, at)
    at_crossings = run.dense(run.event_tau[crossed]) if crossed else np.empty((len(x0), 0))
    return _labelled(compiled, run, x0, times, event_t, run.dense(query), crossed, at_crossings, record_losses, seconds,
                     method, on_compiled)


def _rows(name: str, compiled, setting: Setting, run: _Run, p, horizon, until_loss, points, at) -> tuple:
    """(times, their log-times, the indices of the crossed recorded levels, event_t) of a finished
    integration's rows: the queries of its dense output (the rows, and the crossings at
    run.event_tau[crossed]). A failed run, or an ``until_loss`` not reached, raises here."""
    if run.status < 0:
        raise RuntimeError(f"{name}: integration failed: {run.message}")
    event_t = None
    if until_loss is not None:
        if run.status != 1:
            raise InputError(
                f"{name}: the loss did not reach {until_loss:g} by t = {horizon:g} (final loss "
                f"{float(compiled.loss(*compiled.features(run.final, p), p)):.3g}); "
                + (f"the {setting.frozen} circuit is frozen (its rate is 0), so the loss has a floor above the "
                   "target" if setting.frozen else
                   "a factorized circuit started at 0 sits on a saddle and never moves" if 0.0 in (setting.qk0, setting.ov0)
                   else "the flow stalls on a plateau above the target within the horizon"))
        event_t = math.expm1(run.event_tau[-1])
    times = output_times(event_t if event_t is not None else horizon, points, at)
    query = np.log1p(times)
    if event_t is not None:  # the event row is the solver's own event time
        query[-1] = run.event_tau[-1]
        times[-1] = event_t
    recorded = run.event_tau[:len(run.event_tau) - (until_loss is not None)]
    return times, query, [i for i, tau in enumerate(recorded.tolist()) if math.isfinite(tau)], event_t


def _labelled(compiled, run: _Run, x0, times, event_t, state, crossed, at_crossings, record_losses, seconds: float,
              method: str, on_compiled: bool) -> tuple:
    """(times, state, variables, event_t, stats, crossings) from the dense states at the queries of
    :func:`_rows` (record_losses[crossed[j]] crossed at event_tau[crossed[j]], its state at_crossings[:, j]);
    ``stats["compiled"]``: whether the compiled integrator ran (else SciPy's)."""
    state[:, 0] = x0  # t = 0 is always the first row: the exact initial state
    stats = {"seconds": seconds, "nfev": run.nfev, "njev": run.njev, "steps": run.steps, "method": method,
             "compiled": on_compiled}
    crossings = {record_losses[i]: (math.expm1(run.event_tau[i]), at_crossings[:, j]) for j, i in enumerate(crossed)}
    return times, state, compiled.variables, event_t, stats, crossings


def solve_many(settings: Sequence[Setting], param: str, *, t_max, until_loss, points, at, rtol, atol, method,
               record_losses) -> list[Trajectory]:
    """The trajectories of ``settings`` (one form), each equal to its one-at-a-time :func:`solve`: with
    the compiled DOP853 all of them are integrated in one compiled call, in lockstep lanes
    (:func:`qkdyn.simulate.integrate.integrate_many`: every stage over the lanes in SIMD, each lane's
    arithmetic that of its solve alone), then all of their rows and crossings read off the dense tables
    in one compiled call (:func:`~qkdyn.simulate.integrate.evaluate_many`, the same interpolant at the
    same times) and their (qk, ov) in one vector call (:func:`_features_at_once`); a setting whose
    explicit step collapses is solved again alone (LSODA takes over there).
    ``stats["seconds"]`` is the sweep's integration time divided by its size."""
    for one in settings:
        if not isinstance(one, Setting):
            raise InputError(f"must be a Setting or a list of them, got {type(one).__name__}", "setting")
    check_param(param)
    options = dict(t_max=t_max, until_loss=until_loss, points=points, at=at, rtol=rtol, atol=atol, method=method,
                   record_losses=record_losses)
    compiled = load(param)
    if method != "DOP853" or not settings or not FIRST_SOLVES.compiled_now(compiled):
        return [Trajectory(param, one, *integrate_flow(param, compiled, one, **options)) for one in settings]
    _check_options(t_max, until_loss, points, at, method)
    starts = [_start(compiled, one, t_max, until_loss, at, record_losses) for one in settings]
    levels, horizon = starts[0][2], starts[0][3]
    start = time.perf_counter()
    status, steps, nfev, event_tau, final, *table, first = integrate.integrate_many(
        compiled.rhs_lanes_kernel.address, compiled.loss_kernel.address,
        np.array([compiled.kernel_parameters(p) for p, *_ in starts]),
        np.array([x0 for _, x0, *_ in starts], dtype=float), math.log1p(horizon), rtol, atol,
        np.log(np.asarray(levels, dtype=float)), until_loss is not None)
    seconds = (time.perf_counter() - start) / len(settings)
    alone, runs, plans = {}, {}, {}
    for i, (one, (p, _, _, _)) in enumerate(zip(settings, starts, strict=True)):
        if status[i] < 0:
            alone[i] = Trajectory(param, one, *integrate_flow(param, compiled, one, **options))
            continue
        runs[i] = _Run(int(status[i]), "", int(steps[i]), int(nfev[i]), 0, event_tau[i], final[i])
        plans[i] = _rows(param, compiled, one, runs[i], p, horizon, until_loss, points, at)
    # every trajectory's rows, then every one's crossings, read off its steps' tables in one compiled call
    read = np.fromiter(plans, dtype=np.int64, count=len(plans))
    queries = [plans[i][1] for i in read] + [event_tau[i][plans[i][2]] for i in read]
    own = np.concatenate([read, read])
    qfirst = np.cumsum([0] + [query.size for query in queries])
    flat = integrate.evaluate_many(*table, first[own], first[own + 1], np.concatenate(queries or [np.empty(0)]), qfirst)
    dim = len(compiled.variables)
    blocks = [flat[dim * qfirst[j]:dim * qfirst[j + 1]].reshape(dim, -1) for j in range(len(queries))]
    out = [alone.get(i) for i in range(len(settings))]
    for j, i in enumerate(read):
        times, _, crossed, event_t = plans[i]
        out[i] = Trajectory(param, settings[i], *_labelled(compiled, runs[i], starts[i][1], times, event_t, blocks[j],
                                                           crossed, blocks[len(read) + j], record_losses, seconds, method,
                                                           True))
    _features_at_once(compiled, [out[i] for i in read], flat[:dim * qfirst[len(read)]])
    return out


def _features_at_once(compiled, trajectories: list[Trajectory], states: np.ndarray) -> None:
    """Give the sweep's trajectories their (qk, ov) in one call of the vector ``features`` over all of
    their rows (``states``: their states one after the other), where they all have the same rows: the
    same elementwise arithmetic as each trajectory's own call, on a (dim, S, T) stack with each
    setting's parameters broadcast along its rows."""
    if not trajectories or len({tr.t.size for tr in trajectories}) > 1:
        return  # then each one computes its own, when asked
    stack = states.reshape(len(trajectories), -1, trajectories[0].t.size).transpose(1, 0, 2)
    params = np.array([tr.setting.numeric() for tr in trajectories]).T[:, :, None]
    qk, ov = compiled.features(stack, params)
    for k, tr in enumerate(trajectories):
        tr.features = (qk[k], ov[k])


@dataclasses.dataclass
class _Run:
    """What an integrator hands back: status (0 reached, 1 terminal event, < 0 failed), its counts,
    the log-time of each event level's first crossing (NaN where none), the state where it stopped and,
    for a solve of its own, the dense solution ``dense(taus) -> states (dim, len(taus))`` (a sweep reads
    all of its rows off the tables at once instead: :func:`solve_many`)."""

    status: int
    message: str
    steps: int
    nfev: int
    njev: int
    event_tau: np.ndarray
    final: np.ndarray
    dense: Callable | None = None


def _compiled(compiled: Compiled, p, x0, tau_end, rtol, atol, levels, terminal, method) -> _Run:
    """The compiled DOP853 of :mod:`qkdyn.simulate.integrate` (one lane)."""
    status, steps, nfev, event_tau, final, *table, _ = integrate.integrate_many(
        compiled.rhs_lanes_kernel.address, compiled.loss_kernel.address, compiled.kernel_parameters(p)[None],
        np.asarray(x0, dtype=float)[None], tau_end, rtol, atol, np.asarray(levels, dtype=float), terminal)
    return _Run(int(status[0]), "step size below the resolution of tau", int(steps[0]), int(nfev[0]), 0, event_tau[0],
                final[0], lambda taus: integrate.evaluate(*table, np.asarray(taus, dtype=float)))


def _scipy(compiled: Compiled, p, x0, tau_end, rtol, atol, levels, terminal, method, plain: bool = False) -> _Run:
    """SciPy's ``solve_ivp`` in log-time: LSODA, Radau, BDF with the analytic Jacobian, or SciPy's own
    explicit DOP853 (the spec solver of :mod:`qkdyn.simulate.specsolve`, which has no compiled kernels, and a
    cold start's first solves, :mod:`qkdyn.simulate.coldstart`). ``plain``: the right-hand side run as
    plain Python (:meth:`~qkdyn.theory.compiled.Compiled.plain_rhs`: nothing compiled)."""
    field = compiled.plain_rhs(p) if plain else lambda x: compiled.rhs(x, p)

    def crossing(level: float, last: bool):
        def event(tau, x):
            return math.log(float(compiled.loss(*compiled.features(x, p), p))) - level

        event.terminal, event.direction = terminal and last, -1
        return event

    events = [crossing(level, i == len(levels) - 1) for i, level in enumerate(levels)]

    implicit = {"jac": lambda tau, x: math.exp(tau) * compiled.jac(x, p)} if method in METHODS[1:] else {}

    def run(with_events: bool):
        return solve_ivp(lambda tau, x: math.exp(tau) * field(x), (0.0, tau_end), x0, method=method,
                         rtol=rtol, atol=atol, dense_output=True, events=(events or None) if with_events else None,
                         **implicit)

    try:
        sol = run(True)
    except ValueError:  # scipy's event root bracket read off its interpolant can lose its sign change
        sol = run(False)
        return _crossings_on_dense(sol, events, terminal)
    event_tau = np.array([te[0] if len(te) else np.nan for te in (sol.t_events or [])])
    return _Run(sol.status, sol.message, len(sol.t) - 1, sol.nfev, sol.njev, event_tau, sol.y[:, -1], sol.sol)


def _crossings_on_dense(sol, events, terminal) -> _Run:
    """Each event's first downward crossing located on the dense solution itself (the sign is read
    from the interpolant at both ends of every step, so the bracket always holds); with ``terminal``
    the run ends at the last level's crossing (status 1)."""
    from scipy.optimize import brentq

    def g(event, tau):
        return event(tau, sol.sol(tau))

    event_tau = np.full(len(events), np.nan)
    for i, event in enumerate(events):
        values = [g(event, tau) for tau in sol.t]
        for a, b, ga, gb in zip(sol.t[:-1], sol.t[1:], values[:-1], values[1:], strict=True):
            if ga > 0 >= gb:
                event_tau[i] = b if gb == 0 else brentq(lambda tau, event=event: g(event, tau), a, b, xtol=1e-14 * max(1.0, b))
                break
    status = 1 if terminal and len(events) and np.isfinite(event_tau[-1]) else sol.status
    return _Run(status, sol.message, len(sol.t) - 1, sol.nfev, sol.njev, event_tau, sol.y[:, -1], sol.sol)
