"""The line of the matched-loss closed form (:mod:`qkdyn.simulate.closedform`), compiled: Phi(u) - Phi(u0) and its
inverse, on a table built on demand.

The line is Phi - Phi(qk0) = (A/n)(m (G(u) - G(u0)) + n (u - u0)), qk = u (collapsed QK; G = e^u) or
qk = beta sinh u (factorized QK; G = int e^{beta sinh v} dv tabulated by piecewise Chebyshev quadrature,
degree 14 per panel, panels over which beta sinh u changes by at most 1, extended on demand). It is inverted
by monotone Newton (from the Wright-omega solution of m e^u + n u = c, collapsed; from a cubic Hermite start
inside a table panel, factorized), or, at the quadrature nodes and path samples, read off a per-panel
Chebyshev series of the inverse u(Phi) (collapsed QK too: panels of 1/2 in u, G in closed form, up to
Phi = 1e300; beyond, e^u near overflow, Newton). Symbols as in docs/setting.md and docs/sharpness.md.

A setting's constants are a row ``c`` of :data:`CONSTANTS` (each index named by its upper-case name); the
table is the buffers of :func:`new_table` (``tab``, ``coef``, ``ext``), which grows both ways from u0 at
:data:`CENTER`; ``addr`` holds the addresses of the closed form's C functions (addr[2]: SciPy's Wright omega).
"""
from __future__ import annotations

import math

import numpy as np
from qkdyn.simulate.ccall import call_unary
from qkdyn.simulate.scalarmath import LOG_DOUBLE_MAX, clip, rtsafe_step, search
from qkdyn.theory.kernels import cached_njit

CHEB_DEG = 14  # Chebyshev degree per panel of the line's table
TAIL = 60.0  # below qk = -TAIL, e^qk is negligible in Phi' (relative e^-60 ~ 1e-26): the table's linear tail
MAX_TABLE_PANELS = 20000  # qk changes by at most 1 per panel (|qk| <= ~720 while e^qk is finite)
CHEB_X = np.cos(np.pi * (np.arange(CHEB_DEG + 1) + 0.5) / (CHEB_DEG + 1))
CHEB_FIT = np.linalg.inv(np.polynomial.chebyshev.chebvander(CHEB_X, CHEB_DEG))
CENTER = MAX_TABLE_PANELS + 2  # the table grows both ways from u0 at this index of its buffers
_CAPACITY = 2 * MAX_TABLE_PANELS + 6

#: the constants of one setting, a row of ``constants`` (the line's A, beta, m, n, u0 and the problem's rest)
CONSTANTS = ("a", "beta", "m", "n", "u0", "qk0", "ov0", "kappa", "log_m_n", "log_k1", "log_eta_ov", "factorized_ov",
             "e0")
A, BETA, M, N, U0, QK0, OV0, KAPPA, LOG_MN, LOG_K1, LOG_ETA, FOV, E0 = range(len(CONSTANTS))
#: rows of the table's ``tab`` (edges, offsets G(edge) - G(u0), Phi at the edges, inverse built) and the
#: columns of its ``coef`` (integral coefficients, then the inverse's)
_EDGES, _OFFSETS, _AT, _BUILT = range(4)
_INV = CHEB_DEG + 2

_jit = cached_njit(error_model="numpy")
_inline = cached_njit(error_model="numpy", inline="always")  # small helpers: no call boundary


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
def _fit(values):
    """CHEB_FIT @ values: Chebyshev coefficients from the values at the nodes CHEB_X (plain loops:
    numba's matrix product would compile BLAS calls)."""
    out = np.zeros(CHEB_DEG + 1)
    for i in range(CHEB_DEG + 1):
        for k in range(CHEB_DEG + 1):
            out[i] += CHEB_FIT[i, k] * values[k]
    return out


@_inline
def qk_at(c, u):
    """qk at u on the line: beta sinh u (factorized QK), u (collapsed, beta = 0)."""
    return c[BETA] * math.sinh(u) if c[BETA] > 0 else u


@_inline
def _dphi(c, u):
    """dPhi/du = (A/n)(m e^{q(u)} + n); where m e^q overflows while the slope does not (Phi near the largest double,
    e^q beyond it), (A m / n) e^q + A as exp(q + log(A m / n)) + A."""
    q = qk_at(c, u)
    slope = c[A] / c[N] * (c[M] * math.exp(min(q, LOG_DOUBLE_MAX)) + c[N])
    return slope if slope < math.inf else math.exp(q + math.log(c[A]) + c[LOG_MN]) + c[A]


@_inline
def _g(c, u):
    """G(u) - G(u0) = e^u - e^u0 of a collapsed QK circuit."""
    if u <= c[U0]:
        return c[E0] * math.expm1(u - c[U0])
    # e^u (1 - e^{u0 - u}): e^{u0} e^{u - u0} would overflow where u - u0 > 709 (u0 = -685, u = 35)
    return -math.exp(u) * math.expm1(c[U0] - u)


@_inline
def _phi(c, tab, coef, i, u):
    """Phi(u) - Phi(u0) = (A/n)(m (G(u) - G(u0)) + n (u - u0)); a factorized QK circuit's G from table panel i
    (the one holding u)."""
    if c[BETA] > 0:
        left, right = tab[_EDGES, i], tab[_EDGES, i + 1]
        g = tab[_OFFSETS, i] + 0.5 * (right - left) * _clenshaw((2 * u - left - right) / (right - left), coef, i, 0,
                                                               CHEB_DEG + 2)
    else:
        g = _g(c, u) if u <= LOG_DOUBLE_MAX else math.inf
        if not abs(c[M] * g) < math.inf:  # near the largest double: (A m / n) e^u (1 - e^{u0 - u}) in logs
            return -math.exp(u + math.log(c[A]) + c[LOG_MN]) * math.expm1(c[U0] - u) + c[A] * (u - c[U0])
    return c[A] / c[N] * (c[M] * g + c[N] * (u - c[U0]))


@_jit
def _panel(c, left, right, coef, row):
    """Chebyshev coefficients (into coef[row, :16]) of int_left^u e^{beta sinh v} dv on [left, right];
    returns its total."""
    half, mid = 0.5 * (right - left), 0.5 * (left + right)
    values = np.empty(CHEB_DEG + 1)
    for k in range(CHEB_DEG + 1):
        values[k] = math.exp(c[BETA] * math.sinh(mid + half * CHEB_X[k]))
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
    return min(0.5, 1.0 / (c[BETA] * math.cosh(abs(at) + 0.5)))


@_inline
def _offset(c, tab, coef, row, left, right, known, upward):
    """G - G(u0) at the new edge (right if ``upward``, else left) of the panel [left, right] from ``known``, the
    other edge's: a factorized QK circuit adds the panel's integral (its coefficients into coef row ``row``);
    a collapsed one has it in closed form."""
    if c[BETA] == 0:
        return _g(c, right if upward else left)
    total = _panel(c, left, right, coef, row)
    return known + total if upward else known - total


@_inline
def new_edge(c, tab, i, edge, offset):
    tab[_EDGES, i], tab[_OFFSETS, i], tab[_BUILT, i] = edge, offset, 0.0
    tab[_AT, i] = c[A] / c[N] * (c[M] * offset + c[N] * (edge - c[U0]))


@_jit
def _cover(c, tab, coef, ext, lam_lo, lam_hi):
    """Extend the line's table until Phi - Phi(qk0) spans [lam_lo, lam_hi] (a collapsed QK circuit's stops
    below the panel whose top Phi would exceed 1e300: e^u and Phi' must stay finite there)."""
    while tab[_AT, ext[1] - 1] < lam_hi:
        last = ext[1] - 1
        right = tab[_EDGES, last] + _width(c, tab[_EDGES, last])
        new_edge(c, tab, last + 1, right, _offset(c, tab, coef, last, tab[_EDGES, last], right,
                                                   tab[_OFFSETS, last], True))
        if c[BETA] == 0 and not tab[_AT, last + 1] < 1e300:
            break
        ext[1] += 1
        if ext[1] - ext[0] > MAX_TABLE_PANELS:  # qk grows by 1 per panel: e^qk would overflow long before
            raise RuntimeError("factorized-QK table: more than 20000 panels")
    while tab[_AT, ext[0]] > lam_lo:
        first = ext[0]
        if qk_at(c, tab[_EDGES, first]) < -TAIL:
            # e^{qk} < e^-TAIL from here down: G is constant, Phi linear in u, and one panel with
            # zero coefficients reaches lam_lo (qk may be below -1e300)
            coef[first - 1, :_INV] = 0.0
            new_edge(c, tab, first - 1, c[U0] + lam_lo / c[A] - c[M] / c[N] * tab[_OFFSETS, first] - 1.0,
                      tab[_OFFSETS, first])
            ext[0] -= 1
            break
        left = tab[_EDGES, first] - _width(c, tab[_EDGES, first])
        new_edge(c, tab, first - 1, left, _offset(c, tab, coef, first - 1, left, tab[_EDGES, first],
                                                   tab[_OFFSETS, first], False))
        ext[0] -= 1
        if ext[1] - ext[0] > MAX_TABLE_PANELS:
            raise RuntimeError("factorized-QK table: more than 20000 panels")
    if ext[1] - ext[0] == 1:  # at least one panel, so that lookups always find one
        first = ext[0]
        right = tab[_EDGES, first] + _width(c, tab[_EDGES, first])
        new_edge(c, tab, first + 1, right, _offset(c, tab, coef, first, tab[_EDGES, first], right, 0.0, True))
        if c[BETA] > 0 or tab[_AT, first + 1] < 1e300:
            ext[1] += 1


@_inline
def _newton_line(c, tab, coef, panel, lam, lo, hi, u):
    """u in [lo, hi] with Phi(u) - Phi(u0) = lam (Phi increasing and convex: monotone Newton); [lo, hi] is
    table panel ``panel`` for a factorized QK circuit (unused for a collapsed one)."""
    before_last, last, run = math.inf, math.inf, 0
    for _ in range(200):
        value, slope = _phi(c, tab, coef, panel, u) - lam, _dphi(c, u)
        u, lo, hi, before_last, last, run, done = rtsafe_step(u, value, slope, lo, hi, before_last, last, run, True,
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
    ext[2] = min(max(search(tab, _AT, ext[0], ext[1], lam, False) - 1, ext[0]), ext[1] - 2)
    return ext[2]


@_jit
def _solve_on_table(c, tab, coef, ext, lam):
    """Newton on the table from a cubic Hermite interpolation of u(Phi) across the panel holding lam."""
    i = _panel_of(tab, ext, lam)
    lo, hi = tab[_EDGES, i], tab[_EDGES, i + 1]
    width = tab[_AT, i + 1] - tab[_AT, i]
    t = clip((lam - tab[_AT, i]) / width, 0.0, 1.0)
    slope_lo, slope_hi = width / _dphi(c, lo), width / _dphi(c, hi)
    start = clip((2 * t**3 - 3 * t**2 + 1) * lo + (t**3 - 2 * t**2 + t) * slope_lo
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
    fit = _fit(nodes)
    for k in range(CHEB_DEG + 1):  # element by element: a slice assignment compiles numba's shape-mismatch error, 3 CPU-s
        coef[i, _INV + k] = fit[k]
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
    x = clip((2 * lam - at_lo - at_hi) / (at_hi - at_lo), -1.0, 1.0)
    u = clip(_clenshaw(x, coef, i, _INV, CHEB_DEG + 1), tab[_EDGES, i], tab[_EDGES, i + 1])
    return _polish(c, tab, coef, i, lam, u) if polish else u


@_inline
def invert(c, addr, tab, coef, ext, lam, polish):
    """u with Phi(u) - Phi(u0) = lam: from the table (the inverse's series, then Newton if ``polish``) for a
    factorized QK circuit, and for a collapsed one unless ``polish`` where the table reaches lam (Phi up to 1e300);
    else exactly (invert_collapsed)."""
    if lam == 0.0:  # the start of the line (ov = ov0, or rho = 0)
        return c[U0]
    if c[BETA] > 0 or not polish:
        if lam < tab[_AT, ext[0]] or lam > tab[_AT, ext[1] - 1] or ext[1] - ext[0] == 1:
            _cover(c, tab, coef, ext, min(lam, 0.0), max(lam, 0.0))
        if c[BETA] > 0 or (ext[1] - ext[0] > 1 and tab[_AT, ext[0]] <= lam <= tab[_AT, ext[1] - 1]):
            return _from_inverse_table(c, tab, coef, ext, lam, polish)
    return invert_collapsed(c, addr, tab, coef, lam)


@_jit
def invert_collapsed(c, addr, tab, coef, lam):
    """solve_collapsed as a call: inline only in the matched-loss root's evaluations (the closed form's _level),
    the hot path (every inline copy adds to the compile)."""
    return solve_collapsed(c, addr, tab, coef, lam)


@_inline
def solve_collapsed(c, addr, tab, coef, lam):
    """u with Phi(u) - Phi(u0) = lam for a collapsed QK circuit: Newton from the Wright-omega solution."""
    a, m, n, u0 = c[A], c[M], c[N], c[U0]
    e0 = c[E0]
    # the bounds u0 + lam/a and u0 + log1p(lam n / (A m e^u0)), widened by a few roundings: the second is the
    # root itself where n u is negligible, and rounded below it (CACO from qk0 = log 4 at lam = 2.3e16) it
    # left Newton bisecting towards it, stopped 4e-9 short
    ratio = max(lam, 0.0) * n / (a * m * e0)  # overflows where e^u0 is tiny (u0 = -685): then log(e^u0 + lam n / (A m))
    grown = max(lam, 0.0) * n / (a * m)  # in logs where lam n overflows (lam near the largest double)
    upper = min(u0 + lam / a, u0 + math.log1p(ratio) if ratio < 1e300 else
                math.log(e0 + grown) if grown < math.inf else math.log(lam) + math.log(n / (a * m)))
    hi = upper + 1e-14 * (1.0 + abs(upper)) if lam >= 0 else u0
    lower = u0 + lam / a
    lo = u0 if lam >= 0 else lower - 1e-14 * (1.0 + abs(lower))
    # closed form: m e^u + n u = c solves as u = c/n - omega(log(m/n) + c/n); Newton polishes the round-off.
    # Where c/n dwarfs u that difference cancels (c/n = 1e17, u = 41: the start 32), and Newton starts from
    # the upper bound instead (from above it converges monotonically)
    c_n = lam / a + (m / n) * e0 + u0
    start = c_n - call_unary(addr[2], c[LOG_MN] + c_n)
    if abs(c_n) > 1e10 * max(abs(start), 1.0):
        start = hi
    return _newton_line(c, tab, coef, -1, lam, lo, hi, clip(start, lo, hi))


def new_table():
    """Buffers of the line's table: ``tab`` (edges, offsets, Phi at the edges, inverse built),
    ``coef`` (integral and inverse Chebyshev coefficients per panel), ``ext`` (the [start, stop) of
    the edges in use, and the panel last found)."""
    return np.empty((4, _CAPACITY)), np.empty((_CAPACITY, _INV + CHEB_DEG + 1)), np.zeros(3, dtype=np.int64)
