"""What every log-time solve shares, a named form's (:mod:`qkdyn.simulate.solve`) and a spec's
(:mod:`qkdyn.simulate.specsolve`): its options checked, its start (parameters, initial state, loss levels,
horizon), the record of a finished integration (:class:`Run`), loss crossings located on a dense solution,
and the trajectory's rows read off the run.

Rows: t = 0 and ``points - 1`` log-spaced times up to the end (:func:`output_times`), plus the exact ``at``
times. The row t = 0 is the exact initial state; a row at the end of a run that reached its horizon is the
run's last step end (its final state); every other row is read off the run's dense output in log time
tau = log(1 + t), the event row at the solver's own event time. So a run asked only for its ends (one
point, no ``at``, no loss levels) reads nothing off its dense output.
"""
from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable, Sequence

import numpy as np
from qkdyn.theory.setting import Setting

from qkdyn.errors import InputError

#: horizon for ``until_loss`` runs when no t_max is given
DEFAULT_T_CAP = 1e100
#: integrators: the compiled DOP853 (default), then SciPy's
METHODS = ("DOP853", "LSODA", "Radau", "BDF")
#: :attr:`Run.status` of a run that reached its horizon
REACHED = 0


@dataclasses.dataclass(frozen=True)
class DenseSolution:
    """One run's continuous solution x(t), 0 <= t <= ``t_end``: the integrator's own interpolant in log time
    tau = log(1 + t) (DOP853's 7th-order dense output between its steps; LSODA's where it took over), the
    one a trajectory's rows were read off. ``log_time_states(taus)`` returns the states (dim, len(taus)).
    Data only (arrays, or SciPy's ``OdeSolution``), so a trajectory that holds it pickles."""

    log_time_states: Callable[[np.ndarray], np.ndarray]
    t_end: float

    def __call__(self, t) -> np.ndarray:
        """The states (dim, *shape of t) at the times ``t`` (any order, within [0, t_end]: not checked here)."""
        return self.log_time_states(np.log1p(np.asarray(t, dtype=float)))


@dataclasses.dataclass
class Run:
    """What an integrator hands back: status (:data:`REACHED`, 1 terminal event, < 0 failed), its counts,
    the log-time of each event level's first crossing (NaN where none), the state where it stopped and
    the dense solution ``dense(taus) -> states (dim, len(taus))``."""

    status: int
    message: str
    steps: int
    nfev: int
    njev: int
    event_tau: np.ndarray
    final: np.ndarray
    dense: Callable[[np.ndarray], np.ndarray]


def output_times(t_end: float, points: int, at: Sequence[float] = ()) -> np.ndarray:
    """t = 0, ``points - 1`` log-spaced times up to t_end, and the exact ``at`` times, ascending."""
    return _output_times(t_end, points, tuple(at))[0].copy()


@functools.lru_cache(maxsize=64)  # a sweep asks for the same rows for every setting, a loop of solves too
def _output_times(t_end: float, points: int, at: tuple[float, ...]) -> tuple[np.ndarray, np.ndarray]:
    """(the times of :func:`output_times`, their log-times log(1 + t)); read only (callers copy)."""
    t_lo = min(1e-2, t_end / 1e3)
    if points > 2:  # geometric spacing with exact ends (np.geomspace, at a third of its cost)
        grid = np.exp(np.linspace(math.log(t_lo), math.log(t_end), points - 1))
        grid[0], grid[-1] = t_lo, t_end
    else:
        grid = np.array([t_lo if points == 2 else t_end])
    extra = [x for x in at if x <= t_end]
    times = np.unique(np.concatenate([[0.0], grid, extra, [t_end]]))
    return times, np.log1p(times)


def ends_only(horizon: float, points: int, at: Sequence[float], levels: Sequence[float]) -> bool:
    """Whether a run's rows are its two ends alone (t = 0 and the horizon) and it has no loss levels: then
    none of them is read off its dense output (the integrator may skip computing it)."""
    return not levels and _output_times(horizon, points, tuple(at))[0].size == 2


def check_options(t_max, until_loss, points, at, method) -> None:
    """Raise :class:`~qkdyn.errors.InputError` for an unknown method, no horizon, or a bad horizon, row count or time."""
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


def start(compiled, setting: Setting, t_max, until_loss, at, record_losses) -> tuple:
    """(parameter vector, initial state, loss levels, horizon) of one setting, its inputs checked."""
    p = setting.numeric()
    x0 = compiled.init(p, setting.qk0, setting.ov0)
    return (p, x0, *levels_and_horizon(compiled, p, x0, t_max, until_loss, at, record_losses))


def sweep_starts(compiled, settings: Sequence[Setting], t_max, until_loss, at, record_losses) -> list[tuple]:
    """:func:`start` of every setting of a sweep: the options, the levels and the horizon checked once where they
    do not depend on the setting (no ``until_loss``, which each setting's initial loss must exceed)."""
    if until_loss is not None:
        return [start(compiled, one, t_max, until_loss, at, record_losses) for one in settings]
    first = start(compiled, settings[0], t_max, until_loss, at, record_losses)
    shared = first[2:]
    return [first] + [(p, compiled.init(p, one.qk0, one.ov0), *shared)
                      for one in settings[1:] for p in (one.numeric(),)]


def levels_and_horizon(compiled, p, x0, t_max, until_loss, at, record_losses) -> tuple[list, float]:
    """(the loss levels, the horizon) of a solve from ``x0``, its options checked: ``until_loss`` below the initial
    loss (the last level), the times ``at`` within the horizon."""
    levels = list(record_losses)
    if until_loss is not None:
        loss0 = compiled.state_loss(x0, p)
        if not (math.isfinite(until_loss) and 0 < until_loss < loss0):
            raise InputError(f"must lie in (0, {loss0:.6g}) (the initial loss), got {until_loss!r}", "until_loss")
        levels.append(until_loss)
    return levels, horizon_of(t_max, at)


def horizon_of(t_max, at) -> float:
    """The horizon of a solve (``t_max``, else :data:`DEFAULT_T_CAP`), the times ``at`` checked to lie within it."""
    horizon = t_max if t_max is not None else DEFAULT_T_CAP
    if max(at, default=0.0) > horizon:
        raise InputError(f"time {max(at)} lies beyond the horizon {horizon}", "at")
    return horizon


def sample(name: str, compiled, setting: Setting, run: Run, p, x0, horizon, until_loss, points, at, record_losses,
           seconds: float, method: str, on_compiled: bool) -> tuple:
    """The rows of a finished integration: (times, state, variables, event_t, stats, crossings, dense)."""
    times, query, crossed, event_t = rows(name, compiled, setting, run, p, horizon, until_loss, points, at)
    at_crossings = run.dense(run.event_tau[crossed]) if crossed else None
    inner = inner_queries(run, query)
    read = run.dense(inner) if inner.size else np.empty((len(x0), 0))
    return labelled(compiled, run, times, event_t, states_at(run, x0, read), crossed, at_crossings, record_losses,
                    seconds, method, on_compiled)


def inner_queries(run: Run, query: np.ndarray) -> np.ndarray:
    """The log-times, among the rows' ``query`` (of :func:`rows`), read off the run's dense output: all but
    the first (t = 0) and, where the run reached its horizon, the last (its final state)."""
    return query[1:-1] if run.status == REACHED else query[1:]


def states_at(run: Run, x0, read: np.ndarray) -> np.ndarray:
    """The states (dim, rows) at the rows: the exact initial state ``x0``, the states ``read`` off the dense
    output at :func:`inner_queries`, then the final state where the run reached its horizon."""
    reached = run.status == REACHED
    state = np.empty((len(x0), 1 + read.shape[1] + reached))
    state[:, 0] = x0
    if read.size:
        state[:, 1:1 + read.shape[1]] = read
    if reached:
        state[:, -1] = run.final
    return state


def rows(name: str, compiled, setting: Setting, run: Run, p, horizon, until_loss, points, at) -> tuple:
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
    times, query = _output_times(event_t if event_t is not None else horizon, points, tuple(at))
    times, query = times.copy(), query.copy()
    if event_t is not None:  # the event row is the solver's own event time
        query[-1] = run.event_tau[-1]
        times[-1] = event_t
    return times, query, crossed_levels(run, until_loss), event_t


def crossed_levels(run: Run, until_loss) -> list[int]:
    """The indices of the recorded loss levels the run crossed (its event levels but the target ``until_loss``'s)."""
    recorded = run.event_tau.tolist()[:len(run.event_tau) - (until_loss is not None)]
    return [i for i, tau in enumerate(recorded) if math.isfinite(tau)]


def labelled(compiled, run: Run, times, event_t, state, crossed, at_crossings, record_losses, seconds: float,
             method: str, on_compiled: bool) -> tuple:
    """(times, state, variables, event_t, stats, crossings, dense) from the states at the rows of
    :func:`rows` (:func:`states_at`; record_losses[crossed[j]] crossed at event_tau[crossed[j]], its state at_crossings[:, j]);
    ``stats["compiled"]``: whether the compiled integrator ran (else SciPy's); ``dense``: the
    :class:`DenseSolution` of ``run.dense`` (the run's interpolant in log time) up to the last row."""
    stats = {"seconds": seconds, "nfev": run.nfev, "njev": run.njev, "steps": run.steps, "method": method,
             "compiled": on_compiled}
    crossings = {record_losses[i]: (math.expm1(run.event_tau[i]), at_crossings[:, j]) for j, i in enumerate(crossed)}
    return (times, state, compiled.variables, event_t, stats, crossings,
            DenseSolution(run.dense, float(times[-1])))


class Crossing:
    """SciPy's event of one loss level: log L(x) - level, crossed downwards; ``terminal`` ends the run there."""

    direction = -1

    def __init__(self, log_loss: Callable[[np.ndarray], float], level: float, terminal: bool):
        self.log_loss, self.level, self.terminal = log_loss, level, terminal

    def __call__(self, tau: float, x: np.ndarray) -> float:
        return self.log_loss(x) - self.level


def crossings_on_dense(sol, events, terminal) -> Run:
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
    return Run(status, sol.message, len(sol.t) - 1, sol.nfev, sol.njev, event_tau, sol.y[:, -1], sol.sol)
