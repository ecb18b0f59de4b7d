"""Command line of the coupled-QK study: user errors, a tiny MQAR run, and the report from fake runs."""
import dataclasses
import json
import math
import subprocess
import sys

import pytest
import torch

from qkdyn.empirical.coupled.analysis import analyse, load_runs, tokens_to_match, tokens_to_target
from qkdyn.cli import main


def _main(argv):
    threads = torch.get_num_threads()
    try:
        return main(argv)
    finally:
        torch.set_num_threads(threads)


def test_help_does_not_import_torch():
    code = "import sys; from qkdyn.cli import build_parser; build_parser(); print('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout.strip() == "False"


def test_variant_names_of_the_command_match_the_study():
    from qkdyn.commands.compare_coupled import VARIANTS
    from qkdyn.empirical.coupled.study import LM_VARIANTS

    assert VARIANTS == tuple(LM_VARIANTS)


@pytest.mark.parametrize("argv,message", [
    (["lm", "--data", "/no/such/corpus", "--out", "x"], "neither a corpus name"),
    (["lm", "--data", "wiki", "--out", "x", "--attention", "mlp-only", "--coupling-hidden", "3"], "even"),
    (["lm", "--data", "wiki", "--out", "x", "--max-steps", "0"], "--max-steps"),
    (["compare-coupled", "--runs", "/no/runs", "--out", "{tmp}"], "no finished runs"),
    (["compare-coupled", "--mqar-tasks", "tiny", "--out", "{tmp}"], "--mqar-tasks: must be a comma-separated subset of easy"),
    (["compare-coupled", "--variants", "standard,fancy", "--out", "{tmp}"], "--variants"),
    (["lm", "--data", "wiki", "--out", "{tmp}/x", "--vocab-size", "100"], "--vocab-size"),
    (["lm", "--data", "wiki", "--out", "{tmp}/x", "--attention", "coupled", "--field-gain", "-1"], "--field-gain"),
    (["compare-coupled", "--vocab-size", "100", "--out", "{tmp}"], "--vocab-size"),
    (["compare-coupled", "--efficiency-budgets", "0.5", "--out", "{tmp}"], "--efficiency-budgets"),
    (["compare-coupled", "--trend-presets", "tiny,huge", "--out", "{tmp}"], "--trend-presets"),
])
def test_user_errors_are_one_line_exit_2(argv, message, tmp_path, capsys):
    assert _main([a.replace("{tmp}", str(tmp_path)) for a in argv]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_mqar_command_trains_and_reports(tmp_path, capsys):
    out = tmp_path / "mqar"
    assert _main(["mqar", "--task", "easy", "--out", str(out), "--max-steps", "3", "--batch-size", "4",
                  "--n-test", "8", "--eval-interval", "3", "--attention", "coupled", "--no-progress", "--threads", "1"]) == 0
    result = json.loads((out / "result.json").read_text())
    assert result["task"] == "mqar" and 0 <= result["final"]["mqar_acc"] <= 1
    assert "mqar_acc" in capsys.readouterr().out


SEED_NOISE = (0.3, -0.5, 0.2, 0.6)  # per-seed deviations shared by all variants (paired design)


def _fake_run(root, data, attention, seed, final_ppl, task="lm", steps=1, max_steps=10, curve=None):
    att = {"kind": "standard", "integrator": "euler", "steps": steps, "hidden": 4, "dt_init": 0.1, "field_gain": 1.0,
           **attention}
    name = f"{task}-{data}-{att['kind']}-{att['integrator']}-n{steps}-s{seed}-x{max_steps}"
    d = root / name
    d.mkdir()
    flow = att["kind"] != "standard"
    extra = {"coupling": 0.48, "qk_change": 0.08} if att["kind"] == "coupled" else {"qk_change": 0.05} if flow else {}
    if task == "lm":
        curve = curve or [final_ppl * f for f in (30.0, 3.0, 1.5, 1.0)]
        evals = [{"kind": "eval", "step": max_steps * i // 3, "tokens": 100 * max_steps * i // 3, "val_ppl": p, **extra}
                 for i, p in enumerate(curve)]
        final = {"val_ppl": final_ppl, "val_ppl_byte": final_ppl ** 0.25, "val_ppl_lo": 0.99 * final_ppl,
                 "val_ppl_hi": 1.01 * final_ppl, **extra}
    else:
        final = {"acc_T64_kv4": final_ppl, "mqar_acc": final_ppl, **extra}
        evals = [{"kind": "eval", "step": 0, "tokens": 0, "mqar_acc": 0.0, **extra},
                 {"kind": "eval", "step": max_steps, "tokens": 1000, **final}]
    time_per_step = 0.01 * (1.2 if flow else 1.0)
    result = {"task": task, "data": data, "mqar": data, "preset": "tiny",
              "model": {"attention": att, "vocab_size": 300, "block_size": 16, "n_layer": 2, "n_head": 4, "d_model": 64},
              "train": {"seed": seed, "max_steps": max_steps}, "tokens": 100 * max_steps,
              "train_time_s": time_per_step * max_steps, "tokens_per_s": 100 / time_per_step, "parameters": 100,
              "final": final}
    (d / "result.json").write_text(json.dumps(result))
    (d / "metrics.jsonl").write_text("".join(json.dumps(e) + "\n" for e in evals))


def _fake_study(root, gains=(0.9, 1.1), seeds=4):
    """Coupled x0.9 of standard on 'wiki' (x1.1 on 'web'), with small paired noise; MLP-only noisy."""
    for seed in range(seeds):
        e = SEED_NOISE[seed]
        for data, gain in zip(("wiki", "web"), gains):
            base = 10.0 * (1 + 0.01 * e)
            _fake_run(root, data, {"kind": "standard"}, seed, base)
            _fake_run(root, data, {"kind": "coupled"}, seed, gain * base * (1 + 1e-4 * e))
            _fake_run(root, data, {"kind": "coupled", "integrator": "leapfrog"}, seed, gain * base * (1 + 2e-4 * e))
            _fake_run(root, data, {"kind": "mlp-only"}, seed, base * (1 + 0.1 * e))
            _fake_run(root, data, {"kind": "mlp-only-shared"}, seed, base * (1 - 0.1 * e))
            _fake_run(root, data, {"kind": "diff"}, seed, base * (1 + 0.002 * e))
        # standard trained for coupled's wall-clock (12 steps) and 3x longer (each its own schedule): coupled's
        # ~9.0 lies between their 9.8 and 8.9, at ~2.6x coupled's tokens
        _fake_run(root, "wiki", {"kind": "standard"}, seed, 9.8 * (1 + 0.01 * e), max_steps=12)
        _fake_run(root, "wiki", {"kind": "standard"}, seed, 8.9 * (1 + 0.002 * e), max_steps=30)
        _fake_run(root, "wiki", {"kind": "coupled"}, seed, 9.0 * (1 + 0.01 * e) * (1 + 1e-4), steps=7)
        for task in ("easy", "medium"):
            _fake_run(root, task, {"kind": "standard"}, seed, 0.5 + 0.01 * e, task="mqar")
            _fake_run(root, task, {"kind": "coupled"}, seed, 1.0, task="mqar")


def _verdicts(tmp_path, **kw):
    _fake_study(tmp_path, **kw)
    claims = analyse(load_runs(tmp_path), "wiki", "web", {"flops": 10, "wall-clock": 12})["claims"]
    return {c.id: c for c in claims}


def test_verdicts_follow_the_shared_rule(tmp_path):
    claims = _verdicts(tmp_path)
    assert set(claims) == {"B1", "B2", "B3", "B4", "B5", "B6", "B7", "B8", "B9"}
    for cid, claim in claims.items():
        assert claim.verdict == "holds", (cid, claim.summary)
        assert claim.stats and all(0 <= c["p_value"] <= 1 for c in claim.stats.values())
    assert set(claims["B1"].stats) == {"equal tokens", "equal wall-clock"}  # equal FLOPs = base length: no run
    assert set(claims["B2"].stats) == set(claims["B3"].stats) == {
        "reading (a): separate g(q), h(k)", "reading (b): one f on q and on k"}
    assert claims["B3"].stats["reading (a): separate g(q), h(k)"]["test"].startswith("Pitman-Morgan")
    s12, s30, coupled = 9.8 * 1.003, 8.9 * 1.0006, 9.0 * 1.003 * 1.00003
    frac = math.log(s12 / coupled) / math.log(s12 / s30)
    assert claims["B6"].evidence["ratios"][0] == pytest.approx(1.2 * 2.5 ** frac, rel=1e-6)


def test_a_claim_that_does_not_hold_is_reported_as_failing(tmp_path):
    claims = _verdicts(tmp_path, gains=(1.1, 0.9))  # coupled worse on the coherent corpus, better on the other
    assert claims["B1"].verdict == claims["B8"].verdict == "fails"
    assert claims["B1"].stats["equal tokens"]["effect"] > 0 and claims["B1"].stats["equal tokens"]["p_value"] < 0.05
    assert claims["B6"].verdict == "fails" and claims["B6"].evidence["ratios"][0] < 1


def test_an_unresolved_difference_is_inconclusive_not_failing(tmp_path):
    """The issue's complaint: p = 0.86 used to read 'fails'. Now the wrong sign without p < 0.05 is
    inconclusive (when no paper effect applies) - here the seed-variance claim with equal spreads."""
    from qkdyn.stats import compare_variance

    c = compare_variance([1.0, 2.1, 2.9, 4.2], [1.1, 1.9, 3.0, 4.0], "decrease")
    assert c.effect > 0 and c.p_value > 0.05 and c.verdict == "inconclusive"


def test_tokens_to_match_reads_runs_trained_to_each_length():
    def run(tokens, ppl, curve=()):
        return {"tokens": tokens, "final": {"val_ppl": ppl}, "evals": list(curve)}

    ladder = [run(100, 10.0), run(400, 8.0)]
    tokens, how = tokens_to_match(ladder, math.log(9.0))
    assert how == "bracketed" and tokens == pytest.approx(100 * 4 ** (math.log(10 / 9) / math.log(10 / 8)))
    assert tokens_to_match(ladder, math.log(7.0)) == (400.0, "censored")
    curve = [{"tokens": 50, "val_ppl": 12.0}, {"tokens": 100, "val_ppl": 10.0}]
    assert tokens_to_match([run(100, 10.0, curve), run(400, 8.0)], math.log(11.0)) == (pytest.approx(75.0), "curve")


def test_tokens_to_target_interpolates():
    evals = [{"tokens": 100, "val_ppl": 20.0}, {"tokens": 200, "val_ppl": 10.0}]
    assert tokens_to_target(evals, 15.0) == pytest.approx(150)
    assert tokens_to_target(evals, 25.0) == 100 and tokens_to_target(evals, 5.0) is None


def test_compare_writes_report_plots_and_readme_section(tmp_path, capsys):
    runs, out = tmp_path / "runs", tmp_path / "fig"
    runs.mkdir()
    _fake_study(runs)
    (runs / "matched.json").write_text(json.dumps({"flops": 10, "wall-clock": 12}))
    assert _main(["compare-coupled", "--runs", str(runs), "--out", str(out), "--coherent", "wiki",
                  "--heterogeneous", "web"]) == 0
    for name in ("report.md", "report.json", "README-section.md", "perplexity_by_variant.png",
                 "sample_efficiency.png", "coupling_steps.png", "coupling_strength.png", "mqar_accuracy.png"):
        assert (out / name).stat().st_size > 0
    report = (out / "report.md").read_text()
    claims = json.loads((out / "report.json").read_text())["claims"]
    assert len(claims) == 9 and all(c["stats"] for c in claims)
    for c in claims:  # every claim prints its effect, spread over seeds and p-value
        section = report.split(f"## {c['id']}: ")[1].split("\n## ")[0]
        assert "effect" in section and "spread" in section and "p = " in section, c["id"]
    assert "0.480 → 0.480" in report  # coupling strength per variant, init -> final
    assert "x1.20" in report  # the flow variants' fake runs are 1.2x slower
    assert "ppl per byte" in report


def _corpus(tmp_path):
    words = ["query", "key", "value", "attention", "flow", "step", "head", "layer", "token", "loss"]
    rng = __import__("random").Random(0)
    path = tmp_path / "corpus.txt"
    path.write_text(" ".join(rng.choice(words) for _ in range(3000)))
    return str(path)


TOY = ["--lm-steps", "2", "--batch-size", "1", "--block-size", "16", "--eval-tokens", "64", "--vocab-size", "280",
       "--seeds", "2", "--workers", "1", "--evals-per-run", "1"]


def test_scale_trend_at_toy_size(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("QKDYN_CACHE", str(tmp_path / "cache"))
    runs, out = tmp_path / "runs", tmp_path / "trend"
    assert _main(["compare-coupled", "--train", "--trend", "--trend-presets", "tiny,1M", "--coherent", _corpus(tmp_path),
                  "--runs", str(runs), "--out", str(out), *TOY]) == 0
    report = json.loads((out / "report.json").read_text())
    rows = report["trend"]
    assert [r["preset"] for r in rows] == ["tiny", "1M"] and rows[0]["non-embedding parameters"] < rows[1]["non-embedding parameters"]
    assert all(r["ci low"] <= r["gap (log ppl)"] <= r["ci high"] and r["seeds"] == 2 for r in rows)
    assert (out / "scale_trend.png").stat().st_size > 0 and len(report["claims"]) == 2
    assert len(list(runs.glob("*/result.json"))) == 2 * 2 * 2  # presets x seeds x (standard, coupled)


def test_gpu_plan_runs_at_toy_size_on_cpu(tmp_path, monkeypatch):
    from qkdyn.commands.compare_coupled import study_config
    from qkdyn.empirical.coupled.study import STUDY_PLANS, study_runs
    from qkdyn.cli import build_parser

    plan = STUDY_PLANS["60M"]
    assert plan.preset == "60M" and plan.compile and plan.variants == ("standard", "coupled-euler")
    args = build_parser().parse_args(["compare-coupled", "--preset", "60M", "--device", "cpu", "--seeds", "2"])
    study = study_config(args)  # the plan, with the flags given explicitly on top
    assert (study.preset, study.device, study.seeds, study.lm_steps) == ("60M", "cpu", 2, plan.lm_steps)
    assert not study.heterogeneous and not study.mqar_tasks
    with monkeypatch.context() as cuda:  # as on a GPU machine: the plan compiles there
        cuda.setattr(torch.cuda, "is_available", lambda: True)
        assert study_runs(dataclasses.replace(study, device="cuda"))[0].train.compile

    monkeypatch.setenv("QKDYN_CACHE", str(tmp_path / "cache"))
    runs, out = tmp_path / "runs", tmp_path / "gpu"
    assert _main(["compare-coupled", "--train", "--preset", "60M", "--model", "tiny", "--device", "cpu",
                  "--coherent", _corpus(tmp_path), "--runs", str(runs), "--out", str(out), *TOY]) == 0
    results = [json.loads(p.read_text()) for p in runs.glob("*/result.json")]
    assert sorted(r["model"]["attention"]["kind"] for r in results) == ["coupled", "coupled", "standard", "standard"]
    cpu = study_config(build_parser().parse_args(["compare-coupled", "--preset", "60M", "--device", "cpu"]))
    assert not study_runs(cpu)[0].train.compile  # torch.compile only on CUDA
    claims = json.loads((out / "report.json").read_text())["claims"]
    assert [c["id"] for c in claims] == ["B1"] and (out / "README-section.md").exists()
