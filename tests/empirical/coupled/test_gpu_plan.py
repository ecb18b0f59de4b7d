"""scripts/coupled_gpu.py: the GPU plan that decides B1 in one command (docs/coupled.md, "The GPU plan").
Its arithmetic and packing on hand-made inputs, and the whole script at toy size on the CPU: at most 8
files come back, and the records among them re-make the report here."""
import importlib.util
import json
import os
import subprocess
import sys
import tarfile

import pytest
from qkdyn.empirical.coupled.study import BUDGETS, CoupledStudy
from repo_paths import ROOT

from qkdyn.cli import main as qkdyn_main
from qkdyn.stats import seeds_needed

_spec = importlib.util.spec_from_file_location("coupled_gpu", ROOT / "scripts" / "coupled_gpu.py")
gpu = sys.modules.setdefault("coupled_gpu", importlib.util.module_from_spec(_spec))
_spec.loader.exec_module(gpu)

#: the size of `kernel`'s text.txt under its pin (linux-source-6.1=6.1.176-1, sha256-pinned archive)
KERNEL_BYTES = 50_010_206


def _corpus(tmp_path):
    rng = __import__("random").Random(0)
    words = ["the", "driver", "binds", "a", "device", "and", "returns", "zero", "on", "success", "@dev:"]
    path = tmp_path / "corpus.txt"
    path.write_text("\n\n".join(" ".join(rng.choice(words) for _ in range(60)) for _ in range(150)))
    return path


def test_the_budget_is_sized_for_b1_on_one_device():
    plan = BUDGETS["gpu"]
    assert plan.variants == ("standard", "coupled-euler") and plan.coherent == "kernel" and not plan.compile
    assert plan.seeds >= max(10, seeds_needed("two-sided", gpu.ONE_PERCENT, gpu.PILOT_SD))
    tokens = plan.lm_steps * plan.batch_size * plan.grad_accum * plan.block_size
    assert tokens <= int(KERNEL_BYTES * (1 - plan.val_fraction))  # each byte seen at most once
    default_workers = gpu.parser().parse_args(["run", "--out", "x"]).workers
    assert BUDGETS["gpu"].gpus * default_workers == pytest.approx(1.0)  # the runs at a time share the one device


def test_steps_are_the_fewest_of_budget_epoch_and_time():
    time_bound = gpu.choose_steps(2900, 2990, 400.0, runs=20, workers=10, step_s=0.05, overhead_s=30.0)
    assert (time_bound.steps, time_bound.limited_by, time_bound.waves) == (2800, "time", 2)
    assert time_bound.estimated_wall_s <= gpu.SAFETY * 400.0
    assert gpu.choose_steps(2900, 2990, 4000.0, 20, 10, 0.05, 30.0).limited_by == "the budget"
    epoch_bound = gpu.choose_steps(2900, 1000, 4000.0, 20, 10, 0.05, 30.0)
    assert (epoch_bound.steps, epoch_bound.limited_by) == (1000, "one epoch")
    assert gpu.choose_steps(2900, 2990, 400.0, runs=21, workers=10, step_s=0.05, overhead_s=30.0).waves == 3
    with pytest.raises(ValueError, match="no step fits"):
        gpu.choose_steps(2900, 2990, 60.0, 20, 10, 0.05, 30.0)


def test_the_script_sets_seeds_and_steps_itself():
    flags = ["--model", "tiny", "--seeds", "3", "--lm-steps=5", "--no-compile"]
    assert gpu.without(flags, "--seeds", "--lm-steps") == ["--model", "tiny", "--no-compile"]


def test_calibration_reads_step_time_overhead_and_utilisation_from_the_records():
    results = [{"variant": "standard", "details": {"train_time_s": 10.0, "tokens": 1_000_000}},
               {"variant": "coupled-euler", "details": {"train_time_s": 12.0, "tokens": 1_000_000}}]
    cal = gpu.calibration(results, steps=100, wall_s=40.0, flops={"standard": 3e7, "coupled-euler": 3.1e7})
    assert cal["step_s"] == pytest.approx(0.11) and cal["overhead_s"] == pytest.approx(40.0 - 11.0)
    assert cal["tokens_per_s_all_runs"] == pytest.approx(1e5 + 1e6 / 12)
    assert cal["mfu_vs_h100_bf16"] == pytest.approx((3e7 * 1e5 + 3.1e7 * 1e6 / 12) / gpu.H100_BF16_FLOPS)


def _fake_outputs(tmp_path):
    report = tmp_path / "report"
    report.mkdir()
    for name in ("report.md", "report.json", "README-section.md", "a.png", "a.pdf", "b.png", "b.pdf", "t.csv"):
        (report / name).write_text(name)
    runs = {}
    for top in ("main", "calibration"):
        folder = tmp_path / top / "coupled"
        (folder / "lm-x").mkdir(parents=True)
        (folder / "lm-x.json").write_text("{}")
        (folder / "lm-x" / "metrics.jsonl").write_text("{}\n")
        (folder / "lm-x" / "checkpoint.pt").write_bytes(b"\0" * 1000)
        runs[top] = folder.parent
    return report, runs


def test_out_holds_at_most_eight_plain_files_with_the_records_but_no_checkpoint(tmp_path):
    report, runs = _fake_outputs(tmp_path)
    out = tmp_path / "out"
    written = gpu.pack_out(report, runs, out, {"plan.json": "{}", "log.txt": "log"})
    assert sorted(p.name for p in out.iterdir()) == sorted(p.name for p in written) == sorted(
        ["report.md", "report.json", "README-section.md", "report-files.tar.gz", "records.tar.gz", "plan.json",
         "log.txt"])
    with tarfile.open(out / "records.tar.gz") as tar:
        assert sorted(tar.getnames()) == ["calibration/coupled/lm-x.json", "calibration/coupled/lm-x/metrics.jsonl",
                                          "coupled/lm-x.json", "coupled/lm-x/metrics.jsonl"]
    with tarfile.open(out / "report-files.tar.gz") as tar:
        assert sorted(tar.getnames()) == ["a.pdf", "a.png", "b.pdf", "b.png", "t.csv"]  # all but the three above
    with pytest.raises(RuntimeError, match="at most 8"):
        gpu.pack_out(report, runs, tmp_path / "more", {f"x{i}.txt": "" for i in range(4)})
    with pytest.raises(RuntimeError, match="plainly named"):
        gpu.pack_out(report, runs, tmp_path / "odd", {"plan json": "{}"})


def test_flags_override_the_budget_and_a_cpu_device_asks_for_no_gpu():
    from qkdyn.cli import build_parser
    from qkdyn.commands.compare_coupled import study_of

    plan = BUDGETS["gpu"]
    assert not plan.heterogeneous and not plan.mqar_tasks  # B1 only: one corpus, no MQAR
    study = study_of(build_parser().parse_args(["compare-coupled", "--budget", "gpu", "--device", "cpu", "--seeds", "2"]))
    config = study.config("gpu")  # the budget, with the flags given explicitly on top
    assert (config.preset, config.device, config.seeds, config.lm_steps) == (plan.preset, "cpu", 2, plan.lm_steps)
    assert all(s.gpus == 0 for s in study.plan("gpu"))  # on the CPU no run asks for a GPU


def test_torch_compile_only_where_cuda_is(monkeypatch):
    import torch

    study = CoupledStudy(overrides={"compile": True, "seeds": 1})
    compiled = lambda: [s.params["train"]["compile"] for s in study.plan("gpu") if s.params["kind"] == "train"]  # noqa: E731
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert compiled() and not any(compiled())
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert all(compiled())


def test_records_planned_on_the_gpu_machine_are_read_back_on_a_cpu_one(tmp_path, monkeypatch, capsys):
    """The device plans the budget's runs asking for a share of its GPU; a CPU machine plans the same runs
    asking for none, and reads the records brought back all the same (what re-makes the report here)."""
    import torch

    from qkdyn.studies import Record, find, save

    study, runs = CoupledStudy(), tmp_path / "runs"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # as on the GPU machine
    on_gpu = study.plan("gpu")
    assert qkdyn_main(["plan", "coupled", "--budget", "gpu", "--runs", str(runs)]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [line["name"] for line in lines] == [s.name for s in on_gpu] and lines[0]["name"].startswith(
        f"count-{BUDGETS['gpu'].coherent}-")  # the count model first, then the runs
    assert not runs.exists()  # planning writes nothing
    trained = [s for s in on_gpu if s.params["kind"] == "train"]
    assert len(trained) == len(BUDGETS["gpu"].variants) * BUDGETS["gpu"].seeds
    assert all(s.gpus == BUDGETS["gpu"].gpus > 0 for s in trained)
    for spec in on_gpu:
        save(Record(spec, {"evidence": 1.0}, runs / spec.study / spec.name), runs)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # as here
    here = study.plan("gpu")
    assert [s.name for s in here] == [s.name for s in on_gpu] and all(s.gpus == 0 for s in here)
    assert set(here) != set(on_gpu) and set(find(study, here, runs)) == set(here)


def test_an_unknown_command_is_a_usage_error():
    with pytest.raises(SystemExit) as exit_:
        gpu.main(["bogus"])
    assert exit_.value.code == 2
    with pytest.raises(SystemExit) as exit_:
        gpu.main(["run", "--out", "x", "--workers", "0"])
    assert exit_.value.code == 2


def test_a_checkout_without_an_install_imports_through_a_folder_of_links(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "path", list(sys.path))
    assert gpu.importable(ROOT, tmp_path / "site") == dict(os.environ)  # qkdyn imports here: nothing to do
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)  # as where qkdyn is not installed
    env = gpu.importable(ROOT, tmp_path / "site")
    assert env["PYTHONPATH"].split(":")[0] == str(tmp_path / "site")
    code = "import qkdyn.empirical.coupled.study as s, qkdyn; print(qkdyn.__file__, s.__file__)"
    done = subprocess.run([sys.executable, "-c", code], env=env, cwd=tmp_path, capture_output=True, text=True,
                          check=True)
    package, study = done.stdout.split()
    assert package == str(tmp_path / "site" / "qkdyn" / "__init__.py")
    assert study == str(tmp_path / "site" / "qkdyn" / "empirical" / "coupled" / "study.py")


def test_plan_prints_the_sizing(tmp_path, capsys):
    corpus = _corpus(tmp_path)
    assert gpu.main(["plan", "--cpu-steps", "1", "--cpu-batch", "1", "--work", str(tmp_path), "--model", "tiny",
                     "--block-size", "16", "--coherent", str(corpus)]) == 0
    sizing = json.loads(capsys.readouterr().out.splitlines()[-1])
    plan = BUDGETS["gpu"]
    assert sizing["seeds_for_one_percent"] == seeds_needed("two-sided", gpu.ONE_PERCENT, gpu.PILOT_SD)
    assert sizing["tokens_per_run"] == plan.lm_steps * plan.batch_size * 16 and sizing["runs"] == 2 * plan.seeds
    rows = sizing["variants"]
    assert rows["coupled-euler"]["flops_per_token"] > rows["standard"]["flops_per_token"]
    assert all(row["cpu"]["tokens_per_s"] > 0 for row in rows.values())
    assert sizing["flops_all_runs"] == pytest.approx(plan.seeds * sum(r["flops_per_run"] for r in rows.values()))
    assert sizing["gpu_s_at_mfu"]["0.1"] == pytest.approx(sizing["flops_all_runs"] / (0.1 * gpu.H100_BF16_FLOPS))
    need = [row["mfu_to_fit"] for row in sizing["presets"].values()]
    assert need == sorted(need)  # larger presets need more of the device
    fits = [p for p, row in sizing["presets"].items() if row["mfu_to_fit"] <= gpu.PLAUSIBLE_MFU]
    assert sizing["largest_preset_that_fits"] == (fits[-1] if fits else None)


def test_a_run_stopped_early_still_brings_back_its_log_and_plan(tmp_path, capsys):
    corpus, out, foreign = _corpus(tmp_path), tmp_path / "out", tmp_path / "mine"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("keep me")
    toy = ["--model", "tiny", "--device", "cpu", "--block-size", "16", "--coherent", str(corpus)]
    assert gpu.main(["run", "--out", str(out), "--work", str(foreign), *toy]) == 2  # not its scratch folder
    assert (foreign / "notes.txt").read_text() == "keep me" and "not this script's" in capsys.readouterr().err
    assert gpu.main(["run", "--out", str(out), "--work", str(tmp_path / "work"), "--time-s", "1", "--workers", "2",
                     *toy]) == 1  # the calibration cannot finish in a second
    plan = json.loads((out / "plan.json").read_text())
    assert plan["calibration"] is None and "chosen" not in plan and plan["corpus"]["train_tokens"] > 0
    log = (out / "log.txt").read_text()
    assert "deadline: stopping the study" in log and "stopped: calibration failed" in log
    assert sorted(p.name for p in out.iterdir()) == ["log.txt", "plan.json", "records.tar.gz", "report-files.tar.gz"]


@pytest.mark.slow
def test_the_whole_plan_at_toy_size_brings_back_a_report_its_records_remake(tmp_path):
    corpus, out = _corpus(tmp_path), tmp_path / "out"
    toy = ["--model", "tiny", "--device", "cpu", "--block-size", "16", "--batch-size", "2", "--eval-tokens", "128",
           "--seeds", "2", "--evals-per-run", "1", "--lm-steps", "4", "--coherent", str(corpus)]
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "coupled_gpu.py"), "run", "--out", str(out),
                           "--work", str(tmp_path / "work"), "--time-s", "400", "--workers", "2", "--cal-steps", "2",
                           *toy], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    files = sorted(p.name for p in out.iterdir())
    assert len(files) <= gpu.MAX_FILES and all(p.is_file() and gpu.PLAIN_NAME.fullmatch(p.name) for p in out.iterdir())
    plan = json.loads((out / "plan.json").read_text())
    assert plan["calibration"]["runs"] == 2 and plan["calibration"]["step_s"] > 0  # one seed of each variant
    assert plan["chosen"]["steps"] == 4 and plan["chosen"]["limited_by"] == "the budget"
    assert plan["main"]["finished"] == plan["main"]["planned"] == 4 and not plan["main"]["stopped_at_deadline"]
    assert "calibration:" in (out / "log.txt").read_text()

    runs = tmp_path / "elsewhere"
    with tarfile.open(out / "records.tar.gz") as tar:
        assert not any(name.endswith("checkpoint.pt") for name in tar.getnames())
        tar.extractall(runs, filter="data")
    remake = plan["remake"].split()
    kinds = [json.loads(p.read_text())["result"]["config"]["model"]["attention"]["kind"]
             for p in (runs / "coupled").glob("lm-*.json")]
    assert sorted(kinds) == ["coupled"] * 2 + ["standard"] * 2  # the budget's variants, 2 seeds each
    assert remake[:2] == ["qkdyn", "compare-coupled"] and remake[-4:] == ["--runs", "RUNS", "--out", "OUT"]
    assert qkdyn_main([*remake[1:-4], "--runs", str(runs), "--out", str(tmp_path / "again"), "--no-progress"]) == 0
    report = json.loads((out / "report.json").read_text())
    assert json.loads((tmp_path / "again" / "report.json").read_text()) == report
    assert [c["id"] for c in report["claims"]] == ["B1"] and "of 5 runs" not in json.dumps(report)  # all 4 + count
