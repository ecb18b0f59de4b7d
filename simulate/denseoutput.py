"""DOP853's dense output read off the compiled integrator's tables (:mod:`qkdyn.simulate.integrate`).

Every accepted step k of a trajectory stores its 7th-order interpolant (SciPy's ``Dop853DenseOutput``): its
start tau_k, size h_k, state y_k and its rows F_r, r = 0 .. P-1 (P = :data:`POWER`): with s = (tau - tau_k) / h_k
the state is y_k + s (F_0 + (1 - s) (F_1 + s (F_2 + ...))), the factors alternating. The tables are flat and
indexed by hand (the integrator's layout: ys[k n + c], Fs[(k P + r) n + c] for n components); each lane of a
block has ``capacity`` rows (:func:`grown`), its steps the first of them, read in place.
"""
from __future__ import annotations

import numpy as np
from qkdyn.simulate.dop853 import POWER as POWER  # rows of the dense output per step
from qkdyn.theory.kernels import cached_njit

_jit = cached_njit(error_model="numpy")  # cached in tree (qkdyn.theory.kernels.TreeCache)


@_jit
def _copy(source, start, target, at, count):
    """target[at + j] = source[start + j] for j < count (a loop: numba's slice assignment costs seconds
    of compilation, its shape checks formatting their error messages)."""
    for j in range(count):
        target[at + j] = source[start + j]


@_jit
def grown(table, lanes, old, new):
    """The flat per-lane table (lanes blocks of ``old`` rows) with room for ``new`` rows per lane."""
    width = table.size // (lanes * old)
    out = np.empty(lanes * new * width)
    for l in range(lanes):
        _copy(table, l * old * width, out, l * new * width, old * width)
    return out


@cached_njit(error_model="numpy", inline="always")
def dense(taus, hs, ys, Fs, n, step, tau, out, first, stride):
    """Step ``step``'s dense interpolant at tau (SciPy's Dop853DenseOutput), read from the flat tables
    (ys[step n + k], Fs[(step P + r) n + k]: n components, P = POWER rows), component k into
    out[first + k stride]. Inlined into its callers: a call per row into its own buffer, copied out afterwards,
    cost 15-20% of reading a trajectory's rows."""
    s = (tau - taus[step]) / hs[step]
    for k in range(n):
        acc = 0.0
        for i in range(POWER):
            acc = (acc + Fs[(step * POWER + POWER - 1 - i) * n + k]) * (s if i % 2 == 0 else 1.0 - s)
        out[first + k * stride] = acc + ys[step * n + k]


@_jit
def _step_of(taus, hs, lo, hi, step, tau):
    """The first step k in [lo, hi) whose end taus[k] + hs[k] is at least tau (the last one past the end):
    the step whose interpolant holds tau. The walk goes on from ``step`` (the previous query's) for
    ascending queries, and starts again at ``lo`` for a query before that step."""
    if tau < taus[step]:
        step = lo
    while step < hi - 1 and tau > taus[step] + hs[step]:
        step += 1
    return step


@_jit
def evaluate_tables(taus, hs, ys, Fs, n, lo, hi, query, qfirst, out):
    """:func:`evaluate_many` on the flat tables (n components), into ``out``."""
    for j in range(lo.size):
        base, size, step = n * qfirst[j], qfirst[j + 1] - qfirst[j], lo[j]
        for q in range(size):
            tau = query[qfirst[j] + q]
            step = _step_of(taus, hs, lo[j], hi[j], step, tau)
            dense(taus, hs, ys, Fs, n, step, tau, out, base + q, size)
    return out


def evaluate_many(taus, hs, ys, Fs, lo, hi, query, qfirst, out=None):
    """:func:`evaluate` for many segments of queries on the dense tables of a block of
    :func:`~qkdyn.simulate.integrate.integrate_many`, in one compiled call: segment j reads the times
    query[qfirst[j]:qfirst[j + 1]] off the steps lo[j]:hi[j] (its trajectory's). Returns the flat buffer ``out``
    (by default a new one of dim * qfirst[-1] elements) holding segment j's (dim, T_j) states, row-major, from
    dim * qfirst[j] on: segments of several blocks go into one buffer, qfirst their offsets in it."""
    n = ys.shape[1]
    out = np.empty(n * int(qfirst[-1])) if out is None else out
    return evaluate_tables(taus, hs, ys.reshape(-1), Fs.reshape(-1), n, lo, hi, query, qfirst, out)


def evaluate(taus, hs, ys, Fs, query):
    """States (dim, len(query)) at the times ``query`` (in any order) from one trajectory's dense table (of
    :func:`~qkdyn.simulate.integrate.integrate_one`, or its steps of :func:`~qkdyn.simulate.integrate.integrate_many`'s):
    :func:`evaluate_tables` with one segment, called directly (a single solve's rows: its wrapping is part of the
    call's fixed cost)."""
    n = ys.shape[1]
    out = np.empty((n, query.size))
    evaluate_tables(taus, hs, ys.reshape(-1), Fs.reshape(-1), n, _FIRST_STEP, np.array([taus.size]), query,
                    np.array([0, query.size]), out.reshape(-1))
    return out


#: the first step of one trajectory's table (the segment's start of :func:`evaluate`)
_FIRST_STEP = np.zeros(1, dtype=np.int64)
