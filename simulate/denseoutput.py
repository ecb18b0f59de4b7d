"""DOP853's dense output read off the compiled integrator's tables (:mod:`qkdyn.simulate.integrate`).

Every accepted step k of a trajectory stores its 7th-order interpolant (SciPy's ``Dop853DenseOutput``): its
start tau_k, size h_k, state y_k and its rows F_r, r = 0 .. P-1 (P = :data:`POWER`): with s = (tau - tau_k) / h_k
the state is y_k + s (F_0 + (1 - s) (F_1 + s (F_2 + ...))), the factors alternating. The tables are flat and
indexed by hand (the integrator's layout: ys[k n + c], Fs[(k P + r) n + c] for n components); while the
lanes of one block are integrated, each lane has a block of ``capacity`` rows (:func:`grown`), joined at the end
(:func:`joined`).
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


@_jit
def joined(table, lanes, capacity, steps):
    """The lanes' rows of a flat per-lane table (``capacity`` rows a lane) one after the other."""
    width, total = table.size // (lanes * capacity), 0
    for l in range(lanes):
        total += steps[l]
    out = np.empty(total * width)
    at = 0
    for l in range(lanes):
        _copy(table, l * capacity * width, out, at * width, steps[l] * width)
        at += steps[l]
    return out


@_jit
def dense(taus, hs, ys, Fs, step, tau, out):
    """Step ``step``'s dense interpolant at tau (SciPy's Dop853DenseOutput), read from the flat tables
    (ys[step n + k], Fs[(step P + r) n + k]: n = out.size components, P = POWER rows)."""
    n = out.size
    s = (tau - taus[step]) / hs[step]
    for k in range(n):
        acc = 0.0
        for i in range(POWER):
            acc = (acc + Fs[(step * POWER + POWER - 1 - i) * n + k]) * (s if i % 2 == 0 else 1.0 - s)
        out[k] = acc + ys[step * n + k]


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
def evaluate_tables(taus, hs, ys, Fs, n, lo, hi, query, qfirst):
    """:func:`evaluate_many` on the flat tables (n components)."""
    out = np.empty(n * query.size)
    work = np.empty(n)
    for j in range(lo.size):
        base, size, step = n * qfirst[j], qfirst[j + 1] - qfirst[j], lo[j]
        for q in range(size):
            tau = query[qfirst[j] + q]
            step = _step_of(taus, hs, lo[j], hi[j], step, tau)
            dense(taus, hs, ys, Fs, step, tau, work)
            for k in range(n):
                out[base + k * size + q] = work[k]
    return out


def evaluate_many(taus, hs, ys, Fs, lo, hi, query, qfirst):
    """:func:`evaluate` for many segments of queries on :func:`~qkdyn.simulate.integrate.integrate_many`'s
    concatenated tables, in one compiled call: segment j reads the times query[qfirst[j]:qfirst[j + 1]] off the
    steps lo[j]:hi[j] (its trajectory's). Returns one flat buffer holding segment j's (dim, T_j) states,
    row-major, from dim * qfirst[j] on."""
    return evaluate_tables(taus, hs, ys.reshape(-1), Fs.reshape(-1), ys.shape[1], lo, hi, query, qfirst)


def evaluate(taus, hs, ys, Fs, query):
    """States at the times ``query`` (columns, in any order) from one trajectory's dense table (of
    :func:`~qkdyn.simulate.integrate.integrate_many`)."""
    bounds = np.array([0, query.size], dtype=np.int64)
    return evaluate_many(taus, hs, ys, Fs, bounds[:1], np.array([taus.size], dtype=np.int64), query,
                         bounds).reshape(ys.shape[1], query.size)
