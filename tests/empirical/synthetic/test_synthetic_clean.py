"""The clean sampled generator: weighted token sampler with the query counted, identity init, DTAP bins."""
import numpy as np
import torch
from qkdyn.empirical.synthetic import batched, clean, reduced, sampled
from qkdyn.empirical.synthetic.model import PARAMS


def test_sampler_counts_and_frequencies():
    counts, labels, weights = clean.sample(4000, torch.Generator().manual_seed(0))
    lay = clean.LAYOUT
    assert torch.all(counts.sum(dim=1) == clean.CONTEXT + 1) and torch.all(counts[:, lay.query] == 1)
    assert abs(float(weights.sum()) - 1) < 1e-12
    context = counts[labels == 0].clone()
    context[:, lay.query] = 0
    own = context.sum(dim=0).numpy() / (clean.CONTEXT * len(context))
    expected = clean.token_probabilities()[0]
    assert np.abs(own - expected).max() < 0.01  # 4000 x 62 draws: std ~ 0.001
    assert own[lay.distinct_of(1)].sum() == 0 and own[lay.labels].sum() == 0


def test_identity_init_is_balanced_and_dtap_sums_to_100():
    for param in PARAMS:
        model = clean.new_model(param)
        assert all(err < 1e-15 for err in reduced.balance_error(model).values())
    result = batched.train(clean.task(20), "CACO", "ramp", seed=0, test_size=200)
    hist = sampled.dtap(result.final)
    assert hist.shape == (5, 5) and abs(hist.sum() - 100) < 1e-9 and result.steps == 20
