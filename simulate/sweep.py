"""Sweeps of the features alone: the balanced flow of (qk, ov) over many settings, returned as arrays.

Every setting's init lies on the balanced manifold (docs/setting.md), and the reduced flow of a named form keeps
it there (each B_cj stays 0, kappa is conserved), so its two features move on their own
(:func:`qkdyn.theory.invariants.balanced_flow`):

    dqk/dt = -eta_QK M_QK(qk, kappa) dL/dqk,     dov/dt = -eta_OV M_OV(ov) dL/dov,

with the metrics in closed form (M_QK = s^2 c sqrt(kappa^2 + 4 qk^2 / (s^2 c)) for a factorized QK, M_OV =
2 |ov| / ((K-1) sqrt D) for a factorized OV, constants for a collapsed circuit). :func:`sweep` integrates these
two variables instead of the full reduced state (5-8 variables), in log time tau = log(1 + t) by the compiled
DOP853 in lockstep lanes that ``solve`` runs (:func:`qkdyn.simulate.integrate.integrate_many`, the generated
``balanced_lanes_kernel``), and returns the rows of every setting as (settings, rows) arrays (:class:`Sweep`)
instead of one :class:`~qkdyn.simulate.trajectory.Trajectory` each. It is what a phase diagram or a rate scan
needs; ``solve`` gives the full state (the factors, the invariants, the dense output). The two integrate different
variables of the same flow, so they agree to their tolerances, not to the bit (tests/simulate/test_sweep.py).
"""
from __future__ import annotations

import dataclasses
import functools
import math
import time
from collections.abc import Sequence

import numpy as np
from qkdyn.simulate import integrate
from qkdyn.simulate.coldstart import FIRST_SOLVES
from qkdyn.simulate.logtime import REACHED, check_options, ends_only, horizon_of, output_times
from qkdyn.simulate.solve import LaneTables, check_param, solve
from qkdyn.theory.compiled import Compiled, load
from qkdyn.theory.setting import Setting

from qkdyn.errors import InputError


@dataclasses.dataclass(frozen=True)
class Sweep:
    """The rows of a sweep: setting i's solution at times ``t[i]``, its features ``qk[i]``, ``ov[i]`` (arrays
    (settings, rows); t = 0 and ``points - 1`` log-spaced times up to the end, as :func:`~qkdyn.solve` samples
    them). With ``t_max`` every setting has the same times (``t`` repeats one row, read only); with
    ``until_loss`` each ends at its own crossing ``event_t[i]``. ``steps[i]``: its integrator's steps;
    ``compiled``: whether the compiled integrator ran (else each setting's ``solve``, on a cold start)."""

    param: str
    settings: tuple[Setting, ...]
    t: np.ndarray
    qk: np.ndarray
    ov: np.ndarray
    event_t: np.ndarray | None
    steps: np.ndarray
    compiled: bool

    def __len__(self) -> int:
        return len(self.settings)

    @functools.cached_property
    def _parameters(self) -> np.ndarray:
        """Each setting's numeric parameters, (parameters, settings, 1): broadcast along the rows."""
        return np.array([one.numeric() for one in self.settings]).T[:, :, None]

    @property
    def attn(self) -> np.ndarray:
        """alpha = m e^qk / (m e^qk + n), the attention on the distinct tokens (settings, rows)."""
        return np.asarray(load(self.param).attention(self.qk, self._parameters))

    @property
    def loss(self) -> np.ndarray:
        """L = log(1 + (K-1) e^{-alpha ov}), eq. (2) (settings, rows)."""
        return np.asarray(load(self.param).loss(self.qk, self.ov, self._parameters))

    def columns(self) -> dict[str, np.ndarray]:
        """The rows in long form, one per (setting, row): ``setting`` (its index in ``settings``), each Setting field
        that differs between the settings (NaN where a field is unset), then t, qk, ov, attn, loss."""
        count, rows = self.qk.shape
        columns = {"setting": np.repeat(np.arange(count, dtype=float), rows)}
        for field in dataclasses.fields(Setting):
            values = [getattr(one, field.name) for one in self.settings]
            if len(set(values)) > 1:
                columns[field.name] = np.repeat([np.nan if value is None else float(value) for value in values], rows)
        quantities = {"t": self.t, "qk": self.qk, "ov": self.ov, "attn": self.attn, "loss": self.loss}
        return columns | {name: np.ravel(values) for name, values in quantities.items()}

    def to_csv(self, path) -> None:
        """Write :meth:`columns` as CSV (header first, full precision) atomically."""
        from qkdyn.csvio import write_columns

        write_columns(path, self.columns())

    def to_pandas(self):
        """:meth:`columns` as a ``pandas.DataFrame`` indexed by (setting, t); ``attrs`` holds ``param`` (needs the
        ``frames`` extra: ``pip install qkdyn[frames]``)."""
        import pandas as pd

        columns = self.columns()
        index = pd.MultiIndex.from_arrays([columns.pop("setting").astype(int), columns.pop("t")], names=["setting", "t"])
        frame = pd.DataFrame(columns, index=index)
        frame.attrs = {"param": self.param}
        return frame


def sweep(settings: Sequence[Setting], param: str, *, t_max: float | None = None, until_loss: float | None = None,
          points: int = 200, at: Sequence[float] = (), rtol: float = 1e-11, atol: float = 1e-14) -> Sweep:
    """Integrate the balanced flow of (qk, ov) (module doc) of named form ``param`` from every setting's init to
    ``t_max``, or until the loss reaches ``until_loss``, whichever comes first: a :class:`Sweep` of arrays.

    The options are those of :func:`~qkdyn.solve` (rows: t = 0 and ``points - 1`` log-spaced times to the end,
    plus the exact ``at`` times, which need ``t_max``: with ``until_loss`` alone every setting ends elsewhere).
    Where the explicit step collapses for a setting, that setting is solved alone by :func:`~qkdyn.solve` (whose
    LSODA takes over) and its features taken from there.

    Raises
    ------
    InputError
        For a spec or an unknown form, an empty list or one that is not of settings, bad options (as
        :func:`~qkdyn.solve`), ``at`` with ``until_loss`` alone, or a loss level that some setting starts below
        or does not reach within the horizon.

    Examples
    --------
    >>> rates = [qkdyn.Setting(eta_qk=float(eta)) for eta in np.geomspace(0.1, 10, 64)]
    >>> out = qkdyn.sweep(rates, "FAFO", until_loss=1e-3)
    >>> out.attn[:, -1]          # each rate's attention where its loss reaches 1e-3
    """
    settings = _checked(settings, param)
    check_options(t_max, until_loss, points, at, "DOP853")
    if until_loss is not None and t_max is None and at:
        raise InputError("give t_max with at: with until_loss alone each setting's rows end at its own crossing",
                         "at")
    horizon, compiled = horizon_of(t_max, at), load(param)
    if not FIRST_SOLVES.compiled_now(compiled):
        return _from_solves(settings, param, t_max=t_max, until_loss=until_loss, points=points, at=at, rtol=rtol,
                            atol=atol)
    plain = np.array([one.numeric() for one in settings]).T  # each setting's parameters, a column each
    parameters, starts = _starts(compiled, settings, plain)
    log_levels = _log_levels(compiled, plain, starts, until_loss)
    dense_output = not ends_only(horizon, points, at, log_levels.tolist())
    field, loss = compiled.balanced_lanes_kernel, compiled.balanced_loss_kernel
    with integrate.compiling(f"the balanced (qk, ov) kernels of {param}", not (field.cached() and loss.cached())):
        addresses = field.address, loss.address
    status, steps, _, event_tau, final, tables, capacities = integrate.integrate_many(
        *addresses, parameters, starts, math.log1p(horizon), rtol, atol, log_levels, until_loss is not None,
        dense_output)
    lanes = LaneTables(tables, capacities, steps)
    if until_loss is None:
        shared = output_times(horizon, points, at)
        times = np.broadcast_to(shared, (len(settings), shared.size))
        features = _rows_to_horizon(lanes, starts, final, shared)
        event_t = None
    else:
        times, features = _rows_to_crossing(param, compiled, settings, lanes, status, starts, final, event_tau[:, -1],
                                            points, until_loss, horizon)
        event_t = times[:, -1].copy()
    collapsed = np.flatnonzero(status < 0)
    for i in collapsed.tolist():  # the explicit step collapsed: the full solve, whose LSODA takes over
        alone = solve(settings[i], param, t_max=t_max, until_loss=until_loss, points=points, at=at, rtol=rtol,
                      atol=atol)
        features[:, i] = alone.qk, alone.ov
        if event_t is not None:
            times[i], event_t[i] = alone.t, alone.t[-1]
    times.flags.writeable = False
    return Sweep(param, settings, times, features[0], features[1], event_t, steps, True)


def _checked(settings, param) -> tuple[Setting, ...]:
    """The settings as a tuple, each checked, and the form (a named one: a spec has no balanced kernels)."""
    if not isinstance(param, str):
        raise InputError("sweep takes a named form (CACO, FACO, CAFO, FAFO, paper); solve a spec's settings with "
                         "qkdyn.solve([...], spec)", "param")
    check_param(param)
    if not isinstance(settings, (list, tuple)) or not settings:
        raise InputError("must be a non-empty list of Setting", "settings")
    for one in settings:
        if not isinstance(one, Setting):
            raise InputError(f"must be a list of Setting, got an element of type {type(one).__name__}", "settings")
    return tuple(settings)


def _starts(compiled: Compiled, settings: tuple[Setting, ...], plain: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(the balanced kernels' parameters (settings, k), the initial features (settings, 2)): each setting's (qk, ov)
    and kappa at its init (``balanced_start``: the setting's qk0 and ov0, up to the sign of a zero), in one vector
    call over the settings (``plain``: their parameters, a column each)."""
    qk, ov, kappa = compiled.balanced_start(plain, np.array([one.qk0 for one in settings], dtype=float),
                                            np.array([one.ov0 for one in settings], dtype=float))
    parameters = np.array(compiled.balanced_kernel_parameters(plain, kappa)).T
    return np.ascontiguousarray(parameters), np.ascontiguousarray(np.stack([qk, ov], axis=1))


def _log_levels(compiled: Compiled, plain: np.ndarray, starts: np.ndarray, until_loss) -> np.ndarray:
    """The log loss level the runs stop at (none without ``until_loss``), which every setting (its parameters a
    column of ``plain``, its start a row of ``starts``) must start above."""
    if until_loss is None:
        return np.empty(0)
    loss0 = np.asarray(compiled.loss(starts[:, 0], starts[:, 1], plain))
    below = np.flatnonzero(~(until_loss < loss0))
    if not (math.isfinite(until_loss) and until_loss > 0) or below.size:
        first = int(below[0]) if below.size else 0
        raise InputError(f"must lie below every setting's initial loss and above 0, got {until_loss!r} (setting "
                         f"{first} starts at loss {float(loss0[first]):.6g})", "until_loss")
    return np.array([math.log(until_loss)])


def _rows_to_horizon(lanes: LaneTables, starts, final, times) -> np.ndarray:
    """The features (2, settings, rows) at the shared ``times``: the initial ones, the inner rows read off each
    run's dense tables (one compiled call per block), the final ones (every run reached its horizon; a collapsed
    run's row is overwritten by its own solve)."""
    count, inner = len(starts), np.log1p(times[1:-1])
    features = np.empty((2, count, times.size))
    features[:, :, 0], features[:, :, -1] = starts.T, final.T
    if inner.size:
        flat, _ = lanes.read(list(range(count)), [np.tile(inner, count)], [inner.size] * count)
        features[:, :, 1:-1] = flat.reshape(count, 2, inner.size).transpose(1, 0, 2)
    return features


def _rows_to_crossing(param, compiled, settings, lanes: LaneTables, status, starts, final, crossing_tau, points,
                      until_loss, horizon) -> tuple[np.ndarray, np.ndarray]:
    """(times (settings, rows), features (2, settings, rows)) of runs that stop where the loss reaches
    ``until_loss``: t = 0, ``points - 1`` log-spaced times up to each run's crossing, whose row is the state at
    the solver's own event time. A run that did not reach it raises (:class:`InputError`)."""
    missed = np.flatnonzero(status == REACHED)
    if missed.size:
        i = int(missed[0])
        left = float(compiled.loss(final[i, 0], final[i, 1], np.array(settings[i].numeric())))
        raise InputError(f"{param}: the loss did not reach {until_loss:g} by t = {horizon:g} for {missed.size} of the "
                         f"{len(settings)} settings (the first, setting {i}, ends at loss {left:.3g})", "until_loss")
    ends = np.expm1(crossing_tau)
    placeholder = np.zeros(output_times(1.0, points).size)  # a collapsed run's rows: its own solve's replace them
    rows = [output_times(end, points) if code >= 0 else placeholder
            for end, code in zip(ends.tolist(), status.tolist(), strict=True)]
    times = np.array(rows)  # each run's last row its crossing time (output_times ends at the end given)
    queries = np.log1p(times[:, 1:])
    queries[:, -1] = np.where(status >= 0, crossing_tau, 0.0)
    count = len(settings)
    flat, _ = lanes.read(list(range(count)), [queries.ravel()], [queries.shape[1]] * count)
    features = np.empty((2, count, times.shape[1]))
    features[:, :, 0] = starts.T
    features[:, :, 1:] = flat.reshape(count, 2, -1).transpose(1, 0, 2)
    return times, features


def _from_solves(settings, param, **options) -> Sweep:
    """A cold start's sweep (the form's compiled integrator not yet paid for, :mod:`qkdyn.simulate.coldstart`):
    each setting's full ``solve`` (SciPy's DOP853 until compiling pays), its features at its rows; the time it
    takes counts as the rent. (Once the integrator runs compiled, the balanced kernels compile with it, about a
    CPU-second, announced on stderr.)"""
    begun = time.perf_counter()
    solved = solve(list(settings), param, **options)
    FIRST_SOLVES.rent(time.perf_counter() - begun)
    times = np.array([tr.t for tr in solved])
    event_t = times[:, -1].copy() if options["until_loss"] is not None else None
    return Sweep(param, settings, times, np.array([tr.qk for tr in solved]), np.array([tr.ov for tr in solved]),
                 event_t, np.array([tr.stats["steps"] for tr in solved]), False)
