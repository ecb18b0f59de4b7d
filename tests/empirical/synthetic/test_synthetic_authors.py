"""The authors' sampled generator follows their notebooks' definitions (ids, loss, lengths, inits)."""
import math

import numpy as np
import pytest
import torch
from qkdyn.empirical.synthetic import authors, batched, sampled
from qkdyn.empirical.synthetic.model import PARAMS


@pytest.mark.parametrize("param", ["CACO", "FAFO"])
def test_ids_lengths_and_frequencies(param):
    data = authors.sample(param, 3000, torch.Generator().manual_seed(0))
    # context of seq_len - 2 ids plus the query: 126 + 1 for CACO, 62 + 1 otherwise
    assert torch.all(data.counts.sum(dim=1) == authors.SEQ_LEN[param] - 1)
    assert authors.SEQ_LEN == {"CACO": 128, "FACO": 64, "CAFO": 64, "FAFO": 64}
    # query ids 5..8 and label ids 1..4, class-specific, inside the common range 0..9
    assert torch.equal(data.query, data.cls + 5) and torch.equal(data.target, data.cls + 1)
    assert set(authors.QUERY_IDS) | set(authors.LABEL_IDS) <= set(authors.COMMON.tolist())
    assert torch.all(data.counts[torch.arange(3000), data.query] >= 1)
    # so copies of the query id occur among the context's commons (the shortcut's positions)
    assert float((data.counts[torch.arange(3000), data.query] > 1).double().mean()) > 0.9
    context = data.counts.clone()
    context[torch.arange(3000), data.query] -= 1
    own = context[data.cls == 2].sum(dim=0).numpy() / ((authors.SEQ_LEN[param] - 2) * int((data.cls == 2).sum()))
    expected = authors.token_probabilities()[2]
    assert np.abs(own - expected).max() < 0.01
    assert expected[:10] == pytest.approx([1 / 15.5] * 10) and expected[30:40] == pytest.approx(
        np.arange(1, 11) / 10 / 15.5)
    assert bool(torch.all(data.distinct[data.cls == 2][:, 30:40])) and not bool(data.distinct[data.cls == 2][:, :30].any())


@pytest.mark.parametrize("param", PARAMS)
def test_full_vocabulary_loss_is_log_v_at_zero_init(param):
    model = authors.new_model(param, 0, "equal")
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
    data = authors.sample(param, 64, torch.Generator().manual_seed(1))
    logits, attn = model(data.counts, data.query)
    assert logits.shape == (64, authors.VOCAB) and torch.allclose(attn.sum(dim=1), torch.ones(64))
    assert sampled.loss_of(authors.task(100), model, data).item() == pytest.approx(math.log(50), rel=1e-6)


def test_inits_and_rates_per_form():
    caco = authors.new_model("CACO", 1234, "equal")
    torch.manual_seed(1234)
    reference = torch.nn.Linear(50, 50, bias=False).weight  # their Net_CACO: key_layer first
    assert torch.equal(caco.key_layer.weight, reference)
    fafo = authors.new_model("FAFO", 1234, "qkfast")
    assert all(torch.equal(p, 1e-6 * torch.eye(50)) for p in fafo.parameters())
    fafo_equal = authors.new_model("FAFO", 1234, "equal")  # Row-1: QK identity init commented out
    assert not torch.equal(fafo_equal.query_layer.weight, 1e-6 * torch.eye(50))
    assert torch.equal(fafo_equal.value_layer.weight, 1e-6 * torch.eye(50))
    task = authors.task(1)  # uncompressed: the notebooks' lr
    assert task.base_lr == pytest.approx(1e-2)
    assert task.qk_factor["qkfast"]("FAFO", 0.3) == 20 and task.qk_factor["qkfast"]("CACO", 0.3) == 5
    assert task.qk_factor["ramp"]("FAFO", 1.0) == 40 and task.qk_factor["ramp"]("CACO", 1.0) == 10


def test_scores_and_logits_follow_the_notebook_layers():
    """Per-position forward of their Net_p1 (one-hot sequences) equals the count-vector forward."""
    model = authors.new_model("FAFO", 3, "equal")
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, 0.3)
    gen = torch.Generator().manual_seed(5)
    cls = torch.randint(4, (8,), generator=gen)
    probs = torch.as_tensor(authors.token_probabilities(), dtype=torch.float32)[cls]
    seq = torch.cat([torch.multinomial(probs, 20, replacement=True, generator=gen), (cls + 5)[:, None]], dim=1)
    x = torch.nn.functional.one_hot(seq, 50).float()
    query = model.query_layer(x[:, -1])[:, None]
    key = model.key_layer(x)
    attn = torch.softmax(query @ key.transpose(-2, -1) / math.sqrt(50), dim=-1)
    expected = model.prediction_layer(attn @ model.value_layer(x))[:, 0]
    counts = torch.zeros(8, 50).scatter_add_(1, seq, torch.ones(8, 21))
    logits, _ = model(counts, cls + 5)
    assert torch.allclose(logits, expected, atol=1e-5)


def test_shortcut_and_separability_metrics():
    """attn_query_id counts every position holding the query's id; separability is per position."""
    task = authors.task(100)
    data = authors.sample("CACO", 16, torch.Generator().manual_seed(2))
    model = authors.new_model("CACO", 0, "equal")
    values = sampled.measure(task, model, data)
    with torch.no_grad():
        _, attn = model(data.counts, data.query)
    per_position = attn / data.counts.clamp(min=1)
    for b in range(16):
        q = int(data.query[b])
        assert values["attn_query_id"][b] == pytest.approx(float(per_position[b, q] * data.counts[b, q]))
        present = data.counts[b] > 0
        top = per_position[b][present & data.distinct[b]].max()
        low = per_position[b][present & ~data.distinct[b]].min()
        assert values["separability"][b] == pytest.approx(float(top - low), abs=1e-7)


#: every arm's SGD steps as the notebook cells run them (n_epochs x n_batches), transcribed from the cells:
#: Fig2-Heatmaps/Fig-2-Heatmaps-Row-1.ipynb cells 5 (FAFO), 26 (FACO), 53 (CAFO), 65 (CACO), all equal rates;
#: Fig2-Heatmaps/Fig-2_CACO_FAFO Experiments.ipynb cells 3 (FAFO QK 20x), 14 (FAFO ramp), 21 (CACO QK 5x),
#: 28 (CACO ramp). Arms with no notebook take the notebook arm of their QK form and schedule (qk20 as qkfast).
NOTEBOOKS = {("FAFO", "equal"): 2500 * 250, ("FACO", "equal"): 2500 * 250, ("CAFO", "equal"): 5000 * 200,
             ("CACO", "equal"): 2500 * 200, ("FAFO", "qkfast"): 1000 * 100, ("FAFO", "ramp"): 2000 * 100,
             ("CACO", "qkfast"): 2000 * 100, ("CACO", "ramp"): 2000 * 100}
STAND_IN = {"FACO": "FAFO", "CAFO": "CACO", "FAFO": "FAFO", "CACO": "CACO"}


@pytest.mark.parametrize("compression", [1, 80, 500])
def test_every_arm_runs_its_notebook_horizon(compression):
    task = authors.task(compression)
    assert task.base_lr == pytest.approx(1e-2 * compression)  # the same flow time lr x steps per arm
    for param in PARAMS:
        for schedule in authors.SCHEDULES:
            arm = (param, schedule) if (param, schedule) in NOTEBOOKS else (
                STAND_IN[param], "qkfast" if schedule == "qk20" else schedule)
            assert task.horizon(param, schedule) == round(NOTEBOOKS[arm] / compression), (param, schedule)
    assert {arm: steps for arm, (steps, _, _) in authors.NOTEBOOK_HORIZONS.items()} == NOTEBOOKS


def test_training_reaches_levels_and_ramp_runs_the_horizon():
    task = authors.task(200_000 / 150)  # CACO ramp: 200k notebook steps in 150
    result = batched.train(task, "CACO", "ramp", seed=0, test_size=64)
    assert result.steps == result.horizon == 150 and 1.0 in result.at_level  # lr scaled to the notebooks' flow time
    assert set(result.final) == {"attn_distinct", "attn_query_id", "separability", "p_true"}
