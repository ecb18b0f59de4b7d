"""The compiled integrator: DOP853 in log-time, with its dense output and loss events, under numba.

With tau = log(1 + t) the flow dx/dt = f(x) is dx/dtau = e^tau f(x) (:mod:`qkdyn.simulate.solve`).
This is the explicit Runge-Kutta pair of Dormand and Prince of order 8(5,3) with the step control of
Hairer, Norsett and Wanner (Solving ODEs I, II.10) as SciPy implements it in ``solve_ivp(method="DOP853")``
(the same coefficients, imported from SciPy; the same error norm, step-size factor bounds and initial
step; its ``max_step`` :data:`MAX_LOG_STEP`), but the whole loop compiled (the stage combinations as
straight-line code with the coefficients as literals, :mod:`qkdyn.simulate.dop853`, the same arithmetic as a loop
over SciPy's tables; C functions called through their addresses, compiled and cached on their own), the right-hand side a compiled kernel of
:mod:`qkdyn.theory.generated` called through its C address (so a call from Python costs no more than
its arguments' conversion, and one compiled integrator serves every form). Every accepted step stores its 7th-order
dense interpolant (three extra stages), so output rows are read off afterwards at any tau
(:mod:`qkdyn.simulate.denseoutput`); a run that needs no row between its ends (``dense_output=False``) skips
those stages, a fifth of its field evaluations.

Lanes: a sweep's trajectories are integrated in lockstep, up to :data:`LANES` at a time, each lane
with its own step size, acceptance and events, but every stage evaluated for all lanes in one call of
the form's ``rhs_lanes_kernel`` and every stage combination in one loop over lanes, both of which the
compiler runs in SIMD registers (e^tau too, as ``lane_exp``). A lane that has finished (or whose step
was rejected, for the three dense stages) is carried along and its results ignored. No lane's
arithmetic depends on another's: a trajectory has the same bits alone (one lane) or in any sweep.

Events: for each loss level L_k, the first step across which g_k = log L(x) - log L_k changes sign
from positive to non-positive (the loss falls through the level) is located to round-off on the
dense interpolant by the Illinois variant of regula falsi; the last level may be terminal (the
integration stops there, as ``solve_ivp``'s terminal events do).

Compilation: with an empty numba cache all of this compiles on first use (9-17 CPU-s, by the machine;
24 s before these rules; a process solves with SciPy first until compiling pays: :func:`cached`,
:mod:`qkdyn.simulate.coldstart`), so the code keeps numba's typing and LLVM's work small: every
table is flat and indexed by hand (slice assignment, with its shape checks and their formatted
messages, cost seconds), no compiled helper gets a literal argument (numba compiles it once for each
literal value as well as for int64), and the stage combinations are C functions called through their
addresses (:mod:`qkdyn.simulate.ccall`), so they are not linked into :func:`_lockstep` and optimised once more
with it. :func:`_lockstep`'s own steps (each lane's next attempt, error norm, step control, stored step, events)
are helpers inlined into it (``inline="always"``: no call boundary, the same code as written out in the loop).
"""
from __future__ import annotations

import contextlib
import functools
import math
import sys

import numpy as np
from qkdyn.simulate import dop853
from qkdyn.simulate.ccall import call, call_scalar
from qkdyn.simulate.denseoutput import POWER, dense, evaluate_tables, grown
from qkdyn.simulate.denseoutput import evaluate as evaluate  # the public readers of the tables, named here too
from qkdyn.simulate.denseoutput import evaluate_many as evaluate_many
from qkdyn.simulate.dop853 import STAGES as _STAGES
from qkdyn.simulate.dop853 import C as _C  # the stages' times (SciPy's), their combinations written out there
from qkdyn.theory.kernels import cached_njit, has_machine_code, lane_exp

_jit = cached_njit(error_model="numpy")  # cached in tree (qkdyn.theory.kernels.TreeCache)
_inline = cached_njit(error_model="numpy", inline="always")  # the steps of _lockstep: inlined, no call boundary
_SAFETY, _MIN_FACTOR, _MAX_FACTOR = 0.9, 0.2, 10.0
_EXPONENT = -1.0 / 8.0  # -1 / (error estimator order + 1)

#: the longest step in log time: one e-fold of 1 + t. Late in training the log-time flow relaxes to its asymptote at
#: rate about 1 (a deviation decays like e^-tau = 1 / (1 + t)), and on steps much longer than that DOP853's error
#: estimate is no longer asymptotic: with SciPy's unbounded steps (h 2.9-3.8 in tau) it accepted steps whose true error
#: was 10^2-10^4 times the tolerance (the paper form's rows at rtol 1e-8: 4.5e-5; CACO to t = 1e300 at the default
#: 1e-11: 1e-8 beyond t = 1e30, 5e-15 with the bound). SciPy's ``max_step``: every DOP853 in log time takes it
#: (this one, SciPy's on a cold start and the spec solver's); LSODA, Radau and BDF keep their own steps.
MAX_LOG_STEP = 1.0

#: status codes of :func:`integrate_many`
REACHED, TERMINAL_EVENT, STEP_TOO_SMALL = 0, 1, -1
#: DOP853's stage combinations (C functions: :mod:`qkdyn.simulate.dop853`), whose addresses are passed to
#: :func:`_lockstep` as an argument (a constant would be compiled into its cached code, and be stale there)
_COMBINATIONS = (dop853.stage_state, dop853.solution, dop853.error_sums, dop853.dense_rows)
#: trajectories integrated in lockstep (a block of lanes): wide enough for the SIMD loops, narrow enough
#: that lanes finishing early idle little and the block's dense tables stay small
LANES = 32


@_jit
def _field(f, tau, c, h, x, P, scale, out):
    """out[i L + l] = e^(tau[l] + c h[l]) f(x)_i at the state x[i L + l] of every lane l of L: the
    log-time field at the stage's time (f: the address of a form's ``rhs_lanes_kernel``, P: the lanes'
    parameter vectors as columns; ``out`` a row of the stages K, never a literal row number: numba would
    compile the function once for each)."""
    lanes = h.size
    for l in range(lanes):
        scale[l] = lane_exp(tau[l] + c * h[l])
    call(f, (x, P, scale, out, lanes))


@_inline
def _stage_scales(tau, h, first, end, scales):
    """scales[s L + l] = e^(tau[l] + C[s] h[l]) for the stages s = first .. end - 1 of every lane l of L: the
    factors :func:`_field` would compute stage by stage, all at once before the stages run (the same bits;
    none depends on another, so the CPU overlaps their latencies instead of waiting out each one between
    two field evaluations: 15% of a one-lane solve)."""
    lanes = h.size
    for s in range(first, end):
        for l in range(lanes):
            scales[s * lanes + l] = lane_exp(tau[l] + _C[s] * h[l])


@_jit
def _log_loss(g, x, p):
    value = call_scalar(g, x, p)
    return math.log(value) if value > 0 else -math.inf


@_jit
def _rms(v, scale, lane, lanes):
    """The root mean square of v / scale over lane ``lane``'s elements i lanes + lane."""
    total, n = 0.0, v.size // lanes
    for i in range(n):
        total += (v[i * lanes + lane] / scale[i * lanes + lane]) ** 2
    return math.sqrt(total / n)


@_jit
def _first_steps(f, P, y0, K, tau_end, rtol, atol, work, scale):
    """SciPy's ``select_initial_step`` for order 8 (Hairer, Norsett and Wanner, II.4) in every lane, from
    the field f0 = K[0] at y0 (elements i L + l); its second field evaluation goes into K[1]."""
    lanes = scale.size
    weights, zeros = np.empty(y0.size), np.empty(lanes)
    for m in range(y0.size):
        weights[m] = atol + abs(y0[m]) * rtol
    h0, d1 = np.empty(lanes), np.empty(lanes)
    for l in range(lanes):
        d0, d1[l] = _rms(y0, weights, l, lanes), _rms(K[0], weights, l, lanes)
        h0[l] = min(1e-6 if d0 < 1e-5 or d1[l] < 1e-5 else 0.01 * d0 / d1[l], tau_end)
        zeros[l] = 0.0
    for m in range(y0.size):
        work[m] = y0[m] + h0[m % lanes] * K[0, m]
    _field(f, zeros, 1.0, h0, work, P, scale, K[1])
    for m in range(y0.size):
        work[m] = K[1, m] - K[0, m]
    for l in range(lanes):
        d2 = _rms(work, weights, l, lanes) / h0[l]
        h1 = max(1e-6, h0[l] * 1e-3) if d1[l] <= 1e-15 and d2 <= 1e-15 else (0.01 / max(d1[l], d2)) ** (1.0 / 9.0)
        h0[l] = min(100 * h0[l], h1, tau_end)
    return h0


@_jit
def _locate(g, p, level, taus, hs, ys, Fs, step, g_lo, g_hi, work):
    """The tau in step ``step`` (of the flat tables) where the dense log-loss crosses ``level`` (Illinois method)."""
    a, b, fa, fb = taus[step], taus[step] + hs[step], g_lo, g_hi
    side = 0
    for _ in range(200):
        if b - a <= 4e-16 * max(abs(a), abs(b), 1e-300):
            break
        c = b - fb * (b - a) / (fb - fa) if fb != fa else 0.5 * (a + b)
        if not a < c < b:
            c = 0.5 * (a + b)
        dense(taus, hs, ys, Fs, work.size, step, c, work, 0, 1)
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


@_inline
def _lane_state(y, l, lanes, one):
    """Lane l's state, the elements i lanes + l of the flat ``y``, into ``one``."""
    for i in range(one.size):
        one[i] = y[i * lanes + l]


@_inline
def _next_attempt(l, tau, tau_end, h_abs, min_step, h, tau_new, active, fresh, rejected, status):
    """Lane l's next attempt (a new step, or a rejected one again): its step h[l], to tau_new[l] (h[l] = 0 for
    a lane no longer active). A new step is at least 10 roundings of tau; one that has shrunk below that stops
    the lane (STEP_TOO_SMALL). Returns 1 where the lane stopped here, else 0."""
    stopped = 0
    if active[l]:
        if fresh[l]:
            min_step[l] = 10 * abs(np.nextafter(tau[l], np.inf) - tau[l])
            h_abs[l] = max(h_abs[l], min_step[l])
            fresh[l], rejected[l] = False, False
        if h_abs[l] < min_step[l]:
            status[l], active[l] = STEP_TOO_SMALL, False
            stopped = 1
        else:
            h_abs[l] = min(h_abs[l], MAX_LOG_STEP)
            tau_new[l] = min(tau[l] + h_abs[l], tau_end)
            h[l] = tau_new[l] - tau[l]
    if not active[l]:
        h[l] = 0.0
    return stopped


@_inline
def _error_norm(y, y_new, e5, e3, l, lanes, h_l, rtol, atol):
    """Lane l's error norm of its step of size h_l (SciPy's DOP853): the 5th- and 3rd-order estimates e5, e3
    in the RMS norm weighted by atol + max(|y|, |y_new|) rtol, combined as h err5^2 / sqrt((err5^2 + err3^2 / 100) n)."""
    n = y.size // lanes
    err5, err3 = 0.0, 0.0
    for i in range(n):
        m = i * lanes + l
        weight = atol + max(abs(y[m]), abs(y_new[m])) * rtol
        err5 += (e5[m] / weight) ** 2
        err3 += (e3[m] / weight) ** 2
    return 0.0 if err5 == 0 and err3 == 0 else h_l * err5 / math.sqrt((err5 + 0.01 * err3) * n)


@_inline
def _adapt(norm, l, h_abs, rejected):
    """The step control of lane l: the step is accepted where ``norm`` < 1 and h grows by SciPy's factor
    (at most 1 right after a rejection), else h shrinks and the lane is marked rejected. Returns whether the
    step is accepted."""
    if norm < 1:
        factor = _MAX_FACTOR if norm == 0 else min(_MAX_FACTOR, _SAFETY * norm ** _EXPONENT)
        h_abs[l] *= min(1.0, factor) if rejected[l] else factor
        return True
    h_abs[l] *= max(_MIN_FACTOR, _SAFETY * norm ** _EXPONENT)
    rejected[l] = True
    return False


@_inline
def _store(l, step, y, y_new, K, rows, tau_l, h_l, lanes, taus, hs, ys, Fs):
    """Lane l's accepted step from tau_l, of size h_l, into row ``step`` of the dense tables: its start, size
    and state, and the rows of its interpolant (three from the step's ends and slopes, the rest the extra
    stages' ``rows``)."""
    n = y.size // lanes
    for i in range(n):
        m = i * lanes + l
        d0 = y_new[m] - y[m]
        Fs[step * POWER * n + i] = d0
        Fs[(step * POWER + 1) * n + i] = h_l * K[0, m] - d0
        Fs[(step * POWER + 2) * n + i] = 2 * d0 - h_l * (K[_STAGES, m] + K[0, m])
        ys[step * n + i] = y[m]
        for r in range(POWER - 3):
            Fs[(step * POWER + 3 + r) * n + i] = rows[r, m]
    taus[step], hs[step] = tau_l, h_l


@_inline
def _crossings(g, p, levels, terminal, l, log_loss, event_tau, g_now, taus, hs, ys, Fs, step, work):
    """The events of lane l's accepted step ``step`` (its log loss at the step's end: ``log_loss``): each level
    whose g_k = log L - level_k turns from positive to non-positive for the first time, located on the step's
    interpolant (:func:`_locate`; ``work`` a state's buffer). Returns whether the terminal level (the last one,
    with ``terminal``) was crossed."""
    stop = False
    for k in range(levels.size):
        g_new = log_loss - levels[k]
        if math.isnan(event_tau[l, k]) and g_now[l, k] > 0 and g_new <= 0:
            event_tau[l, k] = _locate(g, p, levels[k], taus, hs, ys, Fs, step, g_now[l, k], g_new, work)
            stop = stop or (terminal and k == levels.size - 1)
        g_now[l, k] = g_new
    return stop


@_inline
def _advance(l, y, y_new, K, lanes):
    """Lane l's state moves to the end of its accepted step, whose last stage is f there (FSAL: the next step's
    first stage)."""
    for i in range(y.size // lanes):
        m = i * lanes + l
        y[m] = y_new[m]
        K[0, m] = K[_STAGES, m]


@_jit
def _lockstep(f, g, combinations, P, Pt, y, tau_end, rtol, atol, levels, terminal, dense_output):
    """Integrate dx/dtau = e^tau f(x) from tau = 0 to ``tau_end`` (or to the terminal event) for every
    row of the parameter vectors ``P`` at once, one lane each, from the flat state ``y`` (lane l's state
    at the elements i L + l, the layout of the lanes kernel; ``Pt``: P transposed, contiguous).

    f, g: the addresses of a form's ``rhs_lanes_kernel`` and ``loss_kernel`` (plain integers: the
    integrator is compiled, and cached, once for every form), ``combinations``: the addresses of
    :data:`_COMBINATIONS`, levels: log loss levels of the events (the last one terminal when ``terminal``). Returns per lane (status, steps, nfev, event_tau (NaN
    where not crossed)), leaving the final states in ``y``, and the lanes' dense tables (tau_old, h,
    y_old, F) with their ``capacity``: lane l's steps[l] accepted steps are rows l capacity .. l capacity +
    steps[l] - 1 (read in place, by :func:`evaluate_many`: never copied into one another). Every table is flat,
    indexed by hand: lane l's row j of a table of width w at (l capacity + j) w. Without ``dense_output`` the
    three extra stages of every step are skipped and no row is stored (the tables are empty, capacity 0): the
    steps and states are the same bits either way (no extra stage feeds a step). Levels need the dense output
    (their crossings are located on the interpolant).
    """
    lanes, n = P.shape[0], y.size // P.shape[0]
    size = lanes * n
    stage_state, solution, error_sums, dense_rows = combinations
    K = np.empty((16, size))
    y_new, work, h_of, e5, e3 = np.empty(size), np.empty(size), np.empty(size), np.empty(size), np.empty(size)
    rows = np.empty((POWER - 3, size))
    scale, scales, one = np.empty(lanes), np.empty(16 * lanes), np.empty(n)
    # rows per lane (not a literal: numba would compile grown for the literal 128 as well); none without dense output
    capacity = np.int64(128 if dense_output else 0)
    taus, hs = np.empty(lanes * capacity), np.empty(lanes * capacity)
    ys, Fs = np.empty(lanes * capacity * n), np.empty(lanes * capacity * POWER * n)
    status, steps, nfev = np.empty(lanes, np.int64), np.empty(lanes, np.int64), np.empty(lanes, np.int64)
    event_tau, g_now = np.empty((lanes, levels.size)), np.empty((lanes, levels.size))
    tau, h, tau_new, min_step = np.empty(lanes), np.empty(lanes), np.empty(lanes), np.empty(lanes)
    active, fresh, rejected, accepted = (np.empty(lanes, np.bool_), np.empty(lanes, np.bool_),
                                         np.empty(lanes, np.bool_), np.empty(lanes, np.bool_))
    for l in range(lanes):
        status[l], steps[l], nfev[l], tau[l], h[l] = REACHED, 0, 2, 0.0, 0.0
        active[l], fresh[l], rejected[l] = True, True, False
        for k in range(levels.size):
            event_tau[l, k] = math.nan
    _field(f, tau, 0.0, h, y, Pt, scale, K[0])
    h_abs = _first_steps(f, Pt, y, K, tau_end, rtol, atol, work, scale)
    for l in range(lanes):
        if levels.size:
            _lane_state(y, l, lanes, one)
            log_loss = _log_loss(g, one, P[l])
            for k in range(levels.size):
                g_now[l, k] = log_loss - levels[k]
    running = lanes
    while running:
        for l in range(lanes):
            running -= _next_attempt(l, tau, tau_end, h_abs, min_step, h, tau_new, active, fresh, rejected, status)
            for i in range(n):
                h_of[i * lanes + l] = h[l]
        if not running:
            break
        _stage_scales(tau, h, 1, _STAGES + 1, scales)  # C[_STAGES] = 1: the step's end
        for s in range(1, _STAGES):
            call(stage_state, (y, h_of, K, s, work, size))
            call(f, (work, Pt, scales[s * lanes:], K[s], lanes))
        call(solution, (y, h_of, K, y_new, size))
        call(f, (y_new, Pt, scales[_STAGES * lanes:], K[_STAGES], lanes))
        call(error_sums, (K, e5, e3, size))
        any_accepted = False
        for l in range(lanes):
            accepted[l] = False
            if not active[l]:
                continue
            nfev[l] += _STAGES
            accepted[l] = _adapt(_error_norm(y, y_new, e5, e3, l, lanes, h[l], rtol, atol), l, h_abs, rejected)
            any_accepted = any_accepted or accepted[l]
        if not any_accepted:
            continue
        if dense_output:
            _stage_scales(tau, h, _STAGES + 1, 16, scales)
            for s in range(_STAGES + 1, 16):  # the extra stages of the dense output
                call(stage_state, (y, h_of, K, s, work, size))
                call(f, (work, Pt, scales[s * lanes:], K[s], lanes))
            call(dense_rows, (K, h_of, rows, size))  # their rows of the dense tables, every lane at once
            full = False
            for l in range(lanes):
                full = full or steps[l] == capacity
            if full:
                taus, hs = grown(taus, lanes, capacity, 2 * capacity), grown(hs, lanes, capacity, 2 * capacity)
                ys, Fs = grown(ys, lanes, capacity, 2 * capacity), grown(Fs, lanes, capacity, 2 * capacity)
                capacity *= 2
        for l in range(lanes):
            if not accepted[l]:
                continue
            step = l * capacity + steps[l]  # the row of the tables
            if dense_output:
                nfev[l] += 3
                _store(l, step, y, y_new, K, rows, tau[l], h[l], lanes, taus, hs, ys, Fs)
            steps[l] += 1
            stop = False
            if levels.size:
                _lane_state(y_new, l, lanes, one)
                stop = _crossings(g, P[l], levels, terminal, l, _log_loss(g, one, P[l]), event_tau, g_now, taus, hs,
                                  ys, Fs, step, one)
            _advance(l, y, y_new, K, lanes)
            tau[l], fresh[l] = tau_new[l], True
            if stop or tau[l] >= tau_end:
                status[l] = TERMINAL_EVENT if stop else REACHED
                active[l] = False
                running -= 1
    return status, steps, nfev, event_tau, taus, hs, ys, Fs, capacity


def cached(*kernels) -> bool:
    """Whether the compiled integrator (:func:`_lockstep`, the dense output's
    :func:`~qkdyn.simulate.denseoutput.evaluate_tables` and the stage
    combinations) and the C ``kernels`` given (a form's :class:`~qkdyn.theory.kernels.LazyCallback`) are
    in this process already or in numba's cache: a solve then loads machine code instead of compiling it."""
    return all(callback.cached() for callback in kernels) and _integrator_cached()


def _integrator_cached() -> bool:
    """Whether the integrator itself (the form's kernels aside) is in this process or in numba's cache."""
    return all(callback.cached() for callback in _COMBINATIONS) and ready(_lockstep, evaluate_tables)


def ready(*functions) -> bool:
    """Whether every compiled function given (a numba dispatcher) has machine code in this process or in
    numba's cache (:func:`~qkdyn.theory.kernels.has_machine_code`): calling it compiles nothing."""
    return all(function.overloads or has_machine_code(function._cache, function.targetctx) for function in functions)


@contextlib.contextmanager
def compiling(what: str, needed: bool):
    """Where ``needed`` (numba is about to compile ``what``: it is neither in this process nor in numba's
    cache), one line on stderr before the block runs, so that a first call never waits silently; else nothing."""
    announce(what, needed)
    yield


def announce(what: str, needed: bool) -> None:
    """The line of :func:`compiling`, on stderr where ``needed``."""
    if needed:
        sys.stderr.write(f"qkdyn: compiling {what} (once: numba caches the machine code for later processes; "
                         "`python -m qkdyn.simulate.warm` compiles everything ahead)\n")
        sys.stderr.flush()


_announced: list[bool] = []  # whether this process has checked the integrator's cache before its first call


def integrate_many(f, g, P, X0, tau_end, rtol, atol, levels, terminal, dense_output=True):
    """Every row of the parameter vectors ``P`` and initial states ``X0`` (one form, the same horizon
    and levels) integrated in blocks of :data:`LANES` lanes (:func:`_block`; a block a compiled call:
    compiled, a loop over blocks would have the compiler inline and optimise the whole integrator once more,
    tripling a fresh install's first compile). Returns (status, steps, nfev, event_tau, final state) per
    trajectory (arrays, event_tau (S, levels), final (S, dim)) and the blocks' dense tables, left where the
    integrator wrote them: a list of (taus, hs, ys (rows, dim), Fs (rows, POWER, dim)) per block, trajectory i
    (lane i mod LANES of block i // LANES) at rows :func:`lane_rows` of its block's, and each one's block's
    capacity (no rows stored without ``dense_output``, which loss levels need: :func:`_lockstep`). Each trajectory's numbers are those it has
    integrated alone (no lane's arithmetic depends on another's)."""
    blocks = [_block(f, g, P[lo:lo + LANES], X0[lo:lo + LANES], tau_end, rtol, atol, levels, terminal, dense_output)
              for lo in range(0, len(X0), LANES)]
    out = [parts[0] if len(parts) == 1 else np.concatenate(parts) for parts in zip(*(block[:5] for block in blocks),
                                                                                   strict=True)]
    n, tables = X0.shape[1], [block[5:] for block in blocks]
    capacities = np.repeat([capacity for *_, capacity in tables], [len(block[0]) for block in blocks])
    return (*out[:4], np.ascontiguousarray(out[4]),
            [(taus, hs, ys.reshape(-1, n), Fs.reshape(-1, POWER, n)) for taus, hs, ys, Fs, _ in tables], capacities)


def lane_rows(capacities, steps, i):
    """(block, first row, end row) of trajectory i's steps in :func:`integrate_many`'s tables: integers for an
    integer i, arrays for an integer array i."""
    first = i % LANES * capacities[i]
    return i // LANES, first, first + steps[i]


def integrate_one(f, g, parameters, x0, tau_end, rtol, atol, levels, terminal, dense_output=True):
    """One trajectory, as :func:`integrate_many` integrates it (one lane of :func:`_lockstep`) without a sweep's
    blocks: (status, steps, nfev, event_tau (levels,), final state (dim,)) followed, with ``dense_output``, by its
    dense tables (taus, hs, ys (steps, dim), Fs (steps, POWER, dim), the first rows of the integrator's own).
    ``parameters`` and ``x0`` are contiguous float vectors."""
    _before_lockstep(levels, dense_output)
    y = x0.copy()  # one lane's flat state is the state itself: it ends final
    status, steps, nfev, event_tau, taus, hs, ys, Fs, _ = _lockstep(f, g, _combination_addresses(), parameters[None],
                                                                    parameters[:, None], y, tau_end, rtol, atol,
                                                                    levels, terminal, dense_output)
    stored, n = int(steps[0]), y.size
    tables = ((taus[:stored], hs[:stored], ys[:stored * n].reshape(-1, n), Fs[:stored * POWER * n].reshape(-1, POWER, n))
              if dense_output else ())
    return (int(status[0]), stored, int(nfev[0]), event_tau[0], y, *tables)


def _block(f, g, P, X0, tau_end, rtol, atol, levels, terminal, dense_output):
    """At most :data:`LANES` rows of ``P`` and ``X0`` integrated in lockstep in one call of :func:`_lockstep`:
    (status, steps, nfev, event_tau, final (S, dim), taus, hs, ys, Fs, capacity), the tables flat, lane l's
    rows from l capacity on."""
    _before_lockstep(levels, dense_output)
    y = X0.T.flatten()  # a copy, lane l's state at the elements i L + l: it ends final
    block = np.ascontiguousarray(P)
    status, steps, nfev, event_tau, *table = _lockstep(f, g, _combination_addresses(), block,
                                                       np.ascontiguousarray(block.T), y, tau_end, rtol, atol, levels,
                                                       terminal, dense_output)
    return (status, steps, nfev, event_tau, y.reshape(X0.shape[1], len(block)).T, *table)


def _before_lockstep(levels, dense_output: bool) -> None:
    """Refuse loss levels without the dense output (their crossings are located on it); on the first call of
    the process, say so on stderr where the integrator compiles now."""
    if levels.size and not dense_output:
        raise ValueError("loss levels are located on the dense output: they need dense_output")
    if not _announced:
        _announced.append(True)
        announce("the DOP853 integrator", not _integrator_cached())


@functools.cache
def _combination_addresses() -> tuple[int, ...]:
    """The addresses of :data:`_COMBINATIONS` (compiled or loaded on the first call, then fixed)."""
    return tuple(combination.address for combination in _COMBINATIONS)
