"""Claims A4 and A5 judged from evidence alone (:func:`qkdyn.simulate.claims_sharpness.judge_a4`,
:func:`~qkdyn.simulate.claims_sharpness.judge_a5`): hand-written evidence on which each verdict and part holds,
fails or is inconclusive, tolerances read from their module constants, and judges that never solve or draw."""
import dataclasses
import json
import math

import numpy as np
import pytest
from qkdyn.simulate import claims_sharpness as cs
from qkdyn.theory.setting import ALL_PARAMS, EXACT_PARAMS, Setting

from qkdyn.studies import json_default

HARD = "CACO ov0=-0.5 rho=1"
PLOTS = {"attn_vs_loss": "a4_attn_vs_loss.png", "attn_at_matched_loss": "a4_a5_attn_at_matched_loss.png",
         "phase_diagrams": "a5_phase_diagrams.png"}


def _evidence(**changes) -> dict:
    """3 rhos x 2 levels on which A4 and A5 hold: attn rises with rho, at rho = 1 FACO > CACO > CAFO, and FAFO
    passes CACO(rho = 1) at rho = 10; one hard case, reached and agreeing with the closed form."""
    cross = {"max_abs_attn_difference": 1e-12, "max_rel_time_difference": 1e-10}
    evidence = {
        "rhos": [0.1, 1.0, 10.0], "levels": [0.1, 0.01],
        "attn": {"CACO": [[0.50, 0.60, 0.70], [0.60, 0.70, 0.80]], "FACO": [[0.55, 0.65, 0.75], [0.65, 0.75, 0.85]],
                 "CAFO": [[0.40, 0.50, 0.60], [0.50, 0.60, 0.70]], "FAFO": [[0.45, 0.55, 0.65], [0.55, 0.65, 0.75]]},
        "ode_cross_check": {"points": 24, **cross, "per_param": {param: dict(cross) for param in EXACT_PARAMS}},
        "frozen_attention_law_check": {"levels": [0.1, 0.01], "max_rel_time_difference": 2e-15},
        "proof_steps": {param: {"reduction": True, "signs": True} for param in ALL_PARAMS},
        "reachability_hard_cases": {HARD: {"levels": [1e-30, 1e-8, 0.3, 0.6], "outcome": "solved",
                                           "ode_times": [1e30, 1e8, 2.0, 1.0],
                                           "max_rel_time_difference_closed_form": 1e-9}},
        "hard_rhos": [1.0],
        "phase_diagrams": {"rho x K": {"points_per_form": 6, "K_range": [2.0, 3.0], "boundaries": {
            "FAFO = CACO(rho=1)": {"rows_where_it_occurs": 2, "rows": 2, "rho_range": [3.0, 5.0]},
            "FACO = CACO": {"rows_where_it_occurs": 0, "rows": 2, "rho_range": None}}}},
    }
    return {**evidence, **changes}


def _with_attn(param: str, level: int, values) -> dict:
    evidence = _evidence()
    evidence["attn"][param][level] = values
    return evidence


def _with_hard(**measured) -> dict:
    evidence = _evidence()
    case = evidence["reachability_hard_cases"][HARD]
    case.update(measured)
    if case["outcome"] != "solved":
        for key in ("ode_times", "max_rel_time_difference_closed_form"):
            del case[key]
    return evidence


def test_both_hold_on_consistent_evidence():
    a4, a5 = cs.judge_a4(_evidence()), cs.judge_a5(_evidence())
    assert a4.verdict == "holds" and a5.verdict == "holds"
    assert a4.plots == [PLOTS["attn_vs_loss"], PLOTS["attn_at_matched_loss"]]
    assert a5.plots == [PLOTS["attn_at_matched_loss"], PLOTS["phase_diagrams"]]
    assert set(a4.evidence["evidence_per_form"].values()) == {"proved"} and "assumptions" in a4.evidence
    assert a4.evidence["reachability_hard_cases"][HARD]["reached"] is True
    assert "outcome" not in a4.evidence["reachability_hard_cases"][HARD]
    assert "times equal to the closed form's to 1e-6" in a4.summary and "below -1e-9 fails" in a4.summary
    assert a5.evidence["rho_index_used_as_equal_rates"] == 1.0
    assert a5.evidence["per_level"]["loss=0.1"]["rho_where_FAFO_reaches_CACO_at_rho_1"] == 10.0
    assert "FACO = CACO: nowhere on the grid" in a5.summary and [row["loss"] for row in a5.table] == [0.1, 0.01]


def test_a4_fails_where_attn_falls_with_rho():
    claim = cs.judge_a4(_with_attn("CAFO", 1, [0.5, 0.4, 0.7]))
    assert claim.parts == {"sharper attention at the same loss": "fails", "the same losses are reached": "holds"}
    assert claim.verdict == "partial" and "NOT monotone" in claim.summary
    row = claim.evidence["per_param"]["CAFO"]["loss=0.01"]
    assert row["non_decreasing_in_rho"] is False and row["largest_decrease"] == pytest.approx(-0.1)


def test_a4_a_level_missing_from_the_grid_is_not_reached():
    """A non-finite closed-form value means the level is not reached at that rho: both parts fail."""
    claim = cs.judge_a4(_with_attn("FACO", 0, [math.nan, 0.65, 0.75]))
    assert claim.verdict == "fails" and "some levels were not reached" in claim.summary
    assert claim.evidence["per_param"]["FACO"]["loss=0.1"]["every_rho_reached_level"] is False


@pytest.mark.parametrize("measured", [
    {"outcome": "ode stopped", "why": "the flow stalls on a plateau above the target within the horizon"},
    {"max_rel_time_difference_closed_form": 1e-3},  # reached, but the two solvers disagree
    {"ode_times": [None, 1e8, 2.0, 1.0], "max_rel_time_difference_closed_form": math.inf},  # a crossing missing
], ids=["stopped", "disagree", "missing"])
def test_a4_fails_where_a_hard_case_is_not_reached(measured):
    claim = cs.judge_a4(_with_hard(**measured))
    assert claim.parts == {"sharper attention at the same loss": "holds", "the same losses are reached": "fails"}
    assert claim.evidence["reachability_hard_cases"][HARD]["reached"] is False
    assert f"NOT reached by t = 1e100: {HARD}" in claim.summary


def test_a4_is_inconclusive_on_reachability_where_a_solver_failed():
    claim = cs.judge_a4(_with_hard(outcome="solver failed", why="ODE solver failed: step size underflow"))
    assert claim.parts == {"sharper attention at the same loss": "holds", "the same losses are reached": "inconclusive"}
    assert claim.verdict == "partial" and f"no measurement (a solver failed): {HARD}" in claim.summary
    assert claim.evidence["reachability_hard_cases"][HARD] == {
        "levels": [1e-30, 1e-8, 0.3, 0.6], "reached": None, "why": "ODE solver failed: step size underflow"}


def test_a4_a_form_with_an_unproved_step_is_sampled():
    evidence = _evidence(proof_steps={param: {"signs": param != "FAFO"} for param in ALL_PARAMS})
    kinds = cs.judge_a4(evidence).evidence["evidence_per_form"]
    assert kinds["FAFO"] == "sampled" and kinds["CACO"] == "proved"
    none = cs.judge_a4(_evidence(proof_steps={param: {"signs": False} for param in ALL_PARAMS}))
    assert "assumptions" not in none.evidence and " Proved:" not in none.summary and none.verdict == "holds"


@pytest.mark.parametrize("param, values, part", [
    ("FACO", [0.55, 0.60, 0.75], "FACO_sharper_than_CACO"),  # FACO = CACO at rho = 1
    ("CAFO", [0.40, 0.61, 0.70], "CAFO_softer_than_CACO"),
    ("FAFO", [0.45, 0.55, 0.59], "FAFO_reaches_CACO"),  # never reaches CACO(rho = 1) = 0.6
])
def test_a5_each_part_fails_at_one_level(param, values, part):
    claim = cs.judge_a5(_with_attn(param, 0, values))
    assert claim.parts == {key: "fails" if key == part else "holds" for key in claim.parts} and len(claim.parts) == 3
    assert claim.verdict == "partial" and claim.evidence["checks_at_every_level"][part] is False
    assert f"{part.replace('_', ' ')}: not at every level" in claim.summary


NAN = float("nan")


@pytest.mark.parametrize("param, values, undecided", [
    ("FACO", [0.55, NAN, 0.75], ["FACO_sharper_than_CACO"]),  # FACO does not reach the level at rho = 1
    ("CAFO", [0.40, NAN, 0.60], ["CAFO_softer_than_CACO"]),
    ("FAFO", [0.45, 0.55, NAN], ["FAFO_reaches_CACO"]),  # it might reach CACO(rho = 1) where it is not measured
    ("CACO", [0.50, NAN, 0.70], ["FACO_sharper_than_CACO", "CAFO_softer_than_CACO", "FAFO_reaches_CACO"]),
])
def test_a5_a_part_is_inconclusive_where_an_attn_it_compares_is_not_measured(param, values, undecided):
    claim = cs.judge_a5(_with_attn(param, 0, values))
    assert claim.parts == {key: "inconclusive" if key in undecided else "holds" for key in claim.parts}
    assert claim.verdict == ("inconclusive" if len(undecided) == 3 else "partial")
    assert all(claim.evidence["checks_at_every_level"][part] is None for part in undecided)
    assert all(f"{part.replace('_', ' ')}: not measured at every level" in claim.summary for part in undecided)


def test_a5_a_part_that_fails_at_one_level_fails_though_another_is_not_measured():
    evidence = _with_attn("FACO", 0, [0.55, 0.60, 0.75])  # FACO = CACO at rho = 1, loss 0.1
    evidence["attn"]["FACO"][1] = [0.65, NAN, 0.85]  # and not measured at loss 0.01
    assert cs.judge_a5(evidence).parts["FACO_sharper_than_CACO"] == "fails"


def test_monotone_slack_is_read_at_call_time(monkeypatch):
    evidence = _with_attn("CACO", 0, [0.50, 0.60, 0.60 - 1e-8])  # a fall of 1e-8
    assert cs.judge_a4(evidence).parts["sharper attention at the same loss"] == "fails"
    monkeypatch.setattr(cs, "MONOTONE_SLACK", 1e-7)
    claim = cs.judge_a4(evidence)
    assert claim.verdict == "holds" and "below -1e-7 fails" in claim.summary


def test_reach_agreement_is_read_at_call_time(monkeypatch):
    evidence = _with_hard(max_rel_time_difference_closed_form=1e-7)
    assert cs.judge_a4(evidence).verdict == "holds"
    monkeypatch.setattr(cs, "REACH_AGREEMENT", 1e-8)
    claim = cs.judge_a4(evidence)
    assert claim.parts["the same losses are reached"] == "fails"
    monkeypatch.setattr(cs, "REACH_AGREEMENT", 1e-5)
    assert "times equal to the closed form's to 1e-5" in cs.judge_a4(evidence).summary


def test_judges_are_pure_and_deterministic(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("a judge solved, read or drew")

    for name in ("solve", "sharpness", "initial_loss", "load", "save", "subplots", "closed_form_sweep", "sweep",
                 "reachability", "reached", "measure_a45", "plot_sweep"):
        monkeypatch.setattr(cs, name, refuse)
    monkeypatch.setattr(cs.phase, "plot", refuse)
    evidence = _evidence()
    frozen = json.dumps(evidence)
    for judge in (cs.judge_a4, cs.judge_a5):
        assert dataclasses.asdict(judge(evidence)) == dataclasses.asdict(judge(evidence))
    assert json.dumps(evidence) == frozen  # the evidence is read, not changed


def test_judge_reached_on_each_outcome():
    solved = {"outcome": "solved", "ode_times": [1.0, 2.0], "max_rel_time_difference_closed_form": 1e-9}
    assert cs.judge_reached(solved) is True
    assert cs.judge_reached({"outcome": "ode stopped", "why": "frozen"}) is False
    assert cs.judge_reached({"outcome": "solver failed", "why": "underflow"}) is None


def test_measure_returns_plain_data_the_judges_decide_and_draw_reads(monkeypatch, tmp_path):
    """A small grid: measuring draws nothing, the evidence survives a run record's JSON round trip unchanged, the
    judges decide from it and :func:`cs.draw_a45` draws the figures the claims name from it alone."""
    import matplotlib.figure

    def refuse(*args, **kwargs):
        raise AssertionError("measure_a45 drew a figure")

    with monkeypatch.context() as patched:
        patched.setattr(matplotlib.figure.Figure, "savefig", refuse)
        evidence = cs.measure_a45(Setting(), [0.1, 1.0, 10.0], [0.1, 1e-2], np.geomspace(0.01, 100, 4), 3, 1e-2)
    back = json.loads(json.dumps(evidence, default=json_default))
    assert back == json.loads(json.dumps(evidence)) == evidence and "plots" not in back
    assert list(back["attn"]) == list(EXACT_PARAMS) and all(len(rows) == 2 for rows in back["attn"].values())
    outcomes = {m["outcome"] for m in back["reachability_hard_cases"].values()}
    assert outcomes <= {"solved", "ode stopped", "solver failed"}
    a4, a5 = cs.judge_a4(back), cs.judge_a5(back)
    assert a4.parts["sharper attention at the same loss"] == "holds" and a5.verdict == "holds"
    assert cs.draw_a45(back, tmp_path) == list(PLOTS.values())
    assert {p.name for p in tmp_path.glob("*.png")} == set(a4.plots) | set(a5.plots) == set(PLOTS.values())
