"""The reduced ODE of theory/ equals the full-matrix gradient flow, to round-off (docs/setting.md sec. 1).

At a random symmetric state x (reduced variables of qkdyn.theory.model.derive(P).variables embedded in the
matrices as theory/model.py states), -eta_c times the autograd gradient of the exact population
loss (every count vector with its probability) at a representative entry of each orbit must equal
``qkdyn.theory.compiled.load(P).rhs(x, p)``; and the whole gradient must lie in the embedded subspace
(every orbit entry equal, every other entry zero), so the flow stays there.
"""
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from qkdyn.empirical.synthetic import data, reduced
from qkdyn.empirical.synthetic.layout import Layout
from qkdyn.empirical.synthetic.model import PARAMS, AttentionHead, cross_entropy
from qkdyn.theory.compiled import load
from qkdyn.theory.setting import Setting


@st.composite
def cases(draw):
    setting = Setting(
        classes=draw(st.integers(2, 3)), distinct=draw(st.integers(1, 3)), commons=draw(st.integers(1, 3)),
        m=draw(st.integers(1, 3)), n=draw(st.integers(1, 3)),
        scale=draw(st.floats(0.2, 3.0)), eta_qk=draw(st.floats(0.05, 20.0)), eta_ov=draw(st.floats(0.05, 20.0)))
    x = np.array(draw(st.lists(st.floats(-2.0, 2.0), min_size=8, max_size=8)))
    return setting, x


def population_gradient(model, setting):
    counts, labels, weights = data.count_support(setting)
    model.zero_grad()
    cross_entropy(model(counts)[0], labels, weights).backward()
    return {name: p.grad for name, p in model.named_parameters()}


@pytest.mark.parametrize("param", PARAMS)
@settings(max_examples=25, deadline=None)
@given(case=cases())
def test_reduced_rhs_equals_autograd(param, case):
    setting, x = case
    compiled = load(param)
    x = x[: len(compiled.variables)]
    model = reduced.embed(AttentionHead(param, Layout.of(setting), setting.scale), dict(zip(compiled.variables, x, strict=True)))
    grads = population_gradient(model, setting)
    eta = {"QK": setting.eta_qk, "OV": setting.eta_ov}
    full = []
    for pname, rows, cols in reduced.orbits(param, model.layout).values():
        circuit = "QK" if pname in ("W_QK", "W_Q", "W_K") else "OV"
        full.append(-eta[circuit] * float(grads[pname][rows[0], cols[0]]))
    rhs = compiled.rhs(x, setting.numeric())
    scale = max(np.abs(rhs).max(), 1e-300)
    assert np.abs(np.array(full) - rhs).max() <= 1e-9 * scale + 1e-15

    # the gradient lies in the embedded subspace: re-embedding its representatives rebuilds it
    representatives = {name: float(grads[p][r[0], c[0]]) for name, (p, r, c) in reduced.orbits(param, model.layout).items()}
    rebuilt = dict(reduced.embed(AttentionHead(param, model.layout, setting.scale), representatives).named_parameters())
    gmax = max(float(g.abs().max()) for g in grads.values())
    for name, g in grads.items():
        assert torch.allclose(g, rebuilt[name].detach(), rtol=0, atol=1e-12 * gmax + 1e-15)
