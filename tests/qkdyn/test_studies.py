"""The study interface (qkdyn.studies): specs, pure claims on fake records, missing runs, and the
executors: local pool, Ray and the plan path (a shell loop over `qkdyn plan`'s commands) give the
same claims; killing the driver leaves no worker behind."""
import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from qkdyn.cli import main
from qkdyn.runs import RunRecord
from qkdyn.studies import Record, RunSpec, Study, get, judge, save

QKDYN = str(Path(sys.executable).with_name("qkdyn"))


def test_run_spec_is_hashable_and_round_trips():
    spec = RunSpec.make("fixed-attention", "x", alpha=0.2, seeds=[0, 1], form="collapsed")
    assert hash(spec) == hash(RunSpec.make("fixed-attention", "x", form="collapsed", seeds=(0, 1), alpha=0.2))
    assert RunSpec.from_dict(json.loads(spec.to_json())) == spec
    assert spec.params["seeds"] == [0, 1]
    for bad in ({1, 2}, object(), float("nan"), float("inf"), {1: "a"}, [{"a": {"b": set()}}]):
        with pytest.raises(TypeError, match="RunSpec config"):
            RunSpec.make("s", "n", value=bad)


def test_run_spec_config_may_be_nested():
    """A nested config round-trips exactly (dicts stay dicts, lists stay lists) and its key order does
    not matter: equality, hash and digest are those of the canonical JSON."""
    nested = {"train": {"lr": 0.1, "steps": [1, 2]}, "model": {"attention": {"kind": "coupled"}, "sizes": []}}
    spec = RunSpec.make("coupled", "x", cpus=2, gpus=0.5, kind="train", run=nested)
    assert spec.params == {"kind": "train", "run": nested}
    assert RunSpec.from_dict(json.loads(spec.to_json())) == spec
    assert RunSpec.from_dict(spec.to_dict()).params["run"] == nested
    reordered = RunSpec.make("coupled", "x", run={"model": {"sizes": [], "attention": {"kind": "coupled"}},
                                                  "train": {"steps": [1, 2], "lr": 0.1}}, kind="train", gpus=0.5, cpus=2)
    assert reordered == spec and hash(reordered) == hash(spec) and reordered.digest == spec.digest
    assert len(spec.digest) == 64 and {spec: 1}[reordered] == 1
    changed = RunSpec.make("coupled", "x", cpus=2, gpus=0.5, kind="train", run={**nested, "train": {"lr": 0.2}})
    assert changed != spec and changed.digest != spec.digest
    assert RunSpec.make("s", "n", a=1) != RunSpec.make("s", "n", a=1.0)  # the canonical JSON differs
    with pytest.raises(TypeError):  # held immutable: the identity cannot change after hashing
        dict(spec.config)["run"]["train"] = {}


def test_a_record_is_its_specs_whatever_resources_either_asked_for(tmp_path):
    """cpus and gpus are requests, not the run: a record written under a spec planned on a GPU machine is the
    record of the same spec planned on a CPU one. Everything else must match exactly (1 is not 1.0)."""
    study = get("fixed-attention")
    on_gpu = RunSpec.make("fixed-attention", "x", cpus=2, gpus=0.1, alpha=1.0, seeds=[0, 1])
    save(Record(on_gpu, {"loss": 0.5}, tmp_path), tmp_path)
    here = RunSpec.make("fixed-attention", "x", alpha=1.0, seeds=[0, 1])
    assert here != on_gpu and (here.cpus, here.gpus) == (1.0, 0.0)
    record = study.load(here, tmp_path)
    assert record is not None and record.spec == here and record.result == {"loss": 0.5}
    for other in (RunSpec.make("fixed-attention", "x", alpha=1, seeds=[0, 1]),  # another config: another run
                  RunSpec.make("fixed-attention", "x", alpha=1.0, seeds=[0]),
                  RunSpec.make("fixed-attention", "x", alpha=1.0, seeds=[0, 1], form="collapsed")):
        assert study.load(other, tmp_path) is None
    path = study.record_path(here, tmp_path)
    path.write_text(json.dumps({"spec": {**json.loads(here.to_json()), "study": "a6"}, "result": {}}))
    assert study.load(here, tmp_path) is None  # another study's spec at this path
    path.write_text(json.dumps({"spec": [], "result": {}}))
    assert study.load(here, tmp_path) is None


def test_every_study_plans_every_budget_with_unique_names():
    for name in ("theory", "a6", "sampled", "fixed-attention", "stability", "circuits", "coupled"):
        study = get(name)
        for budget in ("quick", "cpu", "gpu", "paper"):
            specs = study.plan(budget)
            assert specs and len({s.name for s in specs}) == len(specs) == len(set(specs))
            assert all(s.study == name for s in specs)


class _Timed(Study):
    """A study whose runs record the order they ran in (no work)."""

    name = "timed"
    costs = {"long": 50.0, "middle": 5.0}

    def __init__(self):
        self.ran = []

    def run(self, spec, runs_dir):
        self.ran.append(spec.name)
        return Record(spec, {}, Path(runs_dir))


def test_the_executor_starts_the_longest_runs_first(tmp_path):
    from qkdyn.executors import execute_all

    study = _Timed()
    specs = [RunSpec.make("timed", name) for name in ("short", "middle", "unlisted", "long")]
    done = [record.spec.name for _, record in execute_all([(study, specs)], tmp_path, "local", workers=1)]
    assert done == study.ran == ["long", "middle", "short", "unlisted"]  # ties keep the plan's order
    # the verify studies declare their long runs (measured CPU-s per run): the two sampled programs start first
    queue = [(get(n), spec) for n in ("theory", "a6", "sampled") for spec in get(n).plan("cpu")]
    first = sorted(queue, key=lambda job: -job[0].cost(job[1]))[:2]
    assert {spec.name for _, spec in first} == {"authors", "clean"}


def _fake_records(study, budget, slope):
    """Records of the fixed-attention plan (one per OV form) with made-up loss curves: L(alpha) = 2 - slope alpha t."""
    records = {}
    for spec in study.plan(budget):
        p, runs = spec.params, []
        t = np.linspace(0, 1, p["checkpoints"])
        for alpha in p["alphas"]:
            for seed in p["seeds"]:
                noise = 1e-3 * (seed + 1)
                runs.append({"alpha": alpha, "seed": seed, "t": t.tolist(), "loss": (2 - slope * alpha * t + noise).tolist(),
                             "fall": (slope * t + noise).tolist(), "attn_distinct": alpha})
        records[spec] = Record(spec, {"runs": runs}, Path())
    return records


def test_fixed_attention_claims_are_judged_from_records_alone():
    study = get("fixed-attention")
    specs = study.plan("quick")
    holds = judge(study, "quick", specs, _fake_records(study, "quick", slope=1.0))
    assert [c.id for c in holds] == ["FA"]
    # loss falling faster with alpha: the loss parts hold; the theory part is a check of the flow
    assert all(v == "holds" for k, v in holds[0].parts.items() if "loss at alpha" in k)
    reversed_ = judge(study, "quick", specs, _fake_records(study, "quick", slope=-1.0))[0]
    assert all(v != "holds" for k, v in reversed_.parts.items() if "loss at alpha" in k)
    assert reversed_.verdict != "holds"


def test_missing_runs_make_every_claim_inconclusive_k_of_n():
    study = get("fixed-attention")
    specs = study.plan("quick")
    records = dict(list(_fake_records(study, "quick", 1.0).items())[:1])
    (claim,) = judge(study, "quick", specs, records)
    assert claim.verdict == "inconclusive" and f"1 of {len(specs)} runs" in claim.summary


def test_report_of_an_empty_runs_dir_is_inconclusive(tmp_path, capsys):
    assert main(["report", "fixed-attention", "--budget", "quick", "--runs", str(tmp_path / "runs"),
                 "--figures", str(tmp_path / "out")]) == 0
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert [c["verdict"] for c in report["claims"]] == ["inconclusive"]
    assert "0 of 2 runs" in report["claims"][0]["summary"]  # one run per OV form


def test_bad_spec_and_unknown_study_are_one_line(capsys):
    assert main(["run", "fixed-attention", "--spec", "{not json"]) == 2
    assert main(["plan", "fixd-attention"]) == 2
    err = capsys.readouterr().err
    assert "did you mean 'fixed-attention'" in err and "Traceback" not in err


def _claims(path: Path) -> list:
    return json.loads((path / "report.json").read_text())["claims"]


@pytest.mark.slow
def test_local_ray_and_plan_path_give_the_same_claims(tmp_path):
    pytest.importorskip("ray")
    quick = ["--study", "fixed-attention", "--budget", "quick", "--no-progress"]
    assert main(["verify", *quick, "--workers", "2", "--runs", str(tmp_path / "local"),
                 "--figures", str(tmp_path / "local-out")]) == 0
    assert main(["verify", *quick, "--executor", "ray", "--runs", str(tmp_path / "ray"),
                 "--figures", str(tmp_path / "ray-out")]) == 0
    runs = tmp_path / "plan"
    lines = subprocess.run([QKDYN, "plan", "fixed-attention", "--budget", "quick", "--runs", str(runs)],
                           capture_output=True, text=True, check=True).stdout.splitlines()
    assert len(lines) == 2  # one run per OV form
    env = dict(os.environ, PATH=f"{Path(QKDYN).parent}:{os.environ['PATH']}")
    script = "\n".join(json.loads(line)["command"] for line in lines)  # what a Slurm array would run
    subprocess.run(["bash", "-euc", script], check=True, env=env, capture_output=True)
    assert subprocess.run([QKDYN, "plan", "fixed-attention", "--budget", "quick", "--runs", str(runs)],
                          capture_output=True, text=True, check=True).stdout == ""  # nothing left to run
    assert main(["report", "fixed-attention", "--budget", "quick", "--runs", str(runs),
                 "--figures", str(tmp_path / "plan-out")]) == 0
    local = _claims(tmp_path / "local-out")
    assert local[0]["verdict"] in ("holds", "fails", "partial", "inconclusive")
    assert _claims(tmp_path / "ray-out") == local
    assert _claims(tmp_path / "plan-out") == local
    for name in ("report.md", "report.json"):  # the report is reproducible: no timings, no clock
        assert (tmp_path / "local-out" / name).read_text() == (tmp_path / "ray-out" / name).read_text()


def _descendants(pid: int) -> set[int]:
    """Live (not zombie) descendants of ``pid``, from /proc."""
    parent = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if fields[0] != "Z":
                parent[int(entry.name)] = int(fields[1])
    found, frontier = set(), {pid}
    while frontier:
        frontier = {child for child, ppid in parent.items() if ppid in frontier} - found
        found |= frontier
    return found


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
@pytest.mark.parametrize("kill", [signal.SIGKILL, signal.SIGTERM], ids=["SIGKILL", "SIGTERM"])
def test_killing_the_driver_leaves_no_worker(tmp_path, kill):
    """SIGKILL: the workers die with their parent; SIGTERM: the driver stops at once (exit 130), killing
    its running workers instead of waiting for their runs to finish."""
    driver = subprocess.Popen([QKDYN, "verify", "--study", "fixed-attention", "--budget", "quick", "--workers", "2",
                               "--no-progress", "--runs", str(tmp_path / "runs"), "--figures", str(tmp_path / "out")],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline, workers = time.monotonic() + 120, set()
        while time.monotonic() < deadline and len(workers) < 2:
            time.sleep(0.5)
            workers = _descendants(driver.pid)
        assert len(workers) >= 2, "the pool never started"
        time.sleep(2)
        workers = _descendants(driver.pid)
    finally:
        driver.send_signal(kill)
        returncode = driver.wait(timeout=30)
    assert returncode == (-signal.SIGKILL if kill == signal.SIGKILL else 130)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and any(_alive(p) for p in workers):
        time.sleep(0.5)
    assert not [p for p in workers if _alive(p)]


def _circuits_records(study, gain, all_gain=0.0, uniform=0.1, loss=1.0):
    """Fake finished circuits runs: mass 0.2 + gain for the QK arm at R > 1 (+ all_gain for the
    all-parameters arm), seed noise, same accuracy; uniform attention's mass ``uniform``, training loss
    at the stop ``loss``."""
    records = {}
    for spec in study.plan("quick"):
        p = spec.params
        up = gain if p["arm"] == "qk" and p["ratio"] != 1.0 else all_gain if p["arm"] == "all" else 0.0
        mass = 0.2 + up + 0.01 * p["seed"] ** 2
        test = {"accuracy": 0.8 + 0.001 * p["seed"], "attention_mass": mass + 0.1,
                "attention_mass_without_readout": mass, "uniform_mass": uniform + 0.1,
                "uniform_mass_without_readout": uniform}
        run = RunRecord("circuits", spec.params, steps=10, parameters=100, train_seconds={"wall": 1.0, "cpu": 1.0},
                        final={"dev": test, "test": test}, details={"final_train_loss": loss})
        records[spec] = Record(spec, run.to_dict(), Path())
    return records


def test_circuits_claims_are_judged_from_records_alone():
    from qkdyn.empirical.circuits.study import CircuitsStudy

    study = CircuitsStudy(task="sva", seeds=(0, 1, 2))  # quick: target loss 50, control arm all x30
    specs = study.plan("quick")
    assert {(s.params["arm"], s.params["ratio"]) for s in specs} == {("qk", 1.0), ("qk", 30.0), ("all", 30.0)}
    sharper, beyond, faithful = judge(study, "quick", specs, _circuits_records(study, gain=0.2))
    assert sharper.id == "sva QK x30" and sharper.parts["sharper attention"] == "holds"
    assert beyond.id == "sva QK x30 beyond all x30" and beyond.verdict == "holds"
    assert faithful.id == "sva QK x30 faithfulness" and faithful.verdict == "inconclusive"  # no ERASER recorded
    assert sharper.stats["attention mass (primary)"]["mde"] > 0  # the detectable effect beside the verdict
    flat, _, _ = judge(study, "quick", specs, _circuits_records(study, gain=-0.2))
    assert flat.parts["sharper attention"] != "holds"
    _, everything, _ = judge(study, "quick", specs, _circuits_records(study, gain=0.2, all_gain=0.2))
    assert everything.verdict != "holds"  # faster everything sharpens as much: not a QK effect


def test_circuits_baseline_at_uniform_or_off_target_is_inconclusive():
    """A same-lr arm whose mass is uniform attention's cannot be the baseline of a 'sharper' verdict;
    nor can runs that stopped above the target training loss (not at matched loss)."""
    from qkdyn.empirical.circuits.study import CircuitsStudy

    study = CircuitsStudy(task="sva", seeds=(0, 1, 2))
    specs = study.plan("quick")
    for records, unmet in ((_circuits_records(study, gain=0.2, uniform=0.2), "attends away from uniform"),
                           (_circuits_records(study, gain=0.2, loss=60.0), "reached the target training loss")):
        for claim in judge(study, "quick", specs, records):
            assert claim.verdict == "inconclusive" and all(v == "inconclusive" for v in claim.parts.values())
            assert [p["name"] for p in claim.preconditions if not p["met"]][0].endswith(unmet)


def test_brown_qa_cpu_budget_is_the_ramped_design_and_its_report_says_so():
    """A plain ``--budget cpu`` on brown-qa plans the committed recipe: the QK multiplier ramped over
    2000 steps, the task's 4-epoch cap, nothing REDUCED; the report's scale line states the ramp."""
    from qkdyn.empirical.circuits.study import CircuitsStudy, scale_note

    study = CircuitsStudy(task="brown-qa")
    configs = study.configs("cpu")
    assert study.reductions("cpu") == []
    assert {(arm, ratio) for _, arm, ratio in configs} == {("qk", 1.0)} | {
        (arm, r) for arm in ("qk", "all") for r in (10.0, 30.0, 100.0)}
    assert {(c.qk_ramp_steps, c.epochs, c.target_loss) for c in configs.values()} == {(2000, 4.0, 2.0)}
    same = configs[0, "qk", 1.0]
    note = scale_note({"config": dataclasses.asdict(same), "n_train": 10, "n_parameters": 20}, 35, 600.0)
    assert "multiplier ramped linearly from 1 to R over the first 2000 steps" in note and "10.0 CPU minutes" in note
    unramped = dataclasses.replace(study, overrides={"qk_ramp_steps": 0})
    assert "ramp" not in scale_note({"config": dataclasses.asdict(unramped.configs("cpu")[0, "qk", 1.0]),
                                     "n_train": 10, "n_parameters": 20}, 35, 600.0)
    assert unramped.reductions("cpu") == ["REDUCED from the cpu budget: fields set over the preset: qk_ramp_steps=0."]
    assert dataclasses.replace(study, max_epochs=12.0).reductions("cpu") == [
        "REDUCED from the cpu budget: a cap of 12 epochs instead of 4."]
    assert CircuitsStudy(task="brown-sva").configs("cpu")[0, "qk", 1.0].epochs == 12.0  # the default cap


def test_planning_the_verify_studies_loads_neither_torch_nor_matplotlib():
    """``qkdyn verify`` plans in the driver before any worker starts: the plans come from data
    (``empirical/synthetic/budgets.py``), not from the experiment modules (torch, scipy, matplotlib:
    seconds before the first run)."""
    code = ("import sys; from qkdyn.studies import VERIFY, get\n"
            "for name in VERIFY:\n    [get(name).plan(b) for b in ('quick', 'cpu')]\n"
            "print(sorted(m for m in ('torch', 'matplotlib', 'scipy') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_check_accepts_a_planned_spec_whatever_resources_it_asked_for():
    """A plan line made on a GPU machine (gpus > 0) is a run of the study on a CPU one, and the reverse;
    another run is still refused."""
    from qkdyn.empirical.synthetic.study import StabilityStudy

    from qkdyn.errors import InputError

    study = StabilityStudy()
    spec = study.plan("quick")[0]
    study.check(dataclasses.replace(spec, cpus=3.0, gpus=0.5))
    with pytest.raises(InputError, match="not a run of study"):
        study.check(dataclasses.replace(spec, name="elsewhere"))
