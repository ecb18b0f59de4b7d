"""The shared training loop (qkdyn.empirical.loop): a killed run resumes to the uninterrupted run's result,
divergence is one line, and the checkpointed trainers run on it (no loop of their own)."""
import ast
import json

import pytest
import torch
from qkdyn.empirical import loop
from repo_paths import ROOT

from qkdyn.errors import InputError
from qkdyn.runs import Clock, RunDir


class Regression:
    """A tiny trainer: least squares on fresh random batches (the global torch RNG), SGD."""

    hint = "try a smaller --lr"
    shown = ("loss",)
    done = False

    def __init__(self, total: int, lr: float = 0.1, blow_up_at: int | None = None):
        torch.manual_seed(0)
        self.model = torch.nn.Linear(4, 1)
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=lr, momentum=0.9)
        self.total, self.blow_up_at, self.clock = total, blow_up_at, Clock()
        self.target = torch.arange(4.0)

    def backward(self, step: int) -> float:
        x = torch.randn(8, 4)
        loss = (self.model(x).squeeze(-1) - x @ self.target).square().mean()
        if step == self.blow_up_at:
            loss = loss * float("nan")
        loss.backward()
        return loss.item()

    def update(self, step: int) -> None:
        self.optimizer.step()
        self.optimizer.zero_grad()

    def estimate_loss(self, step: int) -> dict:
        with torch.no_grad():
            return {"step": step, "loss": float(self.model.weight.sub(self.target).square().sum())}

    def save(self, rundir: RunDir, step: int) -> None:
        rundir.save(step, self.model, self.optimizer, clock=self.clock)


def _train(out, stop_after=None, blow_up_at=None, total=10):
    trainer = Regression(total, blow_up_at=blow_up_at)
    with RunDir(out, {"total": total}) as rundir:
        restored = rundir.restore(trainer.model, trainer.optimizer)
        start = restored.step if restored else 0
        step = loop.run(trainer, rundir, start, loop.Intervals(eval_every=2, ckpt_every=3, eval_at_start=True),
                        stop_after=stop_after)
    return step, trainer.model.state_dict()


def test_a_killed_run_resumes_to_the_uninterrupted_result(tmp_path):
    step, full = _train(tmp_path / "a")
    assert step == 10
    assert _train(tmp_path / "b", stop_after=7)[0] is None  # killed after step 7
    assert torch.load(tmp_path / "b" / "checkpoint.pt", weights_only=True)["step"] == 6  # the last checkpoint
    rows = [json.loads(line)["step"] for line in (tmp_path / "b" / "metrics.jsonl").read_text().splitlines()]
    assert rows == [0, 2, 4, 6]
    step, resumed = _train(tmp_path / "b")
    assert step == 10 and all(torch.equal(full[k], resumed[k]) for k in full)
    assert (tmp_path / "a" / "metrics.jsonl").read_text() == (tmp_path / "b" / "metrics.jsonl").read_text()
    assert _train(tmp_path / "b")[0] == 10  # resumed at the end: nothing repeated
    assert (tmp_path / "a" / "metrics.jsonl").read_text() == (tmp_path / "b" / "metrics.jsonl").read_text()


def test_a_divergence_stops_before_the_update_and_keeps_the_last_checkpoint(tmp_path):
    with pytest.raises(InputError, match=r"diverged at step 5: the training loss is nan \(the checkpoint of step 3 "
                                         r"is kept\); try a smaller --lr"):
        _train(tmp_path / "run", blow_up_at=4)
    state = torch.load(tmp_path / "run" / "checkpoint.pt", weights_only=True)
    assert state["step"] == 3 and all(bool(torch.isfinite(v).all()) for v in state["model"].values())


@pytest.mark.parametrize("module", ["empirical/circuits/train.py", "empirical/coupled/train.py"])
def test_the_checkpointed_trainers_run_on_the_shared_loop(module):
    """They call ``loop.run`` and have no training loop of their own (no ``while``, no loop over steps)."""
    tree = ast.parse((ROOT / module).read_text())
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
             and isinstance(n.func.value, ast.Name) and (n.func.value.id, n.func.attr) == ("loop", "run")]
    assert len(calls) == 1
    assert not [n for n in ast.walk(tree) if isinstance(n, ast.While)]
    steps = [n for n in ast.walk(tree) if isinstance(n, ast.For) and isinstance(n.iter, ast.Call)
             and getattr(n.iter.func, "id", "") == "range"]
    assert not steps


def test_a_resumed_run_says_from_which_step(tmp_path, capsys):
    _train(tmp_path / "a", stop_after=5)
    assert "resuming" not in capsys.readouterr().err
    _train(tmp_path / "a")
    assert f"resuming from step 3 of 10 (the checkpoint in {tmp_path / 'a'})" in capsys.readouterr().err
