"""The fixed-attention experiment: attention exactly alpha, -dL/dalpha at fixed weights on both sides, CLI."""
import copy
import csv

import numpy as np
import pytest
import torch
from qkdyn.empirical.synthetic import authors, budgets
from qkdyn.empirical.synthetic import fixed_attention as fa

from qkdyn.cli import main


def test_attention_is_alpha_on_distinct_positions_uniformly():
    data = authors.sample("FAFO", 64, torch.Generator().manual_seed(0))
    attn = fa.fixed_attention(data, 0.3)
    assert torch.allclose((attn * data.distinct).sum(dim=1), torch.full((64,), 0.3))
    assert torch.allclose(attn.sum(dim=1), torch.ones(64))
    per_position = attn / data.counts.clamp(min=1)
    b = 0
    distinct = per_position[b][(data.counts[b] > 0) & data.distinct[b]]
    assert torch.allclose(distinct, distinct[0].expand_as(distinct))  # alpha / s1 on each distinct position


@pytest.mark.parametrize("form", ["collapsed", "factorized"])
@pytest.mark.parametrize("alpha", [0.4, 1.0])
def test_scores_are_the_loss_and_its_exact_derivative_at_fixed_weights(form, alpha):
    """scores' -dL/dalpha is autograd's derivative along alpha of the model's own loss, weights held."""
    data = authors.sample("FAFO", 512, torch.Generator().manual_seed(1))
    data = type(data)(*(f.double() if f.is_floating_point() else f for f in data))
    torch.manual_seed(0)
    model = fa.FixedOV(form).double()
    at = torch.tensor(alpha, dtype=torch.float64, requires_grad=True)
    loss = fa.loss_at(model, data, at)
    exact = -torch.autograd.grad(loss, at)[0].item()
    with torch.no_grad():
        got_loss, got_fall = fa.scores([f.double() for f in fa.stack([model])], type(data)(*(f[None] for f in data)),
                                       torch.tensor([alpha], dtype=torch.float64))
    assert got_loss.item() == pytest.approx(loss.item(), rel=1e-13)
    assert got_fall.item() == pytest.approx(exact, rel=1e-10, abs=1e-15)


def _loss_at_attention():
    """The model's population loss (theory.model.model_loss, from the token counts) with the attention set to
    alpha (s = 1, b = 0, a = log(alpha n / (m (1 - alpha)))), per OV circuit, and its feature ov."""
    import sympy as sp
    from qkdyn.theory import model

    alpha = sp.Symbol("alpha", positive=True)
    gap = {"a": sp.log(alpha * model.n / (model.m * (1 - alpha))), "b": sp.S(0)}
    out = {}
    for form in ("collapsed", "factorized"):
        circuit = model.ov_circuit(form)
        out[form] = alpha, circuit, model.model_loss({**gap, **circuit.entries}).subs(model.s, 1)
    return out


@pytest.mark.parametrize("form", ["collapsed", "factorized"])
def test_fixed_weight_derivative_of_the_model_loss_is_ov_times_one_minus_e_to_minus_l(form):
    """(FW) of the module docstring from the model's definition: -dL/dalpha with every OV entry (or factor)
    held is ov (1 - e^{-L}), ov the product's margin u - w, for both OV forms (sympy, at random states)."""
    import sympy as sp
    from qkdyn.theory import model

    alpha, circuit, loss = _loss_at_attention()[form]
    fall = -sp.diff(loss, alpha)
    closed = circuit.feature * (1 - sp.exp(-loss))
    rng = np.random.default_rng(0)
    for _ in range(4):
        point = {v.symbol: sp.Float(rng.normal(0, 2), 30) for v in circuit.variables}
        point.update({alpha: sp.Float(rng.uniform(0.05, 0.95), 30), model.K: 4, model.m: 22, model.n: 40})
        assert abs(sp.N(fall.subs(point) - closed.subs(point), 30)) < 1e-25 * (1 + abs(sp.N(closed.subs(point))))


@pytest.mark.parametrize("form", ["collapsed", "factorized"])
def test_theory_side_is_the_sampled_derivative_on_one_set_of_weights(form):
    """One set of weights: the frozen-QK flow's state at each checkpoint, written into the full matrices and
    scored on the population by the sampled side's own function (fa.theory), equals (FW) at that state,
    ov (1 - e^{-L}) with ov and L from the generated module, to round-off; its loss is the flow's. The
    derivative across trajectories (the earlier theory side, two flows at alpha +- delta) is a different
    quantity: it adds how the flow's margin depends on alpha (for the factorized OV it is about z = alpha ov
    times smaller, 7x at alpha = 1)."""
    t = np.linspace(0.0, 1250.0, 6)  # the quick budget's checkpoint times
    for alpha in (0.2, 0.6, 1.0):
        loss, fall = fa.theory(alpha, form, t)
        tr, rows = fa.frozen_flow(min(alpha, fa.TOP), form, tuple(t))
        np.testing.assert_allclose(loss, tr.loss[rows], rtol=1e-12)
        np.testing.assert_allclose(fall, -tr.ov[rows] * np.expm1(-tr.loss[rows]), rtol=1e-13)
    if form == "factorized":
        assert fa.across_trajectories(1.0, form, t[-1:])[0] < fall[-1] / 5  # the mismatch the report had


def test_across_trajectories_is_one_minus_e_to_minus_l_times_dz_dalpha():
    """Collapsed OV, z = alpha ov: e^z + (K-1) z = e^{z0} + (K-1) z0 + eta_OV alpha^2 t / D (theory.frozen),
    so dz/dalpha = (ov0 (e^{z0} + K-1) + 2 eta_OV alpha t / D) / (e^z + K - 1), and across trajectories
    -dL/dalpha = (1 - e^{-L}) dz/dalpha, to the central difference's O(delta^2) (1.7e-4 relative at delta =
    0.005, 4x less at half of it)."""
    alpha, t = 0.6, np.array([0.0, 50.0, 1250.0])
    tr, rows = fa.frozen_flow(alpha, "collapsed", tuple(t))
    s, k1 = tr.setting, tr.setting.classes - 1
    z, z0 = alpha * tr.ov[rows], alpha * s.ov0
    dz = (s.ov0 * (np.exp(z0) + k1) + 2 * s.eta_ov * alpha * t / s.distinct) / (np.exp(z) + k1)
    np.testing.assert_allclose(fa.across_trajectories(alpha, "collapsed", t), -np.expm1(-tr.loss[rows]) * dz,
                               rtol=5e-4)


def test_run_and_theory_agree_on_direction():
    run = fa.train("collapsed", 0.6, seed=0, steps=60, eval_size=256, checkpoints=3)
    assert run.attn_distinct == pytest.approx(0.6, abs=1e-6) and run.loss[-1] < run.loss[0]
    loss, fall = fa.theory(0.6, "collapsed", run.t)
    assert loss[-1] < loss[0] and np.all(fall[1:] > 0)


def test_cli_writes_csv_and_rejects_bad_alphas(tmp_path, capsys):
    out = tmp_path / "fa.csv"
    code = main(["fixed-attention", "--alphas", "0.5,1", "--forms", "collapsed", "--seeds", "0,1", "--steps", "60",
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
        losses, falls = [], []
        for step in range(steps + 1):
            if step in (0, 50, 100, 150):  # scored in float64, as the grid scores its checkpoints
                exact = copy.deepcopy(model).double()
                at = torch.tensor(alpha, dtype=torch.float64, requires_grad=True)
                here = fa.loss_at(exact, scored, at)
                losses.append(here.item())
                falls.append(-torch.autograd.grad(here, at)[0].item())  # -dL/dalpha, weights held
            if step == steps:
                break
            if step % CHUNK == 0:
                chunk = next(stream)
            opt.zero_grad()
            fa.loss_at(model, Batch(*(f[step % CHUNK] for f in chunk)), alpha).backward()
            opt.step()
        run = runs[(form, alpha, seed)]
        np.testing.assert_allclose(run.loss, losses, rtol=1e-5)
        np.testing.assert_allclose(run.fall, falls, rtol=1e-5)
        alone = fa.train(form, alpha, seed, steps, eval_size=256, checkpoints=checkpoints)
        np.testing.assert_allclose(alone.loss, run.loss, rtol=1e-6)
