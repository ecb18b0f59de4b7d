"""The written-out gradient of the training loop (:func:`qkdyn.empirical.synthetic.model.exact_gradients`) is
``torch.autograd.grad`` of the model's loss to the last bit: every form, the population and sampled batches, inner
widths where mm's backward takes either of its layouts (r = 1 makes W_Q's query row a column-major (1, r) operand)."""
import pytest
import torch
from qkdyn.empirical.synthetic import data, train
from qkdyn.empirical.synthetic.model import PARAMS, cross_entropy, exact_gradients, head, log_counts
from qkdyn.theory.setting import Setting
from synthetic_models import random_model

SMALL = Setting(classes=3, distinct=3, commons=2, m=3, n=4, qk0=0.5, ov0=0.5, eta_qk=2.0)


@pytest.mark.parametrize("param", PARAMS)
@pytest.mark.parametrize("width", [None, 1, 4])
@pytest.mark.parametrize("batch", [None, 1, 7])
def test_written_out_gradient_is_autograds_to_the_last_bit(param, width, batch):
    model = random_model(param, SMALL, PARAMS.index(param), width)
    parts = train.loss_parts(model)
    counts, labels, weights = (data.mean_counts(SMALL) if batch is None else
                               data.sample(SMALL, batch, torch.Generator().manual_seed(3)))
    log_c = log_counts(counts)
    taped = cross_entropy(head(parts, log_c, model.scale, None, None)[0], labels, weights)
    expected = torch.autograd.grad(taped, list(parts.values()))
    loss, gradients = exact_gradients(parts, log_c, model.scale, labels, weights)
    assert loss.item() == taped.item()
    assert len(gradients) == len(expected)
    for name, got, want in zip(parts, gradients, expected, strict=True):
        assert got.shape == want.shape, name
        assert torch.equal(got, want), (name, float((got - want).abs().max()))
        assert bool(want.abs().max() > 0), name  # the comparison covers a gradient that is not all zeros
