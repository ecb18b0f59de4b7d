"""Attention and time at matched loss in closed form: the first integral instead of the ODE.

The loss depends on (qk, ov) only: L = softplus(log(K-1) - z), z = alpha ov, alpha = m e^qk / (m e^qk + n).
A loss level L therefore fixes z* = log(K-1) - log(expm1(L)), and the state at which the flow
reaches L is the intersection of the first-integral line (rho = eta_QK / eta_OV)

    Phi(qk) - Phi(qk0) = rho (Psi(ov) - Psi(ov0))                                    (L1)

with the level set alpha(qk) ov = z* (L2). No time integration is involved:

* ov increases along the flow (dov/dt = eta_OV M_OV alpha g > 0, g = expit(log(K-1) - z)), so we
  parameterise the line by ov: qk(ov) solves (L1), in the normal form of
  :mod:`qkdyn.theory.sharpness`, Phi = (A/n)(m G(u) + n u), qk = u (collapsed QK, paper; G = e^u) or
  qk = beta sinh u (factorized QK; G = int e^{beta sinh v} dv, tabulated once per setting by
  piecewise Chebyshev quadrature, exact to round-off). Phi is increasing and convex in u, so the
  inversion is a monotone Newton iteration.
* the loss decreases along the flow, so z(ov) = alpha(qk(ov)) ov - z* has exactly one root on the
  trajectory: the *first* (and only) time the loss reaches L. Safeguarded Newton in ov.
* the time is the quadrature t = int_{ov0}^{ov*} dov / (eta_OV M_OV(ov) alpha(qk(ov)) g(z(ov))),
  composite Gauss-Legendre (8 nodes per panel; in log ov for a factorized OV circuit, whose M_OV
  vanishes like ov) on panels that split the path into steps of about 3 units of z, of attention's logit and of
  the integration variable (see :meth:`_Problem.time_to`).

rho = 0 (frozen attention) is a legal value: qk stays at qk0. A level at or above the initial loss,
or a circuit that cannot move (a factorized circuit started at 0, eta_OV = 0) is an InputError.

>>> from qkdyn.theory.setting import Setting
>>> r = sharpness(Setting(), "CACO", rho=[0.1, 1.0, 10.0], loss=1e-3)
>>> bool(r.attn[0] < r.attn[1] < r.attn[2])
True
"""
from __future__ import annotations

import dataclasses
import math
from typing import Mapping

import numpy as np
from numpy.typing import ArrayLike
from scipy.special import log_expit, wrightomega

from qkdyn.errors import InputError
from qkdyn.simulate.grid import LabelledGrid, arrange
from qkdyn.theory.compiled import Compiled, load
from qkdyn.theory.setting import ALL_PARAMS, Setting
from qkdyn.theory.spec import Spec

_INT_FIELDS = ("classes", "distinct", "commons", "m", "n")
_CHEB_DEG = 14  # Chebyshev degree per panel of the factorized-QK table
_TAIL = 60.0  # below qk = -TAIL, e^qk is negligible in Phi' (relative e^-60 ~ 1e-26): the table's linear tail
_LOOSE = 1e6  # a matched-loss bound beyond base + 1e6 max(z*, 1) is replaced by a grown bracket
_MAX_GROWTH = 520  # 4^520 > 1e308: the matched-loss bracket reaches any finite ov
_MAX_TABLE_PANELS = 20000  # qk changes by at most 1 per panel (|qk| <= ~720 while e^qk is finite)
_CHEB_X = np.cos(np.pi * (np.arange(_CHEB_DEG + 1) + 0.5) / (_CHEB_DEG + 1))
_CHEB_FIT = np.linalg.inv(np.polynomial.chebyshev.chebvander(_CHEB_X, _CHEB_DEG))
_GL_X, _GL_W = np.polynomial.legendre.leggauss(8)
#: fractions of the path ov0 -> ov* sampled to place the quadrature panels (plus ov = 0 if crossed)
#: (dense at both ends: attention can rise fastest at the start, e^z grows fastest at the end)
_PATH_FRACTIONS = np.unique(np.concatenate([[0.0], np.geomspace(1e-14, 1.0, 35), 1.0 - np.geomspace(1e-12, 0.5, 20)]))
_GEOMETRIC_SAMPLES = 16  # and at geometric steps over the positive part of the path
_MAX_PANELS_LOG2 = 14  # at most 2^14 panels per path (see _Problem.time_to)
_LOG_DOUBLE_MAX = math.log(np.finfo(float).max)


@dataclasses.dataclass
class Sharpness(LabelledGrid):
    """The state where the loss first reaches each level, and when (arrays of the broadcast shape);
    with ``grid=True`` the named axes too, and :meth:`to_xarray` / :meth:`to_pandas` (:mod:`qkdyn.simulate.grid`)."""

    qk: np.ndarray
    ov: np.ndarray
    attn: np.ndarray
    t: np.ndarray | None  # None when time=False
    axes: dict[str, np.ndarray] | None = None  # axis name -> values (grid=True only)


def _newton_increasing(fun, lo, hi, x, tol=1e-13, iterations=200, convex=False):
    """Root of increasing functions (vectorised, rtsafe): Newton steps, bisection when a step leaves
    the bracket [lo, hi] or (unless ``convex``: Newton from above is then monotone) does not halve
    the step before last (Newton cycling). Stops once every step (or bracket) is below ``tol``
    relative, or steps below 1e3 tol stop shrinking: the error is then at round-off level."""
    before_last = np.full_like(x, np.inf)
    last = np.full_like(x, np.inf)
    for _ in range(iterations):
        value, slope = fun(x)
        lo = np.where(value < 0, x, lo)
        hi = np.where(value > 0, x, hi)
        with np.errstate(divide="ignore", invalid="ignore"):
            new = x - value / slope
        bad = ~np.isfinite(new) | (new < lo) | (new > hi)
        if not convex:
            bad |= np.abs(new - x) > 0.5 * before_last
        new = np.where(bad, _split(lo, hi), new)
        step, scale = np.abs(new - x), tol * (1.0 + np.abs(x))
        # converged: a step below tol, a bracket below it, or steps near round-off that stopped shrinking
        # (the value is then at its round-off level, e.g. Phi - lam with |lam| >> |Phi'| |u|)
        done = (step <= scale) | (hi - lo <= 4 * scale) | ((step <= 1e3 * scale) & (step >= 0.5 * last))
        before_last, last = last, step
        new = np.where(value == 0, x, new)
        done |= value == 0
        x = new
        if np.all(done):
            return x
    raise RuntimeError("matched-loss root did not converge")


def _split(lo, hi):
    """Bisection point of [lo, hi]: the midpoint, or, for a bracket much wider than its distance
    from 0, the geometric mean of the offsets (lo + sqrt(w (hi - lo)), w = max(|lo|, 1)), so that a
    bracket spanning 1e300 shrinks to a unit one in about ten steps rather than a thousand."""
    width, scale = hi - lo, np.maximum(np.abs(lo), 1.0)
    return np.where(width > 4 * scale, lo + np.sqrt(scale * width), lo + 0.5 * width)


def _clenshaw(x, columns, index):
    """sum_j columns[j][index] T_j(x): Chebyshev series of panel ``index`` at local coordinate x."""
    b1 = np.zeros_like(x)
    b2 = np.zeros_like(x)
    two_x = 2 * x
    for j in range(len(columns) - 1, 0, -1):
        b1, b2 = columns[j][index] + two_x * b1 - b2, b1
    return columns[0][index] + x * b1 - b2


class _QKLine:
    """Phi along the line in the normal form Phi - Phi(qk0) = (A/n)(m (G(u) - G(u0)) + n (u - u0))."""

    def __init__(self, a: float, beta: float, m: float, n: float, qk0: float):
        self.a, self.beta, self.m, self.n = a, beta, m, n
        self.factorized = beta > 0
        self.u0 = math.asinh(qk0 / beta) if self.factorized else qk0
        if self.factorized:  # panels of the table of G(u) - G(u0): edges, integral coefficients, offsets
            self.edges = np.array([self.u0])
            self.coef = np.zeros((0, _CHEB_DEG + 2))
            self.offsets = np.zeros(1)

    def q(self, u):
        return self.beta * np.sinh(u) if self.factorized else u

    def dq(self, u):
        return self.beta * np.cosh(u) if self.factorized else np.ones_like(u)

    def dphi(self, u):
        """dPhi/du = (A/n)(m e^{q(u)} + n)."""
        return self.a / self.n * (self.m * np.exp(self.q(u)) + self.n)

    def _g(self, u):
        if not self.factorized:
            return math.exp(self.u0) * np.expm1(u - self.u0)
        index = np.clip(np.searchsorted(self.edges, u, side="right") - 1, 0, len(self.edges) - 2)
        left, right = self.edges[index], self.edges[index + 1]
        x = (2 * u - left - right) / (right - left)
        return self.offsets[index] + 0.5 * (right - left) * _clenshaw(x, self.columns, index)

    def phi(self, u):
        return self.a / self.n * (self.m * self._g(u) + self.n * (u - self.u0))

    def _panel(self, left: float, right: float) -> tuple[np.ndarray, float]:
        values = np.exp(self.beta * np.sinh(0.5 * (left + right) + 0.5 * (right - left) * _CHEB_X))
        coef = np.polynomial.chebyshev.chebint(_CHEB_FIT @ values, lbnd=-1)
        return coef, 0.5 * (right - left) * float(np.polynomial.chebyshev.chebval(1.0, coef))

    def _width(self, at: float) -> float:
        """Panel width in u: the exponent beta sinh u changes by at most 1 across a panel."""
        return min(0.5, 1.0 / (self.beta * math.cosh(abs(at) + 0.5)))

    def cover(self, lam_lo: float, lam_hi: float) -> None:
        """Extend the table until Phi - Phi(qk0) spans [lam_lo, lam_hi]."""
        if not self.factorized:
            return
        edges, coef, offsets = list(self.edges), list(self.coef), list(self.offsets)
        while self.a / self.n * (self.m * offsets[-1] + self.n * (edges[-1] - self.u0)) < lam_hi:
            right = edges[-1] + self._width(edges[-1])
            c, total = self._panel(edges[-1], right)
            edges.append(right), coef.append(c), offsets.append(offsets[-1] + total)
            if len(edges) > _MAX_TABLE_PANELS:  # qk grows by 1 per panel: e^qk would overflow long before
                raise RuntimeError(f"factorized-QK table: more than {_MAX_TABLE_PANELS} panels towards {lam_hi!r}")
        while self.a / self.n * (self.m * offsets[0] + self.n * (edges[0] - self.u0)) > lam_lo:
            if self.beta * math.sinh(edges[0]) < -_TAIL:
                # e^{beta sinh u} < e^-TAIL from here down: G is constant (to e^-TAIL / (beta cosh u)), Phi is
                # linear in u, and one panel with zero coefficients reaches lam_lo (qk may be below -1e300)
                left = self.u0 + lam_lo / self.a - self.m / self.n * offsets[0] - 1.0
                edges.insert(0, left), coef.insert(0, np.zeros(_CHEB_DEG + 2)), offsets.insert(0, offsets[0])
                break
            left = edges[0] - self._width(edges[0])
            c, total = self._panel(left, edges[0])
            edges.insert(0, left), coef.insert(0, c), offsets.insert(0, offsets[0] - total)
            if len(edges) > _MAX_TABLE_PANELS:
                raise RuntimeError(f"factorized-QK table: more than {_MAX_TABLE_PANELS} panels towards {lam_lo!r}")
        if len(edges) == 1:  # at least one panel, so that lookups always find one
            right = edges[0] + self._width(edges[0])
            c, total = self._panel(edges[0], right)
            edges.append(right), coef.append(c), offsets.append(total)
        self.edges, self.coef, self.offsets = np.array(edges), np.array(coef), np.array(offsets)
        self.columns = np.ascontiguousarray(self.coef.T)

    def invert(self, lam, polish: bool = True):
        """u with Phi(u) - Phi(u0) = lam. Phi is increasing and convex: Newton from above (collapsed)
        converges monotonically; from a cubic Hermite start inside a table panel (factorized) it needs
        about three evaluations. ``polish=False`` (factorized only) skips Newton and reads u off the
        inverse table instead: a Chebyshev series of u(Phi) per panel, accurate to ~1e-13, enough for
        quadrature nodes."""
        lam = np.asarray(lam, dtype=float)
        if self.factorized:
            self.cover(float(lam.min(initial=0.0)), float(lam.max(initial=0.0)))
            if not polish:
                return self._from_inverse_table(lam)
            return self._solve(lam, self.phi(self.edges))
        e0 = math.exp(self.u0)
        upper = self.u0 + np.minimum(lam / self.a, np.log1p(np.maximum(lam, 0) * self.n / (self.a * self.m * e0)))
        hi = np.where(lam >= 0, upper, self.u0)
        lo = np.where(lam >= 0, self.u0, self.u0 + lam / self.a)
        # closed form: m e^u + n u = c solves as u = c/n - omega(log(m/n) + c/n) (Wright omega);
        # Newton then only polishes the round-off of the cancellation c/n - omega
        c_n = lam / self.a + (self.m / self.n) * e0 + self.u0
        start = np.clip(c_n - wrightomega(math.log(self.m / self.n) + c_n), lo, hi)
        return _newton_increasing(lambda u: (self.phi(u) - lam, self.dphi(u)), lo, hi, start, convex=True)

    def _solve(self, lam, at_edges):
        """Newton on the table (factorized QK) from a cubic Hermite interpolation of the inverse u(Phi)
        across the panel (values and slopes 1/Phi' at its edges)."""
        index = np.clip(np.searchsorted(at_edges, lam) - 1, 0, len(self.edges) - 2)
        lo, hi = self.edges[index], self.edges[index + 1]
        width = at_edges[index + 1] - at_edges[index]
        t = np.clip((lam - at_edges[index]) / width, 0, 1)
        slope_lo, slope_hi = width / self.dphi(lo), width / self.dphi(hi)
        start = np.clip((2 * t**3 - 3 * t**2 + 1) * lo + (t**3 - 2 * t**2 + t) * slope_lo
                        + (3 * t**2 - 2 * t**3) * hi + (t**3 - t**2) * slope_hi, lo, hi)
        return _newton_increasing(lambda u: (self.phi(u) - lam, self.dphi(u)), lo, hi, start, convex=True)

    def _from_inverse_table(self, lam):
        """u(lam) from the per-panel Chebyshev series of the inverse, (re)built whenever the table grew."""
        if getattr(self, "_inverse_at", None) is None or len(self._inverse_at) != len(self.edges):
            at = self.phi(self.edges)
            nodes = 0.5 * (at[:-1] + at[1:])[:, None] + 0.5 * (at[1:] - at[:-1])[:, None] * _CHEB_X[None, :]
            u = self._solve(nodes.ravel(), at).reshape(nodes.shape)
            self._inverse_at, self._inverse_columns = at, np.ascontiguousarray(_CHEB_FIT @ u.T)
        at = self._inverse_at
        index = np.clip(np.searchsorted(at, lam) - 1, 0, len(at) - 2)
        x = np.clip((2 * lam - at[index] - at[index + 1]) / (at[index + 1] - at[index]), -1.0, 1.0)
        return np.clip(_clenshaw(x, self._inverse_columns, index), self.edges[index], self.edges[index + 1])


class _Problem:
    """One setting: the line, the OV side and the matched-loss root."""

    def __init__(self, setting: Setting, param: str):
        compiled: Compiled = load(param)
        self.compiled, self.p, self.setting = compiled, setting.numeric(), setting
        x0 = compiled.init(self.p, setting.qk0, setting.ov0)
        self.kappa = float(compiled.kappa(x0, self.p))
        qk0, ov0 = (float(v) for v in compiled.features(x0, self.p))
        self.qk0, self.ov0 = qk0, ov0
        a, beta = (float(v) for v in compiled.line_scale(self.kappa, self.p))
        self.line = _QKLine(a, beta, setting.m, setting.n, qk0)
        self.loss0 = float(compiled.loss(qk0, ov0, self.p))
        self.z0 = self.alpha(np.array([qk0]))[0] * ov0
        self.log_k1 = math.log(setting.classes - 1)
        self.factorized_ov = param in ("CAFO", "FAFO")
        self.log_m_n = math.log(setting.m / setting.n)
        self.log_eta_ov = math.log(setting.eta_ov) if setting.eta_ov > 0 else -math.inf

    def _psi_gain(self, delta):
        """Psi(ov0 + delta) - Psi(ov0), Psi even in ov (Psi' = ov / M_OV with M_OV even): the derived
        Psi(|ov0| + s) - Psi(|ov0|) in factored form with s = |ov| - |ov0|, which is +-delta while ov keeps
        the sign of ov0. Exact to round-off relative to the difference: subtracting two doubles would
        lose eps Psi(ov0), which near ov0 moves qk by rho eps Psi(ov0) M_QK (issue 21)."""
        ov = self.ov0 + delta
        same_side = (ov >= 0) if self.ov0 >= 0 else (ov <= 0)
        s = np.where(same_side, math.copysign(1.0, self.ov0) * delta, np.abs(ov) - abs(self.ov0))
        return self.compiled.psi_gain(np.full_like(s, abs(self.ov0)), s, self.p)

    def alpha(self, qk):
        return self.compiled.attention(qk, self.p)

    def m_ov(self, ov):
        return self.compiled.balanced_metrics(np.zeros_like(ov), ov, self.kappa, self.p)[1]

    def qk_of_ov(self, ov, rho, polish: bool = True):
        """qk on the line at margin ov, and u (the line coordinate); ``polish``: see _QKLine.invert."""
        return self.qk_of_offset(np.asarray(ov, dtype=float) - self.ov0, rho, polish)

    def qk_of_offset(self, delta, rho, polish: bool = True):
        """qk and u at ov = ov0 + delta, from delta itself (accurate where delta << ov0)."""
        u = self.line.invert(rho * self._psi_gain(delta), polish)
        return self.line.q(u), u

    def state_at(self, zstar, rho):
        """(qk, ov) where alpha ov = zstar on the line (vectorised over zstar, rho of equal shape):
        safeguarded Newton in ov on z(ov) = alpha(qk(ov)) ov, increasing along the trajectory."""
        base = max(self.ov0, 0.0)  # beyond it qk >= qk(base), so z >= alpha(qk(base)) ov
        qk_base, _ = self.qk_of_ov(np.full_like(zstar, base), rho)
        lo = np.where(zstar > 0, base, self.ov0)
        with np.errstate(divide="ignore", over="ignore"):
            hi = np.maximum(np.where(zstar > 0, np.maximum(zstar, 0) / self.alpha(qk_base), 0.0), lo)

        # where alpha(qk(base)) is tiny (qk far below 0 on the way) the bound is loose or inf, and Psi can
        # overflow inside it: grow a bracket instead (z(ov) -> inf along the line)
        unbounded = ~(hi <= base + _LOOSE * np.maximum(zstar, 1.0))
        if np.any(unbounded):
            hi[unbounded] = np.minimum(hi[unbounded], self._grow_bracket(zstar[unbounded], rho[unbounded], base))
        ov = _newton_increasing(lambda ov: self._level(ov, zstar, rho), lo, hi, hi)
        return self.qk_of_ov(ov, rho)[0], ov

    def _level(self, ov, zstar, rho):
        """z(ov) - z* and its derivative along the line, dz/dov = alpha + ov alpha (1 - alpha) dqk/dov."""
        qk, u = self.qk_of_ov(ov, rho)
        alpha = self.alpha(qk)
        with np.errstate(all="ignore"):  # overflow or 0/0 in the slope: the Newton step bisects instead
            dqk = self.line.dq(u) / self.line.dphi(u) * rho * ov / self.m_ov(ov)
            return alpha * ov - zstar, alpha + ov * alpha * (1 - alpha) * dqk

    def _grow_bracket(self, zstar, rho, base):
        """ov >= base with z(ov) >= zstar, by ov = base + zstar 4^k (z <= ov, so ov* >= zstar)."""
        step = np.maximum(zstar, 1.0)
        for _ in range(_MAX_GROWTH):
            ov = base + step
            short = self._level(ov, zstar, rho)[0] < 0
            if not np.any(short):
                return ov
            step = np.where(short, 4 * step, step)
        raise RuntimeError(f"matched-loss bracket: z(ov) below z* up to ov = {float(np.max(base + step)):.3g}")

    def log_alpha(self, qk):
        """log alpha = log expit(qk + log(m/n)), finite where alpha itself underflows."""
        return log_expit(qk + self.log_m_n)

    def _log_dt_dov(self, ov, qk):
        """log |dt/dx| with x = ov (collapsed OV) or log |ov| (factorized OV):
        dt/dov = (1 + e^z/(K-1)) / (eta_OV M_OV alpha), z = alpha ov, and dt/dx = ov dt/dov."""
        log_alpha = self.log_alpha(qk)
        value = np.logaddexp(0.0, np.exp(log_alpha) * ov - self.log_k1) - log_alpha - self.log_eta_ov
        with np.errstate(divide="ignore"):
            if self.factorized_ov:  # M_OV = c |ov|: the factor |ov| of dt/dx cancels it
                return value - np.log(self.m_ov(np.ones_like(ov)))
            return value - np.log(self.m_ov(ov))

    def time_to(self, ov_star, rho, per_panel: float = 0.75, polish: bool = False):
        """t = int dov / (eta_OV M_OV alpha g) by Gauss-Legendre (in ov, or log |ov| for a factorized OV
        circuit) on panels along which the progress v changes by about ``per_panel``:
        v = z + x + 4 |qk| + |u| (x = log |ov| for a factorized OV circuit, else 0; u the line
        coordinate of a factorized QK circuit; |.| the distance travelled since the start: qk first
        falls when ov0 < 0). Every term increases along the path, so each panel resolves unit changes
        of the loss exponent and of either circuit, and changes of 3/4 in qk: 1/alpha =
        1 + (n/m) e^{-qk} has a pole where e^{qk(ov)} -> 0; across a panel on which e^qk grows by
        e^w it lies at Bernstein-ellipse parameter coth(w/4) (e^qk about linear in ov), and w = 3/4
        keeps 8 Gauss nodes at ~1e-12 (w = 3 gave errors of 1e-8: issue 21). ``per_panel`` = 3/4 (not 3): a
        fast QK from a tiny attention (paper form, rho = 3e11, attn0 = 1e-36, level 2e-12) was 3.9e-8 off the
        mpmath reference at 3 (1.7e-8 at 1.5), 3.1e-9 at 3/4.

        The integrand is summed in logs (t = e^M sum w e^{log f - M}), so a time near the largest
        double is finite even where the integrand alone would overflow; a time beyond it is inf
        (:func:`sharpness` reports it). Rows are grouped by their number of panels (powers of 2), so
        one long path does not lengthen every row's. Unless ``polish``, a factorized-QK line is
        inverted at the nodes from its inverse table (no Newton)."""
        ov_star, rho = np.asarray(ov_star, dtype=float), np.asarray(rho, dtype=float)
        # v on a sample of the path (dense near ov0, where attention can rise fastest, and with the
        # turn of qk at ov = 0 when ov0 < 0); panel edges at equal steps of v by monotone interpolation
        ov_path = self.ov0 + (ov_star - self.ov0)[:, None] * _PATH_FRACTIONS[None, :]
        # and geometric in ov over the positive part of the path (ov* can be 1e60 ov0 where attention is tiny)
        positive = np.maximum(max(self.ov0, 0.0), ov_star * 1e-300)
        with np.errstate(divide="ignore", invalid="ignore"):
            geometric = np.where(ov_star[:, None] > 0, positive[:, None] * (ov_star / positive)[:, None]
                                 ** np.linspace(0.0, 1.0, _GEOMETRIC_SAMPLES)[None, :], self.ov0)
        ov_path = np.sort(np.concatenate([ov_path, geometric, np.clip(0.0, self.ov0, ov_star)[:, None]], axis=1), axis=1)
        samples = ov_path.shape[1]
        qk, u = (a.reshape(ov_path.shape) for a in self.qk_of_ov(ov_path.ravel(), np.repeat(rho, samples), polish))

        def travelled(y):  # total variation from the start
            return np.concatenate([np.zeros((len(y), 1)), np.cumsum(np.abs(np.diff(y, axis=1)), axis=1)], axis=1)

        v_path = self.alpha(qk) * ov_path + 4.0 * travelled(qk)
        if self.factorized_ov:
            v_path = v_path + travelled(np.log(np.abs(ov_path)))
        if self.line.factorized:
            v_path = v_path + travelled(u)
        v_path = np.maximum.accumulate(v_path, axis=1)
        needed = np.ceil((v_path[:, -1] - v_path[:, 0]) / per_panel)
        buckets = np.maximum(2, np.ceil(np.log2(np.maximum(needed, 1.0)))).astype(int)  # panels 2^bucket >= 4
        t = np.empty(len(ov_star))
        for bucket in np.unique(buckets):
            rows = np.flatnonzero(buckets == bucket)
            if bucket > _MAX_PANELS_LOG2:
                # a path this long passes through attention below e^-{5000 per_panel / 4}: dt/dov there
                # exceeds e^{700} unless eta_OV does too, so its time is beyond the largest double
                peak = np.max(self._log_dt_dov(ov_path[rows], qk[rows]), axis=1)
                if np.any(peak < _LOG_DOUBLE_MAX):
                    raise RuntimeError(f"time quadrature: {int(needed[rows].max())} panels needed on a path "
                                       "whose time is not beyond the largest double")
                t[rows] = np.inf
                continue
            t[rows] = self._quadrature(ov_star[rows], rho[rows], ov_path[rows], v_path[rows], 2**bucket, polish)
        return t

    def _quadrature(self, ov_star, rho, ov_path, v_path, panels, polish):
        """The Gauss-Legendre sum on ``panels`` panels at equal steps of the sampled progress v_path."""
        samples = ov_path.shape[1]
        v_levels = v_path[:, :1] + (v_path[:, -1:] - v_path[:, :1]) * (np.arange(panels + 1) / panels)[None, :]
        index = np.clip((v_path[:, :, None] <= v_levels[:, None, :]).sum(axis=1) - 1, 0, samples - 2)
        rows = np.arange(len(ov_star))[:, None]
        v_a, v_b = v_path[rows, index], v_path[rows, index + 1]
        weight = np.where(v_b > v_a, (v_levels - v_a) / np.where(v_b > v_a, v_b - v_a, 1.0), 0.0)
        edges = ov_path[rows, index] + np.clip(weight, 0, 1) * (ov_path[rows, index + 1] - ov_path[rows, index])
        edges[:, 0], edges[:, -1] = self.ov0, ov_star
        # the integration variable measured from the start, y = x - x(ov0), so that nodes near ov0 keep
        # their precision relative to the distance travelled: x = ov, or x = log |ov| for a factorized OV
        # circuit (it keeps the sign of ov0: 0 is a saddle), where delta = ov0 expm1(y)
        offsets = edges - self.ov0
        y_edges = np.log1p(offsets / self.ov0) if self.factorized_ov else offsets
        mid, half = 0.5 * (y_edges[:, 1:] + y_edges[:, :-1]), 0.5 * (y_edges[:, 1:] - y_edges[:, :-1])
        y = mid[:, :, None] + half[:, :, None] * _GL_X  # (points, panels, nodes)
        delta = (self.ov0 * np.expm1(y) if self.factorized_ov else y).ravel()
        qk, _ = self.qk_of_offset(delta, np.repeat(rho, panels * len(_GL_X)), polish)
        log_f = self._log_dt_dov(self.ov0 + delta, qk).reshape(y.shape)
        top = np.max(log_f, axis=(1, 2))
        sign = math.copysign(1.0, self.ov0) if self.factorized_ov else 1.0  # y falls as |ov| shrinks
        scaled = np.sum(sign * half * np.sum(np.exp(log_f - top[:, None, None]) * _GL_W, axis=2), axis=1)
        with np.errstate(over="ignore", divide="ignore"):
            return np.exp(top + np.log(scaled))


def initial_loss(setting: Setting, param: str) -> float:
    """L0, the loss at the docs/setting.md initial state: the levels ``sharpness`` accepts lie in (0, L0)."""
    return _Problem(setting, param).loss0


def reachable_losses(setting: Setting, param: str) -> tuple[float, float]:
    """(L_inf, L0): ``sharpness`` accepts exactly the levels in this open interval (see _reachable)."""
    return _reachable(_Problem(setting, param))


def _reachable(problem: "_Problem") -> tuple[float, float]:
    """(L_inf, L0): the levels the flow crosses are exactly those in the open interval.

    L_inf = 0, except for a factorized OV circuit started below 0: its factors shrink towards the saddle
    at ov = 0 (dov/dt = eta_OV M_OV alpha g with M_OV ~ |ov|, so ov rises to 0 only as t -> infinity),
    and L = softplus(log(K-1) - alpha ov) > softplus(log(K-1)) = log K while ov < 0."""
    floor = math.log(problem.setting.classes) if problem.factorized_ov and problem.ov0 < 0 else 0.0
    return floor, problem.loss0


def _validate(problem: _Problem, param: str, rho, loss) -> None:
    s = problem.setting
    if not (s.eta_ov > 0):
        raise InputError("must be positive: a frozen OV circuit never changes the loss", "eta_ov")
    if param in ("FACO", "FAFO") and s.qk0 == 0:
        raise InputError("must be non-zero for a factorized QK circuit (0 is a saddle of the flow: its factors "
                         "never move)", "qk0")
    if param in ("CAFO", "FAFO") and s.ov0 == 0:
        raise InputError("must be non-zero for a factorized OV circuit (0 is a saddle of the flow: the loss "
                         "stays at its initial value)", "ov0")
    floor, loss0 = _reachable(problem)
    bad = ~(np.isfinite(loss) & (loss > floor) & (loss < loss0))
    if np.any(bad):
        why = (f" (a factorized OV circuit started at ov0 = {s.ov0!r} < 0 shrinks towards its saddle at 0: "
               f"the loss tends to log K = {floor:.6g} and never goes below it)" if floor > 0 else
               " (the initial loss)")
        raise InputError(f"levels must lie in ({floor:.6g}, {loss0:.6g}){why} to be reachable; "
                         f"got {float(np.asarray(loss)[bad].ravel()[0])!r}", "loss")


def _settings(setting, shape_of_rest) -> tuple[tuple, list[Setting], np.ndarray]:
    """(broadcast shape, unique Settings, index of each point's setting)."""
    if isinstance(setting, Setting):
        return shape_of_rest, [setting], np.zeros(int(np.prod(shape_of_rest)), dtype=int)
    if not isinstance(setting, Mapping):
        raise InputError(f"must be a Setting or a mapping of Setting fields to values, got {type(setting).__name__}",
                         "setting")
    unknown = set(setting) - {f.name for f in dataclasses.fields(Setting)}
    if unknown:
        raise InputError(f"unknown field {sorted(unknown)[0]!r}", "setting")
    # attn0 (default None) is a field only when given; it then sets qk0 unless qk0 is given too (an error)
    optional = {"attn0"} - set(setting) | ({"qk0"} if "attn0" in setting and "qk0" not in setting else set())
    names = [f.name for f in dataclasses.fields(Setting) if f.name not in optional]
    defaults = Setting()
    arrays = {name: np.asarray(setting.get(name, getattr(defaults, name)), dtype=float) for name in names}
    # the unique settings of the fields' own broadcast (e.g. 316 rows), not of the full one with rho and
    # loss (1e5 points: sorting that table cost more than the solves); each point's index is then broadcast
    fields_shape = np.broadcast_shapes(*(a.shape for a in arrays.values()))
    shape = np.broadcast_shapes(shape_of_rest, fields_shape)
    table = np.column_stack([np.broadcast_to(arrays[name], fields_shape).ravel() for name in names])
    unique, inverse = np.unique(table, axis=0, return_inverse=True)
    inverse = np.broadcast_to(np.asarray(inverse).reshape(fields_shape), shape)
    settings = []
    for row in unique:
        values = dict(zip(names, row))
        for name in _INT_FIELDS:
            if values[name] != round(values[name]):
                raise InputError(f"must be a positive integer, got {values[name]!r}", name)
            values[name] = int(values[name])
        settings.append(Setting(**values))
    return shape, settings, np.asarray(inverse).ravel()


def sharpness(setting: Setting | Mapping, param: str | Spec, rho: ArrayLike, loss: ArrayLike, *, time: bool = True,
              grid: bool = False) -> Sharpness:
    """qk, ov, attn and t at the first time the loss reaches ``loss``, for rho = eta_QK / eta_OV.

    ``setting`` is a :class:`~qkdyn.theory.setting.Setting` or a mapping of Setting field names to
    scalars or arrays (missing fields take the defaults); its ``eta_qk`` is not used (eta_QK = rho
    eta_OV) and ``eta_ov`` sets the unit of time. ``rho``, ``loss`` and the array-valued fields
    broadcast against each other (numpy rules; a clear error says how to shape them when they do
    not), or with ``grid=True`` form their outer product, one named axis per input (rho, loss, then
    the fields): see :mod:`qkdyn.simulate.grid`. See the module docstring for the mathematics; exact
    to round-off for (qk, ov, attn), t to about 1e-10 relative (a test checks 1e-8 against a 12x
    finer quadrature). ``param`` may be a :class:`~qkdyn.theory.spec.Spec`: the closed form where the spec
    is an exact form's model, else the crossings of the spec's ODE (one ``setting``, a Setting;
    :func:`qkdyn.simulate.specsolve.events_sharpness`).

    >>> r = sharpness({"m": [4, 8, 16]}, "FAFO", rho=1.0, loss=1e-2)
    >>> r.attn.shape
    (3,)
    >>> sharpness({"m": [4, 8, 16]}, "FAFO", rho=[0.1, 1.0], loss=[0.1, 1e-2], grid=True).attn.shape
    (2, 2, 3)
    """
    if isinstance(param, Spec):  # a spec: the closed form where it is an exact form's model, else ODE events
        from qkdyn.theory.specclosed import exact_form

        if exact_form(param) is None:
            from qkdyn.simulate.specsolve import events_sharpness

            return events_sharpness(setting, param, rho, loss, time=time, grid=grid)
        param = exact_form(param)
    setting, rho, loss, axes = arrange(setting, rho, loss, grid)
    if param not in ALL_PARAMS:
        raise InputError(f"must be one of {', '.join(ALL_PARAMS)}, got {param!r}", "param")
    rho_a, loss_a = np.asarray(rho, dtype=float), np.asarray(loss, dtype=float)
    if np.any(~np.isfinite(rho_a) | (rho_a < 0)):
        raise InputError(f"must be finite and non-negative, got {float(rho_a[~(np.isfinite(rho_a) & (rho_a >= 0))].ravel()[0])!r}",
                         "rho")
    shape, settings, which = _settings(setting, np.broadcast_shapes(rho_a.shape, loss_a.shape))
    rho_f = np.broadcast_to(rho_a, shape).ravel()
    loss_f = np.broadcast_to(loss_a, shape).ravel()
    out = {key: np.empty(rho_f.size) for key in ("qk", "ov", "attn", "t")}
    for index, one in enumerate(settings):
        problem = _Problem(one, param)
        mask = which == index
        _validate(problem, param, rho_f[mask], loss_f[mask])
        zstar = problem.log_k1 - np.log(np.expm1(loss_f[mask]))
        qk, ov = problem.state_at(zstar, rho_f[mask])
        out["qk"][mask], out["ov"][mask], out["attn"][mask] = qk, ov, problem.alpha(qk)
        if time:
            t = problem.time_to(ov, rho_f[mask])
            if not np.all(np.isfinite(t)):
                bad = int(np.flatnonzero(~np.isfinite(t))[0])
                raise InputError(f"{float(loss_f[mask][bad])!r} at rho = {float(rho_f[mask][bad])!r} is reached only "
                                 f"after a time beyond the largest double (t > {np.finfo(float).max:.3g}); "
                                 "without the time (time=False, --no-time) the state there is finite", "loss")
            out["t"][mask] = t
    result = {key: value.reshape(shape) for key, value in out.items()}
    return Sharpness(result["qk"], result["ov"], result["attn"], result["t"] if time else None, axes)
