"""GPT presets: parameter counts (closed form vs meta-device models), forward pass and loss masking."""
import pytest
import torch
from qkdyn.empirical.coupled.attention import AttentionConfig
from qkdyn.empirical.coupled.model import GPT, INITS, PRESETS, count_parameters, preset_config


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


@pytest.mark.parametrize("init", INITS)
def test_either_init_counts_its_parameters_and_ties_the_head_only_under_nanogpt(init):
    cfg = preset_config("tiny", vocab_size=64, block_size=16, init=init)
    torch.manual_seed(0)
    model = GPT(cfg)
    assert sum(p.numel() for p in model.parameters()) == count_parameters(cfg)
    assert (model.lm_head.weight is model.wte.weight) == (init == "nanogpt")
    emb, fc, head = (w.detach() for w in (model.wte.weight, model.blocks[0].mlp[0].weight, model.lm_head.weight))
    if init == "torch":  # PyTorch's defaults: embeddings N(0, 1), linear maps U(-1/sqrt(fan_in), 1/sqrt(fan_in))
        assert float(emb.std()) == pytest.approx(1.0, abs=0.05)  # fan-in d_model = 64: bound 1/8
        assert float(fc.abs().max()) <= 1 / 8 and float(fc.std()) == pytest.approx(1 / 8 / 3 ** 0.5, rel=0.05)
        assert float(head.abs().max()) <= 1 / 8
    else:
        assert float(emb.std()) == pytest.approx(0.02, rel=0.05)
        assert float(fc.std()) == pytest.approx(0.02, rel=0.05)


@pytest.mark.parametrize("init", INITS)
def test_every_variant_starts_from_the_same_shared_weights_under_either_init(init):
    """The paired design: after the same seed, only a variant's extra parameters differ."""
    models = []
    for kind in ("standard", "coupled"):
        torch.manual_seed(3)
        models.append(GPT(preset_config("tiny", vocab_size=64, block_size=16, init=init,
                                        attention=AttentionConfig(kind=kind))).state_dict())
    standard, coupled = models
    assert set(standard) < set(coupled)
    assert all(torch.equal(standard[name], coupled[name]) for name in standard)


def test_an_unknown_init_is_refused():
    with pytest.raises(ValueError, match="init"):
        preset_config("tiny", init="xavier")
