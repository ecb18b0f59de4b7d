"""The reduced gradient flow of any :class:`~qkdyn.theory.spec.Spec`, derived from its model definition.

Steps (symbols as in docs/setting.md; nothing circuit-specific is typed in; steps 1-3 and the canonical init
are :mod:`qkdyn.theory.specentries`, steps 4-7 this module):

1. *Factors.* A circuit is a chain W_1 ... W_L (L = 1 collapsed). The entries that reach the loss are
   the query row of W_QK and the label rows of W_OV, over the context tokens (distinct, common, and the
   query itself with ``self_attention``); so factor j has index types (row_j, col_j) with rows
   {query} (QK) or {label} (OV), columns {distinct, common[, query]} and inner indices of the spec's
   type (class-aligned or rank r).
2. *Orbits.* Every (row, col) type pair of every factor is split into the orbits of the relabelling
   group by :func:`qkdyn.theory.orbits.enumerate_orbits`; each orbit is one reduced variable x_i with
   its size w_i (symbolic in K, D, N). Token weights fix the within-class index, so orbits split per
   distinct token.
3. *Collapsed entries.* The product W_1 ... W_L on each (row, col) orbit, summed over the inner
   indices with symbolic counts (:func:`qkdyn.theory.orbits.contract`): a = W_QK[q, d], b = W_QK[q, c],
   a_q = W_QK[q, q]; u = W_OV[label_k, d of k], w = W_OV[label_j, d of k], z = W_OV[label, c],
   v_q = W_OV[label, q].
4. *Population loss from the model.* For a class-k context with counts c (m distinct, n common, and
   the query once when it attends to itself) every distinct token of one orbit scores alike, so with
   g_x = c_x e^{s (A_x - b)}:

       own   = (sum_d g_d u_d + n z + g_q v_q) / (sum_d g_d + n + g_q),   cross likewise with w_d,
       L     = softplus(log(K-1) - (own - cross))                      (cross-entropy)
             = ((own - 1)^2 + (K-1) cross^2) / 2                        (square)

   exact for every draw with uniform token weights (then g_d = m e^{s(a-b)}); with token weights the
   population loss is the exact finite sum over the multinomial count vectors of the m distinct draws.
   This L is the spec's ``loss`` (the data loss, docs/setting.md). Weight decay adds the *penalty*
   P = sum_c (lambda_c / 2) sum_i w_i x_i^2 (every entry of an orbit has the value x_i); the flow
   descends the *objective* L + P, and loss levels (events, matched loss) are levels of L.
5. *Flow.* dx_i/dt = -(eta_c / w_i) d(L + P)/dx_i = -(eta_c / w_i) dL/dx_i - eta_c lambda_c x_i
   (eq. (1) of :mod:`qkdyn.theory.model`).
6. *Conserved polynomials* up to degree 2 of the flow of L (:func:`qkdyn.theory.invariants.conserved_polynomials`,
   with the combinations of the collapsed entries the loss sees as features, found from the loss's own
   translation symmetries by :mod:`qkdyn.theory.lossfeatures`); each is homogeneous. Weight decay on
   circuit c adds -eta_c lambda_c sum_i x_i dI/dx_i = -eta_c lambda_c deg(I) I to dI/dt (Euler), so
   I(t) = I(0) e^{-eta_c lambda_c deg(I) t}: no polynomial in them is conserved, but for two of them
   I_a^deg(I_b) / I_b^deg(I_a) is a rational first integral, and the zero set of each is invariant.
   The *factor balances* B_j = |W_j|^2 - |W_{j+1}|^2 (|W_j|^2 = sum over factor j's orbits of w_i x_i^2)
   are such invariants: the loss sees a chain through products linear in each factor, so
   sum_{i in j} x_i dL/dx_i is the same for every j and dB_j/dt = -2 eta_c lambda_c B_j; the canonical
   init (imbalance 1) has every B_j = 0, so the balanced manifold is invariant with or without decay.
7. *Rate factor* (A1): M_c(x) = sum_i (df/dx_i)^2 / w_i for f = qk = s (a - b) or ov = u - w, and
   R_c = M_c / M_c(collapsed form of the same circuit).

:func:`qkdyn.check` compares the result with autograd on the full matrices of the same spec.
"""
from __future__ import annotations

import dataclasses
import functools
import itertools
import math

import sympy as sp
from qkdyn.theory import invariants, lossfeatures
from qkdyn.theory.functions import softplus
from qkdyn.theory.model import ETA, PARAMS, Circuit, K, Variable, m, n, ov0, qk0, s
from qkdyn.theory.spec import NAMED, CircuitSpec, Spec
from qkdyn.theory.specentries import Entry, circuit_entries, circuit_spec, coupled_scores, init_value


@dataclasses.dataclass(frozen=True)
class SpecDerivation:
    """Everything derived for one spec (module docstring): variables, entries, loss, penalty, flow, init."""

    spec: Spec
    entries: tuple[Entry, ...]
    features: dict  # "QK" / "OV" -> {orbit word -> collapsed entry as a function of x}
    seen: dict  # "QK" / "OV" -> the combinations of the entries the loss depends on (lossfeatures)
    qk: sp.Expr
    ov: sp.Expr
    attn: sp.Expr
    loss: sp.Expr  # the data loss L of the model (cross-entropy or square), without the penalty
    penalty: sp.Expr  # weight decay: P = sum_c (lambda_c / 2) sum_i w_i x_i^2 (0 without)
    rhs: tuple  # dx_i/dt = -(eta_c / w_i) d(L + P)/dx_i
    init: dict  # symbol -> initial value in terms of qk0, ov0 and the parameters

    @property
    def objective(self) -> sp.Expr:
        """L + P: what the flow descends (module docstring, steps 4-5)."""
        return self.loss + self.penalty

    @property
    def variables(self) -> tuple[Variable, ...]:
        return tuple(e.variable for e in self.entries)

    @property
    def symbols(self) -> tuple[sp.Symbol, ...]:
        return tuple(v.symbol for v in self.variables)

    @functools.cached_property
    def jacobian(self) -> sp.Matrix:
        return sp.Matrix(self.rhs).jacobian(self.symbols)

    @functools.cached_property
    def stable_rhs(self) -> tuple:
        """:attr:`rhs` written for floating point, without the quotient rule's cancellation as attention
        saturates (:mod:`qkdyn.theory.stableflow`): what the numeric functions evaluate."""
        from qkdyn.theory.stableflow import stable_rhs

        return stable_rhs(self)

    @functools.cached_property
    def stable_jacobian(self) -> sp.Matrix:
        """The Jacobian of :attr:`stable_rhs` (the implicit solvers' and the settling check's)."""
        return sp.Matrix(self.stable_rhs).jacobian(self.symbols)

    def circuit_symbols(self, circuit: str) -> list[sp.Symbol]:
        return [v.symbol for v in self.variables if v.circuit == circuit]

    def circuit(self, circuit: str) -> Circuit:
        """``circuit`` ("QK" / "OV") as a :class:`~qkdyn.theory.model.Circuit`, so every function of
        :mod:`qkdyn.theory.invariants` takes a spec's circuit (each reads the circuit's own variables and
        feature: a depth-3 circuit gets its own metric, or a statement, never the depth-2 closed form)."""
        chosen = tuple(v for v in self.variables if v.circuit == circuit)
        return Circuit(chosen, self.qk if circuit == "QK" else self.ov, dict(self.features[circuit]),
                       {v.symbol: self.init[v.symbol] for v in chosen})

    @functools.cached_property
    def homogeneous_invariants(self) -> dict:
        """circuit -> the homogeneous polynomials I up to degree 2 conserved by the flow of the loss L alone
        (module docstring, step 6), or a sentence saying why none were searched."""
        out: dict[str, list[sp.Expr] | str] = {}
        for circuit in ("QK", "OV"):
            chosen = [v for v in self.variables if v.circuit == circuit]
            if not all(f.is_polynomial(*[v.symbol for v in chosen]) for f in self.seen[circuit]):
                out[circuit] = ("not searched: the loss sees this circuit through non-polynomial features (the "
                                "coupling MLP), so the polynomial ansatz does not apply")
                continue
            out[circuit] = invariants.conserved_polynomials([v.symbol for v in chosen], [v.orbit for v in chosen],
                                                            self.seen[circuit])
        return out

    @functools.cached_property
    def invariants(self) -> dict:
        """circuit -> its conserved polynomials up to degree 2 (:attr:`homogeneous_invariants`), or a sentence
        saying why none is listed: not searched, or weight decay (then :attr:`rational_integrals` and
        :attr:`balances` say what is conserved and what is invariant)."""
        out = dict(self.homogeneous_invariants)
        for circuit, found in out.items():
            if _decay(self.spec, circuit) and not isinstance(found, str):
                out[circuit] = ("no polynomial first integral: weight decay makes dI/dt = -eta lambda deg(I) I for "
                                "every homogeneous invariant I of the flow without it, so no polynomial in them is "
                                "conserved; the rational first integrals I_a^deg(I_b) / I_b^deg(I_a) are, and the "
                                "balanced manifold (every factor balance 0) is invariant")
        return out

    @functools.cached_property
    def rational_integrals(self) -> dict:
        """circuit with weight decay -> its rational first integrals I_j^deg(I_0) / I_0^deg(I_j) (module
        docstring, step 6) over the circuit's other homogeneous invariants I_j, I_0 the first one that is
        not 0 at the canonical init (each a function of degree 0, conserved where I_0 != 0; one that is 0
        at the init stays 0). Circuits without weight decay, or without two such invariants, are left out."""
        from qkdyn.theory.specclosed import _random_points

        point = next(_random_points((qk0, ov0), 1, seed=2))
        out = {}
        for circuit, found in self.homogeneous_invariants.items():
            if not _decay(self.spec, circuit) or isinstance(found, str):
                continue
            at_init = [abs(complex(sp.N(I.xreplace(self.init).subs(point), 30))) for I in found]
            reference = next((I for I, value in zip(found, at_init, strict=True) if value > 1e-20), None)
            if reference is None or len(found) < 2:
                continue
            degree = {I: sp.Poly(I, *self.circuit_symbols(circuit)).total_degree() for I in found}
            out[circuit] = [I ** degree[reference] / reference ** degree[I] for I in found if I is not reference]
        return out

    @functools.cached_property
    def balances(self) -> dict:
        """circuit -> its factor balances B_j = |W_j|^2 - |W_{j+1}|^2, j = 1 .. L-1 (module docstring, step 6:
        conserved by the flow of L, dB_j/dt = -2 eta_c lambda_c B_j with weight decay, all 0 at the
        canonical init with imbalance 1); () for a collapsed or coupled circuit."""
        out = {}
        for circuit in ("QK", "OV"):
            cs = circuit_spec(self.spec, circuit)
            norms = [sum(e.variable.orbit * e.variable.symbol**2 for e in self.entries
                         if e.factor.circuit == circuit and e.factor.index == j)
                     for j in range(cs.depth if cs.form == "factorized" else 0)]
            out[circuit] = tuple(sp.expand(a - b) for a, b in itertools.pairwise(norms))
        return out

    @functools.cached_property
    def metrics(self) -> dict:
        """circuit -> M_c(x) = sum_i (df/dx_i)^2 / w_i (f = qk or ov) and the rate factor R_c against the
        collapsed form of the same circuit; simplified where the sum has at most :data:`SIMPLIFY_OPS`
        operations (a coupled MLP field at 4 evaluations has ~10^4, and sympy's simplify takes minutes there:
        the sum is then returned as it is, exact but unsimplified)."""
        out = {}
        for circuit, feature in (("QK", self.qk), ("OV", self.ov)):
            chosen = [v for v in self.variables if v.circuit == circuit]
            metric = _simplified(sum(sp.diff(feature, v.symbol) ** 2 / v.orbit for v in chosen))
            plain = CircuitSpec(weight_decay=0.0)
            collapsed = (dataclasses.replace(self.spec, qk=plain) if circuit == "QK"
                         else dataclasses.replace(self.spec, ov=plain))
            base = derive_spec(collapsed)
            base_chosen = [v for v in base.variables if v.circuit == circuit]
            base_feature = base.qk if circuit == "QK" else base.ov
            base_metric = _simplified(sum(sp.diff(base_feature, v.symbol) ** 2 / v.orbit for v in base_chosen))
            out[circuit] = {"metric": metric, "rate_factor": _simplified(metric / base_metric)}
        return out


#: the most operations (sympy's count_ops) an expression may have for :meth:`SpecDerivation.metrics` to simplify
#: it: a depth-4 class-aligned circuit's M_c has ~500 and a coupled MLP field's at 2 evaluations ~650 (seconds),
#: a coupled MLP at 4 evaluations ~10^4 (minutes)
SIMPLIFY_OPS = 1000


def _simplified(expr: sp.Expr) -> sp.Expr:
    """``sympy.simplify(expr)``, or ``expr`` itself beyond :data:`SIMPLIFY_OPS` operations."""
    return sp.simplify(expr) if sp.count_ops(expr) <= SIMPLIFY_OPS else expr


def _decay(spec: Spec, circuit: str) -> sp.Expr:
    """lambda_c as an exact number (0 without weight decay)."""
    return sp.nsimplify(circuit_spec(spec, circuit).weight_decay)


def _count_vectors(spec: Spec) -> list[tuple[tuple, sp.Expr]]:
    """(counts, probability) of the m distinct draws: one deterministic row with uniform weights
    (only the total m matters there), every multinomial count vector with token weights."""
    weights, draws = spec.token_weights, spec.context_distinct
    if weights is None:
        return [((m,), sp.S(1))]
    assert draws is not None  # a Spec with token_weights has context_distinct (checked when it is made)
    total = sum(sp.nsimplify(w) for w in weights)
    probs = [sp.nsimplify(w) / total for w in weights]
    out: list[tuple[tuple, sp.Expr]] = []
    for combo in itertools.combinations_with_replacement(range(len(probs)), draws):
        counts = tuple(combo.count(i) for i in range(len(probs)))
        ways = sp.Integer(math.factorial(draws)) / sp.Mul(*[math.factorial(c) for c in counts])
        out.append((counts, ways * sp.Mul(*[p**c for p, c in zip(probs, counts, strict=True)])))
    return out


@dataclasses.dataclass(frozen=True)
class Token:
    """One token kind of a class-k context (module docstring, step 4): its softmax weight g = c e^sigma
    (c its count), its score sigma = s (A - b) (0 for the common tokens) and the values it brings to the own
    and the cross logit."""

    weight: sp.Expr
    score: sp.Expr
    own: sp.Expr
    cross: sp.Expr
    distinct: bool


def contexts(spec: Spec, qk_f: dict, ov_f: dict) -> list[tuple[sp.Expr, list[Token]]]:
    """(probability, tokens) of every count vector of the context (one with uniform token weights), from
    the collapsed entries: the distinct tokens of each weight, the n common tokens, the query itself."""
    weights = spec.token_weights
    keys = [str(i + 1) for i in range(len(weights))] if weights is not None else [""]
    b, z = qk_f["common"], ov_f["common"]
    out = []
    for counts, probability in _count_vectors(spec):
        tokens = [Token(c * sp.exp(s * (qk_f["distinct" + key] - b)), s * (qk_f["distinct" + key] - b),
                        ov_f["own" + key], ov_f["cross" + key], True) for c, key in zip(counts, keys, strict=True)]
        tokens.append(Token(n, sp.S(0), z, z, False))
        if spec.self_attention:
            score = s * (qk_f["self"] - b)
            tokens.append(Token(sp.exp(score), score, ov_f["query"], ov_f["query"], False))
        out.append((probability, tokens))
    return out


def softmax_average(tokens: list[Token], values: list[sp.Expr]) -> sp.Expr:
    """sum_j g_j values_j / sum_j g_j over one context's tokens (g their softmax weights)."""
    return sum(t.weight * v for t, v in zip(tokens, values, strict=True)) / sum(t.weight for t in tokens)


def context_loss(spec: Spec, own: sp.Expr, cross: sp.Expr) -> sp.Expr:
    """One context's loss from its own and cross logits (module docstring, step 4)."""
    if spec.loss == "cross_entropy":
        return softplus(sp.log(K - 1) - (own - cross))
    return ((own - 1) ** 2 + (K - 1) * cross**2) / 2


def population_loss(spec: Spec, qk_f: dict, ov_f: dict) -> tuple[sp.Expr, sp.Expr, sp.Expr, sp.Expr]:
    """(loss, attn, qk, ov) from the collapsed entries (module docstring, step 4)."""
    weights = spec.token_weights
    loss, attn = sp.S(0), sp.S(0)
    for probability, tokens in contexts(spec, qk_f, ov_f):
        own = softmax_average(tokens, [t.own for t in tokens])
        cross = softmax_average(tokens, [t.cross for t in tokens])
        loss += probability * context_loss(spec, own, cross)
        attn += probability * sum(t.weight for t in tokens if t.distinct) / sum(t.weight for t in tokens)
    b = qk_f["common"]
    if weights is not None:
        keys = [str(i + 1) for i in range(len(weights))]
        total = sum(sp.nsimplify(w) for w in weights)
        probs = [sp.nsimplify(w) / total for w in weights]
        qk = s * (sum(p * qk_f["distinct" + k] for p, k in zip(probs, keys, strict=True)) - b)
        ov = sum(p * (ov_f["own" + k] - ov_f["cross" + k]) for p, k in zip(probs, keys, strict=True))
    else:
        qk, ov = s * (qk_f["distinct"] - b), ov_f["own"] - ov_f["cross"]
    return loss, attn, qk, ov


@functools.cache
def derive_spec(spec: Spec) -> SpecDerivation:
    """Derive the reduced flow of ``spec`` (module docstring); cached per spec. The implementation behind
    the public ``qkdyn.derive(spec).flow``, which callers outside the theory use."""
    qk_entries, qk_f = circuit_entries(spec, "QK")
    ov_entries, ov_f = circuit_entries(spec, "OV")
    entries = tuple(qk_entries + ov_entries)
    # the loss of placeholder entries first: its symmetries (step 6) are read off it, then x goes in
    holders = {c: {key: sp.Symbol(f"E_{c}_{key}", real=True) for key in f} for c, f in (("QK", qk_f), ("OV", ov_f))}
    loss_e, attn, qk, ov = population_loss(spec, holders["QK"], holders["OV"])
    values = {holders[c][key]: value for c, f in (("QK", qk_f), ("OV", ov_f)) for key, value in f.items()}
    seen = {}
    for c, other in (("QK", "OV"), ("OV", "QK")):
        seen[c] = [f.xreplace(values) for f in lossfeatures.features(loss_e, list(holders[c].values()),
                                                                 list(holders[other].values()))]
    loss = loss_e.xreplace(values)
    penalty = sum((_decay(spec, e.variable.circuit) / 2 * e.variable.orbit * e.variable.symbol**2 for e in entries),
                  sp.S(0))
    rhs = tuple(-(ETA[e.variable.circuit] / e.variable.orbit) * sp.diff(loss + penalty, e.variable.symbol)
                for e in entries)
    init = {e.variable.symbol: init_value(spec, e) for e in entries}
    return SpecDerivation(spec, entries, {"QK": qk_f, "OV": ov_f}, seen, qk.xreplace(values), ov.xreplace(values),
                          attn.xreplace(values), loss, penalty, rhs, init)


def named(name: str) -> SpecDerivation:
    """The derivation of one of the four exact forms rebuilt from its spec (:data:`NAMED`)."""
    return derive_spec(NAMED[name])


__all__ = ["PARAMS", "SpecDerivation", "coupled_scores", "derive_spec", "named"]
