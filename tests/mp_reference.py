"""An independent high-precision reference for the matched-loss state and time (tests only).

Written from the model definition of docs/setting.md with mpmath, sharing no code with
:mod:`qkdyn.simulate.sharpness` (no normal form, no table, no Newton, no panels): on the balanced
manifold the flow is dqk/dt = eta_QK M_QK(qk) (-dL/dqk), dov/dt = eta_OV M_OV(ov) (-dL/dov) with

    L = log(1 + (K-1) e^{-z}),  z = alpha ov,  alpha = m e^qk / (m e^qk + n),
    M_QK = s^2 c (collapsed), s^2 c sqrt(kappa^2 + 4 qk^2 / (s^2 c)) (factorized), 1/(K b^2) (paper),
    M_OV = 1/((K-1) D) (collapsed), 2 |ov| / ((K-1) sqrt D) (factorized), 1/(b (K-1)) (paper),

c = 1/(KD) + 1/N, kappa = KD sigma / (KD + N), sigma = |qk0| sqrt(KD) / s (the balanced init). Since
dL/dqk / dL/dov = (1 - alpha) ov, the path obeys dqk / ((1 - alpha) M_QK) = rho ov dov / M_OV:

    int_{qk0}^{qk} (1 + (m/n) e^y) / M_QK(y) dy = rho int_{ov0}^{ov} y / M_OV(y) dy,

integrated here in closed form where elementary and by mpmath.quad otherwise, inverted by
bracketed root finding; the level is alpha(qk(ov)) ov = z* and t = int dov / (eta_OV M_OV alpha g),
g = (K-1) e^{-z} / (1 + (K-1) e^{-z}), by mpmath.quad.
"""
from __future__ import annotations

import bisect
import functools
import sys

import mpmath as mp

DPS = 24
TIME_DPS = 16
QK_DPS = 40
#: qk below which :meth:`Reference.alpha` is 0
_NO_ATTENTION = -mp.mpf(10) ** 10000


class Reference:
    def __init__(self, setting, param: str, rho: float):
        self.param, self.rho = param, mp.mpf(rho)
        K, D, N = (mp.mpf(v) for v in (setting.classes, setting.distinct, setting.commons))
        self.K, self.D, self.m, self.n = K, D, mp.mpf(setting.m), mp.mpf(setting.n)
        s, b = mp.mpf(setting.scale), mp.mpf(setting.b)
        self.qk0, self.ov0, self.eta_ov = mp.mpf(setting.qk0), mp.mpf(setting.ov0), mp.mpf(setting.eta_ov)
        c = 1 / (K * D) + 1 / N
        self.c, self.s = c, s
        self.kappa = kappa = K * D * (abs(self.qk0) * mp.sqrt(K * D) / s) / (K * D + N)
        qk_kind, ov_kind = ("paper", "paper") if param == "paper" else (param[:2], param[2:])
        self.qk_factorized = qk_kind == "FA"
        # per working precision (mp.prec): q -> the e^y part of Phi(q), and its keys sorted (factorized QK)
        self._known: dict[int, tuple[dict, list]] = {}
        self.m_qk = {"CA": lambda q: s**2 * c, "FA": lambda q: s**2 * c * mp.sqrt(kappa**2 + 4 * q**2 / (s**2 * c)),
                     "paper": lambda q: 1 / (K * b**2)}[qk_kind]
        self.m_ov = {"CO": lambda o: 1 / ((K - 1) * D), "FO": lambda o: 2 * abs(o) / ((K - 1) * mp.sqrt(D)),
                     "paper": lambda o: 1 / (b * (K - 1))}[ov_kind]
        # Psi(o) = int_0^o y / M_OV(y) dy = A |o|^p
        self.psi_a, self.psi_p = {"CO": ((K - 1) * D / 2, 2), "FO": ((K - 1) * mp.sqrt(D) / 2, 1),
                                  "paper": (b * (K - 1) / 2, 2)}[ov_kind]
        self.psi = lambda o: self.psi_a * abs(o) ** self.psi_p
        self.w = kappa * s * mp.sqrt(c) / 2  # factorized QK: M_QK = 2 s sqrt(c) sqrt(q^2 + w^2)

    def alpha(self, q):
        # below qk = -10^10000, alpha < e^-(10^10000) is taken as 0: mpmath's e^-qk needs ln 2 to ~log2 |qk| more bits
        # (a root finder's far probe on a large-rho line reaches qk ~ -e^(1e8): 1.4e8 bits), and no state the flow
        # reaches lies there: alpha ov = z* needs alpha >= |z*| / |ov|, above 1e-340 for every level and ov a double allows
        if q < _NO_ATTENTION:
            return mp.mpf(0)
        return 1 / (1 + self.n / self.m * mp.exp(-q))

    def dphi(self, q):
        """dPhi/dqk = (1 + (m/n) e^q) / M_QK(q), the line's slope in qk."""
        return (1 + self.m / self.n * mp.exp(q)) / self.m_qk(q)

    def phi(self, q):
        """int_{qk0}^{q} (1 + (m/n) e^y) / M_QK(y) dy. Factorized QK: the 1 / M_QK part in closed form from qk0
        (:meth:`inverse_m_qk_integral`), the (m/n) e^y / M_QK part by quadrature from the nearest point already
        computed between qk0 and q, so that the root finders' nearby evaluations cost short integrals; never
        from beyond q, where Phi(q) = Phi(a) - int_q^a cancels: a bracket end at qk = 384 left Phi(63) as the
        difference of two numbers near e^384, and the state's qk 34 too large. The nearest point is q's
        neighbour on qk0's side in the sorted points (a scan of all of them made the 5600 bracketing steps
        down to a turn at qk -1e1679 quadratic: 170 s). The points are kept per working precision: a value
        computed at 24 digits is not reused at 40 (FAFO at rho 7e-7, where qk moves by 3e-4 while ov grows
        to 769, needs Phi to 1e-33 relative for its root's sign check)."""
        if not self.qk_factorized:
            return ((q - self.qk0) + self.m / self.n * (mp.exp(q) - mp.exp(self.qk0))) / self.m_qk(q)
        known, points = self._known.setdefault(mp.mp.prec, ({self.qk0: mp.mpf(0)}, [self.qk0]))
        if q not in known:
            if q > self.qk0:
                near = points[bisect.bisect_right(points, q) - 1]
            else:
                near = points[bisect.bisect_left(points, q)]
            known[q] = known[near] + self._exp_part_between(near, q)
            bisect.insort(points, q)
        return self.inverse_m_qk_integral(self.qk0, q) + known[q]

    def inverse_m_qk_integral(self, a, b):
        """int_a^b dy / M_QK(y): (b - a) / M_QK for a collapsed QK circuit (M_QK constant), asinh(y / w) /
        (2 s sqrt(c)) between a and b for a factorized one (M_QK = 2 s sqrt(c) sqrt(y^2 + w^2))."""
        if not self.qk_factorized:
            return (b - a) / self.m_qk(a)
        return (mp.asinh(b / self.w) - mp.asinh(a / self.w)) / (2 * self.s * mp.sqrt(self.c))

    def _exp_part_between(self, a, b):
        """int_a^b (m/n) e^y / M_QK(y) dy by quadrature, cut where e^y falls by e^(2^k) from the top and around
        the near-singularity of 1/M_QK at y = +-i w; below the top by more than the working precision's digits
        (e^-(ln 10 dps + 2)), e^y is beyond them and dropped."""
        w, top = self.w, max(a, b)
        low = max(min(a, b), top - (mp.log(10) * mp.mp.dps + 2))
        if low == top:
            return mp.mpf(0)
        cuts = {low, top} | {top - 2**k for k in range(7)} | {sign * w * 10**k for sign in (-1, 1) for k in range(-1, 8)}
        cuts = sorted(x for x in cuts | {mp.mpf(0)} if low <= x <= top)
        integrand = lambda y: self.m / self.n * mp.exp(y) / self.m_qk(y)  # noqa: E731
        try:
            part = mp.quad(integrand, cuts)
        except ZeroDivisionError:  # mpmath's tanh-sinh error estimate divides by log10 |r_k - r_k-2|, here 0
            part = mp.quad(integrand, cuts, method="gauss-legendre")
        return part if b > a else -part

    def qk(self, ov):
        target = self.rho * (self.psi(ov) - self.psi(self.ov0))
        if not self.qk_factorized:
            # (m/n) e^q + q = C, C = target M_QK + qk0 + (m/n) e^qk0: q = C - W((m/n) e^C) (Lambert W)
            # = log W - log(m/n) (W e^W = (m/n) e^C): C - W cancelled where C >> q (C = 5e17 left a 24-digit
            # qk = 40.8 off by 4e-9; qkdyn was right)
            big_c = target * self.m_qk(0) + self.qk0 + self.m / self.n * mp.exp(self.qk0)
            return mp.log(mp.lambertw(self.m / self.n * mp.exp(big_c)).real) - mp.log(self.m / self.n)
        return self.qk_where(target)

    def qk_where(self, target):
        """qk with Phi(qk) - Phi(qk0) = target. A factorized QK line's root is found in u = asinh(qk / w), where Phi
        grows at least linearly (1/M_QK's part is u / (2 s sqrt(c))): in qk a large rho far below qk0 puts it beyond
        any bracket of steps (u = -1e8 is qk ~ -e^1e8)."""
        if not self.qk_factorized:
            return _increasing_root(lambda q: self.phi(q) - target, self.qk0)
        u = _increasing_root(lambda u: self.phi(self.w * mp.sinh(u)) - target, mp.asinh(self.qk0 / self.w))
        return self.w * mp.sinh(u)

    def z(self, ov):
        return self.alpha(self.qk(ov)) * ov

    def state(self, level):
        """(qk, ov, attn) where the loss first equals ``level``."""
        zstar = mp.log(self.K - 1) - mp.log(mp.expm1(mp.mpf(level)))
        base = max(self.ov0, mp.mpf(0)) if zstar > 0 else self.ov0
        hi = mp.mpf(0) if zstar <= 0 else base + max(zstar, 1)
        while zstar > 0 and self.z(hi) < zstar:
            hi = base + 4 * (hi - base)
        ov = _bisect_secant(lambda o: self.z(o) - zstar, base, hi)
        q = self.qk(ov)
        return q, ov, self.alpha(q)

    def time(self, ov_star):
        def integrand(o):
            with mp.workdps(DPS):  # the line at full precision (qk = C - W(...) cancels digits when C is large)
                alpha = self.alpha(self.qk(o))
            return (1 + mp.exp(alpha * o) / (self.K - 1)) / (self.eta_ov * self.m_ov(o) * alpha)

        # pieces: thirds of [ov0, 0] and [0, ov*]; geometric in ov over the positive part (ov* may be
        # 1e60 ov0); halving towards ov*, where e^z grows fastest
        points = [self.ov0] + ([mp.mpf(0)] if self.ov0 < 0 < ov_star else []) + [ov_star]
        pieces = {a + (b - a) * mp.mpf(j) / 3 for a, b in zip(points[:-1], points[1:], strict=True) for j in range(4)}
        positive = max(self.ov0, ov_star / mp.mpf(10) ** 300) if ov_star > 0 else None
        if positive is not None and positive > 0:
            ratio = ov_star / positive
            pieces |= {positive * ratio ** (mp.mpf(j) / 16) for j in range(17)}
        pieces |= {ov_star - (ov_star - self.ov0) / mp.mpf(2) ** j for j in range(1, 60)}
        # and halving towards ov0: a fast QK from a tiny attention spends its time in a spike of width
        # ~1/(rho M_QK ...) at ov0 (qk climbs linearly in ov while 1/alpha falls like e^-qk), which
        # Gauss-Legendre on a third of the range steps over (rho = 3e11, attn0 = 1e-36: t off by 1e15x)
        pieces |= {self.ov0 + (ov_star - self.ov0) / mp.mpf(2) ** j for j in range(1, 80)}
        pieces = sorted(x for x in pieces if self.ov0 <= x <= ov_star)
        # Gauss-Legendre: the integrand is analytic on every piece (no endpoint singularity), where it
        # converges at a lower degree than tanh-sinh; summed at TIME_DPS digits, ~1e-16, far below the
        # 1e-10 asserted (the same times summed at 30 digits agree to ~1e-18 on the regression cases)
        with mp.workdps(TIME_DPS):
            return mp.quad(integrand, pieces, method="gauss-legendre")


class TimeAlongQK:
    """t to the state (qk*, ov*) as a quadrature in qk, with ov explicit in it: no root finding at the nodes.

    Along the line Psi(ov) = Psi(ov_s) + (Phi(qk) - Phi(qk_s)) / rho from a start (qk_s, ov_s), and

        dt/dqk = 1 / (eta_QK M_QK(qk) ov alpha (1 - alpha) g(z)),  1/g = 1 + e^z / (K-1),  z = alpha ov,

    (dqk/dt = eta_QK M_QK (-dL/dqk), -dL/dqk = g ov alpha (1 - alpha)), so (Phi, t) solve the triangular
    system dPhi/dqk = (1 + (m/n) e^qk) / M_QK(qk), dt/dqk = f(qk, Phi). On each piece Phi at the
    Gauss-Legendre nodes is the integral of the Legendre interpolant of dPhi/dqk through them (spectral
    integration), Phi at the piece's end the Gauss sum, and t is an adaptive composite Gauss-Legendre sum
    (FINE nodes against COARSE per piece, each with its own Phi). qk is monotone along the path unless a
    collapsed OV circuit starts below 0: then qk falls to qk_min (where ov = 0, Phi(qk_min) = Phi(qk0) -
    rho Psi(ov0)) and rises again, and the variable is v with qk = qk_min + v^2, ov = sign(v) |ov|
    (dt/dv = 2 v dt/dqk, finite at v = 0), integrated out of v = 0 on either side. Its own checks: Phi
    at the far end of each leg gives back that end's ov (ov* from the state, or ov0), and the estimated
    error is below 1e-16 t. Shares with :class:`Reference` only the model functions (M_QK, M_OV, Psi,
    alpha) and, for qk_min, its Phi; rho > 0."""

    FINE, COARSE = 24, 16

    def __init__(self, ref: Reference):
        self.ref = ref
        self.eta_qk = ref.rho * ref.eta_ov
        self.rules = {n: _spectral_rule(n, mp.mp.prec) for n in (self.FINE, self.COARSE)}

    def ov(self, potential, sign):
        """ov with Psi(ov) = potential (Psi = A |ov|^p) on the branch of the given sign."""
        return sign * (max(potential, mp.mpf(0)) / self.ref.psi_a) ** (mp.mpf(1) / self.ref.psi_p)

    def turn(self):
        """qk_min, where qk turns at ov = 0: Phi(qk_min) - Phi(qk0) = -rho Psi(ov0)."""
        return self.ref.qk_where(-self.ref.rho * self.ref.psi(self.ref.ov0))

    def time(self, qk_star, ov_star, bound=True):
        """t to (qk*, ov*); across a turn, ``bound``: :meth:`turn_bound` where it exceeds the largest double."""
        ref = self.ref
        if ref.ov0 < 0 < ov_star and ref.psi_p == 2:  # the turn of qk at ov = 0
            qk_min = self.turn()
            if bound and (lower := self.turn_bound(qk_min, qk_star)) > sys.float_info.max:  # no digits needed
                return lower
            legs = ((-mp.sqrt(ref.qk0 - qk_min), ref.ov0), (mp.sqrt(qk_star - qk_min), ov_star))
            return sum(abs(self._leg(qk_min, -1 if far < 0 else 1, far, ov_far, turning=True)) for far, ov_far in legs)
        return abs(self._leg(ref.qk0, 1 if ref.ov0 > 0 else -1, qk_star, ov_star, turning=False))

    def turn_bound(self, qk_min, qk_star):
        """A lower bound of t on a path that turns at (qk_min, ov = 0) (a collapsed OV circuit, M_OV constant):
        the time from ov = 0 to ov_1 = Psi^-1(int_{qk_min}^{q_1} dy / M_QK / rho), q_1 = (qk_min + qk*) / 2.

        Along the rising leg Psi(ov) = (Phi(qk) - Phi(qk_min)) / rho and dPhi/dqk >= 1 / M_QK, so ov_1 is at
        most the ov where qk = q_1; up to there qk <= q_1, so dov/dt = eta_OV M_OV alpha g <= eta_OV M_OV
        alpha(q_1) (g < 1), and t >= ov_1 / (eta_OV M_OV alpha(q_1)). Where qk_min is -1e1679 (FACO from
        qk0 = -674, ov0 = -1.88 at rho = 103: Phi grows like asinh(qk / w)) the bound is e^(3e1679), and
        the quadrature in v (qk = qk_min + v^2) could not resolve qk* at any affordable precision."""
        ref = self.ref
        q_1 = (qk_min + qk_star) / 2
        ov_1 = self.ov(ref.inverse_m_qk_integral(qk_min, q_1) / ref.rho, 1)
        alpha = ref.alpha(q_1)
        return ov_1 / (ref.eta_ov * ref.m_ov(ov_1) * alpha) if alpha else mp.inf  # alpha < e^-(10^10000): t beyond it

    def _leg(self, qk_s, sign, x_far, ov_far, turning):
        """int from x = 0 (v, at the turn) or x = qk0 (qk) to x_far of dt/dx; checks ov at x_far against ov_far."""
        ref = self.ref
        x_s = mp.mpf(0) if turning else qk_s
        psi_s = mp.mpf(0) if turning else ref.psi(ref.ov0)

        m_n, k1, eta_qk, root = ref.m / ref.n, ref.K - 1, self.eta_qk, ref.psi_p == 2

        def dphi(x):
            return 2 * x * ref.dphi(qk_s + x * x) if turning else ref.dphi(x)

        def dt(x, phi):
            """1 / (alpha (1 - alpha)) = (1 + (n/m) e^-q) (1 + (m/n) e^q)."""
            q = qk_s + x * x if turning else x
            potential = max(psi_s + phi / ref.rho, mp.mpf(0)) / ref.psi_a
            ov = sign * (mp.sqrt(potential) if root else potential)
            e = m_n * mp.exp(q)
            alpha = e / (1 + e)
            value = (1 + mp.exp(alpha * ov) / k1) * (1 + 1 / e) * (1 + e) / (eta_qk * ref.m_qk(q) * ov)
            return 2 * x * value if turning else value

        def piece(n, a, b, phi_a):
            """(int_a^b dt, Phi(b))."""
            nodes, weights, spectral = self.rules[n]
            half, mid = (b - a) / 2, (a + b) / 2
            xs = [mid + half * y for y in nodes]
            slopes = [dphi(x) for x in xs]
            phis = [phi_a + half * mp.fdot(row, slopes) for row in spectral]
            total = half * mp.fdot(weights, [dt(x, phi) for x, phi in zip(xs, phis, strict=True)])
            return total, phi_a + half * mp.fdot(weights, slopes)

        # pieces: halving towards both ends (1/alpha where attention starts tiny, e^z and 1/(1 - alpha) at
        # the end), and where 1/M_QK of a factorized QK circuit is near-singular (qk = 0 +- i w: cuts at
        # qk = 0, +-w 2^k), mapped to v = +-sqrt(qk - qk_min) at a turn
        span = x_far - x_s
        cuts = {x_s + span / mp.mpf(2) ** j for j in range(1, 30)} | {x_far - span / mp.mpf(2) ** j for j in range(1, 40)}
        near_singular = [side * ref.w * mp.mpf(2) ** k for side in (-1, 1) for k in range(-4, 40)] if ref.qk_factorized else []
        for q in [mp.mpf(0)] + near_singular:
            if not turning:
                cuts.add(q)
            elif q > qk_s:
                cuts.add(mp.sqrt(q - qk_s) * (1 if x_far > 0 else -1))
        inside = (x for x in cuts if min(x_s, x_far) < x < max(x_s, x_far))
        cuts = [x_s] + sorted(inside, key=lambda x: abs(x - x_s)) + [x_far]
        # a first pass for the scale of t and Phi at the cuts, then each piece refined to 1e-20 of that scale
        first, phi_at = [], [mp.mpf(0)]
        for a, b in zip(cuts[:-1], cuts[1:], strict=True):
            value, phi_b = piece(self.FINE, a, b, phi_at[-1])
            first.append(value)
            phi_at.append(phi_b)
        # compared as Phi, the side that is well conditioned: near ov = 0, ov = Psi^-1(Psi_s + Phi / rho) magnifies
        # Phi's relative error by Psi_s / Psi(ov) (FAFO from ov0 = -0.81 to ov = -9e-7: 1e12, and a Phi right to
        # 4e-28 gave an ov 1.7e-16 off); Phi to 1e-18 of the larger of its two terms is what the check asked of ov
        phi_far = ref.rho * (ref.psi(ov_far) - psi_s)
        if abs(phi_at[-1] - phi_far) > mp.mpf(10) ** -18 * max(abs(phi_far), ref.rho * psi_s):
            ov_end = self.ov(psi_s + phi_at[-1] / ref.rho, sign)
            raise ArithmeticError(f"the qk quadrature's Phi misses the far end: ov {ov_end} against {ov_far}")
        tol = mp.fsum(abs(v) for v in first) * mp.mpf(10) ** -20
        total, error = mp.mpf(0), mp.mpf(0)
        stack = [(a, b, phi, value, 0) for a, b, phi, value in zip(cuts[:-1], cuts[1:], phi_at, first, strict=False)]
        while stack:
            a, b, phi_a, fine, depth = stack.pop()
            coarse, _ = piece(self.COARSE, a, b, phi_a)
            if abs(fine - coarse) <= tol or depth >= 40:
                total, error = total + fine, error + abs(fine - coarse)
                continue
            mid = (a + b) / 2
            left, phi_mid = piece(self.FINE, a, mid, phi_a)
            right, _ = piece(self.FINE, mid, b, phi_mid)
            stack += [(a, mid, phi_a, left, depth + 1), (mid, b, phi_mid, right, depth + 1)]
        if error > abs(total) * mp.mpf(10) ** -16:
            raise ArithmeticError(f"the qk quadrature's error estimate {error} exceeds 1e-16 of t = {total}")
        return total


@functools.cache
def _spectral_rule(n, prec):
    """Gauss-Legendre nodes y_i and weights w_i on [-1, 1], and S with int_{-1}^{y_i} p = sum_j S_ij p(y_j)
    for every polynomial p of degree < n: p = sum_k c_k P_k with c_k = (2k+1)/2 sum_j w_j P_k(y_j) p(y_j)
    (Gauss is exact to degree 2n-1), and int_{-1}^{y} P_k = (P_{k+1}(y) - P_{k-1}(y)) / (2k+1) (y + 1 for k = 0)."""
    with mp.workprec(prec):
        return _spectral_rule_now(n)


def _spectral_rule_now(n):
    nodes, weights = mp.gauss_quadrature(n, "legendre")
    nodes = [nodes[i] for i in range(n)]

    def legendre(y):  # P_0(y) .. P_n(y) by the three-term recurrence
        values = [mp.mpf(1), y]
        for k in range(1, n):
            values.append(((2 * k + 1) * y * values[k] - k * values[k - 1]) / (k + 1))
        return values

    at_nodes = [legendre(y) for y in nodes]
    spectral = []
    for y, p in zip(nodes, at_nodes, strict=True):
        integral = [y + 1] + [(p[k + 1] - p[k - 1]) / (2 * k + 1) for k in range(1, n)]
        spectral.append([weights[j] * mp.fsum((2 * k + 1) / mp.mpf(2) * integral[k] * at_nodes[j][k] for k in range(n))
                         for j in range(n)])
    return nodes, [weights[i] for i in range(n)], spectral


def _increasing_root(f, start):
    """Root of an increasing f, bracketed by steps 1, 2, 4, ... from ``start``."""
    step = mp.mpf(1)
    lo = hi = start
    while f(hi) < 0:
        lo, hi, step = hi, hi + step, 2 * step
    step = mp.mpf(1)
    while f(lo) > 0:
        hi, lo, step = lo, lo - step, 2 * step
    return _bisect_secant(f, lo, hi)


def _bisect_secant(f, lo, hi):
    """Root of an increasing f in [lo, hi] (bisection to 1e-3 relative, then Illinois), converged in x: the bracket
    shrinks below 10^-dps relative (the working precision). It is verified by the sign change of f across it, not by |f(root)|:
    f's scale reaches 1e200 (a factorized QK line from attn0 = 1e-227 to a level near 5e-324), where
    mpmath's own check of |f(root)|^2 against the tolerance refuses a root that is exact in x; and it reaches 1e-26
    (paper, z* = 2e-9 near the initial loss), where mpmath's Illinois stops at |f| < tol, 1e-20 relative off in x."""
    if lo == hi:
        return lo
    while hi - lo > max(abs(lo), abs(hi), 1) * mp.mpf(10) ** -3:  # bisect first: f may span e^500 on [lo, hi]
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if f(mid) < 0 else (lo, mid)
    digits = mp.mp.dps  # the working precision: DPS, or QK_DPS for the far end of a quadrature in qk
    root = _illinois(f, lo, hi, mp.mpf(10) ** (-digits))
    width = max(abs(root), 1) * mp.mpf(10) ** (4 - digits)
    if not f(root - width) <= 0 <= f(root + width):
        raise ArithmeticError(f"the reference's root in [{lo}, {hi}] did not converge (near {root})")
    return root


def _illinois(f, lo, hi, rel):
    """Regula falsi on a bracket [lo, hi] of an increasing f (f(lo) <= 0 <= f(hi)), with the Illinois rule (the end
    kept twice in a row has its value halved, so both ends move), until the bracket is below ``rel`` relative."""
    f_lo, f_hi, kept = f(lo), f(hi), 0
    for _ in range(400):
        if hi - lo <= max(abs(lo), abs(hi), 1) * rel:
            break
        x = hi - f_hi * (hi - lo) / (f_hi - f_lo)
        if not lo < x < hi:  # the secant left the bracket to rounding: bisect
            x = (lo + hi) / 2
        fx = f(x)
        if fx == 0:
            return x
        if fx < 0:
            lo, f_lo = x, fx
            kept = kept + 1 if kept > 0 else 1
            if kept > 1:
                f_hi /= 2
        else:
            hi, f_hi = x, fx
            kept = kept - 1 if kept < 0 else -1
            if kept < -1:
                f_lo /= 2
    return (lo + hi) / 2


def reference(setting, param: str, rho: float, level: float, time: bool = True, along_qk: bool | None = None) -> dict:
    """{'qk', 'ov', 'attn', 't'} (mpf): the state at DPS digits (QK_DPS with a time along qk; j more where ov moves
    by 10^-j ov0); t by quadrature in ov (:meth:`Reference.time`)
    or, ``along_qk`` (the default for a factorized QK circuit, whose qk(ov) costs a quadrature per root-finder
    step), in qk at QK_DPS digits (:class:`TimeAlongQK`); across a turn where a lower bound of t already exceeds the
    largest double (:meth:`TimeAlongQK.turn_bound`), 't' is that bound."""
    along_qk = param in ("FACO", "FAFO") if along_qk is None else along_qk
    # the far end of the quadrature in qk at its own QK_DPS digits: its Phi(qk*) enters the line as Phi / rho,
    # so at small rho a 24-digit qk* misses ov* where ov* is near 0 (FAFO at rho 1e-12, ov* -7.9e-7: 4e-10)
    digits, extra = QK_DPS if time and along_qk else DPS, 0
    # the line's rho (Psi(ov) - Psi(ov0)) is a difference: where ov moves by 10^-j ov0 (a level just below the
    # initial loss at large rho) it keeps j digits fewer, so the state is solved again with j more (CACO at rho
    # 1e12, ov - ov0 = 6.7e-18: qk 1.2e-8 off at 24 digits, the same to 1e-15 at 40 and 60)
    for _ in range(2):
        with mp.workdps(digits + extra):
            ref = Reference(setting, param, rho)
            q, o, a = ref.state(level)
        moved = abs((o - ref.ov0) / ref.ov0) if ref.ov0 != 0 else 1
        lost = int(mp.ceil(-mp.log10(moved))) if 0 < moved < 1 else 0
        if lost <= extra:
            break
        extra = lost
    with mp.workdps(digits + extra):
        t = ref.time(o) if time and not along_qk else None
    if time and along_qk:
        with mp.workdps(QK_DPS):
            t = TimeAlongQK(Reference(setting, param, rho)).time(q, o)
    return {"qk": q, "ov": o, "attn": a, "t": t}
