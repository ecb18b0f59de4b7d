"""GPT presets: parameter counts (closed form vs meta-device models), forward pass and loss masking."""
import pytest
import torch

from qkdyn.empirical.coupled.attention import AttentionConfig
from qkdyn.empirical.coupled.model import GPT, PRESETS, count_parameters, preset_config


@pytest.mark.parametrize("preset,millions", [("60M", 59.8), ("150M", 152.3), ("350M", 353.7)])
def test_preset_sizes_without_allocating(preset, millions):
    for kind in ("standard", "coupled", "diff"):
        cfg = preset_config(preset, attention=AttentionConfig(kind=kind))
        with torch.device("meta"):
            model = GPT(cfg)
        assert sum(p.numel() for p in model.parameters()) == count_parameters(cfg)
    assert count_parameters(preset_config(preset)) / 1e6 == pytest.approx(millions, abs=0.1)


def test_presets_have_64_wide_heads_at_scale():
    for name in ("60M", "150M", "350M"):
        assert PRESETS[name]["d_model"] // PRESETS[name]["n_head"] == 64


def test_forward_and_ignored_targets():
    torch.manual_seed(0)
    model = GPT(preset_config("tiny", block_size=16))
    idx = torch.randint(0, 256, (2, 16))
    logits, loss = model(idx, torch.randint(0, 256, (2, 16)))
    assert logits.shape == (2, 16, 256) and loss.item() == pytest.approx(5.545, abs=0.1)  # ~log 256
    targets = torch.full_like(idx, -100)
    targets[:, 3] = idx[:, 3]
    expected = torch.nn.functional.cross_entropy(logits[:, 3], idx[:, 3])
    assert torch.allclose(model(idx, targets)[1], expected)
    with pytest.raises(ValueError):
        model(torch.randint(0, 256, (1, 17)))


def test_short_conv_hybrid_is_causal_counted_and_alternates_with_attention():
    from qkdyn.empirical.coupled.attention import CausalSelfAttention
    from qkdyn.empirical.coupled.model import ShortConv

    cfg = preset_config("tiny", block_size=16, n_layer=4, short_conv=3, attention=AttentionConfig(kind="coupled"))
    torch.manual_seed(0)
    model = GPT(cfg)
    assert [type(b.attn) is ShortConv for b in model.blocks] == [True, False, True, False]
    assert all(isinstance(b.attn, CausalSelfAttention) for b in model.blocks[1::2])
    assert sum(p.numel() for p in model.parameters()) == count_parameters(cfg)
    conv = model.blocks[0].attn
    x = torch.randn(1, 16, 64)
    y = conv(x)
    x2 = x.clone()
    x2[:, 9] += 1.0  # a change at position 9 reaches positions 9..11 only (width 3)
    changed = (conv(x2) - y).abs().sum(-1)[0] > 0
    assert changed.nonzero().flatten().tolist() == [9, 10, 11]
    # position t mixes t-2..t with the depthwise kernel, gated by the linear map
    w = conv.conv.weight[:, 0]  # (C, width)
    expected = (x[0, 3:6].T * w).sum(-1) * conv.proj(x)[0, 5]
    assert torch.allclose(y[0, 5], expected, atol=1e-6)
