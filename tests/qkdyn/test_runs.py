"""The one run-directory format (qkdyn.runs): the record round-trips, old records are still read, old or
foreign checkpoints are refused in one line, and restore puts back every state that save wrote."""
import json
import math

import pytest
import torch

from qkdyn.errors import InputError
from qkdyn.runs import CHECKPOINT, RESULT, RunDir, RunRecord, read_record


def _record(**kw) -> RunRecord:
    fields = dict(trainer="lm", config={"model": {"d": 4}, "train": {"seed": 0}}, steps=3, parameters=10,
                  train_seconds={"wall": 1.5, "cpu": 1.25}, final={"val_ppl": 9.5, "val_loss": math.nan},
                  details={"tokens": 96})
    return RunRecord(**{**fields, **kw})


def test_a_record_round_trips_through_result_json(tmp_path):
    record = _record()
    with RunDir(tmp_path / "run", record.config) as rundir:
        rundir.write_record(record)
        back = read_record(rundir.result)
        assert rundir.finished() == back
    assert back.to_dict().keys() == record.to_dict().keys() and back.schema == 1
    assert math.isnan(back.final["val_loss"]) and {**back.final, "val_loss": 0} == {**record.final, "val_loss": 0}
    assert dict(back.to_dict(), final=None) == dict(record.to_dict(), final=None)
    assert RunDir(tmp_path / "run", {"model": {"d": 5}}).finished() is None  # another configuration's record


@pytest.mark.parametrize("change,words", [({"schema": 2}, "schema 2"), ({"steps": "3"}, "steps is not a int"),
                                         ({"trainer": None, "schema": None}, "schema None")])
def test_a_record_of_another_schema_or_shape_is_one_line(tmp_path, change, words):
    (tmp_path / RESULT).write_text(json.dumps({**_record().to_dict(), **change}))
    with pytest.raises(InputError, match=words):
        read_record(tmp_path / RESULT)


def test_records_written_before_the_schema_are_still_read():
    old_lm = {"model": {"attention": {"kind": "standard"}}, "train": {"seed": 1, "max_steps": 4}, "world_size": 1,
              "task": "mqar", "parameters": 100, "steps": 4, "tokens": 512, "train_time_s": 2.0, "tokens_per_s": 256.0,
              "final": {"mqar_acc": 0.5}, "evals": [], "ablation": {}}
    lm = RunRecord.from_dict(old_lm)
    assert (lm.trainer, lm.steps, lm.parameters, lm.final) == ("mqar", 4, 100, {"mqar_acc": 0.5})
    assert lm.config == {"model": old_lm["model"], "train": old_lm["train"], "world_size": 1, "task": "mqar"}
    assert lm.details == {"tokens": 512, "train_time_s": 2.0, "tokens_per_s": 256.0, "evals": [], "ablation": {}}
    assert lm.train_seconds["wall"] == 2.0 and math.isnan(lm.train_seconds["cpu"])
    old_circuits = {"config": {"seed": 0}, "classes": ["a", "b"], "vocab_size": 7, "n_parameters": 50, "steps": 10,
                    "stopped_at": 6, "target_reached": True, "final_train_loss": 0.1, "n_train": 20,
                    "train_seconds": {"wall": 1.0, "cpu": 1.0}, "final_eval_seconds": {"wall": 0.1, "cpu": 0.1},
                    "dev": {"accuracy": 0.5}, "test": {"accuracy": 0.75}}
    circuits = RunRecord.from_dict(old_circuits)
    assert (circuits.trainer, circuits.steps, circuits.parameters) == ("circuits", 6, 50)
    assert circuits.final == {"dev": {"accuracy": 0.5}, "test": {"accuracy": 0.75}}
    assert circuits.details["planned_steps"] == 10 and circuits.details["target_reached"] is True
    with pytest.raises(InputError, match="not a run record"):
        RunRecord.from_dict({"something": "else"})


class _Counter:
    """A batch source with a position (the data part of a checkpoint)."""

    def __init__(self):
        self.position = 0

    def state_dict(self):
        return {"position": self.position}

    def load_state_dict(self, state):
        self.position = state["position"]


def _parts(seed=0):
    torch.manual_seed(seed)
    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, 1, gamma=0.5)
    return model, optimizer, scheduler, _Counter()


def _steps(model, optimizer, scheduler, data, n):
    for _ in range(n):
        model(torch.randn(4, 3)).square().sum().backward()  # draws from the global RNG
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad()
        data.position += 1


def test_restore_puts_back_every_state_save_wrote(tmp_path):
    config = {"lr": 0.1}
    model, optimizer, scheduler, data = _parts()
    with RunDir(tmp_path / "run", config) as rundir:
        assert rundir.restore(model, optimizer, scheduler, data) is None  # fresh: nothing to restore
        _steps(model, optimizer, scheduler, data, 3)
        rundir.log({"step": 3, "loss": 1.0})
        rundir.save(3, model, optimizer, scheduler, data, extra={"running": 2.5})
        rundir.log({"step": 4, "loss": 0.5})  # after the checkpoint: dropped on resume
        _steps(model, optimizer, scheduler, data, 2)
        expected = {k: v.clone() for k, v in model.state_dict().items()}
    model2, optimizer2, scheduler2, data2 = _parts(seed=1)  # other initial weights, all overwritten
    with RunDir(tmp_path / "run", config) as rundir:
        restored = rundir.restore(model2, optimizer2, scheduler2, data2)
        assert (restored.step, restored.extra, data2.position) == (3, {"running": 2.5}, 3)
        assert [row["step"] for row in rundir.rows()] == [3]
        _steps(model2, optimizer2, scheduler2, data2, 2)
    assert all(torch.equal(expected[k], v) for k, v in model2.state_dict().items())  # same RNG, same updates
    assert scheduler2.get_last_lr() == scheduler.get_last_lr()
    with RunDir(tmp_path / "run", {"lr": 0.2}) as rundir, pytest.raises(InputError, match="different configuration"):
        rundir.restore(*_parts())


def test_old_checkpoints_are_refused_in_one_line(tmp_path):
    old = tmp_path / "old"
    old.mkdir()
    torch.save({"step": 1, "config": {}, "model": {}}, old / "ckpt.pt")  # the old lm/mqar name
    with RunDir(old, {}) as rundir, pytest.raises(InputError, match="older qkdyn"):
        rundir.restore(*_parts()[:2])
    (old / "ckpt.pt").rename(old / CHECKPOINT)  # the old circuits layout: no format
    with RunDir(old, {}) as rundir, pytest.raises(InputError, match=r"older qkdyn \(format None"):
        rundir.restore(*_parts()[:2])


def _checkpoint_then(tmp_path, change):
    """A run with two metric rows and a checkpoint at step 1, the checkpoint then edited by ``change``."""
    model, optimizer, scheduler, data = _parts()
    with RunDir(tmp_path / "run", {}) as rundir:
        rundir.restore(model, optimizer, scheduler, data)
        rundir.log({"step": 1, "loss": 1.0})
        rundir.save(1, model, optimizer, scheduler, data)
        rundir.log({"step": 2, "loss": 0.5})
    state = torch.load(tmp_path / "run" / CHECKPOINT, weights_only=True)
    change(state)
    torch.save(state, tmp_path / "run" / CHECKPOINT)
    return (tmp_path / "run" / "metrics.jsonl").read_bytes()


@pytest.mark.parametrize("change, words", [
    (lambda s: s.update(step=-5), "step -5 is not a count"),
    (lambda s: s.update(step=2.5), "step 2.5 is not a count"),
    (lambda s: s["model"].update(weight=torch.zeros(7, 7)), "damaged"),  # another shape
])
def test_a_bad_checkpoint_is_refused_before_the_metrics_are_touched(tmp_path, change, words):
    metrics = _checkpoint_then(tmp_path, change)
    with RunDir(tmp_path / "run", {}) as rundir, pytest.raises(InputError, match=words):
        rundir.restore(*_parts())
    assert (tmp_path / "run" / "metrics.jsonl").read_bytes() == metrics
