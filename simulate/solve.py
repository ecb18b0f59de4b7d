"""Integrate the reduced gradient flow over long horizons, in log-time.

With tau = log(1 + t) the flow dx/dt = f(x) becomes dx/dtau = (1 + t) f(x). Late in training
f ~ 1/t, so the log-time field stays O(1): the solver takes O(log t_max) steps and reaches
t = 1e15 (or 1e300) without overflow, because every exponential in f is in stable
sigmoid/softplus form. In log-time the field is not stiff in practice, so the default solver is
explicit: DOP853, compiled with the generated right-hand side (:mod:`qkdyn.simulate.integrate`; no step
longer than one unit of tau, :data:`~qkdyn.simulate.integrate.MAX_LOG_STEP`), which reaches t = 1e15 in 85-155
steps (``make bench`` measures its time against plain scipy, jitted diffrax and a vmapped diffrax sweep). SciPy's LSODA, Radau and BDF (with the analytic Jacobian of
:mod:`qkdyn.theory.compiled`) remain as options for stiff corners.

Frozen circuits (a rate of 0, :class:`~qkdyn.theory.setting.Setting`) need nothing special: every
right-hand side of that circuit carries its eta as a factor, so its variables stay *exactly* at their
initial values (eta_QK = 0: attention constant to the last bit). The line of claim A2 then degenerates
(rho = 0 or inf); written without the division, eta_OV Phi(qk) - eta_QK Psi(ov) = const, it still holds.
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import gc
import math
import time
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, overload

import numpy as np
from qkdyn.simulate import integrate
from qkdyn.simulate.coldstart import FIRST_SOLVES
from qkdyn.simulate.logtime import (
    METHODS,
    Crossing,
    Run,
    check_options,
    crossed_levels,
    crossings_on_dense,
    ends_only,
    inner_queries,
    labelled,
    rows,
    sample,
    start,
    states_at,
    sweep_starts,
)
from qkdyn.simulate.trajectory import Trajectory
from qkdyn.theory.compiled import Compiled, load
from qkdyn.theory.setting import ALL_PARAMS, Setting
from qkdyn.theory.spec import Spec

from qkdyn.errors import InputError

if TYPE_CHECKING:
    from qkdyn.simulate.specsolve import SpecTrajectory

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
    """Solve the reduced gradient flow dx/dt = f(x) from the setting's init (docs/setting.md) to ``t_max``
    or until the loss reaches ``until_loss``, whichever comes first, in log time tau = log(1 + t).

    Parameters
    ----------
    setting : Setting or list of Setting
        The point of the setting (sizes, rates, init); a list or tuple of them is a sweep: the list of
        their trajectories, each equal to its one-at-a-time solve. For a named form a sweep is integrated
        in one call of the compiled integrator, in lockstep SIMD lanes (:func:`solve_many`; ``make bench``
        compares it with a vmapped diffrax sweep); a spec's sweep solves one setting at a time.
    param : str or Spec
        A named form (CACO, FACO, CAFO, FAFO, paper), or a circuit spec (a :class:`~qkdyn.theory.spec.Spec`,
        e.g. ``qkdyn.SPECS["FACO"]`` or ``qkdyn.load_spec(path)``): its flow derived from its model
        definition, integrated by SciPy's DOP853 (there are no compiled kernels for a spec written as data).
    t_max : float, optional
        The horizon (the integrator steps in log time, at most a factor e of 1 + t a step: t = 1e300 takes
        700-1000 steps, a few milliseconds).
    until_loss : float, optional
        Stop where the loss first reaches this level (the solver's event finder); at least one of
        ``t_max`` and ``until_loss`` must be given.
    points : int
        Rows sampled: t = 0 and ``points - 1`` log-spaced times up to the end (a row at ``t_max`` is the
        solver's last step end). ``points=1`` without ``at``, ``until_loss`` or ``record_losses`` asks for the
        two ends alone: the integrator then skips the dense output's stages, and ``tr.at(t)`` integrates
        again, once, to compute it (the same steps).
    at : sequence of float
        Times added to the rows exactly.
    rtol : float
        The integrator's relative tolerance on each step's local error.
    atol : float
        Its absolute tolerance.
    method : str
        ``DOP853`` (compiled; the default), or SciPy's ``LSODA``, ``Radau``, ``BDF`` with the analytic
        Jacobian for stiff corners.
    record_losses : sequence of float
        Loss levels whose exact crossing (time and state) is stored in ``crossings``: the basis of
        matched-loss comparisons.

    Returns
    -------
    Trajectory or SpecTrajectory or list of them
        A :class:`Trajectory` for a named form, a :class:`~qkdyn.simulate.specsolve.SpecTrajectory` (the
        same columns and exports) for a spec; the list of them for a sweep. Either holds the solver's
        dense output: ``tr.at(t)`` (or ``tr(t)``) is the solution at any t within the span solved.
        ``tr.stats["compiled"]`` says whether the compiled integrator ran: where numba's cache lacks it, a
        process solves with SciPy's DOP853 until compiling pays (:mod:`qkdyn.simulate.coldstart`), and
        announces the compilation on stderr before it starts.

    Raises
    ------
    InputError
        For an unknown form, a bad setting, neither or a bad ``t_max`` / ``until_loss``, a loss level not
        reached within the horizon, or an unknown method.

    Examples
    --------
    >>> tr = qkdyn.solve(qkdyn.Setting(eta_qk=10.0), "FAFO", until_loss=1e-3)
    >>> when, sharpness = tr.t[-1], tr.attn[-1]     # when the loss reaches 1e-3, and the attention then
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
    setting's init and sample it: (times, state, variables, event_t, stats, crossings, dense) of a
    :class:`Trajectory`. ``kernels``: DOP853 runs compiled (else SciPy's DOP853); compiled, a run whose
    rows are its two ends alone skips the dense output's stages (:func:`~qkdyn.simulate.logtime.ends_only`;
    ``at()`` computes it when first asked, :class:`_Rerun`)."""
    check_options(t_max, until_loss, points, at, method)
    p, x0, levels, horizon = start(compiled, setting, t_max, until_loss, at, record_losses)
    begun = time.perf_counter()
    on_kernels = method == "DOP853" and kernels
    on_compiled = on_kernels and FIRST_SOLVES.compiled_now(compiled)
    cold = on_kernels and not on_compiled  # SciPy's DOP853 for want of compiled code (qkdyn.simulate.coldstart)
    arguments = (compiled, p, x0, math.log1p(horizon), rtol, atol, np.log(levels) if levels else _NO_LEVELS,
                 until_loss is not None, method)
    run = (_compiled(*arguments, dense_output=not ends_only(horizon, points, at, levels)) if on_compiled else
           _scipy(*arguments, plain=cold))
    if run.status < 0 and method == "DOP853":
        # the explicit step collapses on stiff stretches (e.g. ov crossing 0 at large rho, ov0 < 0):
        # the implicit-capable LSODA with the analytic Jacobian takes over, and the stats say so
        method, on_compiled = "LSODA", False
        run = _scipy(*arguments[:-1], method)
    seconds = time.perf_counter() - begun
    if cold:
        FIRST_SOLVES.rent(seconds)
    return sample(name, compiled, setting, run, p, x0, horizon, until_loss, points, at, record_losses, seconds, method,
                  on_compiled)


@contextlib.contextmanager
def _collector_paused() -> Iterator[None]:
    """Pause Python's cyclic garbage collector (when it runs) for the body; resume it after, error or not.

    A sweep allocates several container objects per setting (its start, its run, its rows' plan) that reference
    counting frees before the sweep returns, and none of them is in a cycle. Counted by the collector, those
    thousands of short-lived objects trigger young collections that promote the live ones, and then full
    collections of everything the process holds: in a process holding ~470k objects (jax and diffrax loaded), 2
    of 10 rounds of a 1024-setting sweep ran a full collection that took 7-11 times the sweep itself. Paused, the
    temporaries never reach a collection; the trajectories the sweep returns are counted as usual once it resumes.
    (The collector is process-wide: another thread's collections wait for the sweep too.)"""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


@_collector_paused()
def solve_many(settings: Sequence[Setting], param: str, *, t_max, until_loss, points, at, rtol, atol, method,
               record_losses) -> list[Trajectory]:
    """The trajectories of ``settings`` (one form), each equal to its one-at-a-time :func:`solve`: with
    the compiled DOP853 all of them are integrated in one compiled call, in lockstep lanes
    (:func:`qkdyn.simulate.integrate.integrate_many`: every stage over the lanes in SIMD, each lane's
    arithmetic that of its solve alone), then all of their rows and crossings read off the dense tables
    where the integrator left them, one compiled call per block of lanes (:class:`LaneTables`, the same
    interpolant at the same times; each trajectory's dense output is a view of its own steps' rows of its
    block's tables), their states assembled at once where they share their rows (a horizon and no loss
    target: :func:`_rows_to_horizon`) and their (qk, ov) in one vector call (:func:`_features_at_once`); a
    setting whose explicit step collapses is solved again alone (LSODA takes over there). Rows that are the
    two ends alone skip the dense output, as :func:`integrate_flow` does.
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
    check_options(t_max, until_loss, points, at, method)
    starts = sweep_starts(compiled, settings, t_max, until_loss, at, record_losses)
    levels, horizon = starts[0][2], starts[0][3]
    dense_output, tau_end = not ends_only(horizon, points, at, levels), math.log1p(horizon)
    begun = time.perf_counter()
    status, steps, nfev, event_tau, final, tables, capacities = integrate.integrate_many(
        *_kernel_addresses(param), np.array([_kernel_parameters(param, p) for p, *_ in starts]),
        np.array([x0 for _, x0, *_ in starts], dtype=float), tau_end, rtol, atol,
        np.log(np.asarray(levels, dtype=float)), until_loss is not None, dense_output)
    seconds = (time.perf_counter() - begun) / len(settings)
    out = {i: Trajectory(param, settings[i], *integrate_flow(param, compiled, settings[i], **options))
           for i in np.flatnonzero(status < 0).tolist()}  # LSODA takes over alone where the explicit step collapsed
    kept = [i for i in range(len(settings)) if i not in out]
    sweep = LaneTables(tables, capacities, steps)
    taken = steps[kept].tolist()
    dense: Sequence[_Table | _Rerun] = (sweep.tables_of(kept) if dense_output else
                                        [_Rerun(param, starts[i][0], starts[i][1], tau_end, rtol, atol, count)
                                         for i, count in zip(kept, taken, strict=True)])
    runs = {i: Run(code, "", count, evaluations, 0, event_tau[i], final[i], own)
            for i, code, count, evaluations, own in zip(kept, status[kept].tolist(), taken, nfev[kept].tolist(), dense,
                                                         strict=True)}
    read = _rows_to_horizon if until_loss is None else _rows_each
    states, plans, at_crossings = read(param, compiled, settings, starts, runs, kept, sweep, horizon, until_loss,
                                       points, at)
    for j, i in enumerate(kept):
        times, _, crossed, event_t = plans[j]
        out[i] = Trajectory(param, settings[i], *labelled(compiled, runs[i], times, event_t, states[j], crossed,
                                                          at_crossings[j], record_losses, seconds, method, True))
    _features_at_once(compiled, [out[i] for i in kept], states if until_loss is None else None,
                      [starts[i][0] for i in kept])
    return [out[i] for i in range(len(settings))]


def _rows_to_horizon(param, compiled, settings, starts, runs, kept, sweep, horizon, until_loss, points, at) -> tuple:
    """The rows of a sweep's runs to the horizon (no loss target: every run reached it, so all of them have the
    same rows; :func:`~qkdyn.simulate.logtime.rows` once): every run's inner rows, then every one's crossings,
    read off its steps' tables (:meth:`LaneTables.read`), and the states (sweep, dim, rows) assembled at once
    (:func:`~qkdyn.simulate.logtime.states_at` for all of them: the initial state, the rows read, the final
    state). Returns (states, each run's plan of :func:`~qkdyn.simulate.logtime.rows`, each one's states at its
    crossings)."""
    if not kept:
        return [], [], []
    times, query, _, _ = rows(param, compiled, settings[kept[0]], runs[kept[0]], starts[kept[0]][0], horizon,
                              until_loss, points, at)
    inner = inner_queries(runs[kept[0]], query)
    recorded = runs[kept[0]].event_tau.size > 0  # loss levels to record: each run's crossings
    crossed = [crossed_levels(runs[i], until_loss) for i in kept] if recorded else [[] for _ in kept]
    crossing_queries = [runs[i].event_tau[levels] for i, levels in zip(kept, crossed, strict=True)] if recorded else []
    counts = [inner.size] * len(kept) + [len(levels) for levels in crossed]
    flat, qfirst = sweep.read(kept, [np.tile(inner, len(kept))] + crossing_queries, counts)
    dim, count = len(compiled.variables), len(kept)
    states = np.empty((count, dim, times.size))
    states[:, :, 0] = [starts[i][1] for i in kept]
    states[:, :, 1:-1] = flat[:dim * qfirst[count]].reshape(count, dim, inner.size)
    states[:, :, -1] = [runs[i].final for i in kept]
    at_crossings = ([flat[dim * qfirst[count + j]:dim * qfirst[count + j + 1]].reshape(dim, -1) for j in range(count)]
                    if recorded else [None] * count)
    return states, [(times.copy(), query, levels, None) for levels in crossed], at_crossings


def _rows_each(param, compiled, settings, starts, runs, kept, sweep, horizon, until_loss, points, at) -> tuple:
    """The rows of a sweep's runs each with its own (a loss target: each run's rows end at its event): every
    run's plan (:func:`~qkdyn.simulate.logtime.rows`), its inner rows, then every one's crossings, read off its
    steps' tables (:meth:`LaneTables.read`). Returns (each run's states, plan, states at its crossings)."""
    plans = [rows(param, compiled, settings[i], runs[i], starts[i][0], horizon, until_loss, points, at) for i in kept]
    queries = ([inner_queries(runs[i], plan[1]) for i, plan in zip(kept, plans, strict=True)] +
               [runs[i].event_tau[plan[2]] for i, plan in zip(kept, plans, strict=True)])
    flat, qfirst = sweep.read(kept * 2, queries, [query.size for query in queries])
    dim = len(compiled.variables)
    blocks = [flat[dim * qfirst[j]:dim * qfirst[j + 1]].reshape(dim, -1) for j in range(len(queries))]
    states = [states_at(runs[i], starts[i][1], blocks[j]) for j, i in enumerate(kept)]
    return states, plans, blocks[len(kept):]


@dataclasses.dataclass(frozen=True)
class LaneTables:
    """The dense tables of a sweep (:func:`~qkdyn.simulate.integrate.integrate_many`: one per block of lanes),
    each trajectory's steps in place in its block's."""

    tables: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]]
    capacities: np.ndarray
    steps: np.ndarray

    def tables_of(self, indices: list[int]) -> list[_Table]:
        """Each trajectory's dense output: its steps' rows (taus, hs, ys, Fs), views of its block's tables (their
        row ranges found for all of them at once)."""
        blocks, firsts, ends = (part.tolist() for part in integrate.lane_rows(self.capacities, self.steps,
                                                                              np.asarray(indices, dtype=np.int64)))
        return [_Table(*(table[lo:hi] for table in self.tables[block]))
                for block, lo, hi in zip(blocks, firsts, ends, strict=True)]

    def read(self, segments, queries, counts) -> tuple[np.ndarray, np.ndarray]:
        """The states at the log-times ``queries`` (concatenated: segment j's counts[j] of them off trajectory
        segments[j mod len(segments)]'s steps, the trajectories of consecutive segments ascending) in one compiled
        call per block and run of consecutive segments in it
        (:func:`~qkdyn.simulate.integrate.evaluate_many`): (one flat buffer, segment j's (dim, counts[j])
        states row-major from dim qfirst[j] on; qfirst)."""
        qfirst = np.zeros(len(counts) + 1, dtype=np.int64)
        np.cumsum(counts, out=qfirst[1:])
        if not qfirst[-1]:
            return np.empty(0), qfirst
        own = np.resize(np.asarray(segments, dtype=np.int64), len(counts))
        block, lo, hi = integrate.lane_rows(self.capacities, self.steps, own)
        query = np.concatenate(queries)
        out = np.empty(self.tables[0][2].shape[1] * int(qfirst[-1]))
        edges = [0, *(np.flatnonzero(np.diff(block)) + 1).tolist(), len(own)]
        for a, b in zip(edges[:-1], edges[1:], strict=True):
            taus, hs, ys, Fs = self.tables[block[a]]
            integrate.evaluate_many(taus, hs, ys, Fs, lo[a:b], hi[a:b], query, qfirst[a:b + 1], out)
        return out, qfirst


def _features_at_once(compiled, trajectories: list[Trajectory], states: np.ndarray | None, params: list) -> None:
    """Give the sweep's trajectories their (qk, ov) in one call of the vector ``features`` over all of
    their rows, where they all have the same rows: the same elementwise arithmetic as each trajectory's
    own call, on a (dim, S, T) stack with each setting's parameters ``params`` broadcast along its rows
    (``states``: their states (S, dim, T) where assembled at once, else stacked here)."""
    if not trajectories or len({tr.t.size for tr in trajectories}) > 1:
        return  # then each one computes its own, when asked
    stack = (np.stack([tr.state for tr in trajectories], axis=1) if states is None else
             np.ascontiguousarray(np.swapaxes(states, 0, 1)))
    qk, ov = compiled.features(stack, np.array(params).T[:, :, None])
    for k, tr in enumerate(trajectories):
        tr.features = (qk[k], ov[k])


#: the log loss levels of a run without any
_NO_LEVELS = np.empty(0)


@functools.cache
def _kernel_addresses(param: str) -> tuple[int, int]:
    """The C addresses of form ``param``'s ``rhs_lanes_kernel`` and ``loss_kernel`` (compiled or loaded on the
    first call, then fixed for the process)."""
    compiled = load(param)
    return compiled.rhs_lanes_kernel.address, compiled.loss_kernel.address


@functools.lru_cache(maxsize=4096)
def _kernel_parameters(param: str, p: tuple[float, ...]) -> np.ndarray:
    """The kernels' parameter vector of form ``param`` at the setting's ``p`` (kept per form and setting: part of
    a solve's fixed cost, 2 us of Python a setting; read only). Room for a sweep of 4096 settings solved again (at
    other tolerances, horizons or rows): at 256 a 1024-setting sweep missed every one, ~0.3 kB each."""
    return np.asarray(load(param).kernel_parameters(p))


@dataclasses.dataclass(frozen=True)
class _Table:
    """The compiled DOP853's dense output of one trajectory: its steps' rows (taus, hs, ys, Fs) of the
    dense tables of :func:`~qkdyn.simulate.integrate.integrate_many`, read by
    :func:`~qkdyn.simulate.integrate.evaluate` (arrays: data that pickles)."""

    taus: np.ndarray
    hs: np.ndarray
    ys: np.ndarray
    Fs: np.ndarray

    def __call__(self, taus) -> np.ndarray:
        """The states (dim, *shape of taus) at the log-times ``taus``, as SciPy's ``OdeSolution`` returns them."""
        query = np.asarray(taus, dtype=float)
        states: np.ndarray = integrate.evaluate(self.taus, self.hs, self.ys, self.Fs, query.ravel())
        return states.reshape(len(states), *query.shape)


@dataclasses.dataclass
class _Rerun:
    """The dense output of a compiled run integrated without it (its rows were its two ends alone): on the
    first read the same integration once more, with it (the same steps to the bit: no stage of the dense
    output feeds a step; checked on the step count), its :class:`_Table` kept. Data (the form's name, the
    setting's parameters, the start and the tolerances), so a trajectory that holds it pickles."""

    param: str
    p: tuple[float, ...]
    x0: np.ndarray
    tau_end: float
    rtol: float
    atol: float
    steps: int
    table: _Table | None = None

    def __call__(self, taus) -> np.ndarray:
        """The states (dim, *shape of taus) at the log-times ``taus`` (:meth:`_Table.__call__`)."""
        table = self.table
        if table is None:
            run = _compiled(load(self.param), self.p, self.x0, self.tau_end, self.rtol, self.atol, _NO_LEVELS, False,
                            "DOP853")
            if not isinstance(run.dense, _Table) or run.steps != self.steps:
                raise RuntimeError(f"{self.param}: the dense output's run took {run.steps} steps, the run {self.steps}")
            table = self.table = run.dense
        return table(taus)


def _compiled(compiled: Compiled, p, x0, tau_end, rtol, atol, levels, terminal, method, dense_output: bool = True) -> Run:
    """The compiled DOP853 of :mod:`qkdyn.simulate.integrate` (one lane); without ``dense_output`` its dense
    output is computed when first read (:class:`_Rerun`)."""
    status, steps, nfev, event_tau, final, *table = integrate.integrate_one(
        *_kernel_addresses(compiled.name), _kernel_parameters(compiled.name, p),
        np.asarray(x0, dtype=float), tau_end, rtol, atol, levels, terminal, dense_output)
    dense = _Table(*table) if dense_output else _Rerun(compiled.name, p, x0, tau_end, rtol, atol, steps)
    return Run(status, "step size below the resolution of tau", steps, nfev, 0, event_tau, final, dense)


def _scipy(compiled, p, x0, tau_end, rtol, atol, levels, terminal, method, plain: bool = False) -> Run:
    """SciPy's ``solve_ivp`` in log-time: LSODA, Radau, BDF with the analytic Jacobian, or SciPy's own
    explicit DOP853 (the spec solver of :mod:`qkdyn.simulate.specsolve`, which has no compiled kernels, and a
    cold start's first solves, :mod:`qkdyn.simulate.coldstart`). ``plain``: the right-hand side run as
    plain Python (:meth:`~qkdyn.theory.compiled.Compiled.plain_rhs`: nothing compiled)."""
    from scipy.integrate import solve_ivp  # here, not at import (as quad in Trajectory.line)

    field = compiled.plain_rhs(p) if plain else lambda x: compiled.rhs(x, p)

    def log_loss(x) -> float:
        return math.log(float(compiled.loss(*compiled.features(x, p), p)))

    events = [Crossing(log_loss, level, terminal and i == len(levels) - 1) for i, level in enumerate(levels)]

    # the implicit methods take the analytic Jacobian; DOP853 the compiled one's longest step (integrate.MAX_LOG_STEP)
    options = ({"jac": lambda tau, x: math.exp(tau) * compiled.jac(x, p)} if method in METHODS[1:] else
               {"max_step": integrate.MAX_LOG_STEP})

    def run(with_events: bool):
        return solve_ivp(lambda tau, x: math.exp(tau) * field(x), (0.0, tau_end), x0, method=method,
                         rtol=rtol, atol=atol, dense_output=True, events=(events or None) if with_events else None,
                         **options)

    try:
        sol = run(True)
    except ValueError:  # scipy's event root bracket read off its interpolant can lose its sign change
        sol = run(False)
        return crossings_on_dense(sol, events, terminal)
    event_tau = np.array([te[0] if len(te) else np.nan for te in (sol.t_events or [])])
    return Run(sol.status, sol.message, len(sol.t) - 1, sol.nfev, sol.njev, event_tau, sol.y[:, -1], sol.sol)
