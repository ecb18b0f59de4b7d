"""Conserved quantities and the implicit learning-rate rescaling (claims A1, A2).

Within one circuit c with feature f (qk or ov), equation (1) of :mod:`qkdyn.theory.model` reads
dx_i/dt = -(eta_c / w_i) (dL/df) (df/dx_i): every variable moves along the *same* scalar dL/df.

* Polynomial first integrals of a circuit (:func:`polynomial_invariants`): I(x) is conserved for
  every loss iff  sum_i (1/w_i) (dI/dx_i)(df/dx_i) == 0  identically in x. For a polynomial ansatz
  this is a linear system in the coefficients, solved exactly; products of lower-degree invariants
  are removed, so what is left is new (linear: "mean modes"; quadratic: factor balance).
* Rate factor (A1): df/dt = -eta_c M_c(x) dL/df with the metric M_c(x) = sum_i (df/dx_i)^2 / w_i.
  Collapsed circuits have constant M_c; factorizing multiplies it by R_c = M_c / M_c^collapsed, a
  state-dependent rescaling of the learning rate. On the balanced manifold (init of docs/setting.md):

      QK:  M_QK = s^2 c sqrt(kappa^2 + 4 qk^2 / (s^2 c)),  c = 1/(KD) + 1/N,
           kappa = (KD k_d + N k_c)^2 / (KD + N)   (conserved)
      OV:  M_OV = 2 |ov| / ((K-1) sqrt(D))         vs collapsed 1/((K-1) D)

  (:func:`balanced_metric`, each verified symbolically by :func:`balanced_metric_residual`).
* The line (A2): dL/dqk / dL/dov = (1 - alpha) ov, so the two circuits obey
  dqk / ((1 - alpha) M_QK) = rho ov dov / M_OV  with rho = eta_QK / eta_OV, i.e.

      Phi(qk) - rho Psi(ov) = const,   Phi(x) = int_0^x (1 + (m/n) e^y) / M_QK(y) dy,
                                        Psi(x) = int_0^x y / M_OV(y) dy:

  in coordinates (Psi(ov), Phi(qk)) the state moves along a straight line of slope rho. Written as
  eta_OV Phi(qk) - eta_QK Psi(ov) = const it also covers frozen circuits (a rate of 0: the line is
  Phi = const for eta_QK = 0, Psi = const for eta_OV = 0); :mod:`qkdyn.theory.frozen` solves the
  remaining one-dimensional motion in closed form.
"""
from __future__ import annotations

import itertools

import sympy as sp
from qkdyn.theory.model import ETA, Circuit, D, Derivation, K, N, ov, qk, reduced_loss, s

kappa = sp.Symbol("kappa", nonnegative=True)
_y = sp.Symbol("y", real=True)


def metric(circuit: Circuit) -> sp.Expr:
    """M_c(x) = sum_i (df/dx_i)^2 / w_i: the rate of the feature per unit of -eta dL/df."""
    return sp.simplify(sum(sp.diff(circuit.feature, v.symbol) ** 2 / v.orbit for v in circuit.variables))


def _monomials(symbols, degree):
    return [sp.Mul(*combo) for combo in itertools.combinations_with_replacement(symbols, degree)]


def _solve_homogeneous(symbols, orbits, features, degree: int) -> list[sp.Expr]:
    """All homogeneous polynomials I of ``degree`` with sum_i (1/w_i) I_i (df/dx_i) == 0 for every
    feature f in ``features`` (a basis): conserved whatever the loss does with the features."""
    monos = _monomials(symbols, degree)
    coeffs = sp.symbols(f"c0:{len(monos)}")
    candidate = sum(c * mono for c, mono in zip(coeffs, monos, strict=True))
    equations: list[sp.Expr] = []
    for feature in features:
        lie = sp.expand(sum(sp.diff(candidate, x) * sp.diff(feature, x) / w for x, w in zip(symbols, orbits, strict=True)))
        equations += sp.Poly(lie, *symbols).coeffs() if lie != 0 else []
    matrix = sp.Matrix([[sp.diff(eq, c) for c in coeffs] for eq in equations]) if equations else \
        sp.zeros(0, len(coeffs))
    basis = matrix.nullspace() if equations else [sp.eye(len(coeffs))[:, j] for j in range(len(coeffs))]
    return [sp.factor(sum(sp.simplify(vec[j]) * monos[j] for j in range(len(monos)))) for vec in basis]


def conserved_polynomials(symbols, orbits, features, max_degree: int = 2) -> list[sp.Expr]:
    """First integrals up to ``max_degree`` of a circuit whose loss sees the state through ``features``
    (variables ``symbols`` with orbit sizes ``orbits``), leaving out products of lower-degree ones."""
    symbols = list(symbols)
    found: list[sp.Expr] = []
    for degree in range(1, max_degree + 1):
        monos = _monomials(symbols, degree)

        def vector(expr, monos=monos):
            poly = sp.Poly(sp.expand(expr), *symbols)
            return [sp.simplify(poly.coeff_monomial(mono)) for mono in monos]

        products = [sp.Mul(*combo) for r in range(2, degree + 1)
                    for combo in itertools.combinations_with_replacement(found, r)
                    if sp.Poly(sp.Mul(*combo), *symbols).total_degree() == degree]
        span = sp.Matrix([vector(p) for p in products]) if products else sp.zeros(0, len(monos))
        for invariant in _solve_homogeneous(symbols, orbits, features, degree):
            extended = span.col_join(sp.Matrix([vector(invariant)]))
            if extended.rank(simplify=True) > span.rank(simplify=True):
                found.append(invariant)
                span = extended
    return found


def polynomial_invariants(circuit: Circuit, max_degree: int = 2) -> list[sp.Expr]:
    """First integrals of ``circuit`` up to ``max_degree`` that are not products of lower ones."""
    return conserved_polynomials([v.symbol for v in circuit.variables], [v.orbit for v in circuit.variables],
                                 [circuit.feature], max_degree)


def lie_derivative(circuit: Circuit, invariant: sp.Expr) -> sp.Expr:
    """sum_i (1/w_i) (dI/dx_i)(df/dx_i), simplified: 0 iff I is conserved for every loss."""
    return sp.simplify(sum(sp.diff(invariant, v.symbol) * sp.diff(circuit.feature, v.symbol) / v.orbit
                           for v in circuit.variables))


def first_integrals(derivation: Derivation) -> dict[str, sp.Expr]:
    """The named conserved polynomials of both circuits (see :class:`qkdyn.theory.model.Circuit`)."""
    return {**derivation.qk_circuit.invariants, **derivation.ov_circuit.invariants}


class NotDerived(ValueError):
    """A closed form that is not derived for the circuit or spec at hand; the message says why (the
    result is a statement, never another circuit's number)."""


def metric_is_constant(circuit: Circuit) -> bool:
    """True when M_c(x) does not depend on the state (every collapsed circuit, the paper form)."""
    return not (metric(circuit).free_symbols & {v.symbol for v in circuit.variables})


def _two_factor(circuit: Circuit) -> str | None:
    """"QK" / "OV" when ``circuit`` is, variable for variable (names, orbit sizes) and in its feature, the
    two-factor circuit of the exact forms whose balanced closed form is derived and proved by
    :func:`balanced_metric_residual`; None for any other circuit (depth 3, rank r, other index types)."""
    from qkdyn.theory.model import ov_circuit, qk_circuit

    for ref in (qk_circuit("factorized"), ov_circuit("factorized")):
        same = len(ref.variables) == len(circuit.variables) and all(
            a.name == b.name and a.circuit == b.circuit and sp.simplify(a.orbit - b.orbit) == 0
            for a, b in zip(ref.variables, circuit.variables, strict=True))
        if same and sp.expand(ref.feature - circuit.feature) == 0:
            return ref.variables[0].circuit
    return None


def _not_derived(circuit: Circuit, what: str) -> NotDerived:
    names = ", ".join(v.name for v in circuit.variables)
    return NotDerived(f"{what} is not derived for this {circuit.variables[0].circuit} circuit ({names}): its M_c(x) "
                      "depends on the state and it is not the two-factor circuit whose balanced closed form is "
                      "proved; its exact rate is M_c(x) = sum_i (df/dx_i)^2 / w_i (qkdyn.derive(spec).flow.metrics)")


def balanced_metric(circuit: Circuit) -> sp.Expr:
    """M_c on the balanced manifold as a function of the feature (qk or ov) alone (see module doc):
    M_c itself where it is constant; the two-factor closed forms for exactly those circuits
    (:func:`_two_factor`); :class:`NotDerived` for every other circuit (a depth-3 or rank-r factorisation
    does not get the depth-2 factor)."""
    if metric_is_constant(circuit):
        return metric(circuit)
    c = 1 / (K * D) + 1 / N
    which = _two_factor(circuit)
    if which == "QK":
        return s**2 * c * sp.sqrt(kappa**2 + 4 * qk**2 / (s**2 * c))
    if which == "OV":
        return 2 * sp.Abs(ov) / ((K - 1) * sp.sqrt(D))
    raise _not_derived(circuit, "the balanced closed form of M_c")


def kappa_of(circuit: Circuit) -> sp.Expr:
    """kappa = |k_perp|^2 = (KD k_d + N k_c)^2 / (KD + N) for the two-factor QK circuit, 0 where the
    balanced metric does not involve it, :class:`NotDerived` otherwise."""
    which = None if metric_is_constant(circuit) else _two_factor(circuit)
    if which == "QK":
        _, kd, kc = (v.symbol for v in circuit.variables)
        return (K * D * kd + N * kc) ** 2 / (K * D + N)
    if which == "OV" or metric_is_constant(circuit):
        return sp.S(0)
    raise _not_derived(circuit, "kappa")


def balanced_metric_residual(circuit: Circuit) -> sp.Expr:
    """M_c(x)^2 - balanced_metric^2 after imposing balance: simplifies to 0 iff the closed form holds.

    QK: p^2 = KD k_d^2 + N k_c^2 (p appears in even powers only), kappa = (KD k_d + N k_c)^2/(KD+N).
    OV: o1 - o2 = sqrt(D) (v1 - v2) (the balanced branch of (o1-o2)^2 = D (v1-v2)^2).
    A circuit with a constant metric has residual 0; any other circuit raises :class:`NotDerived`.
    """
    closed = balanced_metric(circuit)
    if metric_is_constant(circuit):
        return sp.S(0)
    if _two_factor(circuit) == "QK":
        p, kd, kc = (v.symbol for v in circuit.variables)
        closed = closed.subs({qk: circuit.feature, kappa: kappa_of(circuit)})
        residual = sp.expand(metric(circuit) ** 2 - closed**2)
        return sp.simplify(residual.subs(p**2, K * D * kd**2 + N * kc**2))
    o1, o2, v1, v2, _ = (v.symbol for v in circuit.variables)
    balanced = {o1: o2 + sp.sqrt(D) * (v1 - v2)}
    residual = metric(circuit) ** 2 - (closed**2).subs(ov, circuit.feature)
    return sp.simplify(sp.expand(residual.subs(balanced)))


def balanced_flow(derivation: Derivation) -> list[sp.Expr]:
    """(dqk/dt, dov/dt) on the balanced manifold, in (qk, ov, kappa) and the parameters: by A1 each feature moves
    as df/dt = -eta_c M_c dL/df, here with M_c in its closed form (:func:`balanced_metric`) and L eq. (2). The
    flow keeps every B_cj = 0 and kappa conserved, so from the setting's init (docs/setting.md, balanced) the two
    features alone carry the motion exactly: two variables instead of the full reduced state."""
    loss = reduced_loss(qk, ov)
    return [-ETA[circuit.variables[0].circuit] * balanced_metric(circuit) * sp.diff(loss, feature)
            for circuit, feature in ((derivation.qk_circuit, qk), (derivation.ov_circuit, ov))]


def rate_factor(circuit: Circuit) -> sp.Expr:
    """R_c = M_c / M_c^collapsed on the balanced manifold: the implicit learning-rate rescaling."""
    from qkdyn.theory.model import ov_circuit, qk_circuit

    collapsed = qk_circuit("collapsed") if circuit.variables[0].circuit == "QK" else ov_circuit("collapsed")
    return sp.simplify(balanced_metric(circuit) / metric(collapsed))


def gradient_ratio() -> sp.Expr:
    """(dL/dqk) / (dL/dov), simplified: (1 - alpha) ov."""
    loss = reduced_loss(qk, ov)
    return sp.simplify(sp.diff(loss, qk) / sp.diff(loss, ov))


def line_integrands(derivation: Derivation) -> tuple[sp.Expr, sp.Expr]:
    """(dPhi/dqk, dPsi/dov) of the line Phi(qk) - rho Psi(ov) = const."""
    one_minus_alpha = gradient_ratio() / ov
    dphi = sp.simplify((1 / one_minus_alpha).rewrite(sp.exp)) / balanced_metric(derivation.qk_circuit)
    dpsi = ov / balanced_metric(derivation.ov_circuit)
    return sp.simplify(dphi), sp.simplify(dpsi.subs(sp.Abs(ov), ov))


def line_coordinates(derivation: Derivation) -> tuple[sp.Expr, sp.Expr]:
    """(Phi(qk), Psi(ov)), closed forms where they exist; Phi of a factorized QK circuit stays an
    unevaluated integral (numerics use quadrature of :func:`line_integrands`)."""
    dphi, dpsi = line_integrands(derivation)
    # the factorized-QK integrand e^y / sqrt(kappa^2 + 4 y^2/(s^2 c)) has no elementary antiderivative
    phi_y = dphi.subs(qk, _y)
    phi = sp.Integral(phi_y, (_y, 0, qk)) if dphi.has(kappa) else sp.simplify(sp.integrate(phi_y, (_y, 0, qk)))
    psi = sp.integrate(dpsi.subs(ov, _y), (_y, 0, ov))
    return phi, sp.simplify(psi)
