"""The compiled integrator: DOP853 in log-time, with its dense output and loss events, under numba.

With tau = log(1 + t) the flow dx/dt = f(x) is dx/dtau = e^tau f(x) (:mod:`qkdyn.simulate.solve`).
This is the explicit Runge-Kutta pair of Dormand and Prince of order 8(5,3) with the step control of
Hairer, Norsett and Wanner (Solving ODEs I, II.10) as SciPy implements it in ``solve_ivp(method="DOP853")``
(the same coefficients, imported from SciPy; the same error norm, step-size factor bounds and initial
step), but the whole loop compiled (the stage combinations as straight-line code with the coefficients
as literals, :mod:`qkdyn.simulate.dop853`, the same arithmetic as a loop over SciPy's tables), the right-hand side a compiled kernel of
:mod:`qkdyn.theory.generated` called through its C address (so a call from Python costs no more than
its arguments' conversion, and one compiled integrator serves every form). Every accepted step stores its 7th-order
dense interpolant (three extra stages), so output rows are read off afterwards at any tau.

Events: for each loss level L_k, the first step across which g_k = log L(x) - log L_k changes sign
from positive to non-positive (the loss falls through the level) is located to round-off on the
dense interpolant by the Illinois variant of regula falsi; the last level may be terminal (the
integration stops there, as ``solve_ivp``'s terminal events do).
"""
from __future__ import annotations

import math

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic
from scipy.integrate._ivp import dop853_coefficients as _dop

from qkdyn.simulate import dop853
from qkdyn.theory.kernels import cache_in_tree

_CACHE = cache_in_tree(__file__)
_STAGES = _dop.N_STAGES
_C = _dop.C  # the stages' times; their combinations are written out in qkdyn.simulate.dop853
_POWER = _dop.INTERPOLATOR_POWER
_SAFETY, _MIN_FACTOR, _MAX_FACTOR = 0.9, 0.2, 10.0
_EXPONENT = -1.0 / 8.0  # -1 / (error estimator order + 1)

#: status codes of :func:`integrate`
REACHED, TERMINAL_EVENT, STEP_TOO_SMALL = 0, 1, -1


@intrinsic
def _call_field(typingctx, address, x, p, out):
    """Call the C kernel at ``address`` as void(double *x, double *p, double *out)."""
    def codegen(context, builder, signature, args):
        pointers = [context.make_array(t)(context, builder, v).data for t, v in zip(signature.args[1:], args[1:])]
        double = ir.DoubleType().as_pointer()
        kernel = builder.inttoptr(args[0], ir.FunctionType(ir.VoidType(), [double] * 3).as_pointer())
        builder.call(kernel, pointers)
        return context.get_dummy_value()
    return types.void(address, x, p, out), codegen


@intrinsic
def _call_scalar(typingctx, address, x, p):
    """Call the C kernel at ``address`` as double(double *x, double *p)."""
    def codegen(context, builder, signature, args):
        pointers = [context.make_array(t)(context, builder, v).data for t, v in zip(signature.args[1:], args[1:])]
        double = ir.DoubleType().as_pointer()
        kernel = builder.inttoptr(args[0], ir.FunctionType(ir.DoubleType(), [double] * 2).as_pointer())
        return builder.call(kernel, pointers)
    return types.float64(address, x, p), codegen


@njit(cache=_CACHE, error_model="numpy")
def _field(f, tau, x, p, out):
    """out = e^tau f(x): the log-time field (f: the address of a form's ``rhs_kernel``)."""
    _call_field(f, x, p, out)
    scale = math.exp(tau)
    for i in range(out.size):
        out[i] *= scale


@njit(cache=_CACHE, error_model="numpy")
def _field_row(f, tau, x, p, raw, K, row):
    """K[row] = e^tau f(x), through the scratch vector ``raw`` (indexing K, not taking a view of its
    row: in the step loop a view per stage cost more than the arithmetic)."""
    _call_field(f, x, p, raw)
    scale = math.exp(tau)
    for i in range(raw.size):
        K[row, i] = raw[i] * scale


@njit(cache=_CACHE, error_model="numpy")
def _log_loss(g, x, p):
    value = _call_scalar(g, x, p)
    return math.log(value) if value > 0 else -math.inf


@njit(cache=_CACHE, error_model="numpy")
def _rms(v, scale):
    total = 0.0
    for i in range(v.size):
        total += (v[i] / scale[i]) ** 2
    return math.sqrt(total / v.size)


@njit(cache=_CACHE, error_model="numpy")
def _dense(taus, hs, ys, Fs, step, tau, out):
    """Step ``step``'s dense interpolant at tau (SciPy's Dop853DenseOutput), read from the tables."""
    s = (tau - taus[step]) / hs[step]
    for k in range(ys.shape[1]):
        acc = 0.0
        for i in range(_POWER):
            acc = (acc + Fs[step, _POWER - 1 - i, k]) * (s if i % 2 == 0 else 1.0 - s)
        out[k] = acc + ys[step, k]


@njit(cache=_CACHE, error_model="numpy")
def _first_step(f, p, y0, f0, tau_end, rtol, atol):
    """SciPy's ``select_initial_step`` for order 8 (Hairer, Norsett and Wanner, II.4)."""
    scale = atol + np.abs(y0) * rtol
    d0, d1 = _rms(y0, scale), _rms(f0, scale)
    h0 = 1e-6 if d0 < 1e-5 or d1 < 1e-5 else 0.01 * d0 / d1
    h0 = min(h0, tau_end)
    f1 = np.empty_like(y0)
    _field(f, h0, y0 + h0 * f0, p, f1)
    d2 = _rms(f1 - f0, scale) / h0
    h1 = max(1e-6, h0 * 1e-3) if d1 <= 1e-15 and d2 <= 1e-15 else (0.01 / max(d1, d2)) ** (1.0 / 9.0)
    return min(100 * h0, h1, tau_end)


@njit(cache=_CACHE, error_model="numpy")
def _locate(g, p, level, taus, hs, ys, Fs, step, g_lo, g_hi, work):
    """The tau in step ``step`` where the dense log-loss crosses ``level`` (Illinois method)."""
    a, b, fa, fb = taus[step], taus[step] + hs[step], g_lo, g_hi
    side = 0
    for _ in range(200):
        if b - a <= 4e-16 * max(abs(a), abs(b), 1e-300):
            break
        c = b - fb * (b - a) / (fb - fa) if fb != fa else 0.5 * (a + b)
        if not a < c < b:
            c = 0.5 * (a + b)
        _dense(taus, hs, ys, Fs, step, c, work)
        fc = _log_loss(g, work, p) - level
        if fc == 0.0:
            return c
        if fc > 0:
            a, fa = c, fc
            if side == 1:
                fb *= 0.5
            side = 1
        else:
            b, fb = c, fc
            if side == -1:
                fa *= 0.5
            side = -1
    return b


@njit(cache=_CACHE, error_model="numpy")
def integrate(f, g, p, y0, tau_end, rtol, atol, levels, terminal):
    """Integrate dx/dtau = e^tau f(x) from tau = 0 to ``tau_end`` (or to the terminal event).

    f, g: the addresses of a form's ``rhs_kernel`` and ``loss_kernel`` (plain integers: the
    integrator is compiled, and cached, once for every form), p: the parameter vector,
    levels: log loss levels of the events (the last one terminal when ``terminal``).
    Returns (status, steps, nfev, event_tau (NaN where not crossed), dense table): the table is
    (tau_old, h, y_old, F) per accepted step, for :func:`evaluate`.
    """
    n = y0.size
    K = np.empty((16, n))
    capacity = 256
    taus, hs = np.empty(capacity), np.empty(capacity)
    ys, Fs = np.empty((capacity, n)), np.empty((capacity, _POWER, n))
    event_tau = np.full(levels.size, np.nan)
    y, y_new, scale, work, raw = y0.copy(), np.empty(n), np.empty(n), np.empty(n), np.empty(n)
    f_now = np.empty(n)
    _field(f, 0.0, y, p, f_now)
    nfev = 1
    h_abs = _first_step(f, p, y, f_now, tau_end, rtol, atol)
    nfev += 1
    g_now = np.empty(levels.size)
    log_loss = _log_loss(g, y, p) if levels.size else 0.0
    for k in range(levels.size):
        g_now[k] = log_loss - levels[k]
    tau, steps, status = 0.0, 0, REACHED
    while tau < tau_end:
        min_step = 10 * abs(np.nextafter(tau, np.inf) - tau)
        h_abs = max(h_abs, min_step)
        rejected = False
        while True:
            if h_abs < min_step:
                return STEP_TOO_SMALL, steps, nfev, event_tau, taus[:steps], hs[:steps], ys[:steps], Fs[:steps]
            tau_new = min(tau + h_abs, tau_end)
            h = tau_new - tau
            for i in range(n):
                K[0, i] = f_now[i]
            for s in range(1, _STAGES):
                dop853.stage_state(y, h, K, s, work)
                _field_row(f, tau + _C[s] * h, work, p, raw, K, s)
            dop853.solution(y, h, K, y_new)
            _field_row(f, tau + h, y_new, p, raw, K, _STAGES)
            nfev += _STAGES
            err5, err3 = 0.0, 0.0
            for i in range(n):
                scale[i] = atol + max(abs(y[i]), abs(y_new[i])) * rtol
                e5, e3 = dop853.error_sums(K, i)
                err5 += (e5 / scale[i]) ** 2
                err3 += (e3 / scale[i]) ** 2
            norm = 0.0 if err5 == 0 and err3 == 0 else h * err5 / math.sqrt((err5 + 0.01 * err3) * n)
            if norm < 1:
                factor = _MAX_FACTOR if norm == 0 else min(_MAX_FACTOR, _SAFETY * norm ** _EXPONENT)
                h_abs *= min(1.0, factor) if rejected else factor
                break
            h_abs *= max(_MIN_FACTOR, _SAFETY * norm ** _EXPONENT)
            rejected = True
        for s in range(_STAGES + 1, 16):  # the extra stages of the dense output
            dop853.stage_state(y, h, K, s, work)
            _field_row(f, tau + _C[s] * h, work, p, raw, K, s)
        nfev += 3
        if steps == capacity:
            capacity *= 2
            taus, hs = np.concatenate((taus, np.empty(capacity - steps))), np.concatenate((hs, np.empty(capacity - steps)))
            ys = np.concatenate((ys, np.empty((capacity - steps, n))))
            Fs = np.concatenate((Fs, np.empty((capacity - steps, _POWER, n))))
        for i in range(n):  # the dense table's row: indexed, not through a view of Fs[steps]
            d0 = y_new[i] - y[i]
            Fs[steps, 0, i] = d0
            Fs[steps, 1, i] = h * K[0, i] - d0
            Fs[steps, 2, i] = 2 * d0 - h * (K[_STAGES, i] + K[0, i])
            ys[steps, i] = y[i]
        dop853.dense_rows(K, h, Fs, steps)
        taus[steps], hs[steps] = tau, h
        steps += 1
        stop = False
        if levels.size:
            log_loss = _log_loss(g, y_new, p)
            for k in range(levels.size):
                g_new = log_loss - levels[k]
                if np.isnan(event_tau[k]) and g_now[k] > 0 and g_new <= 0:
                    event_tau[k] = _locate(g, p, levels[k], taus, hs, ys, Fs, steps - 1, g_now[k], g_new, work)
                    stop = stop or (terminal and k == levels.size - 1)
                g_now[k] = g_new
        for i in range(n):
            y[i] = y_new[i]
            f_now[i] = K[_STAGES, i]  # FSAL: the last stage is f at the new state
        tau = tau_new
        if stop:
            status = TERMINAL_EVENT
            break
    return status, steps, nfev, event_tau, taus[:steps], hs[:steps], ys[:steps], Fs[:steps]


@njit(cache=_CACHE, error_model="numpy")
def _step_of(taus, hs, lo, hi, step, tau):
    """The first step k in [lo, hi) whose end taus[k] + hs[k] is at least tau (the last one past the end):
    the step whose interpolant holds tau. The walk goes on from ``step`` (the previous query's) for
    ascending queries, and starts again at ``lo`` for a query before that step."""
    if tau < taus[step]:
        step = lo
    while step < hi - 1 and tau > taus[step] + hs[step]:
        step += 1
    return step


@njit(cache=_CACHE, error_model="numpy")
def evaluate_many(taus, hs, ys, Fs, lo, hi, query, qfirst):
    """:func:`evaluate` for many segments of queries on :func:`integrate_many`'s concatenated tables, in
    one call: segment j reads the times query[qfirst[j]:qfirst[j + 1]] off the steps lo[j]:hi[j] (its
    trajectory's). Returns one flat buffer holding segment j's (dim, T_j) states, row-major, from
    dim * qfirst[j] on."""
    n = ys.shape[1]
    out = np.empty(n * query.size)
    work = np.empty(n)
    for j in range(lo.size):
        base, size, step = n * qfirst[j], qfirst[j + 1] - qfirst[j], lo[j]
        for q in range(size):
            tau = query[qfirst[j] + q]
            step = _step_of(taus, hs, lo[j], hi[j], step, tau)
            _dense(taus, hs, ys, Fs, step, tau, work)
            for k in range(n):
                out[base + k * size + q] = work[k]
    return out


@njit(cache=_CACHE, error_model="numpy")
def evaluate(taus, hs, ys, Fs, query):
    """States at the times ``query`` (columns, in any order) from the dense table of :func:`integrate`."""
    bounds = np.array([0, query.size])
    return evaluate_many(taus, hs, ys, Fs, bounds[:1], np.array([taus.size]), query, bounds).reshape(ys.shape[1], query.size)


@njit(cache=_CACHE, error_model="numpy")
def integrate_many(f, g, P, X0, tau_end, rtol, atol, levels, terminal):
    """:func:`integrate` for every row of the parameter vectors ``P`` and initial states ``X0`` (one
    form, the same horizon and levels), in one compiled loop. Returns (status, steps, nfev, event_tau)
    per trajectory (arrays, event_tau (S, levels)) and the dense tables of all of them concatenated:
    (taus, hs, ys, Fs, first) with trajectory i's steps at first[i]:first[i + 1]. Each trajectory's
    numbers are those of its own :func:`integrate` call (the same function, the same inputs)."""
    S, n = X0.shape
    status, steps, nfev = np.empty(S, np.int64), np.empty(S, np.int64), np.empty(S, np.int64)
    event_tau = np.empty((S, levels.size))
    first = np.zeros(S + 1, np.int64)
    capacity = 128 * S
    taus, hs = np.empty(capacity), np.empty(capacity)
    ys, Fs = np.empty((capacity, n)), np.empty((capacity, _POWER, n))
    for i in range(S):
        status[i], steps[i], nfev[i], crossed, t_i, h_i, y_i, F_i = integrate(
            f, g, P[i], X0[i], tau_end, rtol, atol, levels, terminal)
        event_tau[i] = crossed
        end = first[i] + t_i.size
        if end > capacity:
            capacity = max(2 * capacity, end)
            taus, hs = np.concatenate((taus, np.empty(capacity - taus.size))), np.concatenate((hs, np.empty(capacity - hs.size)))
            ys = np.concatenate((ys, np.empty((capacity - ys.shape[0], n))))
            Fs = np.concatenate((Fs, np.empty((capacity - Fs.shape[0], _POWER, n))))
        taus[first[i]:end], hs[first[i]:end], ys[first[i]:end], Fs[first[i]:end] = t_i, h_i, y_i, F_i
        first[i + 1] = end
    return status, steps, nfev, event_tau, taus, hs, ys, Fs, first

