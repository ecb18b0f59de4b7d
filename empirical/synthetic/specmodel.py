"""The full matrix model of a circuit spec (:class:`qkdyn.theory.spec.Spec`) in torch, and its
symmetric embedding.

Each circuit is a chain of full matrices W_1 ... W_L (V x V when collapsed; V x w, w x w, ..., w x V
when factorized, w = K for a class-aligned inner index, r for rank r), or for a coupled QK circuit
W_Q, W_K (V x r), the coupling's A (r x r) or W_1 (r x h), W_2 (h x r) (two of them, one for q and one
for k, in the MLP-only control), and dt when it learns; vocabulary indices as in
:mod:`qkdyn.empirical.synthetic.layout`. With counts c of a context (plus the query once when it
attends to itself), A_x = s W_QK[q, x], attn = softmax(A + log c), logits = W_OV[labels, :] attn;
the loss is the cross-entropy or (1/2) sum_j (logit_j - y_j)^2, plus (lambda_c / 2) |theta_c|^2 per
circuit. Nothing here uses the reduction: :func:`embed` writes reduced values into every entry of
each orbit (concrete index tuples classified by :func:`qkdyn.theory.orbits.orbit_of`), so comparing
autograd on this model with the reduced flow checks the orbit enumeration too.
"""
from __future__ import annotations

import functools
import itertools

import numpy as np
import torch
from qkdyn.empirical.coupled.qk_flow import integrate
from qkdyn.empirical.synthetic.layout import Layout
from qkdyn.empirical.synthetic.model import DTYPE, attend, cross_entropy
from qkdyn.theory import orbits
from qkdyn.theory.specentries import chain
from qkdyn.theory.specflow import SpecDerivation
from torch import nn


class SpecHead(nn.Module):
    """The model of ``derivation.spec`` on ``layout`` with score scale ``scale`` (module docstring)."""

    def __init__(self, derivation: SpecDerivation, layout: Layout, scale: float):
        super().__init__()
        self.derivation, self.spec, self.layout, self.scale = derivation, derivation.spec, layout, float(scale)
        self.chains = {}
        for circuit in ("QK", "OV"):
            factors = chain(self.spec, circuit)
            params = nn.ParameterList(
                nn.Parameter(torch.zeros(self.dimension(f.rows[0]), self.dimension(f.cols[0]), dtype=DTYPE))
                for f in factors)
            self.add_module(f"W_{circuit}", params)
            self.chains[circuit] = factors

    def dimension(self, kind: str) -> int:
        qk = self.spec.qk
        if kind == "cinner":
            return self.layout.classes
        if kind == "rinner":
            return (qk if qk.form != "collapsed" and qk.inner == "rank" else self.spec.ov).rank
        return {"hinner": qk.hidden, "unit": 1}.get(kind, self.layout.vocab)

    def factors(self, circuit: str) -> nn.ParameterList:
        return getattr(self, f"W_{circuit}")

    def product(self, circuit: str) -> torch.Tensor:
        return functools.reduce(torch.matmul, list(self.factors(circuit)))

    def query_scores(self) -> torch.Tensor:
        """W_QK[q, :] (shape V), or for a coupled QK circuit q'_q . k'_x after the coupled flow of
        :mod:`qkdyn.empirical.coupled.qk_flow` on every token's (W_Q[x], W_K[x]) (spec module docstring)."""
        cs = self.spec.qk
        if cs.form != "coupled":
            return self.product("QK")[self.layout.query]
        W = dict(zip((f.name for f in self.chains["QK"]), self.factors("QK"), strict=True))

        def field(suffix: str):
            if cs.coupling == "linear":
                return lambda x: x @ W["A" + suffix]
            return lambda x: nn.functional.silu(x @ W["f1" + suffix]) @ W["f2" + suffix]

        dt = W["dt"].reshape(1) if cs.learn_dt else torch.tensor([cs.dt], dtype=DTYPE)
        if cs.uncoupled:  # paper B's MLP-only control: q and k each from itself, Euler
            q, k, f_q, f_k = W["q"], W["k"], field("q"), field("k")
            for _ in range(cs.steps):
                q, k = q + dt * f_q(q), k + dt * f_k(k)
            return k @ q[self.layout.query]
        q, k = integrate(W["q"][None], W["k"][None], field(""), dt, cs.integrator, cs.steps)
        return k[0] @ q[0, self.layout.query]

    def forward(self, counts: torch.Tensor) -> torch.Tensor:
        """Label logits (B, K) for count vectors (B, V)."""
        if self.spec.self_attention:
            counts = counts.clone()
            counts[:, self.layout.query] += 1
        logits, _ = attend(self.scale * self.query_scores(), torch.log(counts),
                           self.product("OV")[torch.as_tensor(self.layout.labels)])
        return logits

    def loss(self, counts, labels, weights) -> torch.Tensor:
        logits = self(counts)
        if self.spec.loss == "cross_entropy":
            total = cross_entropy(logits, labels, weights)
        else:
            residual = logits - nn.functional.one_hot(labels, logits.shape[1]).to(logits.dtype)
            total = (weights * (residual**2).sum(-1) / 2).sum()
        for circuit, cs in (("QK", self.spec.qk), ("OV", self.spec.ov)):
            if cs.weight_decay:
                total = total + cs.weight_decay / 2 * sum((W**2).sum() for W in self.factors(circuit))
        return total


def _indices(layout: Layout, kind: str, width: int):
    """(matrix index, attribute tuple) of every concrete index of type ``kind``."""
    K, D, N = layout.classes, layout.distinct, layout.commons
    if kind == "query":
        return [(layout.query, ())]
    if kind == "distinct":
        return [(k * D + i, (k, i)) for k in range(K) for i in range(D)]
    if kind == "common":
        return [(K * D + c, (c,)) for c in range(N)]
    if kind == "label":
        return [(int(layout.labels[k]), (k,)) for k in range(K)]
    if kind == "unit":
        return [(0, ())]
    return [(j, (j,)) for j in range(width)]  # cinner (class j), rinner (rho j) or hinner (eta j)


def orbit_entries(model: SpecHead) -> dict[str, tuple[str, int, np.ndarray, np.ndarray]]:
    """Reduced variable name -> (circuit, factor index, rows, cols) of every entry of its orbit."""
    fixed = model.spec.token_weights is not None
    wanted = {(e.factor.circuit, e.factor.index, e.orbit): e.variable.name for e in model.derivation.entries}
    found: dict = {name: [] for name in wanted.values()}
    for circuit, factors in model.chains.items():
        for f in factors:
            for rt, ct in itertools.product(f.rows, f.cols):
                for (r, rv), (c, cv) in itertools.product(_indices(model.layout, rt, model.dimension(rt)),
                                                          _indices(model.layout, ct, model.dimension(ct))):
                    name = wanted.get((circuit, f.index, orbits.orbit_of((rt, ct), (rv, cv), fixed)))
                    if name is not None:
                        found[name].append((r, c))
    out = {}
    for e in model.derivation.entries:
        pairs = np.array(found[e.variable.name]).reshape(-1, 2)
        out[e.variable.name] = (e.factor.circuit, e.factor.index, pairs[:, 0], pairs[:, 1])
    return out


@torch.no_grad()
def embed(model: SpecHead, values) -> SpecHead:
    """Set every entry of each orbit to its reduced value (``values`` in the derivation's order), all
    other entries to 0."""
    for p in model.parameters():
        p.zero_()
    for value, (circuit, j, rows, cols) in zip(values, orbit_entries(model).values(), strict=True):
        model.factors(circuit)[j][rows, cols] = float(value)
    return model
