"""The circuits study's claims judged from hand-written records (no training).

Claim ids (:meth:`CircuitsStudy.claim_ids`): ``TASK QK xR`` and ``TASK QK w/o embedding xR`` (two parts:
sharper attention, no accuracy loss; a multi-layer model adds the rollout reading as a third) and
``TASK QK xR beyond all xR`` (one comparison). Every record is a :class:`qkdyn.runs.RunRecord` made here
and judged through ``CircuitsStudy.claims`` (and :func:`qkdyn.studies.judge`).

Outcomes by design: the two-part claims can be holds, fails, partial and inconclusive (preconditions or an
undecided comparison); ``beyond`` has one part, so it is holds, fails or inconclusive, never partial.
"""
from __future__ import annotations

import math
from pathlib import Path

import pytest
from qkdyn.empirical.circuits import report
from qkdyn.empirical.circuits.study import TARGET_LOSS, CircuitsStudy

from qkdyn.runs import RunRecord
from qkdyn.studies import Record, judge

NAN = math.nan
#: per-seed offsets shared by every arm (the paired design); index by seed
OFFSET = (0.0, 0.02, -0.01, 0.03, 0.01)


def _records(study, budget, *, gain=None, acc=None, uniform=0.1, loss=None, noisy=False, rollout=None, edit=None):
    """Records of ``study``'s plan at ``budget``: mass 0.3 + gain[arm] + a seed offset (R = 1: no gain; ``noisy``:
    the gain's sign alternates with the seed, and so does a 0.05 accuracy change); accuracy (F1 for QA) 0.8 +
    acc[arm]; uniform attention's mass
    ``uniform``; training loss at the stop ``loss`` (default: half the target); ``rollout`` {arm: gain} adds the
    rollout reading (a multi-layer model), at 0.25 + gain. ``edit(params, test, details)`` edits one run."""
    gain, acc = {"qk": 0.2, "qk-noemb": 0.2, "all": 0.0, **(gain or {})}, acc or {}
    loss = study.target(budget) / 2 if loss is None else loss
    records = {}
    for spec in study.plan(budget):
        p = spec.params
        arm = p["arm"] if p["ratio"] != 1.0 else "same"
        sign = (-1) ** p["seed"] if noisy else 1
        mass = 0.3 + sign * gain.get(arm, 0.0) + OFFSET[p["seed"] % len(OFFSET)]
        perf = 0.8 + acc.get(arm, 0.0) + 0.001 * p["seed"] + (0.05 * sign if noisy and arm != "same" else 0.0)
        test = {study.performance_key: perf, "attention_mass": mass + 0.1,
                "attention_mass_without_readout": mass, "uniform_mass": uniform + 0.1,
                "uniform_mass_without_readout": uniform}
        if rollout is not None:
            test["attention_mass_by_method"] = {"rollout": 0.25 + rollout.get(arm, 0.0) + OFFSET[p["seed"] % 5]}
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


VADER = CircuitsStudy(task="vader")  # cpu: 5 seeds, R in {10, 30, 100}, controls: all and QK w/o embedding
SHARPER, NO_LOSS = "sharper attention", "no accuracy loss"


def _kind(cid):
    return "beyond" if "beyond" in cid else "two-part"


def test_every_claim_id_of_the_cpu_plan_is_made():
    ids = VADER.claim_ids("cpu")
    assert len(ids) == 9 and {_kind(c) for c in ids} == {"beyond", "two-part"}
    assert any("w/o embedding" in c for c in ids) and TARGET_LOSS["vader"] == VADER.target("cpu")


def test_every_claim_holds_when_qk_sharpens_more_than_everything_at_no_cost():
    for cid, claim in _claims(VADER).items():
        assert claim.verdict == "holds", (cid, claim.summary)
        assert all(p["met"] for p in claim.preconditions) and len(claim.preconditions) == 2
        assert set(claim.parts) == ({SHARPER, NO_LOSS} if _kind(cid) == "two-part" else
                                    {"sharper than faster everything"})


def test_every_claim_fails_when_qk_blunts_attention_and_costs_accuracy():
    claims = _claims(VADER, gain={"qk": -0.2, "qk-noemb": -0.2, "all": 0.1}, acc={"qk": -0.1, "qk-noemb": -0.1})
    for cid, claim in claims.items():
        assert claim.verdict == "fails" and set(claim.parts.values()) == {"fails"}, cid


def test_two_part_claims_are_partial_when_attention_sharpens_but_accuracy_drops():
    claims = _claims(VADER, acc={"qk": -0.1, "qk-noemb": -0.1})
    for cid, claim in claims.items():
        if _kind(cid) == "two-part":
            assert claim.verdict == "partial" and claim.parts == {SHARPER: "holds", NO_LOSS: "fails"}, cid
        else:  # one part: never partial
            assert claim.verdict == "holds" and len(claim.parts) == 1


@pytest.mark.parametrize("why", ["uniform baseline", "above the target loss", "undecided"])
def test_every_claim_is_inconclusive_when_unjudgeable(why):
    kw = {"uniform baseline": {"uniform": 0.3}, "above the target loss": {"loss": 1.0},
          "undecided": {"noisy": True, "gain": {"all": -0.2}}}[why]
    for cid, claim in _claims(VADER, **kw).items():
        assert claim.verdict == "inconclusive" and set(claim.parts.values()) == {"inconclusive"}, (cid, claim.parts)
        unmet = [p["name"] for p in claim.preconditions if not p["met"]]
        assert bool(unmet) == (why != "undecided"), cid


def test_missing_runs_make_every_claim_inconclusive():
    records = _records(VADER, "cpu")
    specs = VADER.plan("cpu")
    claims = judge(VADER, "cpu", specs, dict(list(records.items())[1:]))
    assert [c.id for c in claims] == list(VADER.claim_ids("cpu"))
    assert all(c.verdict == "inconclusive" and f"{len(specs) - 1} of {len(specs)} runs" in c.summary for c in claims)


def test_on_a_paper_task_a_gain_short_of_the_paper_s_fails():
    """sva is one of the paper's tasks: a clear but small gain (0.01 against the paper's 0.087) fails."""
    sva = CircuitsStudy(task="sva", seeds=(0, 1, 2))
    claims = _claims(sva, "quick", gain={"qk": 0.01})
    sharper = claims["sva QK x30"]
    assert sharper.parts == {SHARPER: "fails", NO_LOSS: "holds"} and sharper.verdict == "partial"
    assert sharper.stats["attention mass (primary)"]["smallest_effect"] == pytest.approx(report.PAPER_MASS_GAIN["sva"])
    assert _claims(sva, "quick")["sva QK x30"].verdict == "holds"  # 0.2 clears it


def test_a_multi_layer_model_judges_rollout_too_and_can_be_partial_on_it():
    qa = CircuitsStudy(task="brown-qa", seeds=(0, 1, 2))
    parts = {SHARPER, "sharper attention (rollout)", "no f1 loss"}
    holds = _claims(qa, "quick", rollout={"qk": 0.1})["brown-qa QK x30"]
    assert holds.verdict == "holds" and set(holds.parts) == parts and len(holds.preconditions) == 3
    split = _claims(qa, "quick", rollout={"qk": -0.1})["brown-qa QK x30"]
    assert split.verdict == "partial" and split.parts["sharper attention (rollout)"] == "fails"
    at_uniform = _claims(qa, "quick", rollout={"same": -0.2})["brown-qa QK x30"]  # rollout baseline at uniform's
    assert at_uniform.verdict == "inconclusive" and not at_uniform.preconditions[1]["met"]


def _nan_at(arm, seed, key, where="test"):
    def edit(p, test, details):
        if p["arm"] == arm and p["ratio"] == 30.0 and p["seed"] == seed:
            (test if where == "test" else details)[key] = NAN
    return edit


@pytest.mark.parametrize("arm, key, where, cid, part", [
    ("qk", "attention_mass_without_readout", "test", "vader QK x30", SHARPER),
    ("qk", "accuracy", "test", "vader QK x30", NO_LOSS),
    ("all", "attention_mass_without_readout", "test", "vader QK x30 beyond all x30", "sharper than faster everything"),
    ("qk-noemb", "final_train_loss", "details", "vader QK w/o embedding x30", SHARPER),
])
def test_a_nan_measurement_never_makes_a_claim_hold(arm, key, where, cid, part):
    claim = _claims(VADER, edit=_nan_at(arm, 2, key, where))[cid]
    assert claim.parts[part] == "inconclusive" and claim.verdict != "holds"


def test_an_unmeasured_uniform_mass_leaves_the_baseline_precondition_unmet():
    def edit(p, test, details):
        if p["ratio"] == 1.0 and p["seed"] == 1:
            test["uniform_mass_without_readout"] = NAN
    claim = _claims(VADER, edit=edit)["vader QK x30"]
    assert claim.verdict == "inconclusive"
