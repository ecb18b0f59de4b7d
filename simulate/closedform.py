"""The matched-loss closed form of :mod:`qkdyn.simulate.sharpness`, compiled: one numba kernel over all points.

The mathematics is that of :mod:`qkdyn.simulate.sharpness` (symbols as in docs/setting.md and
docs/sharpness.md); this module is its compiled arithmetic, point by point:

* the line Phi - Phi(qk0) = (A/n)(m (G(u) - G(u0)) + n (u - u0)), qk = u (collapsed QK; G = e^u) or
  qk = beta sinh u (factorized QK; G = int e^{beta sinh v} dv tabulated by piecewise Chebyshev
  quadrature, degree 14 per panel, panels over which beta sinh u changes by at most 1, extended on
  demand), inverted by monotone Newton (from the Wright-omega solution of m e^u + n u = c, collapsed;
  from a cubic Hermite start inside a table panel, factorized), or, at the quadrature nodes and path
  samples, read off a per-panel Chebyshev series of the inverse u(Phi) (collapsed QK too: panels of
  1/2 in u, G in closed form, up to Phi = 1e300; beyond, e^u near overflow, Newton);
* the matched-loss root of z(ov) = alpha(qk(ov)) ov - z* by safeguarded Newton in s = ov - ov0 (rtsafe),
  started from the Lagrange polynomial in rho through the previous six points' roots (same setting and level);
* the time, composite 16-node Gauss-Legendre on panels at equal steps of the progress
  v = z + 2x + 4|qk| + 2|u| sampled along the path, each panel in doubles (in logs where its values come
  near overflow), the panels summed in logs; the points of one setting and rho (a
  grid's levels) share one path: the panels of the path to the farthest level, the panel holding each
  nearer level split there, each time the sum of the panels before it.

The per-form maths comes from the sympy derivation only: Psi(a + s) - Psi(a) and the balanced M_OV
are the generated C kernels ``psi_gain_kernel`` and ``m_ov_kernel`` of :mod:`qkdyn.theory.generated`,
called through their addresses (so the kernel is compiled once for every form); (A, beta) are the
generated ``line_scale``. Settings are processed in the order of the points (points of one setting
contiguous: the table is rebuilt when the setting changes). numba caches the machine code in tree
(:class:`qkdyn.theory.kernels.TreeCache`): a warm process does not recompile.
"""
from __future__ import annotations

import math

import numpy as np
from llvmlite import ir
from numba import types
from numba.extending import get_cython_function_address, intrinsic
from qkdyn.simulate.integrate import _call_scalar
from qkdyn.theory.kernels import cached_njit, expit

#: SciPy's own real Wright omega and log-expit (scipy.special.cython_special), passed to the kernel by address
#: (an address is an argument, not a global: numba caches only code without dynamic globals)
SPECIAL = (get_cython_function_address("scipy.special.cython_special", "__pyx_fuse_1wrightomega"),
           get_cython_function_address("scipy.special.cython_special", "__pyx_fuse_0log_expit"))

CHEB_DEG = 14  # Chebyshev degree per panel of the line's table
TAIL = 60.0  # below qk = -TAIL, e^qk is negligible in Phi' (relative e^-60 ~ 1e-26): the table's linear tail
LOOSE = 1e6  # a matched-loss bound beyond base + 1e6 max(z*, 1) is replaced by a grown bracket
MAX_GROWTH = 520  # 4^520 > 1e308: the matched-loss bracket reaches any finite ov
MAX_TABLE_PANELS = 20000  # qk changes by at most 1 per panel (|qk| <= ~720 while e^qk is finite)
MAX_PANELS_LOG2 = 14  # at most 2^14 quadrature panels per path (more: a time beyond the largest double)
CHEB_X = np.cos(np.pi * (np.arange(CHEB_DEG + 1) + 0.5) / (CHEB_DEG + 1))
CHEB_FIT = np.linalg.inv(np.polynomial.chebyshev.chebvander(CHEB_X, CHEB_DEG))
GL_X, GL_W = np.polynomial.legendre.leggauss(16)
#: fractions of the path ov0 -> ov* sampled to place the quadrature panels (plus ov = 0 if crossed)
#: (dense at both ends: attention can rise fastest at the start, e^z grows fastest at the end)
PATH_FRACTIONS = np.unique(np.concatenate([[0.0], np.geomspace(1e-14, 1.0, 18), 1.0 - np.geomspace(1e-12, 0.5, 10)]))
GEOMETRIC = np.linspace(0.0, 1.0, 8)  # and at geometric steps over the positive part of the path
LOG_DOUBLE_MAX = math.log(np.finfo(float).max)
_CENTER = MAX_TABLE_PANELS + 2  # the table grows both ways from u0 at this index of its buffers
_CAPACITY = 2 * MAX_TABLE_PANELS + 6

#: the constants of one setting, a row of ``constants`` (the line's A, beta, m, n, u0 and the problem's rest)
CONSTANTS = ("a", "beta", "m", "n", "u0", "qk0", "ov0", "kappa", "log_m_n", "log_k1", "log_eta_ov", "factorized_ov",
             "e0")
_A, _BETA, _M, _N, _U0, _QK0, _OV0, _KAPPA, _LOG_MN, _LOG_K1, _LOG_ETA, _FOV, _E0 = range(len(CONSTANTS))
#: rows of the table's ``tab`` (edges, offsets G(edge) - G(u0), Phi at the edges, inverse built) and the
#: columns of its ``coef`` (integral coefficients, then the inverse's)
_EDGES, _OFFSETS, _AT, _BUILT = range(4)
_INV = CHEB_DEG + 2

_jit = cached_njit(error_model="numpy")
_inline = cached_njit(error_model="numpy", inline="always")  # small helpers: no call boundary


@intrinsic
def _call_unary(typingctx, address, x):
    """Call the C function at ``address`` as double(double)."""
    def codegen(context, builder, signature, args):
        double = ir.DoubleType()
        function = builder.inttoptr(args[0], ir.FunctionType(double, [double]).as_pointer())
        return builder.call(function, [args[1]])
    return types.float64(address, x), codegen


@_inline
def _clenshaw(x, coef, row, first, count):
    """sum_j c[j] T_j(x), c = coef[row, first:first + count]."""
    b1 = 0.0
    b2 = 0.0
    two_x = 2 * x
    for j in range(count - 1, 0, -1):
        b1, b2 = coef[row, first + j] + two_x * b1 - b2, b1
    return coef[row, first] + x * b1 - b2


@_inline
def _clip(x, lo, hi):
    return hi if x > hi else lo if x < lo else x


@_inline
def _logaddexp0(y):
    """log(1 + e^y) (numpy's logaddexp(0, y))."""
    if y == 0.0:
        return math.log(2.0)
    return y + math.log1p(math.exp(-y)) if y > 0 else math.log1p(math.exp(y))


@_inline
def _search(values, row, start, stop, x, right):
    """numpy's searchsorted(values[row, start:stop], x, side) as an index into the row."""
    lo, hi = start, stop
    while lo < hi:
        mid = (lo + hi) // 2
        if values[row, mid] < x or (right and values[row, mid] == x):
            lo = mid + 1
        else:
            hi = mid
    return lo


@_inline
def _split(lo, hi):
    """Bisection point of [lo, hi]: the midpoint, or, for a bracket much wider than its distance from
    0, lo + sqrt(w (hi - lo)), w = max(|lo|, 1) (a bracket spanning 1e300 shrinks in about ten steps)."""
    width, scale = hi - lo, max(abs(lo), 1.0)
    return lo + math.sqrt(scale * width) if width > 4 * scale else lo + 0.5 * width


@_inline
def _rtsafe_step(x, value, slope, lo, hi, before_last, last, run, convex, tol, floor):
    """One step of the safeguarded Newton iteration for a root of an increasing function: Newton, or
    bisection when it leaves [lo, hi] or (unless ``convex``: Newton from above is then monotone) does
    not halve the step before last. ``run``: how many Newton steps in a row led to x (0 at the start).
    Returns (x, lo, hi, before_last, last, run, done): done once the step (or the bracket) is below tol
    (floor + |x|), or steps below 1e3 times that stop shrinking (round-off), or three Newton steps
    d_{k-2}, d_{k-1}, d_k show quadratic convergence e_{k+1} ~ K d_k^2: K estimated from each pair,
    K_1 = d_{k-1} / d_{k-2}^2 and K_2 = d_k / d_{k-1}^2, agreeing (K_2 <= 10 K_1) and both predicting
    K d_k^2 below 1e-3 of the tolerance, i.e. a rounding (the step that would confirm it is not taken:
    one evaluation fewer; at the tolerance itself a CAFO qk was 7e-12 off, where the confirmed step leaves
    it at round-off). One pair alone is no evidence: a first step of 8e6 from a bracket end onto a root of
    a curve straight on that scale but not near the root (CACO, z* = 746) gave K_2 = 3e-15 where the root's
    own K is 4e-7, and stopped with ov 2e-11 off."""
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
    step, scale = abs(new - x), tol * (floor + abs(x))
    quadratic = False
    if not bad and run >= 2 and step <= 1e-2 * last:
        k_1, k_2 = last / before_last / before_last, step / last / last  # (ratios: no overflow for steps of 1e200)
        quadratic = k_2 <= 10 * k_1 and max(k_1, k_2) * step * step <= 1e-3 * scale
    done = step <= scale or hi - lo <= 4 * scale or (step <= 1e3 * scale and step >= 0.5 * last) or quadratic
    if value == 0:
        return x, lo, hi, last, step, run + 1, True
    return new, lo, hi, last, step, 0 if bad else run + 1, done


# -- the line (c: the setting's constants; tab, coef, ext: the line's table) ---------------------------

@_inline
def _q(c, u):
    return c[_BETA] * math.sinh(u) if c[_BETA] > 0 else u


@_inline
def _dphi(c, u):
    """dPhi/du = (A/n)(m e^{q(u)} + n)."""
    return c[_A] / c[_N] * (c[_M] * math.exp(_q(c, u)) + c[_N])


@_inline
def _g(c, u):
    """G(u) - G(u0) = e^u - e^u0 of a collapsed QK circuit."""
    if u <= c[_U0]:
        return c[_E0] * math.expm1(u - c[_U0])
    # e^u (1 - e^{u0 - u}): e^{u0} e^{u - u0} would overflow where u - u0 > 709 (u0 = -685, u = 35)
    return -math.exp(u) * math.expm1(c[_U0] - u)


@_inline
def _phi(c, tab, coef, i, u):
    """Phi(u) - Phi(u0) = (A/n)(m (G(u) - G(u0)) + n (u - u0)); a factorized QK circuit's G from table panel i
    (the one holding u)."""
    if c[_BETA] > 0:
        left, right = tab[_EDGES, i], tab[_EDGES, i + 1]
        g = tab[_OFFSETS, i] + 0.5 * (right - left) * _clenshaw((2 * u - left - right) / (right - left), coef, i, 0,
                                                               CHEB_DEG + 2)
    else:
        g = _g(c, u)
    return c[_A] / c[_N] * (c[_M] * g + c[_N] * (u - c[_U0]))


@_inline
def _fit(values):
    """CHEB_FIT @ values: Chebyshev coefficients from the values at the nodes CHEB_X (plain loops:
    numba's matrix product would compile BLAS calls)."""
    out = np.zeros(CHEB_DEG + 1)
    for i in range(CHEB_DEG + 1):
        for k in range(CHEB_DEG + 1):
            out[i] += CHEB_FIT[i, k] * values[k]
    return out


@_inline
def _insertion_sort(values):
    """Sort in place (the path samples: a few sorted runs, for which this is the fast sort)."""
    for i in range(1, values.size):
        x, j = values[i], i - 1
        while j >= 0 and values[j] > x:
            values[j + 1] = values[j]
            j -= 1
        values[j + 1] = x


@_jit
def _panel(c, left, right, coef, row):
    """Chebyshev coefficients (into coef[row, :16]) of int_left^u e^{beta sinh v} dv on [left, right];
    returns its total."""
    half, mid = 0.5 * (right - left), 0.5 * (left + right)
    values = np.empty(CHEB_DEG + 1)
    for k in range(CHEB_DEG + 1):
        values[k] = math.exp(c[_BETA] * math.sinh(mid + half * CHEB_X[k]))
    fit = _fit(values)
    coef[row, :_INV] = 0.0  # numpy's chebint(fit, lbnd=-1)
    coef[row, 1] = fit[0]
    coef[row, 2] = fit[1] / 4
    for j in range(2, CHEB_DEG + 1):
        coef[row, j + 1] = fit[j] / (2 * (j + 1))
        coef[row, j - 1] -= fit[j] / (2 * (j - 1))
    coef[row, 0] -= _clenshaw(-1.0, coef, row, 0, _INV)
    return half * _clenshaw(1.0, coef, row, 0, _INV)


@_inline
def _width(c, at):
    """Panel width in u: the exponent beta sinh u changes by at most 1 across a panel (1/2 for a collapsed QK
    circuit, beta = 0: its inverse u(Phi), log-like where e^u dominates, has a branch point at Phi(log(n/m) + i pi),
    ~0 against a panel's Phi, at Bernstein parameter coth(w/4) = 8 from a panel of width w = 1/2: the degree-14
    series to ~1e-15)."""
    return min(0.5, 1.0 / (c[_BETA] * math.cosh(abs(at) + 0.5)))


@_inline
def _offset(c, tab, coef, row, left, right, known, upward):
    """G - G(u0) at the new edge (right if ``upward``, else left) of the panel [left, right] from ``known``, the
    other edge's: a factorized QK circuit adds the panel's integral (its coefficients into coef row ``row``);
    a collapsed one has it in closed form."""
    if c[_BETA] == 0:
        return _g(c, right if upward else left)
    total = _panel(c, left, right, coef, row)
    return known + total if upward else known - total


@_inline
def _new_edge(c, tab, i, edge, offset):
    tab[_EDGES, i], tab[_OFFSETS, i], tab[_BUILT, i] = edge, offset, 0.0
    tab[_AT, i] = c[_A] / c[_N] * (c[_M] * offset + c[_N] * (edge - c[_U0]))


@_jit
def _cover(c, tab, coef, ext, lam_lo, lam_hi):
    """Extend the line's table until Phi - Phi(qk0) spans [lam_lo, lam_hi] (a collapsed QK circuit's stops
    below the panel whose top Phi would exceed 1e300: e^u and Phi' must stay finite there)."""
    while tab[_AT, ext[1] - 1] < lam_hi:
        last = ext[1] - 1
        right = tab[_EDGES, last] + _width(c, tab[_EDGES, last])
        _new_edge(c, tab, last + 1, right, _offset(c, tab, coef, last, tab[_EDGES, last], right,
                                                   tab[_OFFSETS, last], True))
        if c[_BETA] == 0 and not tab[_AT, last + 1] < 1e300:
            break
        ext[1] += 1
        if ext[1] - ext[0] > MAX_TABLE_PANELS:  # qk grows by 1 per panel: e^qk would overflow long before
            raise RuntimeError("factorized-QK table: more than 20000 panels")
    while tab[_AT, ext[0]] > lam_lo:
        first = ext[0]
        if _q(c, tab[_EDGES, first]) < -TAIL:
            # e^{qk} < e^-TAIL from here down: G is constant, Phi linear in u, and one panel with
            # zero coefficients reaches lam_lo (qk may be below -1e300)
            coef[first - 1, :_INV] = 0.0
            _new_edge(c, tab, first - 1, c[_U0] + lam_lo / c[_A] - c[_M] / c[_N] * tab[_OFFSETS, first] - 1.0,
                      tab[_OFFSETS, first])
            ext[0] -= 1
            break
        left = tab[_EDGES, first] - _width(c, tab[_EDGES, first])
        _new_edge(c, tab, first - 1, left, _offset(c, tab, coef, first - 1, left, tab[_EDGES, first],
                                                   tab[_OFFSETS, first], False))
        ext[0] -= 1
        if ext[1] - ext[0] > MAX_TABLE_PANELS:
            raise RuntimeError("factorized-QK table: more than 20000 panels")
    if ext[1] - ext[0] == 1:  # at least one panel, so that lookups always find one
        first = ext[0]
        right = tab[_EDGES, first] + _width(c, tab[_EDGES, first])
        _new_edge(c, tab, first + 1, right, _offset(c, tab, coef, first, tab[_EDGES, first], right, 0.0, True))
        if c[_BETA] > 0 or tab[_AT, first + 1] < 1e300:
            ext[1] += 1


@_inline
def _newton_line(c, tab, coef, panel, lam, lo, hi, u):
    """u in [lo, hi] with Phi(u) - Phi(u0) = lam (Phi increasing and convex: monotone Newton); [lo, hi] is
    table panel ``panel`` for a factorized QK circuit (unused for a collapsed one)."""
    before_last, last, run = math.inf, math.inf, 0
    for _ in range(200):
        value, slope = _phi(c, tab, coef, panel, u) - lam, _dphi(c, u)
        u, lo, hi, before_last, last, run, done = _rtsafe_step(u, value, slope, lo, hi, before_last, last, run, True,
                                                               1e-13, 1.0)
        if done:
            return u
    raise RuntimeError("line inversion did not converge")


@_inline
def _panel_of(tab, ext, lam):
    """The table panel i whose Phi range (at_i, at_i+1] holds lam (the first or last one beyond the table):
    the last panel found (ext[2]: a neighbouring point's, usually) where it does, else a binary search."""
    last = ext[2]
    if ext[0] <= last <= ext[1] - 2 and tab[_AT, last] < lam <= tab[_AT, last + 1]:
        return last
    ext[2] = min(max(_search(tab, _AT, ext[0], ext[1], lam, False) - 1, ext[0]), ext[1] - 2)
    return ext[2]


@_jit
def _solve_on_table(c, tab, coef, ext, lam):
    """Newton on the table from a cubic Hermite interpolation of u(Phi) across the panel holding lam."""
    i = _panel_of(tab, ext, lam)
    lo, hi = tab[_EDGES, i], tab[_EDGES, i + 1]
    width = tab[_AT, i + 1] - tab[_AT, i]
    t = _clip((lam - tab[_AT, i]) / width, 0.0, 1.0)
    slope_lo, slope_hi = width / _dphi(c, lo), width / _dphi(c, hi)
    start = _clip((2 * t**3 - 3 * t**2 + 1) * lo + (t**3 - 2 * t**2 + t) * slope_lo
                  + (3 * t**2 - 2 * t**3) * hi + (t**3 - t**2) * slope_hi, lo, hi)
    return _newton_line(c, tab, coef, i, lam, lo, hi, start)


@_jit
def _build_inverse(c, tab, coef, ext, i):
    """coef[i, _INV:]: the Chebyshev series of the inverse u(Phi) on table panel i, from exact inversions at
    its Chebyshev nodes in Phi."""
    at_lo, at_hi = tab[_AT, i], tab[_AT, i + 1]
    nodes = np.empty(CHEB_DEG + 1)
    for k in range(CHEB_DEG + 1):
        nodes[k] = _solve_on_table(c, tab, coef, ext, 0.5 * (at_lo + at_hi) + 0.5 * (at_hi - at_lo) * CHEB_X[k])
    coef[i, _INV:] = _fit(nodes)
    tab[_BUILT, i] = 1.0


@_jit
def _polish(c, tab, coef, i, lam, u):
    """Newton on table panel i from u to Phi(u) - Phi(u0) = lam."""
    return _newton_line(c, tab, coef, i, lam, tab[_EDGES, i], tab[_EDGES, i + 1], u)


@_inline
def _from_inverse_table(c, tab, coef, ext, lam, polish):
    """u(lam) from the Chebyshev series of the inverse on the panel holding lam (built on first use),
    accurate to ~1e-13; ``polish``: then Newton from it (one step, usually, where the Hermite start of
    _solve_on_table needs about three). Inline: the lookup and the series are the hot path of the time
    quadrature; the build and Newton are calls."""
    i = _panel_of(tab, ext, lam)
    if tab[_BUILT, i] == 0.0:
        _build_inverse(c, tab, coef, ext, i)
    at_lo, at_hi = tab[_AT, i], tab[_AT, i + 1]
    x = _clip((2 * lam - at_lo - at_hi) / (at_hi - at_lo), -1.0, 1.0)
    u = _clip(_clenshaw(x, coef, i, _INV, CHEB_DEG + 1), tab[_EDGES, i], tab[_EDGES, i + 1])
    return _polish(c, tab, coef, i, lam, u) if polish else u


@_inline
def _invert(c, addr, tab, coef, ext, lam, polish):
    """u with Phi(u) - Phi(u0) = lam: from the table (the inverse's series, then Newton if ``polish``) for a
    factorized QK circuit, and for a collapsed one unless ``polish`` where the table reaches lam (Phi up to 1e300);
    else exactly (_invert_collapsed)."""
    if lam == 0.0:  # the start of the line (ov = ov0, or rho = 0)
        return c[_U0]
    if c[_BETA] > 0 or not polish:
        if lam < tab[_AT, ext[0]] or lam > tab[_AT, ext[1] - 1] or ext[1] - ext[0] == 1:
            _cover(c, tab, coef, ext, min(lam, 0.0), max(lam, 0.0))
        if c[_BETA] > 0 or (ext[1] - ext[0] > 1 and tab[_AT, ext[0]] <= lam <= tab[_AT, ext[1] - 1]):
            return _from_inverse_table(c, tab, coef, ext, lam, polish)
    return _invert_collapsed(c, addr, tab, coef, lam)


@_jit
def _invert_collapsed(c, addr, tab, coef, lam):
    """_solve_collapsed as a call: inline only in the matched-loss root's evaluations (_level), the hot path
    (every inline copy adds to the compile)."""
    return _solve_collapsed(c, addr, tab, coef, lam)


@_inline
def _solve_collapsed(c, addr, tab, coef, lam):
    """u with Phi(u) - Phi(u0) = lam for a collapsed QK circuit: Newton from the Wright-omega solution."""
    a, m, n, u0 = c[_A], c[_M], c[_N], c[_U0]
    e0 = c[_E0]
    # the bounds u0 + lam/a and u0 + log1p(lam n / (A m e^u0)), widened by a few roundings: the second is the
    # root itself where n u is negligible, and rounded below it (CACO from qk0 = log 4 at lam = 2.3e16) it
    # left Newton bisecting towards it, stopped 4e-9 short
    ratio = max(lam, 0.0) * n / (a * m * e0)  # overflows where e^u0 is tiny (u0 = -685): then log(e^u0 + lam n / (A m))
    upper = min(u0 + lam / a, u0 + math.log1p(ratio) if ratio < 1e300 else math.log(e0 + max(lam, 0.0) * n / (a * m)))
    hi = upper + 1e-14 * (1.0 + abs(upper)) if lam >= 0 else u0
    lower = u0 + lam / a
    lo = u0 if lam >= 0 else lower - 1e-14 * (1.0 + abs(lower))
    # closed form: m e^u + n u = c solves as u = c/n - omega(log(m/n) + c/n); Newton polishes the round-off.
    # Where c/n dwarfs u that difference cancels (c/n = 1e17, u = 41: the start 32), and Newton starts from
    # the upper bound instead (from above it converges monotonically)
    c_n = lam / a + (m / n) * e0 + u0
    start = c_n - _call_unary(addr[2], c[_LOG_MN] + c_n)
    if abs(c_n) > 1e10 * max(abs(start), 1.0):
        start = hi
    return _newton_line(c, tab, coef, -1, lam, lo, hi, _clip(start, lo, hi))


# -- one setting (p: its parameters; addr: the kernels' addresses; work: their argument) ------------------

@_inline
def _gain(c, p, addr, work, delta):
    """Psi(ov0 + delta) - Psi(ov0) from the generated psi_gain(|ov0|, s), s = |ov| - |ov0| (+-delta while
    ov keeps the sign of ov0): no subtraction of two values of Psi."""
    ov0 = c[_OV0]
    ov = ov0 + delta
    same_side = ov >= 0 if ov0 >= 0 else ov <= 0
    work[0] = abs(ov0)
    work[1] = math.copysign(1.0, ov0) * delta if same_side else abs(ov) - abs(ov0)
    return _call_scalar(addr[0], work, p)


@_inline
def _m_ov(c, p, addr, work, ov):
    work[0], work[1], work[2] = 0.0, ov, c[_KAPPA]
    return _call_scalar(addr[1], work, p)


@_inline
def _qk_u(c, p, addr, work, tab, coef, ext, delta, rho, polish):
    """(qk, u) on the line at ov = ov0 + delta."""
    u = _invert(c, addr, tab, coef, ext, rho * _gain(c, p, addr, work, delta), polish)
    return _q(c, u), u


@_inline
def _level(c, p, addr, work, tab, coef, ext, s, ov, zstar, rho):
    """z - z*, dz/ds = alpha + ov alpha (1 - alpha) dqk/dov, qk and dqk/dov along the line at ov = ov0 + s
    (s and ov both given: each is exact where it is the root's variable)."""
    lam = rho * _gain(c, p, addr, work, s)
    # a collapsed QK line inverted exactly inline here (the root's evaluations), elsewhere by a call
    exact = c[_BETA] == 0 and lam != 0.0
    qk = _q(c, _solve_collapsed(c, addr, tab, coef, lam) if exact else _invert(c, addr, tab, coef, ext, lam, True))
    alpha = expit(qk + c[_LOG_MN])
    dq_du = math.hypot(c[_BETA], qk) if c[_BETA] > 0 else 1.0  # beta cosh u, qk = beta sinh u
    dqk = dq_du / (c[_A] / c[_N] * (c[_M] * math.exp(qk) + c[_N])) * rho * ov / _m_ov(c, p, addr, work, ov)
    return alpha * ov - zstar, alpha + ov * alpha * (1 - alpha) * dqk, qk, dqk


@_jit
def _state(c, p, addr, work, tab, coef, ext, zstar, rho, start):
    """(qk, ov, s) where alpha ov = z* on the line: safeguarded Newton in s = ov - ov0 > 0 (ov rises along the
    flow) to 1e-13 relative in s, from ``start`` (an ov: from the roots of neighbouring points) where it lies
    inside the bracket, else from the upper bound. In s, not ov: qk moves by rho Psi'(ov) / Phi'(qk) per
    unit of ov, so ov to eps ov0 would leave qk off by that factor times eps ov0 near the start (a level
    just below the initial loss at large rho), while qk from the generated psi_gain(|ov0|, s) is exact; and s is
    returned beside ov for the time, whose path it is (ov0 + s rounds s away where s < eps ov0)."""
    ov0 = c[_OV0]
    base = max(ov0, 0.0) - ov0  # beyond it qk >= qk(base), so z >= alpha(qk(base)) ov
    qk_base, _ = _qk_u(c, p, addr, work, tab, coef, ext, base, rho, True)
    lo = base if zstar > 0 else 0.0
    hi = max(max(zstar, 0.0) / expit(qk_base + c[_LOG_MN]) - ov0 if zstar > 0 else -ov0, lo)
    if not hi <= base + LOOSE * max(zstar, 1.0):  # alpha(qk(base)) tiny: grow a bracket instead
        step, grown = max(zstar, 1.0), math.nan
        for _ in range(MAX_GROWTH):
            # z - z* at s = base + step (not _level: its inline exact inversion is kept to the root's loop)
            qk_step, _ = _qk_u(c, p, addr, work, tab, coef, ext, base + step, rho, True)
            if not expit(qk_step + c[_LOG_MN]) * (ov0 + base + step) - zstar < 0:
                grown = base + step
                break
            step *= 4
        if math.isnan(grown):
            raise RuntimeError("matched-loss bracket: z(ov) below z* up to ov = 1e308")
        hi = min(hi, grown)
    s, qk = _root(c, p, addr, work, tab, coef, ext, zstar, rho, False, lo, hi,
                  start - ov0 if lo < start - ov0 < hi else hi)
    if not abs(ov0 + s) < s:
        return qk, ov0 + s, s
    # ov near 0 (from a negative start): ov0 + s cancels there (FAFO ov* = -4.9e-8 from ov0 = -0.48 was 3e-10
    # off), so polish in ov itself, in a bracket of a few roundings of s around the root in s
    width = 4e-13 * s
    ov, qk = _root(c, p, addr, work, tab, coef, ext, zstar, rho, True, ov0 + (s - width), ov0 + (s + width), ov0 + s)
    return qk, ov, ov - ov0  # |ov| < s: the difference is exact to a rounding of s


@_jit
def _root(c, p, addr, work, tab, coef, ext, zstar, rho, in_ov, lo, hi, x):
    """(x, qk) at x in [lo, hi] where z = z*, x = s = ov - ov0 (or ov, ``in_ov``): safeguarded Newton to 1e-13
    relative in x; qk from the last evaluation at x_k advanced by dqk/dov (x - x_k) where the final step is
    below 1e-10 |x| (the neglected (x - x_k)^2 qk''/2 is far below a rounding of qk), else from the line at x."""
    ov0, before_last, last, run = c[_OV0], math.inf, math.inf, 0
    for _ in range(200):
        s, ov = (x - ov0, x) if in_ov else (x, ov0 + x)
        value, slope, qk, dqk = _level(c, p, addr, work, tab, coef, ext, s, ov, zstar, rho)
        new, lo, hi, before_last, last, run, done = _rtsafe_step(x, value, slope, lo, hi, before_last, last, run, False,
                                                                 1e-13, 1e-300)
        if done:
            if abs(new - x) <= 1e-10 * abs(x):
                return new, qk + dqk * (new - x)
            s = new - ov0 if in_ov else new
            return new, _qk_u(c, p, addr, work, tab, coef, ext, s, rho, True)[0]
        x = new
    raise RuntimeError("matched-loss root did not converge")


@_inline
def _log_dt_dx(c, p, addr, work, ov, qk):
    """log |dt/dx|, x = ov (collapsed OV) or log |ov| (factorized OV, M_OV = c |ov|: |ov| cancels):
    dt/dov = (1 + e^z/(K-1)) / (eta_OV M_OV alpha), z = alpha ov."""
    log_alpha = _call_unary(addr[3], qk + c[_LOG_MN])
    value = _logaddexp0(math.exp(log_alpha) * ov - c[_LOG_K1]) - log_alpha - c[_LOG_ETA]
    return value - math.log(_m_ov(c, p, addr, work, 1.0 if c[_FOV] > 0 else ov))


@_inline
def _y(c, s):
    """The integration variable measured from the start at ov = ov0 + s: x - x(ov0), x = log |ov| (factorized
    OV) or ov."""
    return math.log1p(s / c[_OV0]) if c[_FOV] > 0 else s


@_jit
def _edges(c, p, addr, work, tab, coef, ext, s_star, rho, per_panel, polish):
    """y at the edges of max(4, needed) panels at equal steps of the progress v sampled along the path
    ov0 -> ov0 + s_star (see :meth:`qkdyn.simulate.sharpness._Problem.time_to`), the samples in
    s = ov - ov0 (exact where s_star < eps ov0: a level just below the initial loss at large rho); empty
    where the time is beyond the largest double."""
    ov0, factorized_ov = c[_OV0], c[_FOV] > 0
    ov_star = ov0 + s_star
    nf, ng = PATH_FRACTIONS.size, GEOMETRIC.size
    gain = np.empty(nf + ng + 1)
    for k in range(nf):
        gain[k] = s_star * PATH_FRACTIONS[k]
    positive = max(max(ov0, 0.0), ov_star * 1e-300)
    for k in range(ng):
        step = positive * (ov_star / positive) ** GEOMETRIC[k] - ov0 if ov_star > 0 else 0.0
        gain[nf + k] = _clip(step, 0.0, s_star)
    gain[-1] = _clip(max(0.0, ov0) - ov0, 0.0, s_star)  # ov = 0 where crossed
    _insertion_sort(gain)
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
        value = expit(qk + c[_LOG_MN]) * ov + 4.0 * travelled_qk
        if factorized_ov:
            value += 2.0 * travelled_x
        if c[_BETA] > 0:
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
        i = min(max(_search(v, 0, 0, gain.size, level, True) - 1, 0), gain.size - 2)
        weight = (level - v[0, i]) / (v[0, i + 1] - v[0, i]) if v[0, i + 1] > v[0, i] else 0.0
        edge = gain[i] + _clip(weight, 0.0, 1.0) * (gain[i + 1] - gain[i])
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
    ov0, factorized_ov = c[_OV0], c[_FOV] > 0
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
            inv_alpha = 1.0 + math.exp(-(qk_at[n] + c[_LOG_MN]))
            inner += GL_W[n] * (1.0 + math.exp(ov_at[n] / inv_alpha - c[_LOG_K1])) * inv_alpha * (
                unit if factorized_ov else 1.0 / _m_ov(c, p, addr, work, ov_at[n]))
        if 1e-290 < inner < 1e290:  # no value overflowed or came near it (1/eta_OV is applied in logs)
            log_panel = math.log(sign * half * inner) - c[_LOG_ETA]
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


def new_table():
    """Buffers of the line's table: ``tab`` (edges, offsets, Phi at the edges, inverse built),
    ``coef`` (integral and inverse Chebyshev coefficients per panel), ``ext`` (the [start, stop) of
    the edges in use, and the panel last found)."""
    return np.empty((4, _CAPACITY)), np.empty((_CAPACITY, _INV + CHEB_DEG + 1)), np.zeros(3, dtype=np.int64)


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
            ext[0], ext[1], ext[2] = _CENTER, _CENTER + 1, -1
            _new_edge(c, tab, _CENTER, c[_U0], 0.0)
        if with_state:
            qk[i], ov[i], gain[i] = _state(c, p, addr, work, tab, coef, ext, zstar[i], rho[i],
                                           _warm_start(which, zstar, rho, ov, i))
        else:
            gain[i] = ov[i] - c[_OV0]
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
            t[order] = times
            start = i + 1
