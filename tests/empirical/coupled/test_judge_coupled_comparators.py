"""Comparators that work, or no verdict (issue 41), judged from hand-written records: B7 against a
Differential Attention given its own grid and learning-rate sweep, judged only when it reaches standard
attention's perplexity; every compared variant against the bigram count model; the f precondition
against the effect the claim is about, not the seed noise; every variant as a comparison row."""
from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np
import pytest
from qkdyn.empirical.coupled.analysis import analyse, as_run
from qkdyn.empirical.coupled.paper_effects import HEADLINE, SAME_MARGIN
from qkdyn.empirical.coupled.preconditions import mechanism_precondition, mechanism_reference
from qkdyn.empirical.coupled.study import LM_VARIANTS, CoupledStudy, variant_label
from test_judge_coupled import ALT, COUNTS, NOISE, OTHER, OVERRIDES, _claims, _records

from qkdyn.runs import RunRecord
from qkdyn.stats import compare
from qkdyn.studies import Record, RunSpec

B7_HEADS, B7_LR = 16, 3e-3
PREMISE = "Differential Attention reaches standard attention's perplexity"
#: a plan whose Differential Attention runs at the main grid's shape and rate (2 x 2 = the preset's 4 heads, one
#: rate), as the plan before B7's grid did: its Diff is the main grid's, with no sweep
SAME_SHAPE = CoupledStudy(overrides={**OVERRIDES, "diff_heads": 2, "diff_lr_factors": (1.0,)})


def test_every_lm_variant_of_the_study_has_its_own_label():
    """The judge tells runs apart by ``variant_label`` of their attention config: two variants with one label
    would be mixed into one selection (coupled-wide and coupled-identity must not read as coupled-euler)."""
    for name, attention in LM_VARIANTS.items():
        assert variant_label(dataclasses.asdict(attention)) == name


def _b7_record(variant: str, seed: int, value: float, lr: float = B7_LR) -> Record:
    """A run of B7's grid (16 heads, learning rate in the config) with final perplexity ``value``."""
    kind = {"standard": "standard", "coupled-euler": "coupled", "diff": "diff"}[variant]
    attention = {"kind": kind, "integrator": "euler", "steps": 1, "horizon": "step", "hidden": 4, "dt_init": 0.1,
                 "field_gain": 1.0}
    evals = [{"kind": "eval", "step": step, "tokens": 100 * step, "val_ppl": value * f}
             for step, f in ((0, 30.0), (100, 1.5), (200, 1.0))]
    config = {"task": "lm", "data": "wiki", "preset": "tiny", "tokenizer": "bpe",
              "model": {"attention": attention, "vocab_size": 300, "block_size": 16, "n_layer": 2, "n_head": B7_HEADS,
                        "d_model": 64},
              "train": {"seed": seed, "max_steps": 200, "batch_size": 4, "lr": lr}}
    ablation = {"attention": {"val_loss": 1.0}, **({"field": {"val_loss": 0.2}, "flow": {"val_loss": 0.25}}
                                                   if kind == "coupled" else {})}
    details = {"tokens": 20000, "tokens_per_s": 1e4, "evals": evals, "ablation": ablation}
    result = RunRecord("lm", config, 200, 100, {"wall": 1.0, "cpu": math.nan}, {"val_ppl": value}, details).to_dict()
    return Record(RunSpec.make("coupled", f"b7-{variant}-{lr:g}-s{seed}", kind="train"), result, Path())


def _b7(sweep: dict[float, object], coupled: float = 0.9, **scenario):
    """B7 judged on the records of a plan whose Diff is the main grid's (:data:`SAME_SHAPE`, ``scenario``) plus
    B7's grid: standard, coupled (``coupled`` x standard) and Diff at each learning rate of ``sweep`` (a factor on
    standard's perplexity, one or one per seed)."""
    grid = []
    for seed in range(5):
        base = 10.0 * (1 + 0.01 * NOISE[seed])
        grid += [_b7_record("standard", seed, base), _b7_record("coupled-euler", seed, coupled * base * (1 + 1e-4 * NOISE[seed]))]
        for lr, factor in sweep.items():
            f = factor[seed] if isinstance(factor, tuple) else factor
            grid.append(_b7_record("diff", seed, f * base * (1 + 0.002 * NOISE[seed]), lr))
    return {c.id: c for c in SAME_SHAPE.claims(_records(SAME_SHAPE, **scenario) + grid, "cpu")}["B7"]


def _unmet(claim) -> list[str]:
    return [p["name"] for p in claim.preconditions if not p["met"]]


def test_b7_holds_against_diff_at_its_best_learning_rate_when_diff_reaches_standard():
    b7 = _b7({1e-3: 1.3, 3e-3: 1.0, 1e-2: 1.6}, diff=2.0)  # the main grid's Diff (4 heads, no sweep) is not B7's
    assert b7.verdict == "holds" and not _unmet(b7), b7.summary
    assert b7.evidence["diff_lr"] == 3e-3 and b7.evidence["grid"].startswith(f"{B7_HEADS} heads")
    premise = next(p for p in b7.preconditions if p["name"] == PREMISE)
    assert premise["value"] < SAME_MARGIN and premise["bound"] == SAME_MARGIN
    assert [row["chosen"] for row in b7.table] == ["", "yes", ""] and "sweep of 3 rates" in b7.summary


def test_b7_fails_when_diff_at_its_best_rate_beats_coupled():
    b7 = _b7({1e-3: 0.8, 3e-3: 1.2})
    assert b7.evidence["diff_lr"] == 1e-3 and b7.verdict == "fails" and not _unmet(b7), b7.summary


@pytest.mark.parametrize("sweep, why", [
    ({1e-3: 1.25, 3e-3: 1.2, 1e-2: math.nan}, "worse than standard at every rate (the issue's Diff); a diverged rate"),
    ({3e-3: tuple(1 + 0.05 * a for a in ALT)}, "at standard's level on average, but too noisy to show it"),
])
def test_b7_is_inconclusive_when_diff_does_not_reach_standard(sweep, why):
    b7 = _b7(sweep)
    assert b7.verdict == "inconclusive" and _unmet(b7) == [PREMISE], (why, _unmet(b7))
    assert b7.summary.startswith("Inconclusive before any effect is read: not met: " + PREMISE)
    if any(isinstance(f, float) and math.isnan(f) for f in sweep.values()):
        assert b7.evidence["diff_lr"] == 3e-3  # the diverged rate is never the best
        assert b7.stats["coupled vs diff"]["verdict"] == "holds"  # the test alone would have said coupled wins


def test_b7_is_inconclusive_when_diff_does_not_beat_the_bigram_model():
    b7 = _b7({3e-3: 2.5})  # ppl ~25 against the bigram's 20
    assert b7.verdict == "inconclusive"
    assert "wiki: Differential Attention ppl below the bigram model" in _unmet(b7) and PREMISE in _unmet(b7)


def test_without_a_separate_grid_b7_uses_the_main_grids_diff_and_says_it_had_no_sweep():
    b7 = _claims(SAME_SHAPE)["B7"]
    assert b7.verdict == "holds" and "the only one run (no sweep)" in b7.summary
    b7 = _claims(SAME_SHAPE, diff=1.2)["B7"]  # Diff worse than standard: no verdict about coupling
    assert b7.verdict == "inconclusive" and _unmet(b7) == [PREMISE]


def test_a_compared_variant_above_the_bigram_model_leaves_its_claims_unjudged():
    claims = _claims(mlp={"mlp-only": 2.5, "mlp-only-shared": 1.0, "mlp-only-q": 1.0})
    for cid in ("B2", "B3"):
        assert claims[cid].verdict == "inconclusive" and _unmet(claims[cid]) == ["wiki: mlp-only ppl below the bigram model"]
    assert claims["B1"].verdict == "holds"
    b1 = _claims(coupled=2.5)["B1"]
    assert b1.verdict == "inconclusive" and _unmet(b1) == ["wiki: coupled Euler ppl below the bigram model"]


# -- the f precondition: the ablation (with its own interval) against the claim's effect, not the seed noise ------

def _group(changes, log_ppls) -> dict[int, dict]:
    return {s: {"ablation": {"field": {"val_loss": c}}, "final": {"val_ppl": math.exp(v)}}
            for s, (c, v) in enumerate(zip(changes, log_ppls, strict=True))}


def test_f_precondition_met_when_the_ablation_is_large_against_the_claim_though_small_against_seed_noise():
    changes = [0.20, 0.21, 0.19, 0.20, 0.22]
    log_ppls = [2.0 + 0.6 * e for e in NOISE]
    assert np.mean(changes) < np.std(log_ppls, ddof=1)  # the old yardstick (seed noise) would have said no
    p = mechanism_precondition(_group(changes, log_ppls), "coupled Euler", *mechanism_reference(None))
    assert p.met and p.bound == HEADLINE and p.value == pytest.approx(compare(changes, [0.0] * 5, "increase").interval[0])


def test_f_precondition_unmet_when_the_ablation_is_small_against_the_claim_though_large_against_seed_noise():
    changes = [0.0030, 0.0031, 0.0029, 0.0030, 0.0032]
    log_ppls = [2.0 + 1e-5 * e for e in NOISE]
    assert np.mean(changes) > 10 * np.std(log_ppls, ddof=1)  # the old yardstick would have said yes
    design = compare([0.006 * e for e in OTHER], [0.0] * 5, "decrease")  # a paired design detecting ~0.01
    reference, text = mechanism_reference(design)
    assert reference == pytest.approx(design.mde) and 0.0032 < reference < HEADLINE and "detects" in text
    p = mechanism_precondition(_group(changes, log_ppls), "coupled Euler", reference, text)
    assert not p.met and "lower end of the 95% CI over 5 seeds" in p.detail
    assert not mechanism_precondition(_group(changes, log_ppls), "coupled Euler", *mechanism_reference(None)).met


def test_f_precondition_reference_is_the_headline_when_the_design_detects_only_larger_effects():
    weak = compare([0.5 * e for e in OTHER], [0.0] * 5, "decrease")
    assert weak.mde > HEADLINE and mechanism_reference(weak)[0] == HEADLINE
    assert mechanism_reference(compare([0.1], [0.0], "decrease"))[0] == HEADLINE  # one seed: no power, the headline
    assert not mechanism_precondition(_group([0.5], [2.0]), "one seed", HEADLINE, "").met  # no interval from one seed


def test_f_precondition_through_the_claims_in_both_directions():
    steady = tuple(0.9 / (1 + 0.01 * e) for e in NOISE)  # coupled steady across seeds, standard not: d is noisy
    claims = _claims(coupled=steady, ablation={"attention": 1.0, "field": 0.003, "flow": 0.004})
    acts = [p for p in claims["B2"].preconditions if "removing f" in p["name"]][0]
    assert not acts["met"] and acts["bound"] > 0.003 and claims["B2"].verdict == "inconclusive"
    noisy = _claims(coupled_noise=0.6, ablation={"attention": 1.0, "field": 0.2, "flow": 0.25})
    cpl = [p for p in noisy["B4"].preconditions if "removing f" in p["name"]][0]
    seed_sd = noisy["B3"].evidence["coupled"]["std_log_ppl"]
    assert cpl["met"] and cpl["bound"] == HEADLINE and 0.2 < seed_sd  # large against the claim, small against noise


# -- every variant as a comparison row, the new ones beside the default -------------------------------------

def test_comparison_rows_show_coupled_wide_and_identity_beside_the_default():
    """Runs of the new variants (relabelled copies of coupled Euler's runs, 5% and 20% worse): each a row of the
    shared rule against standard attention, in order after the default, with its f-ablation and interval."""
    runs = [as_run(r.result) for r in _records(SAME_SHAPE) if r.spec.params["kind"] == "train"]
    runs = [r for r in runs if r["variant"] not in ("coupled-wide", "coupled-identity")]  # the plan's own: replaced
    cpl = [r for r in runs if r["variant"] == "coupled-euler" and r["n"] == 1 and r["data"] == "wiki"
           and r["task"] == "lm"]
    for name, factor in (("coupled-wide", 1.05), ("coupled-identity", 1.2)):
        runs += [{**r, "variant": name, "final": {**r["final"], "val_ppl": factor * r["final"]["val_ppl"]}} for r in cpl]
    counts = {"wiki|bpe|300": COUNTS, "web|bpe|300": COUNTS}
    rows = {row["variant"]: row for row in analyse(runs, "wiki", "web", {}, counts)["comparisons"]}
    assert list(rows)[:3] == ["coupled-euler", "coupled-wide", "coupled-identity"]
    assert rows["coupled-wide"]["effect (log ppl)"] == pytest.approx(rows["coupled-euler"]["effect (log ppl)"]
                                                                    + math.log(1.05))
    assert rows["coupled-euler"]["verdict"] == "holds" and rows["coupled-identity"]["verdict"] == "fails"
    assert rows["coupled-wide"]["f removed (Δ loss)"].startswith("+0.2 [") and rows["diff"]["f removed (Δ loss)"] == "-"
    bigram = {"wiki|bpe|300": {**COUNTS, "bigram_ppl": 10.5}, "web|bpe|300": COUNTS}  # coupled-identity's ~10.8 above it
    rows = {row["variant"]: row for row in analyse(runs, "wiki", "web", {}, bigram)["comparisons"]}
    assert rows["coupled-identity"]["verdict"] == "inconclusive" and "bigram" in rows["coupled-identity"]["unmet"]
    assert rows["coupled-euler"]["verdict"] == "holds"
