"""MQAR generator: Zoology semantics, seeding, power-law gaps, batches and the accuracy metric."""
import numpy as np
import torch
from qkdyn.empirical.coupled.configs import MQAR_PRESETS as PRESETS
from qkdyn.empirical.coupled.mqar import MQARBatches, MQAREvaluator, generate


def test_semantics_of_a_batch():
    T, kv, V = 64, 8, 256
    x, y = generate(200, T, kv, V, np.random.default_rng(0))
    assert x.shape == y.shape == (200, T)
    keys, values = x[:, 0:2 * kv:2], x[:, 1:2 * kv:2]
    assert ((keys >= 1) & (keys < V // 2)).all() and ((values >= V // 2) & (values < V)).all()
    assert all(len(set(row)) == kv for row in keys) and all(len(set(row)) == kv for row in values)
    for i in range(200):
        pos = np.flatnonzero(y[i] != -100)
        assert len(pos) == kv and pos.min() >= 2 * kv and (pos % 2 == 0).all()
        pairs = dict(zip(keys[i], values[i], strict=True))
        assert [pairs[k] for k in x[i, pos]] == list(y[i, pos])  # the label is the queried key's value
        assert sorted(x[i, pos]) == sorted(keys[i])  # every key is queried once


def test_fillers_are_random_tokens_not_zeros():
    x, _ = generate(50, 64, 4, 256, np.random.default_rng(1))
    assert (x[:, 8:] != 0).mean() > 0.9 and len(np.unique(x[:, 8:])) > 100
    x0, _ = generate(50, 64, 4, 256, np.random.default_rng(1), random_non_queries=False)
    assert (x0[:, 8:] == 0).mean() > 0.8


def test_seeded_and_power_law_gaps():
    a = generate(10, 128, 8, 256, np.random.default_rng(3))
    b = generate(10, 128, 8, 256, np.random.default_rng(3))
    assert all(np.array_equal(p, q) for p, q in zip(a, b, strict=True))
    _, y = generate(2000, 128, 4, 256, np.random.default_rng(4))
    gaps = (np.argwhere(y != -100)[:, 1] - 8) // 2
    counts = np.bincount(gaps, minlength=56)
    assert counts[:10].sum() > counts[10:20].sum() > counts[40:50].sum()


def test_presets_are_valid():
    for preset in PRESETS.values():
        for t, kv in preset.settings:
            generate(2, t, kv, preset.vocab_size, np.random.default_rng(0))


def test_batches_cycle_settings_and_resume():
    preset = PRESETS["easy"]
    b = MQARBatches(preset, batch_size=4, grad_accum=1, seed=0)
    first = b.next_step()[0][0]
    state = b.state_dict()
    second = b.next_step()[0]
    assert first.shape == (4, 64) and second[0].shape == (4, 64)
    c = MQARBatches(preset, batch_size=4, grad_accum=1, seed=7)
    c.load_state_dict(state)
    assert torch.equal(c.next_step()[0][1], second[1])


def test_evaluator_scores_an_oracle_perfectly_and_chance_poorly():
    preset = PRESETS["easy"]
    evaluator = MQAREvaluator(preset, n_test=16, seed=0)
    answers = {tuple(row.tolist()): lab for x, y in evaluator.sets.values() for row, lab in zip(x, y, strict=True)}

    class Oracle(torch.nn.Module):
        def forward(self, x):
            labels = torch.stack([answers[tuple(row.tolist())] for row in x]).clamp(min=0)
            return torch.nn.functional.one_hot(labels, preset.vocab_size).float(), None

    class Constant(torch.nn.Module):
        def forward(self, x):
            return torch.zeros(*x.shape, preset.vocab_size), None

    metrics = evaluator(Oracle(), "cpu")
    assert set(metrics) == {"acc_T64_kv4", "acc_T64_kv8", "mqar_acc"} and metrics["mqar_acc"] == 1.0
    assert evaluator(Constant(), "cpu")["mqar_acc"] < 0.05


def test_a_preset_without_random_fillers_reaches_batches_and_the_test_set():
    import dataclasses

    preset = dataclasses.replace(PRESETS["small"], random_non_queries=False)
    x, _ = MQARBatches(preset, batch_size=8, grad_accum=1, seed=0).next_step()[0]
    test_x = next(iter(MQAREvaluator(preset, n_test=8, seed=0).sets.values()))[0]
    (_, kv), = preset.settings
    for inputs in (x, test_x):
        after = inputs[:, 2 * kv:]  # after the pairs: queries at even offsets, the answers' slots between them
        assert (after[:, 1::2] == 0).all() and (after == 0).float().mean() >= 0.5  # the fillers are token 0
