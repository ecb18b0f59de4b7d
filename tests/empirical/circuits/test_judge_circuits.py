"""The circuits study's claims judged from hand-written records (no training).

Claim ids (:meth:`CircuitsStudy.claim_ids`): ``TASK QK xR`` and ``TASK QK w/o embedding xR`` (two parts:
sharper attention, no accuracy loss; a multi-layer model adds the rollout reading as a third; a task with
subsets, brown-sva, has one sharpening part per subset), ``TASK QK xR beyond all xR`` (one comparison, or one
per subset) and ``TASK QK xR faithfulness`` (two parts: comprehensiveness rises, sufficiency falls); on a
negative control (vader) only ``TASK QK xR no sharpening`` (and w/o embedding). Every record is a
:class:`qkdyn.runs.RunRecord` made here and judged through ``CircuitsStudy.claims`` (and
:func:`qkdyn.studies.judge`).

Outcomes by design: the two-part claims can be holds, fails, partial and inconclusive (preconditions or an
undecided comparison); ``beyond`` has one part, so it is holds, fails or inconclusive, never partial.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from qkdyn.empirical.circuits import report
from qkdyn.empirical.circuits.study import TARGET_LOSS, CircuitsStudy, write_report

from qkdyn.runs import RunRecord
from qkdyn.studies import Record, judge

NAN = math.nan
#: per-seed offsets shared by every arm (the paired design); index by seed
OFFSET = (0.0, 0.02, -0.01, 0.03, 0.01)


def _sva_items(seed_offset: float, adjacent_gain: float, far_gain: float, drift: float = 0.0) -> dict:
    """Per-item evidence of 40 brown-sva-like items: read-out r = 3..8; every fourth item non-adjacent (subject at
    r - 3), every eighth also an attractor item, the rest adjacent (subject at r - 1). The model's mass on the
    rationale: 0.5 (adjacent) or 0.15 (non-adjacent) + a per-item jitter + the seed's offset + the arm's gain
    on each kind; on the token before the read-out: the rationale mass where that is the rationale, else
    0.2 + ``drift``."""
    reads = [3 + i % 6 for i in range(40)]
    far = [i % 4 == 0 for i in range(40)]
    subjects = [r - 3 if f else r - 1 for r, f in zip(reads, far, strict=True)]
    mass = [(0.15 + far_gain if f else 0.5 + adjacent_gain) + 0.001 * i + seed_offset for i, f in enumerate(far)]
    return {"uid": [f"d:{i}:1" for i in range(40)], "read": reads, "rationale": [[[s]] for s in subjects],
            "mass": mass, "mass_previous": [0.2 + drift if f else m for f, m in zip(far, mass, strict=True)],
            "score": [1.0] * 40, "flags": {"attractor": [i % 8 == 0 for i in range(40)]}}


def _records(study, budget, *, gain=None, acc=None, uniform=0.1, loss=None, noisy=False, rollout=None, edit=None,
             items=None, offsets=OFFSET):
    """Records of ``study``'s plan at ``budget``: mass 0.3 + gain[arm] + a seed offset (R = 1: no gain; ``noisy``:
    the gain's sign alternates with the seed, and so does a 0.05 accuracy change); accuracy (F1 for QA) 0.8 +
    acc[arm]; ERASER at 5% moving with the mass gain g (comprehensiveness 0.3 + g / 2, sufficiency 0.3 - g / 4,
    plus the seed offset); uniform attention's mass ``uniform``; training loss at the stop ``loss`` (default:
    half the target); ``rollout`` {arm: gain} adds the rollout reading (a multi-layer model), at 0.25 + gain;
    ``items(arm, seed_offset)`` adds per-item evidence (and the primary mass becomes its mean).
    ``edit(params, test, details)`` edits one run."""
    gain, acc = {"qk": 0.4, "qk-noemb": 0.4, "all": 0.0, **(gain or {})}, acc or {}
    loss = study.target(budget) / 2 if loss is None else loss
    records = {}
    for spec in study.plan(budget):
        p = spec.params
        arm = p["arm"] if p["ratio"] != 1.0 else "same"
        sign = (-1) ** p["seed"] if noisy else 1
        offset = offsets[p["seed"] % len(offsets)]
        g = sign * gain.get(arm, 0.0)
        mass = 0.3 + g + offset
        perf = 0.8 + acc.get(arm, 0.0) + 0.001 * p["seed"] + (0.05 * sign if noisy and arm != "same" else 0.0)
        test = {study.performance_key: perf, "attention_mass": mass + 0.1,
                "attention_mass_without_readout": mass, "uniform_mass": uniform + 0.1,
                "uniform_mass_without_readout": uniform,
                "comprehensiveness": 0.3 + g / 2 + offset, "sufficiency": 0.3 - g / 4 + offset}
        if items is not None:
            test["items"] = items(arm, offset)
            test["attention_mass_without_readout"] = float(np.mean(test["items"]["mass"]))
        if rollout is not None:
            test["attention_mass_by_method"] = {"rollout": 0.25 + rollout.get(arm, 0.0) + offset}
            test["uniform_mass_by_method"] = {"rollout": 0.05}
        details = {"final_train_loss": loss, "target_reached": loss < study.target(budget)}
        if edit:
            edit(p, test, details)
        run = RunRecord("circuits", p, steps=10, parameters=100, train_seconds={"wall": 1.0, "cpu": 1.0},
                        final={"dev": test, "test": test}, details=details)
        records[spec] = Record(spec, run.to_dict(), Path())
    return records


def _claims(study, budget="cpu", **kw) -> dict:
    claims = {c.id: c for c in study.claims(list(_records(study, budget, **kw).values()), budget)}
    assert set(claims) == set(study.claim_ids(budget))
    return claims


#: a paper task with every kind of claim: cpu (its paper preset): 5 seeds, R in {10, 30, 100}, controls (all
#: parameters, and QK w/o embedding: its QK group holds the token embedding)
HATEX = CircuitsStudy(task="hatexplain")
VADER = CircuitsStudy(task="vader")  # the negative control
SVA = CircuitsStudy(task="brown-sva")  # decided on its non-adjacent and attractor items
SHARPER, NO_LOSS = "sharper attention", "no accuracy loss"
FAITHFUL = {"comprehensiveness rises", "sufficiency falls"}


def _kind(cid):
    return "beyond" if "beyond" in cid else "faithfulness" if "faithfulness" in cid else "two-part"


def test_every_claim_id_of_the_cpu_plan_is_made():
    ids = HATEX.claim_ids("cpu")
    assert len(ids) == 12 and {_kind(c) for c in ids} == {"beyond", "two-part", "faithfulness"}
    assert sum("w/o embedding" in c for c in ids) == 3
    assert VADER.claim_ids("cpu") == tuple(f"vader {a}x{m} no sharpening" for a in ("QK ", "QK w/o embedding ")
                                           for m in (10, 30, 100))
    assert TARGET_LOSS["vader"] == VADER.target("cpu")
    assert not any("faithfulness" in c for c in CircuitsStudy(task="brown-qa").claim_ids("cpu"))


def test_every_claim_holds_when_qk_sharpens_more_than_everything_at_no_cost():
    for cid, claim in _claims(HATEX).items():
        assert claim.verdict == "holds", (cid, claim.summary)
        assert all(p["met"] for p in claim.preconditions) and len(claim.preconditions) == 2
        assert set(claim.parts) == {"two-part": {SHARPER, NO_LOSS}, "faithfulness": FAITHFUL,
                                    "beyond": {"sharper than faster everything"}}[_kind(cid)]


def test_every_claim_fails_when_qk_blunts_attention_and_costs_accuracy():
    claims = _claims(HATEX, gain={"qk": -0.2, "qk-noemb": -0.2, "all": 0.1}, acc={"qk": -0.1, "qk-noemb": -0.1})
    for cid, claim in claims.items():
        assert claim.verdict == "fails" and set(claim.parts.values()) == {"fails"}, cid


def test_a_gain_short_of_the_paper_s_fails_on_its_own_task():
    """hatexplain is the paper's: a clear 0.1 gain (the paper's mass gain 0.283; ERASER 0.05 / 0.025 against
    its 0.13 / 0.04) fails, where a non-paper task with the same numbers would hold."""
    claims = _claims(HATEX, gain={"qk": 0.1, "qk-noemb": 0.1})
    assert claims["hatexplain QK x30"].parts == {SHARPER: "fails", NO_LOSS: "holds"}
    assert claims["hatexplain QK x30 faithfulness"].parts == {"comprehensiveness rises": "fails",
                                                              "sufficiency falls": "fails"}
    stats = claims["hatexplain QK x30 faithfulness"].stats["comprehensiveness @5% (attention ranking)"]
    assert stats["smallest_effect"] == pytest.approx(report.PAPER_FAITHFULNESS["hatexplain"]["comprehensiveness"])


def test_two_part_claims_are_partial_when_attention_sharpens_but_accuracy_drops():
    claims = _claims(HATEX, acc={"qk": -0.1, "qk-noemb": -0.1})
    for cid, claim in claims.items():
        if _kind(cid) == "two-part":
            assert claim.verdict == "partial" and claim.parts == {SHARPER: "holds", NO_LOSS: "fails"}, cid
        else:  # no accuracy part
            assert claim.verdict == "holds", cid


@pytest.mark.parametrize("why", ["uniform baseline", "above the target loss", "undecided"])
def test_every_claim_is_inconclusive_when_unjudgeable(why):
    kw = {"uniform baseline": {"uniform": 0.3}, "above the target loss": {"loss": 1.0},
          "undecided": {"noisy": True, "gain": {"all": -0.4}}}[why]
    for cid, claim in _claims(HATEX, **kw).items():
        assert claim.verdict == "inconclusive" and set(claim.parts.values()) == {"inconclusive"}, (cid, claim.parts)
        unmet = [p["name"] for p in claim.preconditions if not p["met"]]
        assert bool(unmet) == (why != "undecided"), cid


def test_missing_runs_make_every_claim_inconclusive():
    records = _records(HATEX, "cpu")
    specs = HATEX.plan("cpu")
    claims = judge(HATEX, "cpu", specs, dict(list(records.items())[1:]))
    assert [c.id for c in claims] == list(HATEX.claim_ids("cpu"))
    assert all(c.verdict == "inconclusive" and f"{len(specs) - 1} of {len(specs)} runs" in c.summary for c in claims)


def test_on_a_paper_task_a_gain_short_of_the_paper_s_fails():
    """sva is one of the paper's tasks: a clear but small gain (0.01 against the paper's 0.087) fails."""
    sva = CircuitsStudy(task="sva", seeds=(0, 1, 2))
    claims = _claims(sva, "quick", gain={"qk": 0.01})
    sharper = claims["sva QK x30"]
    assert sharper.parts == {SHARPER: "fails", NO_LOSS: "holds"} and sharper.verdict == "partial"
    assert sharper.stats["attention mass (primary)"]["smallest_effect"] == pytest.approx(report.PAPER_MASS_GAIN["sva"])
    assert _claims(sva, "quick")["sva QK x30"].verdict == "holds"  # 0.4 clears it


def test_a_multi_layer_model_judges_rollout_too_and_can_be_partial_on_it():
    qa = CircuitsStudy(task="brown-qa", seeds=(0, 1, 2))
    parts = {SHARPER, "sharper attention (rollout)", "no f1 loss"}
    holds = _claims(qa, "quick", rollout={"qk": 0.1})["brown-qa QK x30"]
    assert holds.verdict == "holds" and set(holds.parts) == parts and len(holds.preconditions) == 3
    split = _claims(qa, "quick", rollout={"qk": -0.1})["brown-qa QK x30"]
    assert split.verdict == "partial" and split.parts["sharper attention (rollout)"] == "fails"
    at_uniform = _claims(qa, "quick", rollout={"same": -0.2})["brown-qa QK x30"]  # rollout baseline at uniform's
    assert at_uniform.verdict == "inconclusive" and not at_uniform.preconditions[1]["met"]


def test_brown_qa_is_called_a_copy_test_with_its_f1_cost():
    qa = CircuitsStudy(task="brown-qa", seeds=(0, 1, 2))
    claim = _claims(qa, "quick", acc={"qk": -0.02})["brown-qa QK x30"]
    assert "2-layer copy test" in claim.statement and "not for the paper's SQuAD claim" in claim.statement
    assert claim.evidence["f1 cost"].startswith("-0.0200 (95% CI") and claim.parts["no f1 loss"] == "fails"
    summary = report.summarize(qa._results(_records(qa, "quick", acc={"qk": -0.02}).values()))
    (line,) = [t for t in report.task_lines("brown-qa", summary) if "copy test" in t]
    assert "QK x30 -0.020" in line


def _nan_at(arm, seed, key, where="test"):
    def edit(p, test, details):
        if p["arm"] == arm and p["ratio"] == 30.0 and p["seed"] == seed:
            (test if where == "test" else details)[key] = NAN
    return edit


@pytest.mark.parametrize("arm, key, where, cid, part", [
    ("qk", "attention_mass_without_readout", "test", "hatexplain QK x30", SHARPER),
    ("qk", "accuracy", "test", "hatexplain QK x30", NO_LOSS),
    ("all", "attention_mass_without_readout", "test", "hatexplain QK x30 beyond all x30",
     "sharper than faster everything"),
    ("qk-noemb", "final_train_loss", "details", "hatexplain QK w/o embedding x30", SHARPER),
    ("qk", "sufficiency", "test", "hatexplain QK x30 faithfulness", "sufficiency falls"),
])
def test_a_nan_measurement_never_makes_a_claim_hold(arm, key, where, cid, part):
    claim = _claims(HATEX, edit=_nan_at(arm, 2, key, where))[cid]
    assert claim.parts[part] == "inconclusive" and claim.verdict != "holds"


def test_an_unmeasured_uniform_mass_leaves_the_baseline_precondition_unmet():
    def edit(p, test, details):
        if p["ratio"] == 1.0 and p["seed"] == 1:
            test["uniform_mass_without_readout"] = NAN
    claim = _claims(HATEX, edit=edit)["hatexplain QK x30"]
    assert claim.verdict == "inconclusive"
    assert not claim.preconditions[0]["met"] and math.isnan(claim.preconditions[0]["value"])


def test_records_without_erasers_leave_faithfulness_inconclusive_saying_so():
    def edit(p, test, details):
        del test["comprehensiveness"], test["sufficiency"]
    claim = _claims(HATEX, edit=edit)["hatexplain QK x10 faithfulness"]
    assert set(claim.parts.values()) == {"inconclusive"}
    assert claim.evidence["sufficiency"]["same lr (attention)"] == "not measured"


# --- brown-sva: decided on the items where positional heads fail ------------------------------------
def _sva(adjacent=None, far=None, drift=None, **kw) -> dict:
    """brown-sva claims where each arm gains ``adjacent[arm]`` on adjacent items and ``far[arm]`` on the others."""
    adjacent, far, drift = adjacent or {}, far or {}, drift or {}
    return _claims(SVA, items=lambda arm, offset: _sva_items(offset, adjacent.get(arm, 0.0), far.get(arm, 0.0),
                                                             drift.get(arm, 0.0)), **kw)


DECIDING = ("sharper attention (non-adjacent items)", "sharper attention (attractor items)")


def test_brown_sva_holds_when_faster_qk_sharpens_where_positional_heads_fail():
    claims = _sva(adjacent={"qk": 0.3}, far={"qk": 0.2})
    claim = claims["brown-sva QK x10"]
    assert claim.verdict == "holds" and set(claim.parts) == {*DECIDING, NO_LOSS}
    assert claim.stats["attention mass, non-adjacent items (deciding)"]["effect"] == pytest.approx(0.2)
    assert "mde" in claim.stats["attention mass, attractor items (deciding)"]  # the subset's power, printed
    subset = claim.evidence["non-adjacent items"]
    assert subset["items"] == 10 and subset["nulls"]["a previous-token head"] == "0.000 ± 0.000"
    assert subset["nulls"]["the best fixed relative offset (k = 3)"] == "1.000 ± 0.000"  # subject at r - 3
    assert claim.evidence["attractor items"]["items"] == 5
    assert claims["brown-sva QK x10 beyond all x10"].parts == {
        "sharper than faster everything (non-adjacent items)": "holds",
        "sharper than faster everything (attractor items)": "holds"}


@pytest.mark.parametrize("far", [0.0, -0.03])
def test_a_previous_token_head_that_explains_the_whole_gain_does_not_make_brown_sva_hold(far):
    """The faster arm gains 0.4 on the adjacent items only (and its mass on the wrong previous token rises): the
    all-items mass rises clearly (the old rule would hold), but on the non-adjacent and attractor items it
    does not rise (inconclusive) or falls (fails), so no sharpening claim holds."""
    claims = _sva(adjacent={"qk": 0.4, "all": 0.0}, far={"qk": far}, drift={"qk": 0.2})
    claim = claims["brown-sva QK x10"]
    assert claim.stats["attention mass (primary), all items (secondary)"]["verdict"] == "holds"
    assert {claim.parts[p] for p in DECIDING} == {"inconclusive" if far == 0 else "fails"}
    assert claim.verdict != "holds"
    drift = claim.evidence["non-adjacent items"]["mass on the token just before the read-out"]
    assert drift == {"control": "0.200 ± 0.000", "treatment": "0.400 ± 0.000"}
    beyond = claims["brown-sva QK x10 beyond all x10"]
    assert beyond.verdict == ("inconclusive" if far == 0 else "fails")


def test_records_without_per_item_evidence_leave_the_subsets_inconclusive():
    claim = _claims(SVA)["brown-sva QK x30"]  # older records: no items
    assert {claim.parts[p] for p in DECIDING} == {"inconclusive"} and claim.parts[NO_LOSS] == "holds"
    assert claim.verdict == "partial" and "not measured" in claim.evidence["attractor items"]["items"]


def test_items_prepared_without_tags_leave_only_the_attractor_part_inconclusive():
    def items(arm, offset):
        out = _sva_items(offset, 0.0, 0.2 if arm == "qk" else 0.0)
        out["flags"] = {}
        return out
    claim = _claims(SVA, items=items)["brown-sva QK x10"]
    assert claim.parts == {DECIDING[0]: "holds", DECIDING[1]: "inconclusive", NO_LOSS: "holds"}


def test_item_views_split_the_evidence_by_hand():
    """Items: r = 3 subject 2 (adjacent), r = 4 subject 1 (non-adjacent, attractor), r = 5 subject 0
    (non-adjacent), r = 2 without a rationale. Non-adjacent: mass (0.4 + 0.2) / 2, previous-token head 0,
    uniform (1/5 + 1/6) / 2, offsets 3 and 5 each hit one of the two (1/2; the smaller wins), positions 0 and 1
    likewise (p = 0), mass on the token before the read-out (0.1 + 0.3) / 2, score 1/2. Attractor: item two alone."""
    items = {"read": [3, 4, 5, 2], "rationale": [[[2]], [[1]], [[0]], [[]]], "mass": [0.9, 0.4, 0.2, NAN],
             "mass_previous": [0.9, 0.1, 0.3, 0.5], "score": [1.0, 1.0, 0.0, 1.0],
             "flags": {"attractor": [False, True, False, False]}}
    views = report.item_views({"items": items})
    assert views == pytest.approx({
        "mass_previous@all": (0.9 + 0.1 + 0.3) / 3,
        "n_items@non-adjacent": 2, "attention_mass@non-adjacent": 0.3, "mass_previous@non-adjacent": 0.2,
        "score@non-adjacent": 0.5, "uniform@non-adjacent": (1 / 5 + 1 / 6) / 2, "previous_token@non-adjacent": 0.0,
        "best_offset@non-adjacent": 0.5, "best_offset_k@non-adjacent": 3, "best_absolute@non-adjacent": 0.5,
        "best_absolute_p@non-adjacent": 0,
        "n_items@attractor": 1, "attention_mass@attractor": 0.4, "mass_previous@attractor": 0.1,
        "score@attractor": 1.0, "uniform@attractor": 0.2, "previous_token@attractor": 0.0,
        "best_offset@attractor": 1.0, "best_offset_k@attractor": 3, "best_absolute@attractor": 1.0,
        "best_absolute_p@attractor": 1})
    assert report.item_views({}) == {}


# --- vader: the negative control ----------------------------------------------------------------------
SMALL = tuple(o / 10 for o in OFFSET)  # the same-lr arm within 0.003 of uniform attention's mass


def _control(offsets=SMALL, **kw) -> dict:
    return _claims(VADER, uniform=0.3, offsets=offsets, **kw)


def test_the_negative_control_holds_when_faster_qk_leaves_attention_where_it_was():
    claims = _control(gain={"qk": 0.003, "qk-noemb": 0.003}, noisy=True)
    for cid, claim in claims.items():
        assert claim.verdict == "holds" and claim.parts == {"no sharpening": "holds"}, (cid, claim.summary)
        assert [p["name"].split(": ")[1] for p in claim.preconditions] == [
            "the same-lr arm attends at uniform (the negative control's regime)",
            "every compared run reached the target training loss"]
        assert claim.stats["attention mass (primary)"]["test"] == "TOST (paired)"
        assert "brown-sva's effect at this R is not in this report" in claim.evidence[
            "power against the reference effect"]


def test_the_negative_control_fails_when_faster_qk_moves_attention():
    for cid, claim in _control(gain={"qk": 0.1, "qk-noemb": -0.1}).items():
        assert claim.verdict == "fails", cid


@pytest.mark.parametrize("why", ["undecided", "baseline attends", "above the target loss"])
def test_the_negative_control_is_inconclusive_when_unjudgeable(why):
    kw = {"undecided": {"gain": {"qk": 0.03, "qk-noemb": 0.03}, "noisy": True},
          "baseline attends": {"gain": {"qk": 0.003, "qk-noemb": 0.003}, "noisy": True, "offsets": OFFSET},
          "above the target loss": {"loss": 1.0}}[why]
    for cid, claim in _control(**kw).items():
        assert claim.verdict == "inconclusive", (cid, claim.summary)
        assert any(not p["met"] for p in claim.preconditions) == (why != "undecided")


def test_the_control_prints_its_power_against_brown_sva_s_effect_in_the_report(tmp_path):
    """``write_report`` judges brown-sva first and prints, beside each vader claim, whether vader's design
    detects brown-sva's effect at the same R (here its non-adjacent items' +0.2, against vader's spread)."""
    for study, records in ((SVA, _records(SVA, "cpu", items=lambda arm, offset: _sva_items(
            offset, 0.0, 0.2 if arm == "qk" else 0.0))),
            (VADER, _records(VADER, "cpu", uniform=0.3, offsets=SMALL, gain={"qk": 0.003, "qk-noemb": 0.003},
                             noisy=True))):
        results = study._results(records.values())
        summary = report.summarize(results)
        (tmp_path / f"{study.task}.json").write_text(json.dumps({
            "task": study.task, "arms": list(results), "seeds": [0, 1, 2, 3, 4], "config": {"n_layer": 1},
            "summary": summary, "notes": [], "plots": [], "performance_key": "accuracy",
            "target_loss": study.target("cpu")}))
    claims = write_report(tmp_path)
    power = claims["vader"][0].evidence["power against the reference effect"]
    assert power.startswith("brown-sva's effect (attention mass, non-adjacent items (deciding)) +0.2:")
    assert "so it would detect that effect" in power
    text = (tmp_path / "report.md").read_text()
    assert "non-adjacent items (deciding): previous-token head's mass" in text
    assert "vader is a negative control" in text and "Sharpening is decided on the attractor items" in text
    assert [c.id for c in claims["brown-sva"]][:2] == ["brown-sva QK x10", "brown-sva QK x10 beyond all x10"]


def test_reference_power_in_words():
    from qkdyn.stats import compare

    flat = compare([0.1, 0.2, 0.1, 0.2], [0.1, 0.1, 0.1, 0.1], "same", margin=0.02)
    text = report.reference_power("brown-sva", flat, ("all items", 0.01))
    assert "would NOT detect that effect" in text and "seeds would" in text
