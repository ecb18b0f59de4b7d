"""The matched-loss closed form of :mod:`qkdyn.simulate.sharpness`, compiled: one numba kernel over all points.

The mathematics is that of :mod:`qkdyn.simulate.sharpness` (symbols as in docs/setting.md and
docs/sharpness.md); this module is its compiled arithmetic, point by point:

* the line Phi - Phi(qk0) = (A/n)(m (G(u) - G(u0)) + n (u - u0)), qk = u (collapsed QK; G = e^u) or
  qk = beta sinh u (factorized QK; G = int e^{beta sinh v} dv tabulated by piecewise Chebyshev
  quadrature, degree 14 per panel, panels over which beta sinh u changes by at most 1, extended on
  demand), inverted by monotone Newton (from the Wright-omega solution of m e^u + n u = c, collapsed;
  from a cubic Hermite start inside a table panel, factorized), or read off a per-panel Chebyshev
  series of the inverse u(Phi) at the quadrature nodes;
* the matched-loss root of z(ov) = alpha(qk(ov)) ov - z* by safeguarded Newton in ov (rtsafe);
* the time, composite 8-node Gauss-Legendre on panels at equal steps of the progress
  v = z + x + 4|qk| + |u| sampled along the path, summed in logs.

The per-form maths comes from the sympy derivation only: Psi(a + s) - Psi(a) and the balanced M_OV
are the generated C kernels ``psi_gain_kernel`` and ``m_ov_kernel`` of :mod:`qkdyn.theory.generated`,
called through their addresses (so the kernel is compiled once for every form); (A, beta) are the
generated ``line_scale``. Settings are processed in the order of the points (points of one setting
contiguous: the table is rebuilt when the setting changes). numba caches the machine code in tree
(:func:`qkdyn.theory.kernels.cache_in_tree`): a warm process does not recompile.
"""
from __future__ import annotations

import math

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import get_cython_function_address, intrinsic

from qkdyn.simulate.integrate import _call_scalar
from qkdyn.theory.kernels import cache_in_tree, expit

_CACHE = cache_in_tree(__file__)
#: SciPy's own real Wright omega and log-expit (scipy.special.cython_special), passed to the kernel by address
#: (an address is an argument, not a global: numba caches only code without dynamic globals)
SPECIAL = (get_cython_function_address("scipy.special.cython_special", "__pyx_fuse_1wrightomega"),
           get_cython_function_address("scipy.special.cython_special", "__pyx_fuse_0log_expit"))

CHEB_DEG = 14  # Chebyshev degree per panel of the factorized-QK table
TAIL = 60.0  # below qk = -TAIL, e^qk is negligible in Phi' (relative e^-60 ~ 1e-26): the table's linear tail
LOOSE = 1e6  # a matched-loss bound beyond base + 1e6 max(z*, 1) is replaced by a grown bracket
MAX_GROWTH = 520  # 4^520 > 1e308: the matched-loss bracket reaches any finite ov
MAX_TABLE_PANELS = 20000  # qk changes by at most 1 per panel (|qk| <= ~720 while e^qk is finite)
MAX_PANELS_LOG2 = 14  # at most 2^14 quadrature panels per path
CHEB_X = np.cos(np.pi * (np.arange(CHEB_DEG + 1) + 0.5) / (CHEB_DEG + 1))
CHEB_FIT = np.linalg.inv(np.polynomial.chebyshev.chebvander(CHEB_X, CHEB_DEG))
GL_X, GL_W = np.polynomial.legendre.leggauss(8)
#: fractions of the path ov0 -> ov* sampled to place the quadrature panels (plus ov = 0 if crossed)
#: (dense at both ends: attention can rise fastest at the start, e^z grows fastest at the end)
PATH_FRACTIONS = np.unique(np.concatenate([[0.0], np.geomspace(1e-14, 1.0, 35), 1.0 - np.geomspace(1e-12, 0.5, 20)]))
GEOMETRIC = np.linspace(0.0, 1.0, 16)  # and at geometric steps over the positive part of the path
LOG_DOUBLE_MAX = math.log(np.finfo(float).max)
_CENTER = MAX_TABLE_PANELS + 2  # the table grows both ways from u0 at this index of its buffers
_CAPACITY = 2 * MAX_TABLE_PANELS + 6

#: fields of a problem row and of a line row (one per setting)
PROBLEM = ("qk0", "ov0", "kappa", "log_m_n", "log_k1", "log_eta_ov", "factorized_ov")
LINE = ("a", "beta", "m", "n", "u0")

_jit = njit(cache=_CACHE, error_model="numpy")


@intrinsic
def _call_unary(typingctx, address, x):
    """Call the C function at ``address`` as double(double)."""
    def codegen(context, builder, signature, args):
        double = ir.DoubleType()
        function = builder.inttoptr(args[0], ir.FunctionType(double, [double]).as_pointer())
        return builder.call(function, [args[1]])
    return types.float64(address, x), codegen


@_jit
def _clenshaw(x, c):
    """sum_j c[j] T_j(x)."""
    b1 = 0.0
    b2 = 0.0
    two_x = 2 * x
    for j in range(c.size - 1, 0, -1):
        b1, b2 = c[j] + two_x * b1 - b2, b1
    return c[0] + x * b1 - b2


@_jit
def _clip(x, lo, hi):
    return hi if x > hi else lo if x < lo else x


@_jit
def _logaddexp0(y):
    """log(1 + e^y) (numpy's logaddexp(0, y))."""
    if y == 0.0:
        return math.log(2.0)
    return y + math.log1p(math.exp(-y)) if y > 0 else math.log1p(math.exp(y))


@_jit
def _search(values, start, stop, x, right):
    """numpy's searchsorted(values[start:stop], x, side) as an index into values."""
    lo, hi = start, stop
    while lo < hi:
        mid = (lo + hi) // 2
        if values[mid] < x or (right and values[mid] == x):
            lo = mid + 1
        else:
            hi = mid
    return lo


@_jit
def _split(lo, hi):
    """Bisection point of [lo, hi]: the midpoint, or, for a bracket much wider than its distance from
    0, lo + sqrt(w (hi - lo)), w = max(|lo|, 1) (a bracket spanning 1e300 shrinks in about ten steps)."""
    width, scale = hi - lo, max(abs(lo), 1.0)
    return lo + math.sqrt(scale * width) if width > 4 * scale else lo + 0.5 * width


@_jit
def _rtsafe_step(x, value, slope, lo, hi, before_last, last, convex, tol):
    """One step of the safeguarded Newton iteration for a root of an increasing function: Newton, or
    bisection when it leaves [lo, hi] or (unless ``convex``: Newton from above is then monotone) does
    not halve the step before last. Returns (x, lo, hi, before_last, last, done): done once the step
    (or the bracket) is below ``tol`` relative, or steps below 1e3 tol stop shrinking (round-off)."""
    if value < 0:
        lo = x
    if value > 0:
        hi = x
    new = x - value / slope
    bad = not math.isfinite(new) or new < lo or new > hi
    if not convex and abs(new - x) > 0.5 * before_last:
        bad = True
    if bad:
        new = _split(lo, hi)
    step, scale = abs(new - x), tol * (1.0 + abs(x))
    done = step <= scale or hi - lo <= 4 * scale or (step <= 1e3 * scale and step >= 0.5 * last)
    if value == 0:
        return x, lo, hi, last, step, True
    return new, lo, hi, last, step, done


# -- the line ------------------------------------------------------------------------------------------

@_jit
def _q(line, u):
    return line[1] * math.sinh(u) if line[1] > 0 else u


@_jit
def _dq(line, u):
    return line[1] * math.cosh(u) if line[1] > 0 else 1.0


@_jit
def _dphi(line, u):
    """dPhi/du = (A/n)(m e^{q(u)} + n)."""
    return line[0] / line[3] * (line[2] * math.exp(_q(line, u)) + line[3])


@_jit
def _phi(line, table, u):
    """Phi(u) - Phi(u0) = (A/n)(m (G(u) - G(u0)) + n (u - u0))."""
    a, beta, m, n, u0 = line[0], line[1], line[2], line[3], line[4]
    if beta > 0:
        edges, coef, offsets, _, _, _, ext = table
        i = min(max(_search(edges, ext[0], ext[1], u, True) - 1, ext[0]), ext[1] - 2)
        left, right = edges[i], edges[i + 1]
        g = offsets[i] + 0.5 * (right - left) * _clenshaw((2 * u - left - right) / (right - left), coef[i])
    else:
        g = math.exp(u0) * math.expm1(u - u0)
    return a / n * (m * g + n * (u - u0))


@_jit
def _panel(line, left, right, out):
    """Chebyshev coefficients (into ``out``) of int_left^u e^{beta sinh v} dv on [left, right]; its total."""
    half, mid = 0.5 * (right - left), 0.5 * (left + right)
    values = np.empty(CHEB_DEG + 1)
    for k in range(CHEB_DEG + 1):
        values[k] = math.exp(line[1] * math.sinh(mid + half * CHEB_X[k]))
    c = CHEB_FIT @ values
    out[:] = 0.0  # numpy's chebint(c, lbnd=-1)
    out[1] = c[0]
    out[2] = c[1] / 4
    for j in range(2, CHEB_DEG + 1):
        out[j + 1] = c[j] / (2 * (j + 1))
        out[j - 1] -= c[j] / (2 * (j - 1))
    out[0] -= _clenshaw(-1.0, out)
    return half * _clenshaw(1.0, out)


@_jit
def _width(line, at):
    """Panel width in u: the exponent beta sinh u changes by at most 1 across a panel."""
    return min(0.5, 1.0 / (line[1] * math.cosh(abs(at) + 0.5)))


@_jit
def _new_edge(line, table, i):
    edges, _, offsets, at, _, built, _ = table
    at[i] = line[0] / line[3] * (line[2] * offsets[i] + line[3] * (edges[i] - line[4]))
    built[i] = False


@_jit
def _cover(line, table, lam_lo, lam_hi):
    """Extend the factorized-QK table until Phi - Phi(qk0) spans [lam_lo, lam_hi]."""
    a, beta, m, n, u0 = line[0], line[1], line[2], line[3], line[4]
    edges, coef, offsets, at, _, _, ext = table
    while at[ext[1] - 1] < lam_hi:
        last = ext[1] - 1
        right = edges[last] + _width(line, edges[last])
        total = _panel(line, edges[last], right, coef[last])
        edges[last + 1], offsets[last + 1] = right, offsets[last] + total
        ext[1] += 1
        _new_edge(line, table, last + 1)
        if ext[1] - ext[0] > MAX_TABLE_PANELS:  # qk grows by 1 per panel: e^qk would overflow long before
            raise RuntimeError("factorized-QK table: more than 20000 panels")
    while at[ext[0]] > lam_lo:
        first = ext[0]
        if beta * math.sinh(edges[first]) < -TAIL:
            # e^{beta sinh u} < e^-TAIL from here down: G is constant, Phi linear in u, and one panel with
            # zero coefficients reaches lam_lo (qk may be below -1e300)
            edges[first - 1], offsets[first - 1] = u0 + lam_lo / a - m / n * offsets[first] - 1.0, offsets[first]
            coef[first - 1, :] = 0.0
            ext[0] -= 1
            _new_edge(line, table, first - 1)
            break
        left = edges[first] - _width(line, edges[first])
        total = _panel(line, left, edges[first], coef[first - 1])
        edges[first - 1], offsets[first - 1] = left, offsets[first] - total
        ext[0] -= 1
        _new_edge(line, table, first - 1)
        if ext[1] - ext[0] > MAX_TABLE_PANELS:  # qk grows by 1 per panel: e^qk would overflow long before
            raise RuntimeError("factorized-QK table: more than 20000 panels")
    if ext[1] - ext[0] == 1:  # at least one panel, so that lookups always find one
        first = ext[0]
        right = edges[first] + _width(line, edges[first])
        edges[first + 1], offsets[first + 1] = right, _panel(line, edges[first], right, coef[first])
        ext[1] += 1
        _new_edge(line, table, first + 1)


@_jit
def _newton_line(line, table, lam, lo, hi, u):
    """u in [lo, hi] with Phi(u) - Phi(u0) = lam (Phi increasing and convex: monotone Newton)."""
    before_last, last = math.inf, math.inf
    for _ in range(200):
        value, slope = _phi(line, table, u) - lam, _dphi(line, u)
        u, lo, hi, before_last, last, done = _rtsafe_step(u, value, slope, lo, hi, before_last, last, True, 1e-13)
        if done:
            return u
    raise RuntimeError("line inversion did not converge")


@_jit
def _solve_on_table(line, table, lam):
    """Newton on the table from a cubic Hermite interpolation of u(Phi) across the panel holding lam."""
    edges, _, _, at, _, _, ext = table
    i = min(max(_search(at, ext[0], ext[1], lam, False) - 1, ext[0]), ext[1] - 2)
    lo, hi = edges[i], edges[i + 1]
    width = at[i + 1] - at[i]
    t = _clip((lam - at[i]) / width, 0.0, 1.0)
    slope_lo, slope_hi = width / _dphi(line, lo), width / _dphi(line, hi)
    start = _clip((2 * t**3 - 3 * t**2 + 1) * lo + (t**3 - 2 * t**2 + t) * slope_lo
                  + (3 * t**2 - 2 * t**3) * hi + (t**3 - t**2) * slope_hi, lo, hi)
    return _newton_line(line, table, lam, lo, hi, start)


@_jit
def _from_inverse_table(line, table, lam):
    """u(lam) from the Chebyshev series of the inverse on the panel holding lam (built on first use
    from exact inversions at its Chebyshev nodes)."""
    edges, _, _, at, inverse, built, ext = table
    i = min(max(_search(at, ext[0], ext[1], lam, False) - 1, ext[0]), ext[1] - 2)
    if not built[i]:
        nodes = np.empty(CHEB_DEG + 1)
        for k in range(CHEB_DEG + 1):
            nodes[k] = _solve_on_table(line, table, 0.5 * (at[i] + at[i + 1]) + 0.5 * (at[i + 1] - at[i]) * CHEB_X[k])
        inverse[i, :] = CHEB_FIT @ nodes
        built[i] = True
    x = _clip((2 * lam - at[i] - at[i + 1]) / (at[i + 1] - at[i]), -1.0, 1.0)
    return _clip(_clenshaw(x, inverse[i]), edges[i], edges[i + 1])


@_jit
def _invert(line, table, kernels, lam, polish):
    """u with Phi(u) - Phi(u0) = lam; ``polish=False`` (factorized only) reads the inverse table."""
    a, beta, m, n, u0 = line[0], line[1], line[2], line[3], line[4]
    if beta > 0:
        _cover(line, table, min(lam, 0.0), max(lam, 0.0))
        return _solve_on_table(line, table, lam) if polish else _from_inverse_table(line, table, lam)
    e0 = math.exp(u0)
    upper = u0 + min(lam / a, math.log1p(max(lam, 0.0) * n / (a * m * e0)))
    hi = upper if lam >= 0 else u0
    lo = u0 if lam >= 0 else u0 + lam / a
    # closed form: m e^u + n u = c solves as u = c/n - omega(log(m/n) + c/n); Newton polishes the round-off
    c_n = lam / a + (m / n) * e0 + u0
    return _newton_line(line, table, lam, lo, hi, _clip(c_n - _call_unary(kernels[2], math.log(m / n) + c_n), lo, hi))


# -- one setting -------------------------------------------------------------------------------------

@_jit
def _gain(problem, kernels, delta):
    """Psi(ov0 + delta) - Psi(ov0) from the generated psi_gain(|ov0|, s), s = |ov| - |ov0| (+-delta while
    ov keeps the sign of ov0): no subtraction of two values of Psi."""
    ov0 = problem[1]
    gain, p, work = kernels[0], kernels[4], kernels[5]
    ov = ov0 + delta
    same_side = ov >= 0 if ov0 >= 0 else ov <= 0
    work[0] = abs(ov0)
    work[1] = math.copysign(1.0, ov0) * delta if same_side else abs(ov) - abs(ov0)
    return _call_scalar(gain, work, p)


@_jit
def _m_ov(problem, kernels, ov):
    m_ov, p, work = kernels[1], kernels[4], kernels[6]
    work[0], work[1], work[2] = 0.0, ov, problem[2]
    return _call_scalar(m_ov, work, p)


@_jit
def _qk_u(line, table, problem, kernels, delta, rho, polish):
    """(qk, u) on the line at ov = ov0 + delta."""
    u = _invert(line, table, kernels, rho * _gain(problem, kernels, delta), polish)
    return _q(line, u), u


@_jit
def _level(line, table, problem, kernels, ov, zstar, rho):
    """z(ov) - z* and dz/dov = alpha + ov alpha (1 - alpha) dqk/dov along the line."""
    qk, u = _qk_u(line, table, problem, kernels, ov - problem[1], rho, True)
    alpha = expit(qk + problem[3])
    dqk = _dq(line, u) / _dphi(line, u) * rho * ov / _m_ov(problem, kernels, ov)
    return alpha * ov - zstar, alpha + ov * alpha * (1 - alpha) * dqk


@_jit
def _state(line, table, problem, kernels, zstar, rho):
    """(qk, ov) where alpha ov = z* on the line: safeguarded Newton in ov from the upper bound."""
    ov0 = problem[1]
    base = max(ov0, 0.0)  # beyond it qk >= qk(base), so z >= alpha(qk(base)) ov
    qk_base, _ = _qk_u(line, table, problem, kernels, base - ov0, rho, True)
    lo = base if zstar > 0 else ov0
    hi = max(max(zstar, 0.0) / expit(qk_base + problem[3]) if zstar > 0 else 0.0, lo)
    if not hi <= base + LOOSE * max(zstar, 1.0):  # alpha(qk(base)) tiny: grow a bracket instead
        step, grown = max(zstar, 1.0), math.nan
        for _ in range(MAX_GROWTH):
            if not _level(line, table, problem, kernels, base + step, zstar, rho)[0] < 0:
                grown = base + step
                break
            step *= 4
        if math.isnan(grown):
            raise RuntimeError("matched-loss bracket: z(ov) below z* up to ov = 1e308")
        hi = min(hi, grown)
    ov, before_last, last = hi, math.inf, math.inf
    for _ in range(200):
        value, slope = _level(line, table, problem, kernels, ov, zstar, rho)
        ov, lo, hi, before_last, last, done = _rtsafe_step(ov, value, slope, lo, hi, before_last, last, False, 1e-13)
        if done:
            return _qk_u(line, table, problem, kernels, ov - ov0, rho, True)[0], ov
    raise RuntimeError("matched-loss root did not converge")


@_jit
def _log_dt_dx(problem, kernels, ov, qk):
    """log |dt/dx|, x = ov (collapsed OV) or log |ov| (factorized OV, M_OV = c |ov|: |ov| cancels):
    dt/dov = (1 + e^z/(K-1)) / (eta_OV M_OV alpha), z = alpha ov."""
    log_alpha = _call_unary(kernels[3], qk + problem[3])
    value = _logaddexp0(math.exp(log_alpha) * ov - problem[4]) - log_alpha - problem[5]
    return value - math.log(_m_ov(problem, kernels, 1.0 if problem[6] else ov))


@_jit
def _time(line, table, problem, kernels, ov_star, rho, per_panel, polish):
    """t = int dt/dx dx by Gauss-Legendre on 2^k panels at equal steps of the progress v sampled
    along the path (see :meth:`qkdyn.simulate.sharpness._Problem.time_to`); inf beyond the largest double."""
    ov0, factorized_ov = problem[1], problem[6] > 0
    nf, ng = PATH_FRACTIONS.size, GEOMETRIC.size
    ov = np.empty(nf + ng + 1)
    for k in range(nf):
        ov[k] = ov0 + (ov_star - ov0) * PATH_FRACTIONS[k]
    positive = max(max(ov0, 0.0), ov_star * 1e-300)
    for k in range(ng):
        ov[nf + k] = positive * (ov_star / positive) ** GEOMETRIC[k] if ov_star > 0 else ov0
    ov[-1] = min(max(0.0, ov0), ov_star)
    ov.sort()
    v = np.empty(ov.size)
    travelled_qk = travelled_x = travelled_u = 0.0
    qk_last = u_last = x_last = 0.0
    for k in range(ov.size):
        qk, u = _qk_u(line, table, problem, kernels, ov[k] - ov0, rho, polish)
        x = math.log(abs(ov[k])) if factorized_ov else 0.0
        if k > 0:
            travelled_qk += abs(qk - qk_last)
            travelled_x += abs(x - x_last)
            travelled_u += abs(u - u_last)
        qk_last, u_last, x_last = qk, u, x
        v[k] = expit(qk + problem[3]) * ov[k] + 4.0 * travelled_qk
        if factorized_ov:
            v[k] += travelled_x
        if line[1] > 0:
            v[k] += travelled_u
        if k > 0:
            v[k] = max(v[k], v[k - 1])
    needed = math.ceil((v[-1] - v[0]) / per_panel)
    bucket = max(2, math.ceil(math.log2(max(needed, 1.0))))
    if bucket > MAX_PANELS_LOG2:
        # a path this long passes through attention below e^-{5000 per_panel / 4}: dt/dov there exceeds
        # e^700 unless eta_OV does too, so its time is beyond the largest double
        peak = -math.inf
        for k in range(ov.size):
            peak = max(peak, _log_dt_dx(problem, kernels, ov[k], _qk_u(line, table, problem, kernels, ov[k] - ov0,
                                                                         rho, polish)[0]))
        if peak < LOG_DOUBLE_MAX:
            raise RuntimeError("time quadrature: more than 2^14 panels needed on a path whose time is not beyond "
                               "the largest double")
        return math.inf
    panels = 2**bucket
    y = np.empty(panels + 1)  # the integration variable measured from the start (y = x - x(ov0))
    for j in range(panels + 1):
        level = v[0] + (v[-1] - v[0]) * (j / panels)
        i = min(max(_search(v, 0, v.size, level, True) - 1, 0), v.size - 2)
        weight = (level - v[i]) / (v[i + 1] - v[i]) if v[i + 1] > v[i] else 0.0
        edge = ov[i] + _clip(weight, 0.0, 1.0) * (ov[i + 1] - ov[i])
        edge = ov0 if j == 0 else ov_star if j == panels else edge
        y[j] = math.log1p((edge - ov0) / ov0) if factorized_ov else edge - ov0
    log_f = np.empty((panels, GL_X.size))
    top = -math.inf
    for j in range(panels):
        mid, half = 0.5 * (y[j + 1] + y[j]), 0.5 * (y[j + 1] - y[j])
        for k in range(GL_X.size):
            node = mid + half * GL_X[k]
            delta = ov0 * math.expm1(node) if factorized_ov else node
            qk, _ = _qk_u(line, table, problem, kernels, delta, rho, polish)
            log_f[j, k] = _log_dt_dx(problem, kernels, ov0 + delta, qk)
            top = max(top, log_f[j, k])
    sign = math.copysign(1.0, ov0) if factorized_ov else 1.0  # y falls as |ov| shrinks
    scaled = 0.0
    for j in range(panels):
        inner = 0.0
        for k in range(GL_X.size):
            inner += math.exp(log_f[j, k] - top) * GL_W[k]
        scaled += sign * 0.5 * (y[j + 1] - y[j]) * inner
    return math.exp(top + math.log(scaled))


def new_table():
    """Buffers of a factorized-QK table: edges, integral coefficients, offsets, Phi at the edges,
    inverse coefficients, their built flags, and the [start, stop) range of edges in use."""
    return (np.empty(_CAPACITY), np.empty((_CAPACITY, CHEB_DEG + 2)), np.empty(_CAPACITY), np.empty(_CAPACITY),
            np.empty((_CAPACITY, CHEB_DEG + 1)), np.zeros(_CAPACITY, dtype=np.bool_), np.zeros(2, dtype=np.int64))


@_jit
def _reset(line, table):
    edges, _, offsets, at, _, built, ext = table
    ext[0], ext[1] = _CENTER, _CENTER + 1
    edges[_CENTER], offsets[_CENTER], at[_CENTER], built[_CENTER] = line[4], 0.0, 0.0, False


@_jit
def solve_points(lines, problems, params, gain, m_ov, special, which, zstar, rho, ov, with_state, with_time, per_panel,
                 polish, table, qk, t):
    """Every point i, of setting ``which[i]`` (rows of ``lines``, ``problems``, ``params``; ``gain``,
    ``m_ov``: the addresses of the form's generated kernels; ``special``: SPECIAL): with_state, (qk[i], ov[i]) where the loss
    first reaches z*[i]; with_time, t[i], the time to ov[i] (inf beyond the largest double)."""
    current = -1
    kernels = (gain, m_ov, special[0], special[1], params[0], np.empty(2), np.empty(3))
    for i in range(which.size):
        s = which[i]
        if s != current:
            current = s
            kernels = (gain, m_ov, special[0], special[1], params[s], np.empty(2), np.empty(3))
            _reset(lines[s], table)
        if with_state:
            qk[i], ov[i] = _state(lines[s], table, problems[s], kernels, zstar[i], rho[i])
        if with_time:
            t[i] = _time(lines[s], table, problems[s], kernels, ov[i], rho[i], per_panel, polish)
