"""A spec's flow written for floating point: the same function as ``SpecDerivation.rhs``, without its cancellation.

``sympy.diff`` of the population loss (:mod:`qkdyn.theory.specflow`, step 4) differentiates each softmax
average A = sum_j g_j a_j / sum_j g_j by the quotient rule: (sum_j g_j' a_j) / G - (sum_j g_j a_j)(sum_j g_j') / G^2.
As attention saturates on one token d (p_d = g_d / G -> 1) the two terms agree to 1 - p_d, so in floating
point the QK field carries a relative error eps / (1 - p_d): 1e-8 at t = 1e8 and 4e-5 at t = 1e11 for
``examples/specs/deep_qk_decay.toml``, where the field is noise long before t = 1e15 and a stiff solver's
error estimate sees that noise. With p_j = g_j / G and sum_j p_j = 1 the same derivative is

    dA/dx = sum_j p_j da_j/dx + sum_{j<k} p_j p_k (a_j - a_k) (dsigma_j/dx - dsigma_k/dx)       (sigma_j the scores)

every term of which is accurate to its own size (the pair (d, k) carries p_d p_k, not 1 - p_d computed by
subtraction). The flow is then dx_i/dt = -(eta_c / w_i) sum_contexts P(context) dl/dx_i - eta_c lambda_c x_i, with
dl/dx = -expit(log(K-1) - D) dD/dx for the cross-entropy (D = own - cross = sum_j p_j (own_j - cross_j), the
margin as one softmax average) and (own - 1) d own/dx + (K - 1) cross d cross/dx for the square loss.
"""
from __future__ import annotations

import itertools

import sympy as sp
from qkdyn.theory.model import ETA
from qkdyn.theory.specentries import circuit_spec
from qkdyn.theory.specflow import SpecDerivation, Token, context_loss, contexts, softmax_average

#: placeholders of one context's own and cross logits, the arguments of its loss (specflow.context_loss)
OWN, CROSS = sp.symbols("own cross", real=True)


def softmax_average_derivative(tokens: list[Token], values: list[sp.Expr], x: sp.Symbol) -> sp.Expr:
    """d/dx of sum_j p_j values_j, p = the tokens' softmax weights, in the pairwise form of the module docstring."""
    total = sum(t.weight for t in tokens)
    p = [t.weight / total for t in tokens]
    scores = [sp.diff(t.score, x) for t in tokens]
    direct = sum((pj * sp.diff(v, x) for pj, v in zip(p, values, strict=True)), sp.S(0))
    pairs = sum((p[j] * p[k] * (values[j] - values[k]) * (scores[j] - scores[k])
                 for j, k in itertools.combinations(range(len(tokens)), 2)), sp.S(0))
    return direct + pairs


def _loss_derivative(slopes: tuple[sp.Expr, sp.Expr], tokens: list[Token], x: sp.Symbol) -> sp.Expr:
    """dl/dx of one context's loss l(own, cross), its ``slopes`` (dl/d own, dl/d cross) in the placeholders: a loss
    of the margin own - cross alone (the cross-entropy) is differentiated along the margin as one softmax average
    (module docstring), any other through both logits."""
    d_own, d_cross = slopes
    owns, crosses = [t.own for t in tokens], [t.cross for t in tokens]
    if d_own + d_cross == 0:
        margins = [o - c for o, c in zip(owns, crosses, strict=True)]
        at = {OWN: softmax_average(tokens, margins), CROSS: sp.S(0)}
        return d_own.xreplace(at) * softmax_average_derivative(tokens, margins, x)
    at = {OWN: softmax_average(tokens, owns), CROSS: softmax_average(tokens, crosses)}
    return (d_own.xreplace(at) * softmax_average_derivative(tokens, owns, x)
            + d_cross.xreplace(at) * softmax_average_derivative(tokens, crosses, x))


def stable_rhs(d: SpecDerivation) -> tuple[sp.Expr, ...]:
    """dx_i/dt of ``d``'s flow in the form of the module docstring (equal to ``d.rhs`` as a function)."""
    cases = contexts(d.spec, d.features["QK"], d.features["OV"])
    loss = context_loss(d.spec, OWN, CROSS)
    slopes = (sp.diff(loss, OWN), sp.diff(loss, CROSS))
    out = []
    for variable in d.variables:
        x, circuit = variable.symbol, variable.circuit
        gradient = sum((probability * _loss_derivative(slopes, tokens, x) for probability, tokens in cases), sp.S(0))
        decay = sp.nsimplify(circuit_spec(d.spec, circuit).weight_decay)
        out.append(-(ETA[circuit] / variable.orbit) * gradient - ETA[circuit] * decay * x)
    return tuple(out)
