"""The canonical setting in sympy: reduced coordinates, population loss, gradient-flow ODE.

Symmetry (docs/setting.md section 1) makes the flow stay in a subspace where every matrix entry in one
orbit of the relabelling group shares one value. A *reduced variable* is that shared value; its
*orbit size* w_i is how many entries share it. If L~(x) is the population loss as a function of the
reduced variables, the chain rule gives dL~/dx_i = w_i * dL/dW_entry, so the exact flow of one
entry, d W_entry/dt = -eta_c dL/dW_entry, is

    dx_i/dt = -(eta_c / w_i) dL~/dx_i                                              (1)

Population loss. For a class-k sequence every distinct token of the context scores s*a, every
common token s*b (a = W_QK[q, d], b = W_QK[q, c]), so the m + n attention weights, and hence the
logits, are the same for every draw of tokens and every order:

    logit_own   = (m e^{sa} u + n e^{sb} z) / (m e^{sa} + n e^{sb})
    logit_cross = (m e^{sa} w + n e^{sb} z) / (m e^{sa} + n e^{sb})
    L           = -logit_own + log(e^{logit_own} + (K-1) e^{logit_cross})

with u = W_OV[label_k, d], w = W_OV[label_j, d] (j != k), z = W_OV[label, c]. The expectation over
the data is therefore exact without any sampling. L depends on the state only through

    qk = s (a - b),  ov = u - w,  alpha = expit(qk + log(m/n)) = m e^qk / (m e^qk + n),
    L  = softplus(log(K-1) - alpha ov)                                                  (2)

(the *reduction lemma*, checked in tests/theory/test_theory_derivation.py). The ODE (1) is derived by
differentiating (2) composed with qk(x), ov(x) — never typed by hand — and the result is checked
against autograd on the full matrices in the tests.

Parameterisations: the QK circuit is collapsed (variables a, b) or factorized W_QK = W_Q W_K^T
(variables p = W_Q[q, 0], k_d = W_K[d, 0], k_c = W_K[c, 0]; a = p k_d, b = p k_c); the OV circuit is
collapsed (u, w, z) or factorized W_OV = W_O W_V with inner index i = class (o1 = W_O[label_i, i],
o2 = W_O[label_j, i], v1 = W_V[i, d in class i], v2 = W_V[i, d in class j], v3 = W_V[i, c]).
Each circuit also names its conserved polynomials (the mean modes the loss cannot see, and for
factors the balance W_Q^T W_Q - W_K^T W_K, W_O^T W_O - W_V W_V^T restricted to the gradient's
singular subspace); :mod:`qkdyn.theory.invariants` proves them conserved and complete up to degree 2.
The ``paper`` form is the authors' reduced system: two variables (mu_QK, mu_OV) flowing by (1) with
divisors M b^2 and b (M-1) in place of orbit sizes.
"""
from __future__ import annotations

import dataclasses
import functools

import sympy as sp
from qkdyn.theory.functions import expit, softplus
from qkdyn.theory.setting import factorized

K, D, N, m, n, s, eta_qk, eta_ov, b = sp.symbols("K D N m n s eta_QK eta_OV b", positive=True)
#: order of the numeric parameter vector (qkdyn.theory.setting.Setting.numeric)
PARAMS = (K, D, N, m, n, s, eta_qk, eta_ov, b)
qk, ov, t = sp.symbols("qk ov t", real=True)
qk0, ov0 = sp.symbols("qk0 ov0", real=True)  # any sign: balanced factors carry it (qk_circuit, ov_circuit)
ETA = {"QK": eta_qk, "OV": eta_ov}


@dataclasses.dataclass(frozen=True)
class Variable:
    """One reduced coordinate: CSV column name, circuit, orbit size (or divisor), meaning."""

    name: str
    circuit: str
    orbit: sp.Expr
    meaning: str

    @property
    def symbol(self) -> sp.Symbol:
        return sp.Symbol(self.name, real=True)


@dataclasses.dataclass(frozen=True)
class Circuit:
    """One circuit's reduced variables, its feature (qk or ov), collapsed entries and balanced init.

    It carries no form label: what is derived for it downstream (:mod:`qkdyn.theory.invariants`) is read
    off its variables and feature, so a circuit built by hand or from a spec gets its own results."""

    variables: tuple[Variable, ...]
    feature: sp.Expr  # qk or ov as a function of the variables
    entries: dict  # collapsed matrix entries (a, b) or (u, w, z) as functions of the variables
    init: dict  # variable symbol -> initial value in terms of qk0 / ov0 (balanced factors)
    invariants: dict = dataclasses.field(default_factory=dict)  # name -> conserved polynomial


def _syms(*names: str) -> list[sp.Symbol]:
    return [sp.Symbol(x, real=True) for x in names]


def qk_circuit(kind: str) -> Circuit:
    """The QK circuit. Balanced init from the SVD of W_QK0 = (qk0/s) e_q 1_distinct^T:
    singular value sigma = (|qk0|/s) sqrt(KD), W_Q = sign(qk0) sqrt(sigma) e_q, W_K = sqrt(sigma) 1_d/sqrt(KD)
    (the sign of a negative qk0 sits on the query factor; either choice is balanced and gives the same flow
    of qk, since the loss and the invariants see the factors only through qk and kappa)."""
    if kind == "collapsed":
        a, bb = _syms("qk_distinct", "qk_common")
        variables: tuple[Variable, ...] = (
            Variable("qk_distinct", "QK", K * D, "W_QK[q, d] for a distinct token d"),
            Variable("qk_common", "QK", N, "W_QK[q, c] for a common token c"),
        )
        invariants = {"qk_mean": K * D * a + N * bb}
        return Circuit(variables, s * (a - bb), {"a": a, "b": bb}, {a: qk0 / s, bb: sp.S(0)}, invariants)
    if kind == "factorized":
        p, kd, kc = _syms("q_query", "k_distinct", "k_common")
        variables = (
            Variable("q_query", "QK", sp.S(1), "W_Q[q, 0] (query row of the query factor)"),
            Variable("k_distinct", "QK", K * D, "W_K[d, 0] for a distinct token d"),
            Variable("k_common", "QK", N, "W_K[c, 0] for a common token c"),
        )
        sigma = sp.Abs(qk0) / s * sp.sqrt(K * D)
        init = {p: sp.sign(qk0) * sp.sqrt(sigma), kd: sp.sqrt(sigma / (K * D)), kc: sp.S(0)}
        invariants = {"k_mean": K * D * kd + N * kc, "qk_balance": p**2 - K * D * kd**2 - N * kc**2}
        return Circuit(variables, s * p * (kd - kc), {"a": p * kd, "b": p * kc}, init, invariants)
    raise ValueError(kind)


def ov_circuit(kind: str) -> Circuit:
    """The OV circuit. Balanced init from the SVD of W_OV0 = ov0 (I_K (x) 1_D^T): K equal singular
    values |ov0| sqrt(D), W_O = sign(ov0) sqrt(sigma) on the label/class diagonal, W_V = sqrt(sigma/D) on
    blocks (the sign of a negative ov0 sits on the output factor)."""
    if kind == "collapsed":
        u, w, z = _syms("ov_own", "ov_cross", "ov_common")
        variables: tuple[Variable, ...] = (
            Variable("ov_own", "OV", K * D, "W_OV[label_k, d] for d of class k"),
            Variable("ov_cross", "OV", K * (K - 1) * D, "W_OV[label_j, d] for d of class k != j"),
            Variable("ov_common", "OV", K * N, "W_OV[label_j, c] for a common token c"),
        )
        invariants = {"ov_mean": u + (K - 1) * w, "ov_common": z}
        return Circuit(variables, u - w, {"u": u, "w": w, "z": z}, {u: ov0, w: sp.S(0), z: sp.S(0)},
                       invariants)
    if kind == "factorized":
        o1, o2, v1, v2, v3 = _syms("o_own", "o_cross", "v_own", "v_cross", "v_common")
        variables = (
            Variable("o_own", "OV", K, "W_O[label_i, i]"),
            Variable("o_cross", "OV", K * (K - 1), "W_O[label_j, i], j != i"),
            Variable("v_own", "OV", K * D, "W_V[i, d] for d of class i"),
            Variable("v_cross", "OV", K * (K - 1) * D, "W_V[i, d] for d of class j != i"),
            Variable("v_common", "OV", K * N, "W_V[i, c] for a common token c"),
        )
        entries = {
            "u": o1 * v1 + (K - 1) * o2 * v2,
            "w": o1 * v2 + o2 * v1 + (K - 2) * o2 * v2,
            "z": (o1 + (K - 1) * o2) * v3,
        }
        sigma = sp.Abs(ov0) * sp.sqrt(D)
        init = {o1: sp.sign(ov0) * sp.sqrt(sigma), o2: sp.S(0), v1: sp.sqrt(sigma / D), v2: sp.S(0), v3: sp.S(0)}
        invariants = {
            "o_mean": o1 + (K - 1) * o2,
            "v_mean": v1 + (K - 1) * v2,
            "v_common": v3,
            "ov_balance": (o1 - o2) ** 2 - D * (v1 - v2) ** 2,
        }
        return Circuit(variables, entries["u"] - entries["w"], entries, init, invariants)
    raise ValueError(kind)


def paper_circuits() -> tuple[Circuit, Circuit]:
    """The authors' reduced form: mu_QK with divisor M b^2, mu_OV with divisor b (M - 1), M = K."""
    mq, mo = _syms("mu_qk", "mu_ov")
    qk_c = Circuit((Variable("mu_qk", "QK", K * b**2, "the authors' mu_QK"),), mq, {}, {mq: qk0})
    ov_c = Circuit((Variable("mu_ov", "OV", b * (K - 1), "the authors' mu_OV"),), mo, {}, {mo: ov0})
    return qk_c, ov_c


def attention(gap: sp.Expr) -> sp.Expr:
    """alpha = m e^gap / (m e^gap + n): attention mass on the distinct tokens."""
    return expit(gap + sp.log(m / n))


def reduced_loss(gap: sp.Expr, margin: sp.Expr) -> sp.Expr:
    """L = log(1 + (K-1) e^{-alpha ov}) in stable form softplus(log(K-1) - alpha ov), eq. (2)."""
    return softplus(sp.log(K - 1) - attention(gap) * margin)


def model_loss(entries: dict) -> sp.Expr:
    """The population cross-entropy built from the model definition (token counts, no reduction)."""
    a, bb, u, w, z = (entries[key] for key in ("a", "b", "u", "w", "z"))
    weight_distinct, weight_common = m * sp.exp(s * a), n * sp.exp(s * bb)
    total = weight_distinct + weight_common
    logit_own = (weight_distinct * u + weight_common * z) / total
    logit_cross = (weight_distinct * w + weight_common * z) / total
    return -logit_own + sp.log(sp.exp(logit_own) + (K - 1) * sp.exp(logit_cross))


@dataclasses.dataclass(frozen=True)
class Derivation:
    """Everything derived for one parameterisation."""

    name: str
    qk_circuit: Circuit
    ov_circuit: Circuit
    rhs: tuple  # dx_i/dt, eq. (1)
    jacobian: sp.Matrix

    @property
    def variables(self) -> tuple[Variable, ...]:
        return self.qk_circuit.variables + self.ov_circuit.variables

    @property
    def symbols(self) -> tuple[sp.Symbol, ...]:
        return tuple(v.symbol for v in self.variables)

    @property
    def qk(self) -> sp.Expr:
        return self.qk_circuit.feature

    @property
    def ov(self) -> sp.Expr:
        return self.ov_circuit.feature

    @property
    def loss(self) -> sp.Expr:
        return reduced_loss(self.qk, self.ov)

    @property
    def init(self) -> dict:
        return {**self.qk_circuit.init, **self.ov_circuit.init}

    def model_loss(self) -> sp.Expr | None:
        """Population loss from the model definition (None for the paper form)."""
        if self.name == "paper":
            return None
        return model_loss({**self.qk_circuit.entries, **self.ov_circuit.entries})


def circuits(name: str) -> tuple[Circuit, Circuit]:
    if name == "paper":
        return paper_circuits()
    kind = {True: "factorized", False: "collapsed"}
    qk_factorized, ov_factorized = factorized(name)
    return qk_circuit(kind[qk_factorized]), ov_circuit(kind[ov_factorized])


@functools.cache
def derive(name) -> Derivation:
    """Derive the reduced gradient flow (1) and its Jacobian for parameterisation ``name``. A
    :class:`~qkdyn.theory.spec.Spec` that is an exact form's model gives that form's derivation, so every
    closed form keyed by a form (line normal form, laws, A4) takes such a spec; any other spec raises
    :class:`~qkdyn.theory.invariants.NotDerived` saying so."""
    from qkdyn.theory.spec import Spec

    if isinstance(name, Spec):
        from qkdyn.theory.invariants import NotDerived
        from qkdyn.theory.specclosed import exact_form

        if exact_form(name) is None:
            raise NotDerived(f"{name.name} is not the model of an exact form, so their closed forms (the line's "
                             "normal form, the late-time laws, matched loss in closed form) are not derived for it; "
                             "qkdyn.derive(spec).not_derived says what follows for it")
        return derive(exact_form(name))
    qk_c, ov_c = circuits(name)
    loss = reduced_loss(qk_c.feature, ov_c.feature)
    variables = qk_c.variables + ov_c.variables
    rhs = tuple(-(ETA[v.circuit] / v.orbit) * sp.diff(loss, v.symbol) for v in variables)
    jacobian = sp.Matrix(rhs).jacobian([v.symbol for v in variables])
    return Derivation(name, qk_c, ov_c, rhs, jacobian)
