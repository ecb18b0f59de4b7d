"""Claims A4-/A5-sampled judged from hand-written evidence (:func:`.claims_sampled.judge`): each holds,
fails part by part and is inconclusive (no shared level, one seed, a value not measured), the thresholds
are read at call time, and the judge trains and draws nothing. Every evidence goes through the JSON round
trip of a run record first."""
import json
import math
import types

import numpy as np
import pytest
from qkdyn.empirical.synthetic import batched, claims_sampled, plots, sampled
from qkdyn.empirical.synthetic.model import PARAMS

from qkdyn import stats
from qkdyn.studies import json_default

SCHEDULES = ("equal", "qkfast", "ramp")
#: attention on distinct tokens at equal rates: FACO > CACO, FAFO > CAFO, CAFO < CACO, FAFO < FACO (A5 holds)
EQUAL = {"CACO": 0.5, "FACO": 0.6, "CAFO": 0.4, "FAFO": 0.45}
#: what a faster QK adds to it (A4 holds)
FASTER = 0.2
A4_PARTS = [f"{p}: {s} > equal" for p in PARAMS for s in SCHEDULES[1:]]
A5_PARTS = ["factorized QK sharpens: FACO > CACO", "factorized QK sharpens: FAFO > CAFO",
            "factorized OV softens: CAFO < CACO", "factorized OV softens: FAFO < FACO", "faster QK sharpens FAFO"]


def roundtrip(evidence: dict) -> dict:
    """As a run record stores it."""
    return json.loads(json.dumps(evidence, default=json_default))


def make_evidence(attn: dict | None = None, seeds=(0, 1, 2), levels=(0.3, 0.1), query_id: dict | None = None,
                  unreached: tuple = ()) -> dict:
    """Evidence as :func:`.claims_sampled.measure` returns it: every run reaches ``levels`` (except the runs
    (form, schedule, seed) in ``unreached``: none), its attention on distinct tokens ``attn[(form, schedule)]``
    (default :data:`EQUAL`, plus :data:`FASTER` when faster) plus a little seed noise, and on the query's id
    ``query_id[(form, schedule)]`` (default 0.05)."""
    attn, query_id = attn or {}, query_id or {}
    runs = []
    for i, (p, s) in enumerate((p, s) for p in PARAMS for s in SCHEDULES):
        base = attn.get((p, s), EQUAL[p] + (FASTER if s != "equal" else 0.0))
        for seed in seeds:
            metrics = {"attn_distinct": base + 0.003 * ((seed * (i + 2)) % 3),
                       "attn_query_id": query_id.get((p, s), 0.05), "separability": 0.1, "p_true": 0.9}
            runs.append({"form": p, "schedule": s, "seed": seed, "horizon": 100, "steps": 90 + seed, "loss": 0.05,
                         "at_level": [] if (p, s, seed) in unreached else [
                             {"level": level, **metrics} for level in levels]})
    return roundtrip({"generator": "clean", "seeds": list(seeds), "test_size": 64, "base_lr": 1.0, "perturb": None,
                      "figures": {"attention": "sampled_clean_attention.png", "dtap": "sampled_clean_dtap.png"},
                      "horizon_steps": {f"{p} {s}": 100 for p in PARAMS for s in SCHEDULES}, "runs": runs})


def test_both_hold_and_the_claims_carry_the_evidence():
    a4, a5 = claims_sampled.judge(make_evidence())
    assert (a4.id, a4.verdict, a5.id, a5.verdict) == ("A4-sampled-clean", "holds", "A5-sampled-clean", "holds")
    assert list(a4.parts) == A4_PARTS and list(a5.parts) == A5_PARTS
    assert a4.plots == ["sampled_clean_attention.png", "sampled_clean_dtap.png"]
    assert a5.plots == ["sampled_clean_attention.png"]
    assert set(a4.evidence) == {"seeds", "horizon_steps", "test_size", "base_lr", "shortcut"}
    assert a5.evidence == {"equal_rates_level": 0.1, "fafo_level": 0.1, "seeds": [0, 1, 2]}
    assert all(a4.stats[k]["n"] == 3 and a4.stats[k]["verdict"] == "holds" for k in A4_PARTS)
    assert a4.stats["CACO: qkfast > equal"]["effect"] == pytest.approx(FASTER, abs=0.01)
    assert len(a4.table) == len(PARAMS) * len(SCHEDULES) and a4.table[0]["matched_loss"] == 0.1
    assert a4.summary.endswith(a4.evidence["shortcut"]) and "does not act" in a4.evidence["shortcut"]


def test_judge_is_deterministic():
    evidence = make_evidence()
    assert claims_sampled.judge(evidence) == claims_sampled.judge(evidence)


@pytest.mark.parametrize("part", A4_PARTS)
def test_a4_fails_part_by_part(part):
    form, schedule = part.split(": ")[0], part.split(": ")[1].split(" >")[0]
    a4, _ = claims_sampled.judge(make_evidence({(form, schedule): EQUAL[form] - 0.1}))
    assert a4.parts[part] == "fails" and a4.verdict == "partial"
    assert all(v == "holds" for k, v in a4.parts.items() if k != part)


#: per A5 part, the attention (equal rates unless named) that reverses it and it alone
A5_REVERSALS = {
    "factorized QK sharpens: FACO > CACO": {("FACO", "equal"): 0.48},
    "factorized QK sharpens: FAFO > CAFO": {("FAFO", "equal"): 0.38},
    "factorized OV softens: CAFO < CACO": {("CACO", "equal"): 0.35},
    "factorized OV softens: FAFO < FACO": {("FAFO", "equal"): 0.65, ("FAFO", "qkfast"): 0.85, ("FAFO", "ramp"): 0.85},
    "faster QK sharpens FAFO": {("FAFO", "qkfast"): 0.3},
}


@pytest.mark.parametrize("part", A5_PARTS)
def test_a5_fails_part_by_part(part):
    _, a5 = claims_sampled.judge(make_evidence(A5_REVERSALS[part]))
    assert a5.parts[part] == "fails" and a5.verdict == "partial"
    assert all(v == "holds" for k, v in a5.parts.items() if k != part)


def test_no_shared_level_is_inconclusive():
    a4, a5 = claims_sampled.judge(make_evidence(unreached=(("FAFO", "qkfast", 1),)))
    assert {k: v for k, v in a4.parts.items() if v != "holds"} == {"FAFO: qkfast > equal": "inconclusive",
                                                                   "FAFO: ramp > equal": "inconclusive"}
    assert a4.stats["FAFO: qkfast > equal"] is None and "FAFO: qkfast > equal no shared loss level" in a4.summary
    assert {k: v for k, v in a5.parts.items() if v != "holds"} == {"faster QK sharpens FAFO": "inconclusive"}
    assert a5.evidence["fafo_level"] is None
    assert math.isnan(next(r for r in a4.table if r["form"] == "FAFO")["matched_loss"])


def test_no_level_anywhere_is_inconclusive_and_the_shortcut_unmeasured():
    a4, a5 = claims_sampled.judge(make_evidence(levels=()))
    assert a4.verdict == a5.verdict == "inconclusive"
    assert "not measured" in a4.evidence["shortcut"]


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # the table's sd over one seed
def test_one_seed_is_inconclusive():
    a4, a5 = claims_sampled.judge(make_evidence(seeds=(0,)))
    assert a4.verdict == a5.verdict == "inconclusive"
    assert a4.stats["CACO: qkfast > equal"]["n"] == 1


def test_a_value_not_measured_never_holds():
    a4, a5 = claims_sampled.judge(make_evidence({("CAFO", "equal"): math.nan}))
    assert a4.parts["CAFO: qkfast > equal"] == a4.parts["CAFO: ramp > equal"] == "inconclusive"
    assert a5.parts["factorized QK sharpens: FAFO > CAFO"] == "inconclusive"
    assert a5.parts["factorized OV softens: CAFO < CACO"] == "inconclusive"
    assert a5.stats["factorized OV softens: CAFO < CACO"] is None
    assert "CAFO < CACO at loss 0.1: attn_distinct not measured (NaN) for seeds [0, 1, 2]" in a5.summary
    everywhere = claims_sampled.judge(make_evidence({(p, s): math.nan for p in PARAMS for s in SCHEDULES}))
    assert all(c.verdict == "inconclusive" for c in everywhere)


def test_alpha_is_read_at_call_time(monkeypatch):
    evidence = make_evidence({("CACO", "qkfast"): EQUAL["CACO"] + 0.02})  # a small effect: p = 0.01
    part = "CACO: qkfast > equal"
    p = claims_sampled.judge(evidence)[0].stats[part]["p_value"]
    assert claims_sampled.judge(evidence)[0].parts[part] == "holds"
    monkeypatch.setattr(stats, "ALPHA", p / 2)
    assert claims_sampled.judge(evidence)[0].parts[part] == "inconclusive"


def test_shortcut_threshold_is_read_at_call_time(monkeypatch):
    evidence = make_evidence(query_id={("CACO", "qkfast"): 0.08})
    assert "The shortcut acts" in claims_sampled.judge(evidence)[0].evidence["shortcut"]
    monkeypatch.setattr(claims_sampled, "SHORTCUT_MOVE", 0.05)
    assert "does not act here" in claims_sampled.judge(evidence)[0].evidence["shortcut"]


def test_judge_is_pure(monkeypatch, tmp_path):
    def forbidden(*args, **kwargs):
        raise AssertionError("the judge trained or drew")

    for module, name in ((batched, "grid"), (batched, "run"), (batched, "train"), (plots, "dtap"),
                         (plots, "sampled_attention"), (claims_sampled, "measure")):
        monkeypatch.setattr(module, name, forbidden)
    monkeypatch.chdir(tmp_path)
    assert [c.verdict for c in claims_sampled.judge(make_evidence())] == ["holds", "holds"]
    assert not list(tmp_path.iterdir())


def test_measure_returns_evidence_the_judge_reads(monkeypatch, tmp_path):
    """measure on a fake grid (no training): JSON evidence, drawn figures named, the same claims as the
    hand-written evidence of the same numbers."""
    written = make_evidence()
    results = {(r["form"], r["schedule"], r["seed"]): sampled.Result(
        r["form"], r["schedule"], r["seed"], r["horizon"], r["steps"], r["loss"],
        {lv["level"]: {m: lv[m] for m in claims_sampled.METRICS} for lv in r["at_level"]},
        {"attn_distinct": np.full(4, 0.5), "p_true": np.full(4, 0.9)}) for r in written["runs"]}
    drawn = []
    monkeypatch.setattr(batched, "grid", lambda *args: results)
    monkeypatch.setattr(plots, "dtap", lambda grid, path: drawn.append(path.name))
    monkeypatch.setattr(plots, "sampled_attention", lambda rows, path, name: drawn.append(path.name))
    task = types.SimpleNamespace(base_lr=1.0, qk_factor=dict.fromkeys(SCHEDULES), horizon=lambda p, s: 100)
    evidence = claims_sampled.measure("clean", task, 64, [0, 1, 2], tmp_path)
    assert json.dumps(evidence) == json.dumps(written)  # JSON as it is: no numpy, no tuple, no float key
    assert sorted(drawn) == sorted(evidence["figures"].values())
    assert claims_sampled.judge(roundtrip(evidence)) == claims_sampled.judge(written)
