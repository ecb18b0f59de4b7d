"""The exact population loss and gradient of the full model, against brute force.

* count vectors (``data.count_support``) == every sequence enumerated and evaluated position by
  position (``model.forward_tokens``), for general random (non-symmetric) matrices, to 1e-12;
* the mean-count batch (``data.mean_counts``) == the exact population on the symmetric subspace;
* read(embed(x)) == x, and the canonical init reads as theory's balanced init.
"""
import numpy as np
import pytest
import torch
from qkdyn.empirical.synthetic import data, reduced
from qkdyn.empirical.synthetic.layout import Layout
from qkdyn.empirical.synthetic.model import PARAMS, AttentionHead, cross_entropy
from qkdyn.theory.compiled import load
from qkdyn.theory.setting import Setting, factorized
from synthetic_models import random_model

TINY = Setting(classes=3, distinct=2, commons=2, m=2, n=3, scale=0.7)


def loss_and_grad(model, logits_fn, labels, weights):
    model.zero_grad()
    loss = cross_entropy(logits_fn(), labels, weights)
    loss.backward()
    return float(loss.detach()), {name: p.grad.clone() for name, p in model.named_parameters()}


@pytest.mark.parametrize("param", PARAMS)
def test_count_support_equals_brute_force(param):
    model = random_model(param, TINY, seed=1)
    tokens, labels, weights = data.all_sequences(TINY)
    assert len(tokens) == 3 * 10 * 4 * 8 and abs(float(weights.sum()) - 1) < 1e-12
    brute, g_brute = loss_and_grad(model, lambda: model.forward_tokens(tokens)[0], labels, weights)
    counts, c_labels, c_weights = data.count_support(TINY)
    assert len(counts) == data.support_size(TINY) and abs(float(c_weights.sum()) - 1) < 1e-12
    exact, g_exact = loss_and_grad(model, lambda: model(counts)[0], c_labels, c_weights)
    assert abs(exact - brute) <= 1e-12 * abs(brute)
    for name in g_brute:
        assert torch.allclose(g_exact[name], g_brute[name], rtol=0, atol=1e-12 * float(g_brute[name].abs().max()))


@pytest.mark.parametrize("param", PARAMS)
def test_mean_counts_exact_on_symmetric_subspace(param):
    compiled = load(param)
    x = np.random.default_rng(2).normal(size=len(compiled.variables))
    model = reduced.embed(AttentionHead(param, Layout.of(TINY), TINY.scale), dict(zip(compiled.variables, x, strict=True)))
    exact, g_exact = loss_and_grad(model, lambda: model(data.count_support(TINY)[0])[0], *data.count_support(TINY)[1:])
    counts, labels, weights = data.mean_counts(TINY)
    mean, g_mean = loss_and_grad(model, lambda: model(counts)[0], labels, weights)
    assert abs(mean - exact) <= 1e-13
    for name in g_exact:
        assert torch.allclose(g_mean[name], g_exact[name], rtol=0, atol=1e-13)
    assert abs(exact - compiled.loss(*compiled.features(x, TINY.numeric()), TINY.numeric())) < 1e-13


@pytest.mark.parametrize("param", PARAMS)
def test_read_inverts_embed_and_design_init(param):
    compiled = load(param)
    x = np.abs(np.random.default_rng(3).normal(size=len(compiled.variables)))
    if factorized(param)[1]:  # polar gauge domain: o_own >= o_cross
        x[-5], x[-4] = x[-5] + x[-4], x[-4] / 2
    model = reduced.embed(AttentionHead(param, Layout.of(TINY), TINY.scale), dict(zip(compiled.variables, x, strict=True)))
    assert np.allclose(reduced.read(model), x, rtol=0, atol=1e-13)
    assert reduced.symmetric_distance(model) < 1e-14
    model = reduced.new_model(param, Setting())
    x0 = compiled.init(Setting().numeric(), Setting().qk0, Setting().ov0)
    assert np.allclose(reduced.read(model), x0, rtol=0, atol=1e-15)
    assert all(err < 1e-14 for err in reduced.balance_error(model).values())
