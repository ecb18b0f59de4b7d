"""Matched-loss sharpness from the first integral: the line in a normal form, and claim A4 as a theorem.

The loss depends on (qk, ov) only, L = softplus(log(K-1) - z) with z = alpha ov (eq. (2) of
:mod:`qkdyn.theory.model`), so the loss level L fixes z* = log(K-1) - log(expm1(L)). The state at
loss L is the intersection of the line (:mod:`qkdyn.theory.invariants`, rho = eta_QK / eta_OV)

    Phi(qk) - Phi(qk0) = rho (Psi(ov) - Psi(ov0))                                   (L1)

with the level set alpha(qk) ov = z*                                                 (L2)

Normal form of the line (:func:`line_normal_form`). In every parameterisation the QK integrand is

    dPhi/dqk = A (m e^qk + n) / n                           (collapsed QK, paper)
    dPhi/dqk = A (m e^qk + n) / (n sqrt(qk^2 + beta^2))     (factorized QK)

with A, beta > 0 derived here from :func:`qkdyn.theory.invariants.line_integrands` (beta from the
conserved kappa). With qk = q(u) = u (collapsed) or beta sinh(u) (factorized) the line coordinate is

    Phi = (A / n) (m G(u) + n u),   G'(u) = e^{q(u)},

so G = e^u in closed form (collapsed) and G = int e^{beta sinh u} du (factorized, an entire
integrand without the near-singularity of 1/sqrt(qk^2 + beta^2) at qk = 0). Phi is increasing and
convex in u, which the numerics (:mod:`qkdyn.simulate.sharpness`) use for monotone Newton steps.

A4 as a theorem (:func:`a4_derivative`). Differentiating (L1), (L2) in rho at fixed L:

    d attn / d rho = alpha (1 - alpha) (Psi(ov) - Psi(ov0)) / (Phi'(qk) + rho ov^2 (1 - alpha) / M_OV(ov))

Every factor is positive when ov > ov0 >= 0 (ov increases along the flow, Psi is increasing on
ov >= 0, Phi' = 1 / ((1 - alpha) M_QK) > 0, M_OV > 0), so attention at matched loss strictly increases
with rho, in every parameterisation. For ov0 < 0 (collapsed OV) the sign of Psi(ov) - Psi(ov0) is
the sign of |ov| - |ov0|: at losses reached while |ov| < |ov0|, larger rho gives *softer* attention.
:func:`a4_proof` checks each step with sympy.

The loss that can be reached does not depend on rho: along (L1), ov -> infinity and alpha stays
above alpha(min qk) > 0, so z = alpha ov -> infinity, i.e. every level in (0, L0) is crossed once.

Frozen attention (rho = 0, :func:`frozen_time_law`): qk = qk0, alpha = alpha0 and
dz/dt = eta_OV alpha0^2 M_OV(ov) (K-1) / (e^z + K - 1); for a collapsed OV circuit
(M_OV = 1/((K-1) D)) this integrates to  e^z + (K-1) z = e^{z0} + (K-1) z0 + eta_OV alpha0^2 t / D.
"""
from __future__ import annotations

import functools

import sympy as sp

from qkdyn.theory import invariants, model
from qkdyn.theory.model import K, eta_ov, m, n, ov, qk

beta = sp.Symbol("beta", positive=True)
rho = sp.Symbol("rho", nonnegative=True)
u = sp.Symbol("u", real=True)
z = sp.Symbol("z", positive=True)


@functools.lru_cache(maxsize=None)
def line_normal_form(name: str) -> tuple[sp.Expr, sp.Expr]:
    """(A, beta) with dPhi/dqk = A (m e^qk + n) / (n sqrt(qk^2 + beta^2)) (factorized QK) or
    A (m e^qk + n) / n (beta = 0: collapsed QK and paper); A, beta in the model parameters and kappa."""
    d = model.derive(name)
    dphi, _ = invariants.line_integrands(d)
    ratio = sp.simplify(dphi * n / (m * sp.exp(qk) + n))  # A / sqrt(qk^2 + beta^2), or A
    if not ratio.has(qk):
        return ratio, sp.S(0)
    poly = sp.Poly(sp.simplify(sp.expand(1 / ratio**2)), qk)  # (qk^2 + beta^2) / A^2
    if poly.degree() != 2 or poly.coeff_monomial(qk) != 0:
        raise ValueError(f"{name}: QK integrand not of the form A/sqrt(qk^2 + beta^2): {ratio}")
    lead, const = poly.coeff_monomial(qk**2), poly.coeff_monomial(1)
    a, b = sp.simplify(1 / sp.sqrt(lead)), sp.simplify(sp.sqrt(const / lead))
    return a, b


def normal_form_residual(name: str) -> sp.Expr:
    """dPhi/dqk minus its normal form: simplifies to 0 iff :func:`line_normal_form` is exact."""
    d = model.derive(name)
    dphi, _ = invariants.line_integrands(d)
    a, b = line_normal_form(name)
    normal = a * (m * sp.exp(qk) + n) / n / (sp.sqrt(qk**2 + b**2) if b != 0 else 1)
    return sp.simplify(dphi - normal)


def _ingredients(name: str):
    d = model.derive(name)
    dphi, dpsi = invariants.line_integrands(d)
    _, psi = invariants.line_coordinates(d)
    alpha = model.attention(qk)
    m_ov = invariants.balanced_metric(d.ov_circuit).subs(sp.Abs(ov), ov)
    return dphi, dpsi, psi, alpha, m_ov


#: abstract pieces of the implicit differentiation: Phi'(qk), Psi'(ov), Psi(ov) - Psi(ov0), alpha, alpha'
_PHI1, _PSI1, _GAIN, _ALPHA, _ALPHA1 = sp.symbols("Phi1 Psi1 gain alpha alpha1")


def a4_general() -> sp.Expr:
    """d attn / d rho = alpha' qk'(rho) from the two differentiated equations, in abstract pieces:

    (L1)'  Phi'(qk) qk' = (Psi(ov) - Psi(ov0)) + rho Psi'(ov) ov'
    (L2)'  alpha'(qk) ov qk' + alpha ov' = 0"""
    dqk, dov = sp.symbols("dqk dov")
    solution = sp.solve([sp.Eq(_PHI1 * dqk, _GAIN + rho * _PSI1 * dov),
                         sp.Eq(_ALPHA1 * ov * dqk + _ALPHA * dov, 0)], [dqk, dov], dict=True)[0]
    return sp.factor(_ALPHA1 * solution[dqk])


def a4_derivative(name: str) -> sp.Expr:
    """d attn / d rho at fixed loss for parameterisation ``name`` (the general form with its pieces)."""
    dphi, dpsi, psi, alpha, _ = _ingredients(name)
    pieces = {_PHI1: dphi, _PSI1: dpsi, _GAIN: psi - psi.subs(ov, model.ov0), _ALPHA: alpha,
              _ALPHA1: sp.diff(alpha, qk)}
    return a4_general().subs(pieces)


def a4_positive_form() -> sp.Expr:
    """alpha (1 - alpha) gain / (Phi' + rho ov^2 (1 - alpha) / M_OV), in abstract pieces."""
    m_ov = sp.Symbol("M_OV")
    return _ALPHA * (1 - _ALPHA) * _GAIN / (_PHI1 + rho * ov**2 * (1 - _ALPHA) / m_ov)


def provably_positive(expr: sp.Expr) -> bool:
    """True when sympy's sign inference proves ``expr`` > 0 for every real qk, every ov > 0, K >= 2
    (K = 1 + K', K' > 0) and kappa > 0 (e^qk written as a positive symbol e). False means "not shown"."""
    e = sp.Symbol("e", positive=True)
    expr = expr.rewrite(sp.exp).subs(sp.exp(qk), e).subs(sp.exp(-qk), 1 / e)
    expr = expr.subs({K: 1 + sp.Symbol("Kminus1", positive=True), ov: sp.Symbol("ov_", positive=True),
                      invariants.kappa: sp.Symbol("kappa_", positive=True)})
    return bool(sp.factor(sp.simplify(expr)).is_positive)


def a4_proof(name: str) -> dict[str, bool]:
    """Each step of the sign argument, checked by sympy (every entry must be True):

    - the general derivative equals the positive form once alpha' = alpha (1 - alpha) and
      Psi' = ov / M_OV (both identities checked for this parameterisation);
    - alpha (1 - alpha) > 0, Phi'(qk) > 0 for every real qk, M_OV > 0 for ov > 0 (sympy's sign
      inference with e^qk -> e > 0, K = 1 + K' with K' > 0, kappa > 0);
    - gain Psi(ov0 + delta) - Psi(ov0) > 0 for delta > 0, ov0 >= 0 (ov0 > 0 for a factorized OV);
    - dov/dt > 0 for ov > 0, so the state at any loss below L0 has ov > ov0 (delta > 0 above).
    """
    dphi, dpsi, psi, alpha, m_ov = _ingredients(name)
    m_ov_symbol = sp.Symbol("M_OV")
    general = a4_general().subs({_ALPHA1: _ALPHA * (1 - _ALPHA), _PSI1: ov / m_ov_symbol})
    delta, ov0_nonneg = sp.Symbol("delta", positive=True), sp.Symbol("ov0_", nonnegative=True)
    positive = provably_positive
    start = ov0_nonneg if dpsi.has(ov) else sp.Symbol("ov0_pos", positive=True)
    gain = psi.subs(ov, start + delta) - psi.subs(ov, start)
    return {
        "d attn/d rho = alpha(1-alpha) gain / (Phi' + rho ov^2 (1-alpha)/M_OV)":
            sp.simplify(general - a4_positive_form().subs(m_ov_symbol, m_ov_symbol)) == 0,
        "alpha' = alpha (1 - alpha)": sp.simplify((sp.diff(alpha, qk) - alpha * (1 - alpha)).rewrite(sp.exp)) == 0,
        "Psi' = ov / M_OV": sp.simplify(dpsi - ov / m_ov) == 0,
        "alpha (1 - alpha) > 0": positive(alpha * (1 - alpha)),
        "Phi'(qk) > 0": positive(dphi),
        "M_OV > 0 (ov > 0)": positive(m_ov),
        "Psi(ov0 + delta) - Psi(ov0) > 0": positive(gain),
        "dov/dt / eta_OV = -M_OV dL/dov > 0 (ov increases, so ov > ov0 at every loss below L0)":
            positive(-sp.diff(model.reduced_loss(qk, ov), ov) * m_ov),
    }


def frozen_time_law(name: str) -> sp.Expr:
    """t(z) at frozen attention (rho = 0, alpha = alpha0 > 0): the time for z = alpha0 ov to go
    from z0 to z, by integrating dt = dz / (dz/dt) with dz/dt = eta_OV alpha0^2 M_OV (K-1) / (e^z + K - 1)."""
    m_ov = _ingredients(name)[4]
    alpha0, z0 = sp.Symbol("alpha0", positive=True), sp.Symbol("z0", positive=True)
    speed = eta_ov * alpha0**2 * m_ov.subs(ov, z / alpha0) * (K - 1) / (sp.exp(z) + K - 1)
    y = sp.Symbol("y", positive=True)
    antiderivative = sp.integrate(sp.expand((1 / speed).subs(z, y)), y)
    return sp.simplify(antiderivative.subs(y, z) - antiderivative.subs(y, z0))


def ov_shift_limit(name: str) -> sp.Expr:
    """lim_{ov -> oo} of delta = (1 - alpha) ov along the line, for a collapsed QK circuit:
    (m/n) e^qk ~ rho Psi(ov) / A gives delta ~ A ov / (rho Psi(ov)). 0 for a collapsed OV circuit
    (Psi ~ ov^2); the constant c = 2A / (rho sqrt(D) (K-1)) for a factorized one (CAFO), by which
    the leading OV law e^ov / ov = T is off: e^ov / ov = e^c T (docs/sharpness.md). For a factorized
    QK circuit delta also carries 1/qk and tends to 0, at log-log rate."""
    a, beta_ = line_normal_form(name)
    _, _, psi, _, _ = _ingredients(name)
    if beta_ != 0:
        return sp.S(0)
    return sp.limit(a * ov / (rho * psi), ov, sp.oo)
