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

import mpmath as mp

DPS = 24
TIME_DPS = 16


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
        self._known = {self.qk0: mp.mpf(0)}  # q -> Phi(q) - Phi(qk0), for the factorized QK quadrature
        self.m_qk = {"CA": lambda q: s**2 * c, "FA": lambda q: s**2 * c * mp.sqrt(kappa**2 + 4 * q**2 / (s**2 * c)),
                     "paper": lambda q: 1 / (K * b**2)}[qk_kind]
        self.m_ov = {"CO": lambda o: 1 / ((K - 1) * D), "FO": lambda o: 2 * abs(o) / ((K - 1) * mp.sqrt(D)),
                     "paper": lambda o: 1 / (b * (K - 1))}[ov_kind]
        # Psi(o) = int_0^o y / M_OV(y) dy
        self.psi = {"CO": lambda o: (K - 1) * D * o**2 / 2, "FO": lambda o: (K - 1) * mp.sqrt(D) * abs(o) / 2,
                    "paper": lambda o: b * (K - 1) * o**2 / 2}[ov_kind]

    def alpha(self, q):
        return 1 / (1 + self.n / self.m * mp.exp(-q))

    def phi(self, q):
        """int_{qk0}^{q} (1 + (m/n) e^y) / M_QK(y) dy (factorized QK: from the nearest point already
        computed, so that the root finders' nearby evaluations cost short integrals)."""
        if not self.qk_factorized:
            return ((q - self.qk0) + self.m / self.n * (mp.exp(q) - mp.exp(self.qk0))) / self.m_qk(q)
        near = min(self._known, key=lambda a: abs(a - q))
        value = self._known[near] + self._phi_between(near, q)
        self._known[q] = value
        return value

    def _phi_between(self, a, b):
        """int_a^b: dy / M_QK = asinh(y / w) / (2 s sqrt(c)) in closed form (M_QK = 2 s sqrt(c) sqrt(y^2 + w^2));
        the e^y part by quadrature, cut where e^y falls by e^(2^k) from the top and around the
        near-singularity of 1/M_QK at y = +-i w."""
        w = self.kappa * self.s * mp.sqrt(self.c) / 2
        linear = (mp.asinh(b / w) - mp.asinh(a / w)) / (2 * self.s * mp.sqrt(self.c))
        top = max(a, b)
        low = max(min(a, b), top - 90)  # below top - 90, e^y is 1e-39 of the integral: dropped
        if low == top:
            return linear
        cuts = {low, top} | {top - 2**k for k in range(7)} | {sign * w * 10**k for sign in (-1, 1) for k in range(-1, 8)}
        cuts = sorted(x for x in cuts | {mp.mpf(0)} if low <= x <= top)
        part = mp.quad(lambda y: self.m / self.n * mp.exp(y) / self.m_qk(y), cuts)
        return linear + (part if b > a else -part)

    def qk(self, ov):
        target = self.rho * (self.psi(ov) - self.psi(self.ov0))
        if not self.qk_factorized:
            # (m/n) e^q + q = C, C = target M_QK + qk0 + (m/n) e^qk0: q = C - W((m/n) e^C) (Lambert W)
            big_c = target * self.m_qk(0) + self.qk0 + self.m / self.n * mp.exp(self.qk0)
            return big_c - mp.lambertw(self.m / self.n * mp.exp(big_c)).real
        return _increasing_root(lambda q: self.phi(q) - target, self.qk0)

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
        pieces = {a + (b - a) * mp.mpf(j) / 3 for a, b in zip(points[:-1], points[1:]) for j in range(4)}
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
    shrinks below 10^-DPS relative. It is verified by the sign change of f across it, not by |f(root)|:
    f's scale reaches 1e200 (a factorized QK line from attn0 = 1e-227 to a level near 5e-324), where
    mpmath's own check of |f(root)|^2 against the tolerance refuses a root that is exact in x."""
    if lo == hi:
        return lo
    while hi - lo > max(abs(lo), abs(hi), 1) * mp.mpf(10) ** -3:  # bisect first: f may span e^500 on [lo, hi]
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if f(mid) < 0 else (lo, mid)
    root = mp.findroot(f, (lo, hi), solver="illinois", tol=mp.mpf(10) ** (-DPS), maxsteps=400, verify=False)
    width = max(abs(root), 1) * mp.mpf(10) ** (4 - DPS)
    if not f(root - width) <= 0 <= f(root + width):
        raise ArithmeticError(f"the reference's root in [{lo}, {hi}] did not converge (near {root})")
    return root


def reference(setting, param: str, rho: float, level: float, time: bool = True) -> dict:
    """{'qk', 'ov', 'attn', 't'} (mpf) at ``mpmath.mp.dps`` = DPS."""
    with mp.workdps(DPS):
        ref = Reference(setting, param, rho)
        q, o, a = ref.state(level)
        return {"qk": q, "ov": o, "attn": a, "t": ref.time(o) if time else None}
