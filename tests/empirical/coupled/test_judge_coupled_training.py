"""Paper B's evidence over training and compute matching (issue 41), from hand-written records that carry
the fields of the record contract (ablations, per-head dt and coupling at every evaluation; diagnostics and
CPU time per run) or lack them, as old records do ("not measured", never a crash)."""
from __future__ import annotations

import math
import warnings

import pytest
from qkdyn.empirical.coupled import report
from qkdyn.empirical.coupled.analysis import analyse, as_run
from qkdyn.empirical.coupled.compute_match import loss_at_tokens
from qkdyn.empirical.coupled.curves import NOT_MEASURED, ablation_curves, diagnostics, paired_curve, per_head
from qkdyn.empirical.coupled.report_training import training_markdown, write_training_plots
from test_judge_coupled import COUNTS, NOISE, STUDY, _claims, _records

from qkdyn import figures
from qkdyn.stats import compare

COUNT_MODELS = {"wiki|bpe|300": COUNTS, "web|bpe|300": COUNTS}
FLOW_KINDS = ("coupled", "mlp-only", "mlp-only-shared", "mlp-only-q")
#: standard attention's CPU seconds per token in the fake records
CPU_RATE = 1e-3


def with_contract(cpu_factor: float = 1.33, stalled: int | None = None):
    """An edit adding the record contract's fields to a fake record: at every evaluation the ablations (f
    removal growing from 0 to 0.2 over training) and, for flow variants, per-head dt and coupling (2 layers
    x 4 heads); per run the diagnostics (seed ``stalled`` with a large gradient norm and loss spikes) and its
    CPU seconds (flow variants ``cpu_factor`` x standard's per token)."""
    def edit(run, result):
        details, flow = result["details"], run.attention.kind in FLOW_KINDS
        last = len(details["evals"]) - 1
        for i, e in enumerate(details["evals"]):
            share = i / last
            metric = "val_loss" if run.task == "lm" else "mqar_acc"
            e["ablation"] = {"attention": {metric: 1.0 * share}}
            if flow:
                e["ablation"].update({"field": {metric: 0.2 * share}, "flow": {metric: 0.25 * share}})
                e["dt_per_head"] = [[0.1 + 0.01 * h * share for h in range(4)] for _ in range(2)]
                e["field_ratio_per_head"] = [[0.048 * (1 - 0.4 * share) + 0.001 * h for h in range(4)] for _ in range(2)]
        spiky = run.train.seed == stalled
        details["diagnostics"] = {"max_grad_norm": 40.0 if spiky else 1.5, "clipped_fraction": 0.6 if spiky else 0.05,
                                  "loss_spikes": 7 if spiky else 0, "grad_norm_every": 1}
        details["cpu_time_s"] = CPU_RATE * details["tokens"] * (cpu_factor if flow else 1.0)
    return edit


def _runs(**kw) -> list[dict]:
    return [as_run(r.result) for r in _records(**kw) if r.spec.params["kind"] == "train"]


# -- curves over training -------------------------------------------------------------------------------

def _lm(seed: int, curve: list[tuple[int, float]], **eval_fields) -> dict:
    return {"seed": seed, "evals": [{"step": s, "tokens": 10 * s, "val_ppl": p, **eval_fields} for s, p in curve]}


def test_paired_curve_is_the_shared_rule_at_every_shared_evaluation():
    treatment = {s: _lm(s, [(0, 100.0), (50, 20.0), (100, 10.0 * (1 + 0.01 * s))]) for s in range(3)}
    control = {s: _lm(s, [(0, 100.0), (50, 22.0), (100, 11.0)]) for s in range(4)}
    del treatment[2]["evals"][1]  # seed 2 missed the evaluation at step 50: that step is not shared
    curve = paired_curve(treatment, control)
    assert curve["steps"] == [0, 100] and curve["tokens"] == [0.0, 1000.0] and curve["seeds"] == 3
    d = [math.log(10.0 * (1 + 0.01 * s)) - math.log(11.0) for s in range(3)]
    expected = compare(d, [0.0] * 3, "decrease")
    assert curve["mean"][1] == pytest.approx(expected.effect) and curve["low"][1] == pytest.approx(expected.interval[0])
    assert curve["mean"][0] == 0.0 and paired_curve(treatment, {}) is None


def test_ablation_curves_per_head_and_diagnostics_from_contract_records():
    runs = _runs(edit=with_contract(stalled=1))
    result = analyse(runs, "wiki", "web", {}, COUNT_MODELS)
    f = result["ablation_curves"]["coupled-euler"]["f removed (dt f = 0)"]
    assert f["mean"][0] == 0.0 and f["mean"][-1] == pytest.approx(0.2) and f["seeds"] == 5 and len(f["steps"]) == 4
    assert set(result["ablation_curves"]) >= {"coupled-euler", "coupled-leapfrog", "mlp-only"} and \
        "diff" not in result["ablation_curves"]
    dt = result["per_head"]["coupled-euler"]["dt_per_head"]
    assert dt["init"]["per_head"] == [[0.1] * 4] * 2 and dt["final"]["max"] == pytest.approx(0.13)
    assert result["per_head"]["coupled-euler"]["field_ratio_per_head"]["final"]["min"] == pytest.approx(0.0288)
    def rows(grid: str, variant: str) -> list[dict]:
        return [r for r in result["diagnostics"] if (r["grid"], r["task"], r["data"], r["variant"], r["n"], r["steps"])
                == (grid, "lm", "wiki", variant, 1, 200)]
    main = rows("main", "coupled-euler")
    assert [r["seed"] for r in main] == list(range(5)) and [r["loss spikes"] for r in main] == [0, 7, 0, 0, 0]
    assert main[1]["max grad norm"] == 40.0 and main[1]["vs median seed"] < 0  # seed 1's NOISE is the lowest
    assert len(result["diagnostics"]) == len(runs)  # every run, B7's grid included
    b7 = rows("B7", "coupled-euler")  # B7's coupled Euler (more heads): its own group, never the main grid's
    assert [r["seed"] for r in b7] == list(range(5)) and b7[1]["loss spikes"] == 7 and b7[1]["vs median seed"] < 0
    diff = rows("B7", "diff")  # Differential Attention at each rate of its sweep, grouped by rate
    assert len(diff) == 5 * len(STUDY.config("cpu").diff_lr_factors) and not rows("main", "diff")
    assert len({r["lr"] for r in diff}) == len(STUDY.config("cpu").diff_lr_factors)
    curves = result["paired_curves"]
    b7_panel = f"B7 grid ({2 * STUDY.config('cpu').diff_heads} heads)"
    assert set(curves) == {"wiki", "web", b7_panel} and "coupled-euler" in curves["wiki"] and "standard" not in curves["wiki"]
    assert curves["wiki"]["coupled-euler"]["mean"][-1] == pytest.approx(math.log(0.9), abs=1e-3)
    assert curves[b7_panel]["coupled-euler"]["mean"][-1] == pytest.approx(math.log(0.9), abs=1e-3)
    assert [label.startswith("diff (lr ") for label in curves[b7_panel]] == [True, False]


def test_old_records_read_as_not_measured_never_a_crash():
    result = analyse(_runs(), "wiki", "web", {}, COUNT_MODELS)  # no ablation per evaluation, no per-head, no diagnostics
    assert result["ablation_curves"] == {} and result["per_head"] == {}
    assert all(r["max grad norm"] == r["loss spikes"] == NOT_MEASURED for r in result["diagnostics"])
    assert ablation_curves({"x": {0: {"evals": [{"step": 0}]}}}) == {} and per_head({"x": {0: {"evals": []}}}) == {}
    b1 = _claims()["B1"]
    assert "Equal CPU time: not measured" in b1.summary and "equal CPU time" not in b1.stats and b1.verdict == "holds"
    text = training_markdown(result)
    assert "not measured" in text and "## Effects over training: `wiki`" in text and "Ablations over training" not in text


def test_diagnostics_show_a_stalled_seed_beside_its_group():
    runs = [{"task": "lm", "data": "wiki", "variant": "coupled-euler", "n": 1, "max_steps": 400, "seed": s,
             "final": {"val_ppl": p}, "diagnostics": {"max_grad_norm": g, "clipped_fraction": 0.0, "loss_spikes": k}}
            for s, p, g, k in ((0, 13.1, 1.2, 0), (1, 15.9, 9.5, 4), (2, 13.3, 1.1, 0))]
    rows = diagnostics(runs)
    assert [r["vs median seed"] for r in rows] == pytest.approx([math.log(13.1 / 13.3), math.log(15.9 / 13.3), 0.0])
    assert rows[1]["loss spikes"] == 4 and rows[0]["lr"] == NOT_MEASURED


# -- compute matched as a reader would: equal FLOPs and equal measured CPU time -------------------------------

def test_loss_at_tokens_interpolates_in_log_tokens_and_says_how():
    ladder = [{"tokens": 100, "final": {"val_ppl": 10.0}}, {"tokens": 400, "final": {"val_ppl": 8.0}}]
    loss, how = loss_at_tokens(ladder, 200)
    assert how == "bracketed" and loss == pytest.approx(math.log(10.0) + 0.5 * math.log(0.8))
    assert loss_at_tokens(ladder, 800) == (pytest.approx(math.log(8.0)), "censored")
    assert loss_at_tokens(ladder, 50) == (pytest.approx(math.log(10.0)), "shortest")


def test_b1_at_equal_cpu_time_holds_fails_by_bounds_and_states_both_matchings():
    b1 = _claims(edit=with_contract(cpu_factor=1.33))["B1"]
    assert set(b1.stats) == {"equal tokens", "equal flops", "equal CPU time"} and b1.verdict == "holds", b1.summary
    assert all(row["read"] == "bracketed" for row in b1.table)
    assert [row["CPU per token vs standard"] for row in b1.table] == pytest.approx([1.33] * 5)
    assert "Equal FLOPs:" in b1.summary and "Equal CPU time: coupled used x" in b1.summary
    # coupled 3.5x standard's CPU: standard trained 3.5x longer is beyond its longest run (3x): censored, and its loss
    # there is at most the longest run's (8.9 < coupled's 9.0), so coupled is known worse on every seed
    b1 = _claims(edit=with_contract(cpu_factor=3.5))["B1"]
    cpu = b1.stats["equal CPU time"]
    assert all(row["read"] == "censored" for row in b1.table) and cpu["censored"] == 5
    assert cpu["verdict"] == "fails" and "sign test" in cpu["test"] and b1.verdict == "partial"


def test_b1_prints_the_designs_minimum_detectable_effect_beside_its_verdict():
    b1 = _claims(coupled=tuple(0.9 * (1 + 0.01 * e) for e in (0.6, -0.4, 0.2, -0.5, 0.3)))["B1"]
    tokens = b1.stats["equal tokens"]
    assert b1.evidence["mde_log_ppl"] == tokens["mde"] > 0
    assert f"Design: 5 seeds, paired sd {tokens['spread']:.3g} of log ppl -> detects >= {tokens['mde']:.3g}" in b1.summary


def test_b6_keeps_a_seed_whose_ladder_never_reaches_the_target_as_a_lower_bound():
    """Seed 0 has only its base-length standard run (the longer ones are missing): it was dropped; now it is
    read off that one run, censored at its tokens (a lower bound), beside the bracketed seeds."""
    records = [r for r in _records() if not (r.spec.params["kind"] == "train" and r.spec.params["variant"] == "standard"
                                             and r.spec.params["train"]["seed"] == 0
                                             and r.spec.params["train"]["max_steps"] != 200)]
    b6 = {c.id: c for c in STUDY.claims(records, "cpu")}["B6"]
    rows = {row["seed"]: row for row in b6.table}
    assert set(rows) == set(range(5)) and rows[0]["read"].startswith("censored") and rows[0]["standard lengths"] == 1
    assert rows[0]["ratio"] == 1.0 and b6.evidence["censored"] == 1
    assert all(rows[s]["read"] == "bracketed" for s in range(1, 5))


# -- the report draws and prints it --------------------------------------------------------------------------

def test_training_figures_render_without_overlaps_and_tables_print(tmp_path):
    result = analyse(_runs(edit=with_contract(stalled=1)), "wiki", "web", {}, COUNT_MODELS)
    with warnings.catch_warnings():
        warnings.simplefilter("error", figures.FigureLayoutWarning)
        written = write_training_plots(result, tmp_path)
    assert written == ["paired_differences.png", "ablation_curves.png"]
    assert sorted(p.stem for p in tmp_path.glob("*.png")) == sorted(p.stem for p in tmp_path.glob("*.pdf"))
    text = training_markdown(result)
    for heading in ("## Every variant against standard attention", "## Effects over training: `wiki`",
                    "## Ablations over training: `coupled-euler`", "## Per-head dt and coupling", "## Diagnostics per run"):
        assert heading in text, heading
    assert "| coupled-euler | \\|dt f(q)\\| / \\|k\\| |" in text
    assert write_training_plots({"tables": {}}, tmp_path / "none") == []


def test_the_reports_json_carries_the_evidence_over_training(tmp_path):
    records = _records(edit=with_contract())
    claims = STUDY.claims(records, "cpu")
    with warnings.catch_warnings():
        warnings.simplefilter("error", figures.FigureLayoutWarning)
        out = STUDY.report(records, claims, "cpu", tmp_path)
    assert {"paired_curves", "ablation_curves", "per_head", "diagnostics", "comparisons"} <= set(out["json"])
    assert "paired_differences.png" in next(c for c in claims if c.id == "B1").plots
    assert "Training CPU time per token vs standard" in out["sections"][1] and "x1.33" in out["sections"][1]
    assert report.VARIANT_ORDER.index("coupled-wide") == 2 and NOISE
