"""The matched-loss closed form of :mod:`qkdyn.simulate.sharpness`, compiled: one numba kernel over all points.

The mathematics is that of :mod:`qkdyn.simulate.sharpness` (symbols as in docs/setting.md and
docs/sharpness.md); this module is its compiled arithmetic, point by point:

* the line Phi - Phi(qk0) = (A/n)(m (G(u) - G(u0)) + n (u - u0)), qk = u (collapsed QK) or qk = beta sinh u
  (factorized QK), tabulated and inverted by :mod:`qkdyn.simulate.qkline`;
* the matched-loss root of z(ov) = alpha(qk(ov)) ov - z* by safeguarded Newton in s = ov - ov0 (rtsafe),
  started from the Lagrange polynomial in rho through the previous six points' roots (same setting and level);
* the time, composite 16-node Gauss-Legendre on panels at equal steps of the progress
  v = z + 2x + 4|qk| + 2|u| sampled along the path, each panel in doubles (in logs where its values or its
  integral come near overflow), the panels summed in logs; the points of one setting and rho (a
  grid's levels) share one path: the panels of the path to the farthest level, the panel holding each
  nearer level split there, each time the sum of the panels before it.

The per-form maths comes from the sympy derivation only: Psi(a + s) - Psi(a) and the balanced M_OV
are the generated C kernels ``psi_gain_kernel`` and ``m_ov_kernel`` of :mod:`qkdyn.theory.generated`,
called through their addresses (so the kernel is compiled once for every form); (A, beta) are the
generated ``line_scale``. Settings are processed in the order of the points (points of one setting
contiguous: the table is rebuilt when the setting changes). numba caches the machine code in tree
(:class:`qkdyn.theory.kernels.TreeCache`): a warm process does not recompile. Where the cache lacks it, the
first calls of a process run this same code as plain Python (:func:`plain_solve_points`,
:mod:`qkdyn.simulate.coldstart`).
"""
from __future__ import annotations

import functools
import importlib
import math
from collections.abc import Callable

import numpy as np
from numba.extending import get_cython_function_address
from qkdyn.simulate.ccall import call_scalar, call_unary
from qkdyn.simulate.coldstart import plain_python
from qkdyn.simulate.qkline import (
    BETA,
    CENTER,
    FOV,
    KAPPA,
    LOG_ETA,
    LOG_K1,
    LOG_MN,
    OV0,
    U0,
    A,
    M,
    N,
    invert,
    new_edge,
    qk_at,
    solve_collapsed,
)
from qkdyn.simulate.scalarmath import LOG_DOUBLE_MAX, clip, insertion_sort, logaddexp0, rtsafe_step, search
from qkdyn.theory.kernels import cached_njit, expit
from scipy import special

#: SciPy's own real Wright omega and log-expit (scipy.special.cython_special), passed to the kernel by address
#: (an address is an argument, not a global: numba caches only code without dynamic globals)
SPECIAL = (get_cython_function_address("scipy.special.cython_special", "__pyx_fuse_1wrightomega"),
           get_cython_function_address("scipy.special.cython_special", "__pyx_fuse_0log_expit"))
#: the same two by name, for the kernel run as plain Python (:func:`plain_solve_points`)
SPECIAL_PLAIN = (special.wrightomega, special.log_expit)

LOOSE = 1e6  # a matched-loss bound beyond base + 1e6 max(z*, 1) is replaced by a grown bracket
MAX_GROWTH = 520  # 4^520 > 1e308: the matched-loss bracket reaches any finite ov
MAX_PANELS_LOG2 = 14  # at most 2^14 quadrature panels per path (more: a time beyond the largest double)
GL_X, GL_W = np.polynomial.legendre.leggauss(16)
#: fractions of the path ov0 -> ov* sampled to place the quadrature panels (plus ov = 0 if crossed)
#: (dense at both ends: attention can rise fastest at the start, e^z grows fastest at the end)
PATH_FRACTIONS = np.unique(np.concatenate([[0.0], np.geomspace(1e-14, 1.0, 18), 1.0 - np.geomspace(1e-12, 0.5, 10)]))
GEOMETRIC = np.linspace(0.0, 1.0, 8)  # and at geometric steps over the positive part of the path

_jit = cached_njit(error_model="numpy")
_inline = cached_njit(error_model="numpy", inline="always")  # small helpers: no call boundary


# -- one setting (c: its constants, qkdyn.simulate.qkline.CONSTANTS; p: its parameters; addr: the kernels'
# addresses; work: their argument; tab, coef, ext: the line's table) ---------------------------------------

@_inline
def _gain(c, p, addr, work, delta):
    """Psi(ov0 + delta) - Psi(ov0) from the generated psi_gain(|ov0|, s), s = |ov| - |ov0| (+-delta while
    ov keeps the sign of ov0): no subtraction of two values of Psi."""
    ov0 = c[OV0]
    ov = ov0 + delta
    same_side = ov >= 0 if ov0 >= 0 else ov <= 0
    work[0] = abs(ov0)
    work[1] = math.copysign(1.0, ov0) * delta if same_side else abs(ov) - abs(ov0)
    return call_scalar(addr[0], work, p)


@_inline
def _line_gain(c, p, addr, work, delta, rho):
    """Phi(qk) - Phi(qk0) on the line at ov = ov0 + delta: rho (Psi(ov0 + delta) - Psi(ov0)), and 0 at rho = 0
    (frozen attention: qk = qk0 at every ov) without the gain, which may exceed the doubles there (a collapsed OV
    circuit's Psi grows like ov^2: beyond ov ~ 1e154, where attention from below ~1e-150 takes the root), and
    0 inf is NaN (a line inversion that never converged, or a wrong qk from the factorized-QK table)."""
    return rho * _gain(c, p, addr, work, delta) if rho > 0 else 0.0


@_inline
def _m_ov(c, p, addr, work, ov):
    work[0], work[1], work[2] = 0.0, ov, c[KAPPA]
    return call_scalar(addr[1], work, p)


@_inline
def _qk_u(c, p, addr, work, tab, coef, ext, delta, rho, polish):
    """(qk, u) on the line at ov = ov0 + delta."""
    u = invert(c, addr, tab, coef, ext, _line_gain(c, p, addr, work, delta, rho), polish)
    return qk_at(c, u), u


@_inline
def _level(c, p, addr, work, tab, coef, ext, s, ov, zstar, rho):
    """z - z*, dz/ds = alpha + ov alpha (1 - alpha) dqk/dov, qk and dqk/dov along the line at ov = ov0 + s
    (s and ov both given: each is exact where it is the root's variable)."""
    lam = _line_gain(c, p, addr, work, s, rho)
    # a collapsed QK line inverted exactly inline here (the root's evaluations), elsewhere by a call
    exact = c[BETA] == 0 and lam != 0.0
    qk = qk_at(c, solve_collapsed(c, addr, tab, coef, lam) if exact else invert(c, addr, tab, coef, ext, lam, True))
    alpha = expit(qk + c[LOG_MN])
    dq_du = math.hypot(c[BETA], qk) if c[BETA] > 0 else 1.0  # beta cosh u, qk = beta sinh u
    dqk = dq_du / (c[A] / c[N] * (c[M] * math.exp(qk) + c[N])) * rho * ov / _m_ov(c, p, addr, work, ov)
    return alpha * ov - zstar, alpha + ov * alpha * (1 - alpha) * dqk, qk, dqk


@_jit
def _state(c, p, addr, work, tab, coef, ext, zstar, rho, start):
    """(qk, ov, s) where alpha ov = z* on the line: safeguarded Newton in s = ov - ov0 > 0 (ov rises along the
    flow) to 1e-13 relative in s, from ``start`` (an ov: from the roots of neighbouring points) where it lies
    inside the bracket, else from the upper bound. In s, not ov: qk moves by rho Psi'(ov) / Phi'(qk) per
    unit of ov, so ov to eps ov0 would leave qk off by that factor times eps ov0 near the start (a level
    just below the initial loss at large rho), while qk from the generated psi_gain(|ov0|, s) is exact; and s is
    returned beside ov for the time, whose path it is (ov0 + s rounds s away where s < eps ov0)."""
    ov0 = c[OV0]
    base = max(ov0, 0.0) - ov0  # beyond it qk >= qk(base), so z >= alpha(qk(base)) ov
    qk_base, _ = _qk_u(c, p, addr, work, tab, coef, ext, base, rho, True)
    lo = base if zstar > 0 else 0.0
    hi = max(max(zstar, 0.0) / expit(qk_base + c[LOG_MN]) - ov0 if zstar > 0 else -ov0, lo)
    if not hi <= base + LOOSE * max(zstar, 1.0):  # alpha(qk(base)) tiny: grow a bracket instead
        step, grown = max(zstar, 1.0), math.nan
        for _ in range(MAX_GROWTH):
            # z - z* at s = base + step (not _level: its inline exact inversion is kept to the root's loop)
            qk_step, _ = _qk_u(c, p, addr, work, tab, coef, ext, base + step, rho, True)
            if not expit(qk_step + c[LOG_MN]) * (ov0 + base + step) - zstar < 0:
                grown = base + step
                break
            step *= 4
        if math.isnan(grown):
            raise RuntimeError("matched-loss bracket: z(ov) below z* up to ov = 1e308")
        hi = min(hi, grown)
    s, qk = _root(c, p, addr, work, tab, coef, ext, zstar, rho, 0.0, lo, hi,
                  start - ov0 if lo < start - ov0 < hi else hi)
    if not abs(ov0 + s) < s:
        return qk, ov0 + s, s
    # ov near 0 (from a negative start): ov0 + s cancels there (FAFO ov* = -4.9e-8 from ov0 = -0.48 was 3e-10
    # off), so polish in ov itself, in a bracket of a few roundings of s around the root in s
    width = 4e-13 * s
    ov, qk = _root(c, p, addr, work, tab, coef, ext, zstar, rho, 1.0, ov0 + (s - width), ov0 + (s + width), ov0 + s)
    return qk, ov, ov - ov0  # |ov| < s: the difference is exact to a rounding of s


@_jit
def _root(c, p, addr, work, tab, coef, ext, zstar, rho, in_ov, lo, hi, x):
    """(x, qk) at x in [lo, hi] where z = z*, x = s = ov - ov0 (or ov, where ``in_ov`` is 1.0, not 0.0: a float, as
    numba would compile this function once for each literal bool it is passed, 20 CPU-s each): safeguarded Newton
    to 1e-13 relative in x; qk from the last evaluation at x_k advanced by dqk/dov (x - x_k) where the final step is
    below 1e-10 |x| (the neglected (x - x_k)^2 qk''/2 is far below a rounding of qk), else from the line at x."""
    ov0, before_last, last, run = c[OV0], math.inf, math.inf, 0
    for _ in range(200):
        s, ov = (x - ov0, x) if in_ov > 0 else (x, ov0 + x)
        value, slope, qk, dqk = _level(c, p, addr, work, tab, coef, ext, s, ov, zstar, rho)
        new, lo, hi, before_last, last, run, done = rtsafe_step(x, value, slope, lo, hi, before_last, last, run, False,
                                                                 1e-13, 1e-300)
        if done:
            if abs(new - x) <= 1e-10 * abs(x):
                return new, qk + dqk * (new - x)
            s = new - ov0 if in_ov > 0 else new
            return new, _qk_u(c, p, addr, work, tab, coef, ext, s, rho, True)[0]
        x = new
    raise RuntimeError("matched-loss root did not converge")


@_inline
def _log_dt_dx(c, p, addr, work, ov, qk):
    """log |dt/dx|, x = ov (collapsed OV) or log |ov| (factorized OV, M_OV = c |ov|: |ov| cancels):
    dt/dov = (1 + e^z/(K-1)) / (eta_OV M_OV alpha), z = alpha ov."""
    log_alpha = call_unary(addr[3], qk + c[LOG_MN])
    value = logaddexp0(math.exp(log_alpha) * ov - c[LOG_K1]) - log_alpha - c[LOG_ETA]
    return value - math.log(_m_ov(c, p, addr, work, 1.0 if c[FOV] > 0 else ov))


@_inline
def _y(c, s):
    """The integration variable measured from the start at ov = ov0 + s: x - x(ov0), x = log |ov| (factorized
    OV) or ov."""
    return math.log1p(s / c[OV0]) if c[FOV] > 0 else s


@_jit
def _edges(c, p, addr, work, tab, coef, ext, s_star, rho, per_panel, polish):
    """y at the edges of max(4, needed) panels at equal steps of the progress v sampled along the path
    ov0 -> ov0 + s_star (see :meth:`qkdyn.simulate.sharpness._Problem.time_to`), the samples in
    s = ov - ov0 (exact where s_star < eps ov0: a level just below the initial loss at large rho); empty
    where the time is beyond the largest double."""
    ov0, factorized_ov = c[OV0], c[FOV] > 0
    ov_star = ov0 + s_star
    nf, ng = PATH_FRACTIONS.size, GEOMETRIC.size
    gain = np.empty(nf + ng + 1)
    for k in range(nf):
        gain[k] = s_star * PATH_FRACTIONS[k]
    positive = max(max(ov0, 0.0), ov_star * 1e-300)
    for k in range(ng):
        step = positive * (ov_star / positive) ** GEOMETRIC[k] - ov0 if ov_star > 0 else 0.0
        gain[nf + k] = clip(step, 0.0, s_star)
    gain[-1] = clip(max(0.0, ov0) - ov0, 0.0, s_star)  # ov = 0 where crossed
    insertion_sort(gain)
    v = np.empty((1, gain.size))
    travelled_qk = travelled_x = travelled_u = 0.0
    qk_last = u_last = x_last = 0.0
    for k in range(gain.size):
        qk, u = _qk_u(c, p, addr, work, tab, coef, ext, gain[k], rho, polish)
        ov = ov0 + gain[k]
        x = math.log(abs(ov)) if factorized_ov else 0.0
        if k > 0:
            travelled_qk += abs(qk - qk_last)
            travelled_x += abs(x - x_last)
            travelled_u += abs(u - u_last)
        qk_last, u_last, x_last = qk, u, x
        value = expit(qk + c[LOG_MN]) * ov + 4.0 * travelled_qk
        if factorized_ov:
            value += 2.0 * travelled_x
        if c[BETA] > 0:
            value += 2.0 * travelled_u
        v[0, k] = max(value, v[0, k - 1]) if k > 0 else value
    first, final = v[0, 0], v[0, gain.size - 1]
    span = (final - first) / per_panel  # inf where qk leaves the doubles (FACO turning at qk -6.6e1679)
    if not span <= 2**MAX_PANELS_LOG2:
        # a path this long passes through attention below e^-{5000 per_panel / 4}: dt/dov there exceeds
        # e^700 unless eta_OV does too, so its time is beyond the largest double
        peak = -math.inf
        for k in range(gain.size):
            qk, _ = _qk_u(c, p, addr, work, tab, coef, ext, gain[k], rho, polish)
            peak = max(peak, _log_dt_dx(c, p, addr, work, ov0 + gain[k], qk))
        if peak < LOG_DOUBLE_MAX:
            raise RuntimeError("time quadrature: more than 2^14 panels needed on a path whose time is not beyond "
                               "the largest double")
        return np.empty(0)
    panels = max(4, math.ceil(span))
    y = np.empty(panels + 1)
    for j in range(panels + 1):
        level = first + (final - first) * (j / panels)
        i = min(max(search(v, 0, 0, gain.size, level, True) - 1, 0), gain.size - 2)
        weight = (level - v[0, i]) / (v[0, i + 1] - v[0, i]) if v[0, i + 1] > v[0, i] else 0.0
        edge = gain[i] + clip(weight, 0.0, 1.0) * (gain[i + 1] - gain[i])
        y[j] = _y(c, 0.0 if j == 0 else s_star if j == panels else edge)
    return y


@_jit
def _times(c, p, addr, work, tab, coef, ext, targets, rho, per_panel, polish, t):
    """t[k] = int dt/dx dx from ov0 to ov0 + targets[k] (targets: s = ov - ov0, ascending: the order along the
    path) on one path: the 16-node Gauss-Legendre panels of the path to the last target (_edges), each panel
    holding another target split there, t[k] the sum of the panels before it (in logs: t = e^M sum e^{log P_j - M}).
    Returns False, t untouched, where the last target's time is beyond the largest double (the nearer
    ones may not be: their own paths decide)."""
    y = _edges(c, p, addr, work, tab, coef, ext, targets[-1], rho, per_panel, polish)
    if y.size == 0:
        return False
    ov0, factorized_ov = c[OV0], c[FOV] > 0
    sign = math.copysign(1.0, ov0) if factorized_ov else 1.0  # y falls as |ov| shrinks
    edges, at = np.empty(y.size + targets.size), np.empty(targets.size, dtype=np.int64)
    count, a = 0, 0
    for k in range(targets.size):  # the edges and the targets merged in path order (sign y increasing)
        target = y[-1] if k == targets.size - 1 else _y(c, targets[k])
        while a < y.size and sign * y[a] < sign * target:
            edges[count] = y[a]
            count, a = count + 1, a + 1
        if count == 0 or edges[count - 1] != target:
            edges[count] = target
            count += 1
        while a < y.size and sign * y[a] <= sign * target:
            a += 1
        at[k] = count - 1
    top, scaled, k = -math.inf, 0.0, 0
    qk_at, ov_at, log_f = np.empty(GL_X.size), np.empty(GL_X.size), np.empty(GL_X.size)
    unit = 1.0 / _m_ov(c, p, addr, work, 1.0) if factorized_ov else 1.0
    for j in range(count - 1):
        mid, half = 0.5 * (edges[j + 1] + edges[j]), 0.5 * (edges[j + 1] - edges[j])
        inner = 0.0
        for n in range(GL_X.size):
            node = mid + half * GL_X[n]
            delta = ov0 * math.expm1(node) if factorized_ov else node
            qk_at[n], _ = _qk_u(c, p, addr, work, tab, coef, ext, delta, rho, polish)
            ov_at[n] = ov0 + delta
            # dt/dx = (1 + e^{z - log(K-1)}) (1 + e^{-(qk + log(m/n))}) / (eta_OV M_OV), z = alpha ov, in doubles
            inv_alpha = 1.0 + math.exp(-(qk_at[n] + c[LOG_MN]))
            inner += GL_W[n] * (1.0 + math.exp(ov_at[n] / inv_alpha - c[LOG_K1])) * inv_alpha * (
                unit if factorized_ov else 1.0 / _m_ov(c, p, addr, work, ov_at[n]))
        panel = sign * half * inner
        if 1e-290 < inner < 1e290 and panel < math.inf:  # no value overflowed or came near it, nor the panel's
            # integral (it did at rho = 0 from attention 1e-200: ov* = 8e200, 1/alpha = 1e200); 1/eta_OV in logs
            log_panel = math.log(panel) - c[LOG_ETA]
        else:  # in logs (t = e^M sum w e^{log f - M}): attention near 0, z beyond 700, or a time near 1e308
            peak = -math.inf
            for n in range(GL_X.size):
                log_f[n] = _log_dt_dx(c, p, addr, work, ov_at[n], qk_at[n])
                peak = max(peak, log_f[n])
            inner = 0.0
            for n in range(GL_X.size):
                inner += math.exp(log_f[n] - peak) * GL_W[n]
            log_panel = peak + math.log(sign * half * inner)
        if log_panel > top:
            scaled, top = scaled * math.exp(top - log_panel) + 1.0, log_panel
        else:
            scaled += math.exp(log_panel - top)
        while k < targets.size and at[k] == j + 1:
            t[k] = math.exp(top + math.log(scaled))
            k += 1
    return True


@_inline
def _warm_start(which, zstar, rho, ov, i):
    """A start for the root of point i from the roots of the (up to) six points before it at the same
    setting and level: their Lagrange polynomial in rho at rho_i (the previous root alone where two rho
    coincide; nan where there is none). On a phase diagram's geometric rho grid (steps of h = 0.3%) the
    previous root is O(h) off, the quadratic through three O(h^3) (two Newton steps), the quintic through
    six O(h^6), below the root's tolerance of 1e-13: the first Newton step is the last (the 1e6-point
    diagram in 0.8 s instead of 1.05). The weights of six points extrapolating one step sum to 63 in
    absolute value, so the roots' own round-off enters the start at ~1e-14, also below the tolerance."""
    count = 0
    while count < 6 and i - count > 0 and which[i - count - 1] == which[i] and zstar[i - count - 1] == zstar[i]:
        count += 1
    if count == 0:
        return math.nan
    start = 0.0
    for j in range(1, count + 1):
        weight = 1.0
        for k in range(1, count + 1):
            if k != j:
                weight *= (rho[i] - rho[i - k]) / (rho[i - j] - rho[i - k])
        start += weight * ov[i - j]
    return start if math.isfinite(start) else ov[i - 1]


@_jit
def solve_points(constants, params, addr, which, zstar, rho, ov, with_state, with_time, per_panel, polish, tab,
                 coef, ext, qk, t):
    """Every point i, of setting ``which[i]`` (rows of ``constants`` (CONSTANTS) and ``params``
    (Setting.numeric()); ``addr``: the addresses of the form's generated psi_gain and m_ov kernels
    and of SPECIAL): with_state, (qk[i], ov[i]) where the loss first reaches z*[i]; with_time, t[i],
    the time to ov[i] (inf beyond the largest double). ``tab``, ``coef``, ``ext``: new_table()."""
    current, start = -1, 0
    work, gain = np.empty(3), np.empty(which.size)  # gain: s = ov - ov0, the time's target (exact, unlike ov0 + s)
    for i in range(which.size):
        s = which[i]
        c, p = constants[s], params[s]
        if s != current:
            current = s
            ext[0], ext[1], ext[2] = CENTER, CENTER + 1, -1
            new_edge(c, tab, CENTER, c[U0], 0.0)
        if with_state:
            qk[i], ov[i], gain[i] = _state(c, p, addr, work, tab, coef, ext, zstar[i], rho[i],
                                           _warm_start(which, zstar, rho, ov, i))
        else:
            gain[i] = ov[i] - c[OV0]
        if with_time and (i == which.size - 1 or which[i + 1] != s or rho[i + 1] != rho[i]):
            # the points start..i share a setting and rho, hence a path: one quadrature, in the order along it
            order = start + np.argsort(gain[start:i + 1])
            times = np.full(order.size, np.nan)  # a time left unwritten reads as not finite, never as garbage
            if not _times(c, p, addr, work, tab, coef, ext, gain[order], rho[i], per_panel, polish, times):
                times[-1] = math.inf
                for k in range(order.size - 1):
                    if not _times(c, p, addr, work, tab, coef, ext, gain[order[k:k + 1]], rho[i], per_panel, polish,
                                  times[k:k + 1]):
                        times[k] = math.inf
            for k in range(order.size):  # element by element: t[order] = times compiles numba's shape-mismatch error
                t[order[k]] = times[k]
            start = i + 1


@functools.cache
def plain_solve_points(name: str):
    """(:func:`solve_points` as plain Python, the ``addr`` it takes) for the form ``name``: the same code run
    uncompiled (:func:`qkdyn.simulate.coldstart.plain_python`), its C callees the Python they were compiled
    from, the form's generated ``psi_gain_at`` and ``m_ov_at`` (whose C wrappers are the kernels of ``addr``),
    and :data:`SPECIAL_PLAIN`, ``addr`` holding their positions instead of addresses."""
    generated = importlib.import_module(f"qkdyn.theory.generated.{name}")
    callees = (plain_python(generated.psi_gain_at, {}), plain_python(generated.m_ov_at, {}), *SPECIAL_PLAIN)
    replace: dict[str, Callable] = {"call_scalar": lambda address, x, p: callees[address](x, p),
                                    "call_unary": lambda address, x: callees[address](x)}
    return plain_python(solve_points, replace), np.arange(len(callees))
