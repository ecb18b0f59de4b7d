"""The batched sampled program: every run's numbers equal its one-at-a-time plain loop, to round-off."""
import dataclasses
import math
from collections import deque

import numpy as np
import pytest
import torch
from qkdyn.empirical.synthetic import authors, batched, clean, sampled
from qkdyn.empirical.synthetic.model import PARAMS
from qkdyn.empirical.synthetic.threads import one_thread


def plain_loop(task, param, schedule, seed, test_size):
    """The recipe of :mod:`.sampled` as a plain module + torch.optim.SGD loop, one run alone."""
    horizon = task.horizon(param, schedule)
    stream = sampled.chunks(task, param, seed)
    test = sampled.test_set(task, param, seed, test_size)
    model = task.new_model(param, seed, schedule)
    opt = torch.optim.SGD([{"params": model.circuit_parameters("QK"), "lr": task.base_lr},
                           {"params": model.circuit_parameters("OV"), "lr": task.base_lr}], lr=task.base_lr)
    recent, at_level, running = deque(maxlen=task.window), {}, math.inf
    for step in range(horizon):
        if step % sampled.CHUNK == 0:
            chunk = next(stream)
        batch = sampled.Batch(*(f[step % sampled.CHUNK] for f in chunk))
        opt.param_groups[0]["lr"] = task.base_lr * task.qk_factor[schedule](param, step / horizon)
        loss = sampled.loss_of(task, model, batch)
        recent.append(loss.item())
        running = sum(recent) / len(recent) if len(recent) == recent.maxlen else math.inf
        for level in task.levels:
            if running <= level and level not in at_level:
                at_level[level] = {k: float(np.nanmean(v)) for k, v in sampled.measure(task, model, test).items()}
        if schedule != "ramp" and running <= task.target:
            break
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    return step + 1, running, at_level, sampled.measure(task, model, test)


def assert_same(result, reference, tol):
    steps, running, at_level, final = reference
    assert result.steps == steps and result.loss == pytest.approx(running, rel=tol, abs=tol)
    assert set(result.at_level) == set(at_level)
    for level, values in at_level.items():
        for key, value in values.items():
            assert result.at_level[level][key] == pytest.approx(value, rel=tol, abs=tol), (level, key)
    for key, values in final.items():
        np.testing.assert_allclose(result.final[key], values, rtol=tol, atol=tol, err_msg=key)


def short(task, steps, levels, target):
    """The task with every arm ``steps`` long and levels (and stopping) a short run reaches."""
    return dataclasses.replace(task, horizon=lambda param, schedule: steps, levels=levels, target=target)


@pytest.mark.parametrize("task, arms, tol", [
    # float32 (their nn.Linear layers): CACO at length 128, the other forms at 64, defaults and identity inits
    (short(authors.task(500), 150, (3.0, 1.5, 1.0), 1e-3),
     [(p, s, seed) for p in PARAMS for s in ("qkfast", "ramp") for seed in (0, 1)] + [("FAFO", "equal", 0)], 2e-4),
    # float64 (the canonical head); the faster arms stop early (running loss <= target)
    (short(clean.task(1), 300, (1.3, 1.0, 0.5), 0.3), [(p, s, 3) for p in PARAMS for s in ("equal", "qkfast")], 1e-9),
    # seed 0's arms all stop early: its stream is no longer drawn and seed 1's chunks move to the first row
    (short(clean.task(1), 400, (1.3, 1.0, 0.5), 0.3),
     [(p, "qkfast", 0) for p in ("CACO", "FACO")] + [(p, "equal", 1) for p in PARAMS], 1e-9),
])
def test_batched_runs_equal_their_plain_loops(task, arms, tol):
    with one_thread():  # as the batched program (tiny tensors)
        compare_runs(task, arms, tol)


def compare_runs(task, arms, tol):
    together = batched.run(task, arms, test_size=300)
    compared = arms[::3] + arms[-1:]
    for arm in compared:
        assert_same(together[arm], plain_loop(task, *arm, test_size=300), tol)
        alone = batched.train(task, *arm, test_size=300)
        assert alone.steps == together[arm].steps
        for key in alone.final:  # the same program with one row: independent of the other rows
            np.testing.assert_allclose(alone.final[key], together[arm].final[key], rtol=1e-6, atol=1e-7)
    assert any(together[arm].at_level for arm in compared)  # the matched-loss measurements were compared
    if task.name == "clean":
        assert any(together[arm].steps < together[arm].horizon for arm in compared)  # and early stopping
    if task.name == "clean" and {seed for _, _, seed in arms} == {0, 1}:  # a stream unread from some chunk on, the other read past it
        stops = [together[arm].steps for arm in arms if arm[2] == 0]
        assert max(stops) < sampled.CHUNK * (min(together[arm].steps for arm in arms if arm[2] == 1) // sampled.CHUNK)
