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
    logits, nothing = model(idx)
    unformed, loss = model(idx, torch.randint(0, 256, (2, 16)))  # the loss without forming the logits
    assert nothing is None and unformed is None
    assert logits.shape == (2, 16, 256) and loss.item() == pytest.approx(5.545, abs=0.1)  # ~log 256
    targets = torch.full_like(idx, -100)
    targets[:, 3] = idx[:, 3]
    expected = torch.nn.functional.cross_entropy(logits[:, 3], idx[:, 3])
    assert torch.allclose(model(idx, targets)[1], expected)
    with pytest.raises(ValueError):
        model(torch.randint(0, 256, (1, 17)))
