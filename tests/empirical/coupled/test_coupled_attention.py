"""Attention variants of paper B: shapes, causality, parameter counts, reductions, reversibility."""
import math

import pytest
import torch
import torch.nn.functional as F
from qkdyn.empirical.coupled.attention import (
    AttentionConfig,
    CausalSelfAttention,
    DifferentialAttention,
    build_attention,
    extra_parameters,
    lambda_init_for,
)
from qkdyn.empirical.coupled.model import GPT, count_parameters, preset_config
from qkdyn.empirical.coupled.qk_flow import PerHeadMLP, euler_step, integrate, leapfrog_step

D, H = 32, 4
CONFIGS = {
    "standard": AttentionConfig(),
    "coupled-euler": AttentionConfig(kind="coupled", integrator="euler", steps=2),
    "coupled-leapfrog": AttentionConfig(kind="coupled", integrator="leapfrog", steps=3),
    "mlp-only": AttentionConfig(kind="mlp-only", steps=2),
    "mlp-only-shared": AttentionConfig(kind="mlp-only-shared", steps=2),
    "diff": AttentionConfig(kind="diff"),
}


def _module(cfg, layer=1):
    torch.manual_seed(0)
    return build_attention(cfg, D, H, layer)


@pytest.mark.parametrize("name", CONFIGS)
def test_shape_and_causality(name):
    attn = _module(CONFIGS[name], layer=2)
    x = torch.randn(2, 10, D)
    y = attn(x)
    assert y.shape == x.shape
    x2 = x.clone()
    x2[:, 6:] = torch.randn(2, 4, D)  # change the future only
    assert torch.allclose(attn(x2)[:, :6], y[:, :6], atol=1e-6)
    assert not torch.allclose(attn(x2)[:, 6:], y[:, 6:])


@pytest.mark.parametrize("name", CONFIGS)
def test_parameter_count_formula_matches_modules(name):
    cfg = preset_config("tiny", attention=CONFIGS[name])
    assert count_parameters(cfg) == sum(p.numel() for p in GPT(cfg).parameters())
    extra = sum(p.numel() for p in _module(CONFIGS[name]).parameters()) - 4 * D * D
    assert extra == extra_parameters(CONFIGS[name], H, D // H)


def test_mlp_only_matches_coupled_parameter_count():
    coupled = extra_parameters(AttentionConfig(kind="coupled"), 8, 64)
    assert extra_parameters(AttentionConfig(kind="mlp-only"), 8, 64) == coupled
    assert extra_parameters(AttentionConfig(kind="mlp-only-shared"), 8, 64) == coupled


def test_coupled_overhead_at_60M_is_about_a_tenth_of_a_percent():
    base = count_parameters(preset_config("60M"))
    coupled = count_parameters(preset_config("60M", attention=AttentionConfig(kind="coupled")))
    assert 0.0008 < coupled / base - 1 < 0.0015  # paper: 0.11%


@pytest.mark.parametrize("kind", ["coupled", "mlp-only", "mlp-only-shared"])
@pytest.mark.parametrize("integrator", ["euler", "leapfrog"])
def test_zero_step_size_reduces_to_standard_attention_exactly(kind, integrator):
    coupled = _module(AttentionConfig(kind=kind, integrator=integrator, steps=3))
    standard = CausalSelfAttention(D, H)
    standard.load_state_dict({k: v for k, v in coupled.state_dict().items() if k.startswith("c_")})
    with torch.no_grad():
        coupled.dt.zero_()
    x = torch.randn(2, 7, D)
    assert torch.equal(coupled(x), standard(x))


def test_zero_field_euler_is_a_pure_drift():
    field = PerHeadMLP(H, 8, 4)
    with torch.no_grad():
        field.w2.zero_()
    q, k, dt = torch.randn(2, H, 5, 8), torch.randn(2, H, 5, 8), torch.rand(H)
    q1, k1 = euler_step(q, k, field, dt)
    assert torch.equal(k1, k) and torch.allclose(q1, q + dt.view(-1, 1, 1) * k)


def test_leapfrog_is_time_reversible():
    torch.manual_seed(1)
    field = PerHeadMLP(H, 8, 16, init_std=0.5).double()
    q, k = torch.randn(2, H, 5, 8, dtype=torch.float64), torch.randn(2, H, 5, 8, dtype=torch.float64)
    dt = torch.rand(H, dtype=torch.float64) * 0.5
    with torch.no_grad():
        q1, k1 = integrate(q, k, field, dt, "leapfrog", 5)
        q0, k0 = integrate(q1, k1, field, -dt, "leapfrog", 5)
        assert torch.allclose(q0, q, atol=1e-12) and torch.allclose(k0, k, atol=1e-12)
        qe, ke = integrate(*euler_step(q, k, field, dt), field, -dt, "euler", 1)  # Euler is not
        assert not torch.allclose(qe, q, atol=1e-6) or not torch.allclose(ke, k, atol=1e-6)


def test_leapfrog_is_kick_drift_kick():
    field = PerHeadMLP(1, 3, 5, init_std=0.5)
    q, k, dt = torch.randn(1, 1, 2, 3), torch.randn(1, 1, 2, 3), torch.tensor([0.3])
    k_half = k + 0.15 * field(q)
    q_new = q + 0.3 * k_half
    q1, k1 = leapfrog_step(q, k, field, dt)
    assert torch.allclose(q1, q_new) and torch.allclose(k1, k_half + 0.15 * field(q_new))


def test_lambda_init_schedule():
    assert lambda_init_for(1) == pytest.approx(0.2)
    assert lambda_init_for(3) == pytest.approx(0.8 - 0.6 * math.exp(-0.6))


def test_differential_attention_matches_reference_formula():
    attn = _module(AttentionConfig(kind="diff"), layer=3)
    assert isinstance(attn, DifferentialAttention)
    x = torch.randn(2, 6, D)
    B, T, hd = 2, 6, D // H
    q, k, v = attn.c_attn(x).split(D, dim=2)
    q = q.view(B, T, H, hd).transpose(1, 2)
    k = k.view(B, T, H, hd).transpose(1, 2)
    v = v.view(B, T, H // 2, 2 * hd).transpose(1, 2)
    mask = torch.ones(T, T, dtype=torch.bool).tril()
    w = (q @ k.transpose(-1, -2) / math.sqrt(hd)).masked_fill(~mask, float("-inf")).softmax(-1)
    w = w.view(B, H // 2, 2, T, T)
    lam = (torch.exp((attn.lambda_q1 * attn.lambda_k1).sum()) - torch.exp((attn.lambda_q2 * attn.lambda_k2).sum())
           + lambda_init_for(3))
    y = (w[:, :, 0] - lam * w[:, :, 1]) @ v
    y = F.rms_norm(y, (2 * hd,), attn.subln.weight, eps=1e-5) * (1 - lambda_init_for(3))
    expected = attn.c_proj(y.transpose(1, 2).reshape(B, T, D))
    assert torch.allclose(attn(x), expected, atol=1e-5)


def test_bad_configs_are_rejected():
    with pytest.raises(ValueError):
        AttentionConfig(kind="nope")
    with pytest.raises(ValueError):
        AttentionConfig(kind="mlp-only", hidden=3)
    with pytest.raises(ValueError):
        build_attention(AttentionConfig(kind="diff"), 30, 3, 1)
    with pytest.raises(ValueError):
        AttentionConfig(kind="coupled", field_gain=-1.0)


def test_the_torch_free_config_names_the_integrators_that_exist():
    from qkdyn.empirical.coupled.configs import INTEGRATOR_NAMES
    from qkdyn.empirical.coupled.qk_flow import INTEGRATORS

    assert INTEGRATOR_NAMES == tuple(INTEGRATORS)


def test_the_torch_free_config_names_the_presets_that_exist():
    from qkdyn.empirical.coupled import model
    from qkdyn.empirical.coupled.configs import PRESET_NAMES

    assert PRESET_NAMES == tuple(model.PRESETS)


# ---- the coupling acts (issue: at nanoGPT's N(0, 0.02^2) init, |dt f(q)| / |dt k| was ~1e-3) ----

STRENGTH_FLOOR = 0.1  # docs/coupled.md: the default init gives |f(q)|/|k| ~0.48; 0.1 is 100x the old ~1e-3


def _gpt(cfg, seed=0):
    torch.manual_seed(seed)
    return GPT(preset_config("tiny", vocab_size=512, block_size=32, attention=cfg))


def test_coupling_strength_at_default_init_is_above_the_floor_and_the_old_init_was_negligible():
    from qkdyn.empirical.coupled.strength import measure

    x = torch.randint(0, 512, (4, 32))
    model = _gpt(AttentionConfig(kind="coupled"))
    got = measure(model, x)
    assert got["field_ratio"] > STRENGTH_FLOOR and 0 < got["qk_change"] < 1
    assert got["coupling"] == pytest.approx(0.1 * got["field_ratio"], rel=1e-5)  # dt = 0.1 in every head: dt is in it
    for block in model.blocks:  # nanoGPT's init of f, as before the issue
        old = PerHeadMLP(H, block.attn.d_head, 4, init_std=0.02)
        block.attn.field.load_state_dict(old.state_dict())
    assert measure(model, x)["field_ratio"] < 0.01
    assert measure(_gpt(AttentionConfig()), x) == {}
    assert set(measure(_gpt(AttentionConfig(kind="mlp-only")), x)) == {"qk_change", "dt_per_head"}


def test_coupling_strength_scales_with_the_field_gain():
    from qkdyn.empirical.coupled.strength import measure

    x = torch.randint(0, 512, (2, 32))
    s1 = measure(_gpt(AttentionConfig(kind="coupled", field_gain=1.0)), x)["coupling"]
    s2 = measure(_gpt(AttentionConfig(kind="coupled", field_gain=2.0)), x)["coupling"]
    assert s2 == pytest.approx(2 * s1, rel=1e-5)


def _rel_change(a, b):
    return float((a - b).norm() / b.norm())


def test_removing_f_changes_the_attention_output_measurably():
    torch.manual_seed(3)
    attn = build_attention(AttentionConfig(kind="coupled"), 64, 4, 1)
    x = torch.randn(2, 16, 64)
    with torch.no_grad():
        y = attn(x)
        attn.field.w2.zero_()  # f = 0: the coupled flow is the linear drift q' = q + dt k
        y0 = attn(x)
    assert _rel_change(y, y0) > 1e-3  # ~1e-2 at the default init; ~1e-6 at the old one


def test_mlp_only_controls_differ_from_standard_attention():
    x = torch.randn(2, 16, 64)
    for kind in ("mlp-only", "mlp-only-shared"):
        torch.manual_seed(4)
        attn = build_attention(AttentionConfig(kind=kind), 64, 4, 1)
        standard = CausalSelfAttention(64, 4)
        standard.load_state_dict({k: v for k, v in attn.state_dict().items() if k.startswith("c_")})
        with torch.no_grad():
            assert _rel_change(attn(x), standard(x)) > 1e-3, kind


def test_shared_reading_moves_q_and_k_with_one_field():
    torch.manual_seed(5)
    attn = build_attention(AttentionConfig(kind="mlp-only-shared", dt_init=0.3), D, H, 1)
    q, k = torch.randn(2, H, 5, D // H), torch.randn(2, H, 5, D // H)
    with torch.no_grad():
        q1, k1 = attn.transform_qk(q, k)
        assert torch.allclose(q1, q + 0.3 * attn.field(q)) and torch.allclose(k1, k + 0.3 * attn.field(k))


def test_flops_per_token_counts_the_flow():
    from qkdyn.empirical.coupled.model import flops_per_token

    std = preset_config("60M", vocab_size=8192)
    cpl = preset_config("60M", vocab_size=8192, attention=AttentionConfig(kind="coupled"))
    leap = preset_config("60M", vocab_size=8192, attention=AttentionConfig(kind="coupled", integrator="leapfrog"))
    extra = flops_per_token(cpl) - flops_per_token(std)
    assert extra == 3 * 12 * 10 * (4 * 64 * 4 + 4 * 64)  # layers x heads x (one f eval + two axpys)
    assert flops_per_token(leap) - flops_per_token(std) == 3 * 12 * 10 * (2 * 4 * 64 * 4 + 4 * 64)
    assert 1 < flops_per_token(cpl) / flops_per_token(std) < 1.002  # ~0.1%, like the parameter overhead
