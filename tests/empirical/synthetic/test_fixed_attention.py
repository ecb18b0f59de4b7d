"""The fixed-attention experiment: attention exactly alpha, CRN derivative, theory beside it, CLI."""
import copy
import csv

import numpy as np
import pytest
import torch

from qkdyn.cli import main
from qkdyn.empirical.synthetic import authors, budgets
from qkdyn.empirical.synthetic import fixed_attention as fa


def test_attention_is_alpha_on_distinct_positions_uniformly():
    data = authors.sample("FAFO", 64, torch.Generator().manual_seed(0))
    attn = fa.fixed_attention(data, 0.3)
    assert torch.allclose((attn * data.distinct).sum(dim=1), torch.full((64,), 0.3))
    assert torch.allclose(attn.sum(dim=1), torch.ones(64))
    per_position = attn / data.counts.clamp(min=1)
    b = 0
    distinct = per_position[b][(data.counts[b] > 0) & data.distinct[b]]
    assert torch.allclose(distinct, distinct[0].expand_as(distinct))  # alpha / s1 on each distinct position


def test_common_random_numbers_derivative_matches_autograd():
    """Same samples and weights at alpha and alpha + delta: the difference is the derivative, not noise."""
    data = authors.sample("FAFO", 512, torch.Generator().manual_seed(1))
    torch.manual_seed(0)
    model = fa.FixedOV("factorized")
    alpha = torch.tensor(0.4, requires_grad=True)
    exact = torch.autograd.grad(fa.loss_at(model, data, alpha), alpha)[0].item()
    with torch.no_grad():
        crn = (fa.loss_at(model, data, 0.4 + fa.DELTA) - fa.loss_at(model, data, 0.4)).item() / fa.DELTA
    assert crn == pytest.approx(exact, rel=1e-2, abs=1e-6)


def test_run_and_theory_agree_on_direction():
    run = fa.train("collapsed", 0.6, seed=0, steps=60, eval_size=256, checkpoints=3)
    assert run.attn_distinct == pytest.approx(0.6, abs=1e-6) and run.loss[-1] < run.loss[0]
    loss, fall = fa.theory(0.6, "collapsed", run.t)
    assert loss[-1] < loss[0] and np.all(fall[1:] > 0)


def test_cli_writes_csv_and_rejects_bad_alphas(tmp_path, capsys):
    out = tmp_path / "fa.csv"
    code = main(["fixed-attention", "--alphas", "0.5,1", "--forms", "collapsed", "--seeds", "2", "--steps", "60",
                 "--eval-size", "128", "--checkpoints", "3", "--figures", str(tmp_path), "--out", str(out)])
    assert code == 0 and (tmp_path / "fixed_attention.png").exists()
    rows = list(csv.DictReader(out.open()))
    assert len(rows) == 2 * 2 * 3 and set(rows[0]) >= {"alpha", "loss", "minus_dL_dalpha", "theory_loss"}
    assert "FA " in capsys.readouterr().out
    assert main(["fixed-attention", "--alphas", "0,0.5", "--out", str(tmp_path / "x.csv")]) == 2
    assert not (tmp_path / "x.csv").exists()


def test_batched_runs_equal_their_plain_loops():
    """Every run of the one tensor program equals its plain nn.Linear + torch.optim.SGD loop (same stream)."""
    from qkdyn.empirical.synthetic.sampled import CHUNK, Batch, draw_chunks

    steps, checkpoints = 150, 4
    runs = fa.grid(budgets.FORMS, (0.4, 1.0), (0, 1), steps, eval_size=256, checkpoints=checkpoints)
    for form, alpha, seed in [("collapsed", 0.4, 1), ("factorized", 1.0, 0), ("factorized", 0.4, 1)]:
        lr = fa.NOTEBOOK_LR * fa.NOTEBOOK_STEPS / steps
        stream = draw_chunks(lambda size, g: authors.sample(fa.SEQ, size, g), fa.BATCH, seed)
        evaluation = authors.sample(fa.SEQ, 256, torch.Generator().manual_seed(20_000 + seed))
        scored = Batch(*(f.double() if f.is_floating_point() else f for f in evaluation))
        torch.manual_seed(seed)
        model = fa.FixedOV(form)
        opt = torch.optim.SGD(model.parameters(), lr=lr)
        other = alpha - fa.DELTA if alpha + fa.DELTA > 1 else alpha + fa.DELTA
        losses, falls = [], []
        for step in range(steps + 1):
            if step in (0, 50, 100, 150):  # scored in float64, as the grid scores its checkpoints
                with torch.no_grad():
                    exact = copy.deepcopy(model).double()
                    here = fa.loss_at(exact, scored, alpha).item()
                    there = fa.loss_at(exact, scored, other).item()
                losses.append(here)
                falls.append((here - there) / (other - alpha))
            if step == steps:
                break
            if step % CHUNK == 0:
                chunk = next(stream)
            opt.zero_grad()
            fa.loss_at(model, Batch(*(f[step % CHUNK] for f in chunk)), alpha).backward()
            opt.step()
        run = runs[(form, alpha, seed)]
        np.testing.assert_allclose(run.loss, losses, rtol=1e-5)
        np.testing.assert_allclose(run.fall, falls, rtol=2e-3, atol=2e-3)  # a difference of two losses / 0.005
        alone = fa.train(form, alpha, seed, steps, eval_size=256, checkpoints=checkpoints)
        np.testing.assert_allclose(alone.loss, run.loss, rtol=1e-6)
