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


@functools.cache
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


def reduction_lemma(name: str) -> dict[str, bool]:
    """The loss depends on the state only through (qk, ov), from the model definition
    (:func:`qkdyn.theory.model.model_loss`: logits from the token counts), in two symbolic steps:
    logit_own - logit_cross = alpha(qk) ov, and -l_own + log(e^l_own + (K-1) e^l_cross) =
    softplus(log(K-1) - (l_own - l_cross)) for all reals (checked after exponentiating: exp is
    injective). The ``paper`` form is given in reduced form by its authors: nothing to reduce."""
    d = model.derive(name)
    if d.model_loss() is None:
        return {}
    e = {**d.qk_circuit.entries, **d.ov_circuit.entries}
    w1, w2 = m * sp.exp(model.s * e["a"]), n * sp.exp(model.s * e["b"])
    gap = (w1 * e["u"] + w2 * e["z"]) / (w1 + w2) - (w1 * e["w"] + w2 * e["z"]) / (w1 + w2)
    x, y = sp.symbols("l_own l_cross", real=True)
    lhs = -x + sp.log(sp.exp(x) + (K - 1) * sp.exp(y))
    rhs = sp.log(1 + (K - 1) * sp.exp(y - x))  # = softplus(log(K-1) - (x - y))
    softplus_form = model.reduced_loss(qk, ov).subs(model.attention(qk), (x - y) / ov)
    return {
        "reduction: logit_own - logit_cross = alpha(qk) ov (model definition)":
            sp.simplify((gap - model.attention(d.qk) * d.ov).rewrite(sp.exp)) == 0,
        "reduction: the cross-entropy of those logits is log(1 + (K-1) e^(l_cross - l_own))":
            sp.simplify(sp.expand(sp.exp(lhs) - sp.exp(rhs))) == 0,
        "reduction: that is softplus(log(K-1) - alpha ov), eq. (2)":
            sp.simplify((softplus_form - rhs).rewrite(sp.exp)) == 0,
    }


def flow_lemmas(name: str) -> dict[str, bool]:
    """What the flow does, from the derived right-hand side (qkdyn.theory.model.derive: eq. (1)):

    - chain rule: every OV variable moves by -(eta_OV / w_i) (dL/dov) (d ov/dx_i);
    - so d ov/dt = -eta_OV M_OV(x) dL/dov with M_OV(x) = sum_i (d ov/dx_i)^2 / w_i, a sum of
      squares over positive orbit sizes, and -dL/dov > 0: ov increases while d ov/dx != 0;
    - the loss strictly decreases: the OV part of dL/dt = -sum_i (eta/w_i)(dL/dx_i)^2 is exactly
      -eta_OV M_OV (dL/dov)^2 < 0, so each level is crossed at most once (uniqueness);
    - the line is a first integral: with dqk/dt = -eta_QK M_QK dL/dqk (M_QK its balanced closed form
      for factors, :func:`qkdyn.theory.invariants.balanced_metric_residual`) and the line's
      integrands, Phi' dqk/dt - rho Psi' dov/dt = 0 using the true dL/dqk, dL/dov of eq. (2)."""
    d = model.derive(name)
    rhs = dict(zip(d.symbols, d.rhs, strict=True))
    slope = sp.diff(model.reduced_loss(qk, ov), ov)
    slope_x = slope.subs({qk: d.qk, ov: d.ov}, simultaneous=True)
    ov_vars = d.ov_circuit.variables
    chain = all(sp.simplify(rhs[v.symbol] + (model.ETA[v.circuit] / v.orbit) * slope_x * sp.diff(d.ov, v.symbol)) == 0
                for v in ov_vars)
    g = sp.Symbol("G")
    metric = invariants.metric(d.ov_circuit)
    speed = sum(sp.diff(d.ov, v.symbol) * (-(eta_ov / v.orbit) * g * sp.diff(d.ov, v.symbol)) for v in ov_vars)
    as_real = {sym: sp.Symbol(sym.name, real=True) for sym in d.symbols}
    as_real[K] = 1 + sp.Symbol("Kminus1", positive=True)
    squares = all((sp.diff(d.ov, v.symbol) ** 2 / v.orbit).subs(as_real).is_nonnegative for v in ov_vars)
    ov_part = sum((eta_ov / v.orbit) * sp.diff(d.loss, v.symbol) ** 2 for v in ov_vars)
    dphi, dpsi, _, _, m_ov = _ingredients(name)
    m_qk_bal = invariants.balanced_metric(d.qk_circuit).subs(sp.Abs(qk), qk)
    dqk = -model.ETA["QK"] * m_qk_bal * sp.diff(model.reduced_loss(qk, ov), qk)
    dov = -eta_ov * m_ov * slope
    line = dphi * dqk - (model.ETA["QK"] / eta_ov) * dpsi * dov
    balanced = all(invariants.balanced_metric_residual(c) == 0 for c in (d.qk_circuit, d.ov_circuit)
                   if not invariants.metric_is_constant(c))
    return {
        "chain rule: d x_i/dt = -(eta_OV / w_i) dL/dov d ov/dx_i for every OV variable": chain,
        "d ov/dt = -eta_OV M_OV(x) dL/dov, M_OV(x) = sum (d ov/dx_i)^2 / w_i >= 0":
            sp.simplify(speed + eta_ov * metric * g) == 0 and squares,
        "-dL/dov > 0 (so ov increases, ov > ov0 at every loss below L0)": provably_positive(-slope),
        "L strictly decreases (OV part of dL/dt = -eta_OV M_OV (dL/dov)^2): each level crossed at most once":
            sp.simplify(ov_part - eta_ov * metric * slope_x**2) == 0,
        "balanced factors: M_c(x) equals its closed form on the balanced states": balanced,
        "the line Phi(qk) - rho Psi(ov) is a first integral of the flow":
            sp.simplify(line.rewrite(sp.exp)) == 0,
    }


def implicit_function_step() -> dict[str, bool]:
    """The Jacobian of (line (L1), level (L2)) in (qk, ov) is alpha times the positive denominator:
    det [[Phi', -rho Psi'], [alpha' ov, alpha]] = alpha (Phi' + rho ov^2 (1 - alpha) / M_OV) with
    alpha' = alpha (1 - alpha), Psi' = ov / M_OV; so the state at loss L is a smooth function of rho
    (implicit function theorem) wherever alpha > 0, and a4_general is its derivative."""
    m_ov_symbol = sp.Symbol("M_OV", positive=True)
    jac = sp.Matrix([[_PHI1, -rho * _PSI1], [_ALPHA1 * ov, _ALPHA]])
    det = jac.det().subs({_ALPHA1: _ALPHA * (1 - _ALPHA), _PSI1: ov / m_ov_symbol})
    return {"det d(L1, L2)/d(qk, ov) = alpha (Phi' + rho ov^2 (1 - alpha)/M_OV)":
            sp.simplify(det - _ALPHA * (_PHI1 + rho * ov**2 * (1 - _ALPHA) / m_ov_symbol)) == 0}


#: what the A4 theorem takes from outside sympy, with where its numerical evidence is
A4_ASSUMPTIONS = {
    "scope: the reduced flow describes the full model": "exact on the symmetric subspace; the full model stays "
    "near it only inside the boundary of claim SUB (perturbed full-matrix flows, GD)",
    "existence: ov -> infinity along the flow, so every level in (0, L0) is reached": "claim A4's reachability "
    "runs (ODE event finder to t = 1e100 at ov0 < 0, plateaus, levels to 1e-30); at ov0 < 0 with a large rho a "
    "level can stay unreached by t = 1e100",
    "balanced factors stay balanced": "the factor balance is a conserved polynomial (qkdyn.theory.invariants, "
    "proved by its Lie derivative in the tests) and the canonical init is balanced",
}


def a4_proof(name: str) -> dict[str, bool]:
    """Each step of the sign argument, checked by sympy (every entry must be True); what is not
    proved here is named in :data:`A4_ASSUMPTIONS`:

    - the reduction lemma from the model definition (:func:`reduction_lemma`);
    - the flow: OV increases, the loss strictly decreases (a level is crossed once), the line is
      a first integral (:func:`flow_lemmas`);
    - the implicit-function step (:func:`implicit_function_step`) and the derivative: the general
      derivative equals the positive form once alpha' = alpha (1 - alpha);
    - alpha (1 - alpha) > 0, Phi'(qk) > 0 for every real qk, M_OV > 0 for ov > 0 (sympy's sign
      inference with e^qk -> e > 0, K = 1 + K' with K' > 0, kappa > 0);
    - gain Psi(ov0 + delta) - Psi(ov0) > 0 for delta > 0, ov0 >= 0 (ov0 > 0 for a factorized OV).
    """
    dphi, dpsi, psi, alpha, m_ov = _ingredients(name)
    m_ov_symbol = sp.Symbol("M_OV")
    general = a4_general().subs({_ALPHA1: _ALPHA * (1 - _ALPHA), _PSI1: ov / m_ov_symbol})
    delta, ov0_nonneg = sp.Symbol("delta", positive=True), sp.Symbol("ov0_", nonnegative=True)
    positive = provably_positive
    start = ov0_nonneg if dpsi.has(ov) else sp.Symbol("ov0_pos", positive=True)
    gain = psi.subs(ov, start + delta) - psi.subs(ov, start)
    return {
        **reduction_lemma(name),
        **flow_lemmas(name),
        **implicit_function_step(),
        "d attn/d rho = alpha(1-alpha) gain / (Phi' + rho ov^2 (1-alpha)/M_OV)":
            sp.simplify(general - a4_positive_form()) == 0,
        "alpha' = alpha (1 - alpha)": sp.simplify((sp.diff(alpha, qk) - alpha * (1 - alpha)).rewrite(sp.exp)) == 0,
        "alpha (1 - alpha) > 0": positive(alpha * (1 - alpha)),
        "Phi'(qk) > 0": positive(dphi),
        "M_OV > 0 (ov > 0)": positive(m_ov),
        "Psi(ov0 + delta) - Psi(ov0) > 0": positive(gain),
    }


#: the frozen attention alpha0 and the start z0 = alpha0 ov0 of :func:`frozen_time_law`
FROZEN_START = (sp.Symbol("alpha0", positive=True), sp.Symbol("z0", positive=True))


def frozen_time_law(name: str) -> sp.Expr:
    """t(z) at frozen attention (rho = 0, alpha = alpha0 > 0): the time for z = alpha0 ov to go
    from z0 to z, by integrating dt = dz / (dz/dt) with dz/dt = eta_OV alpha0^2 M_OV (K-1) / (e^z + K - 1)."""
    m_ov = _ingredients(name)[4]
    alpha0, z0 = FROZEN_START
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
