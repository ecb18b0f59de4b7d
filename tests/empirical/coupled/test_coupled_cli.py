"""Command line of the coupled-QK study: user errors, a tiny MQAR run, and the report from fake runs."""
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from qkdyn.empirical.coupled.analysis import tokens_to_match, tokens_to_target
from qkdyn.empirical.coupled.study import CoupledStudy

from qkdyn.cli import main
from qkdyn.runs import RunRecord
from qkdyn.studies import Record


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
    from qkdyn.empirical.coupled.study import LM_VARIANTS

    from qkdyn.commands.compare_coupled import VARIANTS

    assert VARIANTS == tuple(LM_VARIANTS)


@pytest.mark.parametrize("argv,message", [
    (["lm", "--data", "/no/such/corpus", "--out", "x"], "neither a corpus name"),
    (["lm", "--data", "wiki", "--out", "x", "--attention", "mlp-only", "--coupling-hidden", "3"], "even"),
    (["lm", "--data", "wiki", "--out", "x", "--max-steps", "0"], "--max-steps"),
    (["compare-coupled", "--runs", "/no/runs", "--out", "{tmp}"], "no finished runs"),
    (["compare-coupled", "--mqar-tasks", "tiny", "--out", "{tmp}"], "--mqar-tasks: must be a comma-separated subset of small"),
    (["compare-coupled", "--variants", "standard,fancy", "--out", "{tmp}"], "--variants"),
    (["lm", "--data", "wiki", "--out", "{tmp}/x", "--vocab-size", "100"], "--vocab-size"),
    (["lm", "--data", "wiki", "--out", "{tmp}/x", "--attention", "coupled", "--field-gain", "-1"], "--field-gain"),
    (["compare-coupled", "--tokenizer", "bpe", "--vocab-size", "100", "--out", "{tmp}"], "--vocab-size"),
    (["compare-coupled", "--efficiency-budgets", "0.5", "--out", "{tmp}"], "--efficiency-budgets"),
    (["compare-coupled", "--trend-presets", "tiny,huge", "--out", "{tmp}"], "--trend-presets"),
])
def test_user_errors_are_one_line_exit_2(argv, message, tmp_path, capsys):
    assert _main([a.replace("{tmp}", str(tmp_path)) for a in argv]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


@pytest.mark.parametrize("flags,message", [
    (["--coherent", "no-such-corpus"], "--coherent 'no-such-corpus' is neither a corpus name"),
    (["--heterogeneous", "no-such-corpus"], "--heterogeneous 'no-such-corpus' is neither a corpus name"),
    (["--coherent", "{tmp}/empty.txt"], "empty.txt is an empty file"),
    (["--coherent", "{tmp}/emptydir"], "emptydir holds no corpus files"),
    (["--coherent", ""], "--coherent must name a corpus"),
    ([], "cannot fetch pydocs"),  # the quick budget's registry corpus, with no registry client to fetch it
])
def test_train_checks_its_corpora_before_it_creates_anything(flags, message, tmp_path, monkeypatch, capsys):
    """No run folder, figure folder, cache folder or progress bar before the corpora are known to be usable."""
    monkeypatch.setenv("QKDYN_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("PATH", str(tmp_path / "no-clients"))  # as offline: npm, pip's registry and apt-get unreachable
    (tmp_path / "empty.txt").write_bytes(b"")
    (tmp_path / "emptydir").mkdir()
    before = sorted(tmp_path.rglob("*"))
    argv = ["compare-coupled", "--train", "--budget", "quick", "--runs", str(tmp_path / "runs"),
            "--out", str(tmp_path / "fig"), *(flag.replace("{tmp}", str(tmp_path)) for flag in flags)]
    assert _main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1, err
    assert sorted(tmp_path.rglob("*")) == before


def test_mqar_command_trains_and_reports(tmp_path, capsys):
    out = tmp_path / "mqar"
    assert _main(["mqar", "--task", "easy", "--out", str(out), "--max-steps", "3", "--batch-size", "4",
                  "--n-test", "8", "--eval-interval", "3", "--attention", "coupled", "--no-progress", "--threads", "1"]) == 0
    result = json.loads((out / "result.json").read_text())
    assert result["trainer"] == "mqar" and 0 <= result["final"]["mqar_acc"] <= 1
    assert "mqar_acc" in capsys.readouterr().out


SEED_NOISE = (0.3, -0.5, 0.2, 0.6)  # per-seed deviations shared by all variants (paired design)
#: the fake study's count models: standard attention (ppl ~10) is well below both
COUNT_MODELS = {f"{c}|bpe|300": {"unigram_ppl": 60.0, "bigram_ppl": 20.0, "discount": 0.7, "train_tokens": 1000,
                                 "val_targets": 100, "vocab": 300} for c in ("wiki", "web")}
#: ablations of the fake runs (change of val loss / accuracy): attention matters, f acts
ABLATION = {"attention": 1.0, "field": 0.05, "flow": 0.06}
FAKE_STUDY = dict(coherent="wiki", heterogeneous="web", seeds=4, lm_steps=10, sweep_steps=(7,), sweep_horizons=("step",),
                  mqar_steps=(10,), efficiency_budgets=(1.2, 3.0), variants=("standard", "coupled-euler", "coupled-leapfrog",
                  "mlp-only", "mlp-only-shared", "mlp-only-q", "diff"))


def _fake_result(data, attention, seed, final_ppl, task="lm", steps=1, max_steps=10, curve=None, ablation=ABLATION):
    """The record of a finished training run (summary, evaluation curve, ablations) with made-up numbers."""
    att = {"kind": "standard", "integrator": "euler", "steps": steps, "horizon": "step", "hidden": 4, "dt_init": 0.1,
           "field_gain": 1.0, **attention}
    flow = att["kind"] not in ("standard", "diff")
    extra = ({"coupling": 0.048, "field_ratio": 0.48, "qk_change": 0.08} if att["kind"] == "coupled"
             else {"qk_change": 0.05} if flow else {})
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
    metric = "val_loss" if task == "lm" else "mqar_acc"
    sign = 1 if task == "lm" else -0.1
    whats = ("attention", "field", "flow") if flow else ("attention",)
    config = {"task": task, "data": data, "mqar": data, "preset": "tiny", "tokenizer": "bpe", "n_test": 16,
              "model": {"attention": att, "vocab_size": 300, "block_size": 16, "n_layer": 2, "n_head": 4, "d_model": 64},
              "train": {"seed": seed, "max_steps": max_steps, "batch_size": 4}}
    details = {"tokens": 100 * max_steps, "train_time_s": time_per_step * max_steps, "tokens_per_s": 100 / time_per_step,
               "evals": evals, "ablation": {w: {metric: sign * ablation[w]} for w in whats}}
    return RunRecord(task, config, max_steps, 100, {"wall": time_per_step * max_steps, "cpu": math.nan}, final,
                     details).to_dict()


def _fake_value(spec, gains=(0.9, 1.1), standard_ladder=(9.8, 8.9)):
    """The fake final value of a study run: coupled x0.9 of standard on 'wiki' (x1.1 on 'web'), small paired
    noise; MLP-only noisy; standard trained 1.2x and 3x longer reaches 9.8 and 8.9 (coupled's ~9.0 between)."""
    e = SEED_NOISE[spec.train.seed]
    if spec.task == "mqar":
        return 1.0 if spec.variant == "coupled-euler" else 0.8 + 0.01 * e
    if spec.train.max_steps != spec.base_steps:
        long = spec.train.max_steps > 12
        return standard_ladder[long] * (1 + (0.002 if long else 0.01) * e)
    if spec.attention.steps != 1:
        return 9.0 * (1 + 0.01 * e) * (1 + 1e-4)
    gain = gains[spec.data != "wiki"]
    base = 10.0 * (1 + 0.01 * e)
    return {"standard": base, "coupled-euler": gain * base * (1 + 1e-4 * e),
            "coupled-leapfrog": gain * base * (1 + 2e-4 * e), "mlp-only": base * (1 + 0.1 * e),
            "mlp-only-shared": base * (1 - 0.1 * e), "mlp-only-q": base * (1 + 0.09 * e),
            "diff": base * (1 + 0.002 * e)}[spec.variant]


FAKE = CoupledStudy(overrides=FAKE_STUDY)  # the cpu budget with the fake's grid


def _fake_records(gains=(0.9, 1.1), standard_ladder=(9.8, 8.9), ablation=ABLATION, count_models=COUNT_MODELS,
                  change=None):
    """Records of every run of the fake 4-seed study's plan (``change(spec, result)`` edits a result)."""
    from qkdyn.empirical.coupled.study import CoupledRun

    records = []
    for spec in FAKE.plan("cpu"):
        if spec.params["kind"] == "count":
            entry = count_models.get(f"{spec.params['data']}|bpe|300")
            if entry is not None:
                records.append(Record(spec, {"count_model": entry, "data": spec.params["data"], "tokenizer": "bpe"},
                                      Path()))
            continue
        run = CoupledRun.from_config(spec.params)
        attention = {"kind": run.attention.kind, "integrator": run.attention.integrator}
        result = _fake_result(run.data, attention, run.train.seed, _fake_value(run, gains, standard_ladder),
                              task=run.task, steps=run.attention.steps, max_steps=run.train.max_steps, ablation=ablation)
        if change:
            change(run, result)
        records.append(Record(spec, result, Path()))
    return records


def _verdicts(tmp_path=None, **kw):
    return {c.id: c for c in FAKE.claims(_fake_records(**kw), "cpu")}


def test_verdicts_follow_the_shared_rule(tmp_path):
    claims = _verdicts(tmp_path)
    assert set(claims) == {"B1", "B2", "B3", "B4", "B5", "B6", "B7", "B8", "B9"}
    for cid, claim in claims.items():
        assert claim.verdict == "holds", (cid, claim.summary)
        assert claim.stats and all(0 <= c["p_value"] <= 1 for c in claim.stats.values())
        assert claim.preconditions and all(p["met"] for p in claim.preconditions), cid
        assert all(c["mde"] >= 0 for c in claim.stats.values()), cid  # power beside every comparison (0: no spread)
        assert claim.evidence["ablation"] and "Ablations" in claim.summary, cid  # ablation beside every verdict
    assert set(claims["B1"].stats) == {"equal tokens"}  # equal FLOPs rounds to the base length: the base run
    assert set(claims["B2"].stats) == set(claims["B3"].stats) == {
        "reading (a): separate g(q), h(k)", "reading (b): one f on q and on k", "reading (c): an MLP update on q only"}
    assert claims["B3"].stats["reading (a): separate g(q), h(k)"]["test"].startswith("Pitman-Morgan")
    s12, s30, coupled = 9.8 * 1.003, 8.9 * 1.0006, 9.0 * 1.003 * 1.00003
    frac = math.log(s12 / coupled) / math.log(s12 / s30)
    assert claims["B6"].evidence["ratios"][0] == pytest.approx(1.2 * 2.5 ** frac, rel=1e-6)
    assert claims["B6"].evidence["censored"] == 0


def test_a_claim_that_does_not_hold_is_reported_as_failing(tmp_path):
    claims = _verdicts(tmp_path, gains=(1.1, 0.9))  # coupled worse on the coherent corpus, better on the other
    assert claims["B1"].verdict == claims["B8"].verdict == "fails"
    assert claims["B1"].stats["equal tokens"]["effect"] > 0 and claims["B1"].stats["equal tokens"]["p_value"] < 0.05


LM_CLAIMS = ("B1", "B2", "B3", "B4", "B5", "B6", "B7", "B8")


@pytest.mark.parametrize("gains", [(0.9, 1.1), (1.1, 0.9)])
def test_a_baseline_at_unigram_level_makes_every_lm_claim_inconclusive_whatever_the_effect(tmp_path, gains):
    at_unigram = {k: {**v, "unigram_ppl": 10.0, "bigram_ppl": 6.0} for k, v in COUNT_MODELS.items()}
    claims = _verdicts(tmp_path, count_models=at_unigram, gains=gains)
    for cid in LM_CLAIMS:
        c = claims[cid]
        assert c.verdict == "inconclusive" and set(c.parts.values()) <= {"inconclusive"}, cid
        names = [p["name"] for p in c.preconditions if not p["met"]]
        assert "wiki: standard ppl below the bigram model" in names, cid
        assert c.summary.startswith("Inconclusive before any effect is read"), cid
    assert claims["B9"].verdict == "holds"  # MQAR has its own precondition, met


def test_without_count_models_the_floor_is_not_measured_and_nothing_is_decided(tmp_path):
    claims = _verdicts(tmp_path, count_models={})
    assert all(claims[cid].verdict == "inconclusive" for cid in LM_CLAIMS)
    assert any(p["value"] == p["value"] and p["bound"] != p["bound"] for p in claims["B1"].preconditions)


def test_a_coupling_that_changes_nothing_leaves_mechanism_claims_inconclusive(tmp_path):
    claims = _verdicts(tmp_path, ablation={"attention": 1.0, "field": 1e-5, "flow": 1e-5})
    for cid in ("B2", "B3", "B4", "B5", "B8"):
        assert claims[cid].verdict == "inconclusive", cid
        assert any("removing f" in p["name"] and not p["met"] for p in claims[cid].preconditions), cid
    assert claims["B1"].verdict == "holds"  # a claim about the variant as a whole is still judged


def test_all_seeds_censored_is_never_decided_with_p_zero(tmp_path):
    claims = _verdicts(tmp_path, standard_ladder=(9.95, 9.9))  # standard never gets down to coupled's ~9.0
    b6 = claims["B6"]
    stats = b6.stats["log token ratio"]
    assert b6.evidence["censored"] == 4 and stats["censored"] == 4
    assert b6.verdict == "inconclusive" and stats["p_value"] > 0.05  # 4 seeds: the sign test's best p is 1/16
    assert "sign test" in stats["test"] and "lower bound" in b6.summary


@pytest.mark.parametrize("recall", [0.2, 0.3])  # below guessing (1/4); just above it, far from recall
def test_mqar_without_recall_is_inconclusive(recall):
    from qkdyn.empirical.coupled.preconditions import guessing_rate, recall_floor

    assert guessing_rate({"final": {"acc_T64_kv4": 0.1, "acc_T64_kv8": 0.1, "mqar_acc": 0.1}}) == pytest.approx(0.1875)
    assert recall_floor(0.25) == pytest.approx(0.625)

    def no_recall(run, result):
        if run.task == "mqar" and run.variant == "standard":
            result["final"].update({"acc_T64_kv4": recall, "mqar_acc": recall})

    claims = _verdicts(change=no_recall)
    assert claims["B9"].verdict == "inconclusive"
    assert any("guessing" in p["name"] and not p["met"] for p in claims["B9"].preconditions)
    assert _verdicts()["B9"].verdict == "holds"  # standard at 0.8: recall learnt, the claim is judged


def test_mqar_says_its_scope_and_when_standard_leaves_no_room_above_it():
    summary = _verdicts()["B9"].summary
    assert "): T 64 with 4 pairs, vocabulary 300, `tiny` models (100 parameters, init nanogpt)" in summary
    assert "trained on 40 sequences, each seed scored on 64 test queries" in summary and "ceiling" not in summary  # standard at 0.8: room above it

    def perfect(run, result):
        if run.task == "mqar" and run.variant == "standard":
            result["final"].update({"acc_T64_kv4": 1.0, "mqar_acc": 1.0})

    assert "at the ceiling here (worst seed 1)" in _verdicts(change=perfect)["B9"].summary


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
    from qkdyn.studies import RunSpec, save

    runs, out = tmp_path / "runs", tmp_path / "fig"
    records = _fake_records()
    for record in records:
        save(record, runs)
    other = Record(RunSpec.make("coupled", "lm-wiki-other-config", kind="train"),  # another config: not read
                   _fake_result("wiki", {"kind": "standard"}, 0, 1.0), Path())
    save(other, runs)
    flags = ["--coherent", "wiki", "--heterogeneous", "web", "--seeds", "4", "--lm-steps", "10", "--sweep-steps", "7",
             "--sweep-horizons", "step", "--mqar-steps", "10", "--efficiency-budgets", "1.2,3", "--budget", "cpu",
             "--variants", ",".join(FAKE_STUDY["variants"])]
    assert _main(["compare-coupled", "--runs", str(runs), "--out", str(out), "--no-progress", *flags]) == 0
    for name in ("report.md", "report.json", "README-section.md", "perplexity_by_variant.png",
                 "sample_efficiency.png", "coupling_steps.png", "coupling_strength.png", "mqar_accuracy.png"):
        assert (out / name).stat().st_size > 0
    report = (out / "report.md").read_text()
    claims = json.loads((out / "report.json").read_text())["claims"]
    assert len(claims) == 9 and all(c["stats"] for c in claims)
    assert all(c["verdict"] == "holds" for c in claims)  # the other config's run (ppl 1.0) was not mixed in
    for c in claims:  # every claim prints its preconditions first, effect, spread over seeds, p-value and power
        section = report.split(f"## {c['id']}: ")[1].split("\n## ")[0]
        assert "effect" in section and "spread" in section and "p = " in section, c["id"]
        assert section.index("*Preconditions*") < section.index("*Statistics*"), c["id"]
        assert "with 80% power" in section and "Ablations" in section, c["id"]
    assert "0.0480 → 0.0480" in report  # coupling strength |dt f(q)| / |k| per variant, init -> final
    assert "x1.20" in report  # the flow variants' fake runs are 1.2x slower
    assert "ppl per byte" in report and "bigram ppl" in report


def _corpus(tmp_path):
    words = ["query", "key", "value", "attention", "flow", "step", "head", "layer", "token", "loss"]
    rng = __import__("random").Random(0)
    path = tmp_path / "corpus.txt"
    path.write_text(" ".join(rng.choice(words) for _ in range(3000)))
    return str(path)


TOY = ["--lm-steps", "2", "--batch-size", "1", "--block-size", "16", "--eval-tokens", "64", "--tokenizer", "bpe",
       "--vocab-size", "280", "--seeds", "2", "--workers", "1", "--evals-per-run", "1"]


def test_scale_trend_at_toy_size(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("QKDYN_CACHE", str(tmp_path / "cache"))
    runs, out = tmp_path / "runs", tmp_path / "trend"
    assert _main(["compare-coupled", "--train", "--trend", "--trend-presets", "tiny,1M", "--coherent", _corpus(tmp_path),
                  "--runs", str(runs), "--out", str(out), "--no-progress", *TOY]) == 0
    report = json.loads((out / "report.json").read_text())
    rows = report["coupled"]["trend"]
    assert [r["preset"] for r in rows] == ["tiny", "1M"] and rows[0]["non-embedding parameters"] < rows[1]["non-embedding parameters"]
    assert all(r["ci low"] <= r["gap (log ppl)"] <= r["ci high"] and r["seeds"] == 2 for r in rows)
    assert (out / "scale_trend.png").stat().st_size > 0 and len(report["claims"]) == 2
    assert all(len(c["preconditions"]) == 3 for c in report["claims"])  # each size's own floor and attention use
    assert len(list((runs / "coupled").glob("*/result.json"))) == 2 * 2 * 2  # presets x seeds x (standard, coupled)
