"""The chunked output-head cross-entropy equals F.cross_entropy on the full logits, to round-off."""
import math

import pytest
import torch
import torch.nn.functional as F
from qkdyn.empirical.coupled import lm_loss
from qkdyn.empirical.coupled.attention import AttentionConfig
from qkdyn.empirical.coupled.model import GPT, preset_config


def _case(rows=37, d=8, vocab=50, seed=0):
    g = torch.Generator().manual_seed(seed)
    hidden = torch.randn(rows, d, generator=g, requires_grad=True)
    weight = torch.randn(vocab, d, generator=g).requires_grad_()
    targets = torch.randint(0, vocab, (rows,), generator=g)
    targets[[2, 11, 30]] = lm_loss.IGNORE
    return hidden, weight, targets


@pytest.mark.parametrize("chunk_elements", [1, 7 * 50, 1 << 19])  # one row a chunk, 7 (37 = 5 x 7 + 2), all
def test_loss_and_both_gradients_equal_the_full_logits_cross_entropy(monkeypatch, chunk_elements):
    monkeypatch.setattr(lm_loss, "CHUNK_ELEMENTS", chunk_elements)
    hidden, weight, targets = _case()
    full = F.cross_entropy(hidden @ weight.t(), targets, ignore_index=-100)
    chunked = lm_loss.linear_cross_entropy(hidden, weight, targets)
    assert chunked.item() == pytest.approx(full.item(), rel=1e-6)
    for want, got in zip(torch.autograd.grad(3.0 * full, (hidden, weight)),
                         torch.autograd.grad(3.0 * chunked, (hidden, weight)), strict=True):  # the incoming gradient scales
        assert torch.allclose(got, want, rtol=1e-5, atol=1e-7)
    hidden.grad = None
    with torch.no_grad():  # evaluation: the loss alone
        assert lm_loss.linear_cross_entropy(hidden, weight, targets).item() == pytest.approx(full.item(), rel=1e-6)


def test_every_target_ignored_is_nan_as_in_torch():
    hidden, weight, targets = _case()
    targets[:] = lm_loss.IGNORE
    assert math.isnan(F.cross_entropy(hidden @ weight.t(), targets, ignore_index=-100).item())
    assert math.isnan(lm_loss.linear_cross_entropy(hidden, weight, targets).item())


def test_training_with_it_gives_the_validation_loss_of_the_full_logits_loss(monkeypatch):
    """A tiny GPT trained 5 AdamW steps with the model's chunked loss and with F.cross_entropy on its
    logits: the same validation loss to round-off (and the loss moved, so the steps were taken)."""
    monkeypatch.setattr(lm_loss, "CHUNK_ELEMENTS", 3 * 300)  # several chunks per batch
    cfg = preset_config("tiny", vocab_size=300, block_size=16, attention=AttentionConfig())
    g = torch.Generator().manual_seed(1)
    x, val = torch.randint(0, 300, (4, 17), generator=g), torch.randint(0, 300, (4, 17), generator=g)

    def val_loss(model):
        with torch.no_grad():
            return F.cross_entropy(model(val[:, :-1])[0].reshape(-1, 300), val[:, 1:].reshape(-1)).item()

    results = []
    for chunked in (True, False):
        torch.manual_seed(0)
        model = GPT(cfg)
        start = val_loss(model)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
        for _ in range(5):
            loss = (model(x[:, :-1], x[:, 1:])[1] if chunked else
                    F.cross_entropy(model(x[:, :-1])[0].reshape(-1, 300), x[:, 1:].reshape(-1)))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
        results.append(val_loss(model))
    assert abs(results[0] - start) > 1e-3
    assert results[0] == pytest.approx(results[1], rel=1e-6)
