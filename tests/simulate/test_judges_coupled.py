"""The judges of CQ1-CQ4 on hand-written evidence: each claim (and each of its parts) holds, fails and is
inconclusive on evidence made to say so; a value not measured (NaN) never lets a claim hold; the tolerances
are read at call time; the judges are pure (they run with every solver of the module made to raise)."""
import dataclasses
import json

import pytest
from qkdyn.simulate import claims_coupled as cc
from qkdyn.simulate import flowpaths

from qkdyn.studies import json_default

NAME, CONTROL = "coupled/euler/linear/dt=0.2/A0=0.5", "MLP-only/linear/dt=0.2/A0=0.5"
NAN = float("nan")


def evidence() -> dict:
    """Evidence shaped as :func:`cc.measure` returns it, one coupled variant, on which every claim holds."""
    return {
        "CQ1": {"rhos": [0.1, 1.0, 10.0], "factorized_local_exponent_at_end": 1.0,
                "per_spec": {NAME: {"max_rel_difference_at_qk_events": {"rho=0.1": 2e-13, "rho=10": 1e-13},
                                    "smallest_factor_step": 1e-3, "factor_at_start": 0.08, "factor_at_end": 76.0,
                                    "qk_at_end": 13.0, "local_exponent_at_end": 1.03,
                                    "factor_over_factorized_at_end": 1.05}}},
        "CQ2": {"rhos": [0.1, 1.0, 10.0], "max_rel_error_at_qk_events": {NAME: {"rho=0.1": 4e-11, "rho=10": 6e-11}},
                "control_CACO": {"rho=0.1": 3e-11, "rho=10": 5e-10}, "reference_rising": {NAME: True}},
        "CQ3": {"k": {NAME: {"exp(qk)": 0.1, "odds": 0.2}}, "k_controls": {"CACO": 0.05, "FACO": 1.0},
                "window": [1e20, 1e50]},
        # rows rho = 0.1, 1; columns loss 1e-2, 1e-3: coupled above every baseline and rising with rho
        "CQ4": {"rhos": [0.1, 1.0], "levels": [1e-2, 1e-3], "controls": {NAME: CONTROL},
                "attn_closed": {"CACO": [[0.9, 0.95], [0.92, 0.96]], "FACO": [[0.95, 0.97], [0.96, 0.98]]},
                "attn": {NAME: [[0.99, 0.995], [0.999, 0.9995]], CONTROL: [[0.98, 0.99], [0.99, 0.995]]}},
    }


def judged(claim: str, edit=None):
    """``claim`` judged on :func:`evidence`, after ``edit`` (a function changing that claim's evidence)."""
    ev = evidence()[claim]
    if edit:
        edit(ev)
    return getattr(cc, f"judge_{claim.lower()}")(ev)


SAME_PART, GROW_PART = "R_QK is a function of qk along the flow (every rho)", "R_QK grows with qk"


def test_every_claim_and_part_holds_on_its_evidence():
    claims = cc.judge(evidence())
    assert [c.id for c in claims] == ["CQ1", "CQ2", "CQ3", "CQ4"]
    assert all(c.verdict == "holds" and set(c.parts.values()) <= {"holds"} for c in claims), \
        [(c.id, c.parts, c.summary) for c in claims]
    assert "Not measured" not in " ".join(c.summary for c in claims)
    assert claims[3].plots == ["cq4_matched_loss.png"] and len(claims[3].table) == 4


def _set(path, value):
    """An edit setting evidence[path[0]]...[path[-1]] to ``value``."""
    def edit(ev):
        for key in path[:-1]:
            ev = ev[key]
        ev[path[-1]] = value
    return edit


def _cq1_difference(value):
    return _set(("per_spec", NAME, "max_rel_difference_at_qk_events", "rho=10"), value)


def _cq1_step(value):
    return _set(("per_spec", NAME, "smallest_factor_step"), value)


@pytest.mark.parametrize("edit, same, grow", [
    (_cq1_difference(1e-3), "fails", "holds"), (_cq1_step(0.0), "holds", "fails"),
    (_cq1_difference(NAN), "inconclusive", "holds"), (_cq1_step(NAN), "holds", "inconclusive")])
def test_cq1_parts_fail_on_a_difference_or_a_step_and_are_inconclusive_on_nan(edit, same, grow):
    claim = judged("CQ1", edit)
    assert claim.parts == {SAME_PART: same, GROW_PART: grow} and claim.verdict == "partial"
    assert ("Not measured (NaN)" in claim.summary) == ("inconclusive" in (same, grow))


def test_cq1_fails_when_both_parts_fail_and_reports_an_unmeasured_step_as_unknown():
    assert judged("CQ1", lambda ev: (_cq1_difference(1e-3)(ev), _cq1_step(-1.0)(ev))).verdict == "fails"
    claim = judged("CQ1", lambda ev: (_cq1_difference(NAN)(ev), _cq1_step(NAN)(ev)))
    assert claim.verdict == "inconclusive" and claim.evidence["per_spec"][NAME]["increasing_with_qk"] is None


@pytest.mark.parametrize("edit, verdict, met", [
    (_set(("max_rel_error_at_qk_events", NAME, "rho=10"), 1e-3), "fails", [True, True]),
    (_set(("max_rel_error_at_qk_events", NAME, "rho=10"), NAN), "inconclusive", [True, True]),
    (_set(("control_CACO", "rho=0.1"), 1e-4), "inconclusive", [False, True]),  # the measurement resolves no line
    (_set(("control_CACO", "rho=0.1"), NAN), "inconclusive", [False, True]),
    (_set(("reference_rising", NAME), False), "inconclusive", [True, False])])
def test_cq2_fails_on_a_line_error_and_is_inconclusive_without_its_measurement(edit, verdict, met):
    claim = judged("CQ2", edit)
    assert claim.verdict == verdict and [p["met"] for p in claim.preconditions] == met, claim.summary


@pytest.mark.parametrize("edit, qk, odds", [
    (_set(("k", NAME, "exp(qk)"), 1.0), "fails", "holds"), (_set(("k", NAME, "odds"), -0.6), "holds", "fails"),
    (_set(("k", NAME, "exp(qk)"), NAN), "inconclusive", "holds"),
    (_set(("k_controls", "CACO"), 0.6), "inconclusive", "inconclusive"),  # the window does not resolve CACO's law
    (_set(("k_controls", "CACO"), NAN), "inconclusive", "inconclusive")])
def test_cq3_parts_fail_on_a_leftover_factor_and_are_inconclusive_without_calibration(edit, qk, odds):
    claim = judged("CQ3", edit)
    assert claim.parts == {"exp(qk) ~ (log t)^2": qk, "odds ~ (log t)^2": odds}


def test_cq3_fails_when_both_readings_carry_a_factor():
    assert judged("CQ3", lambda ev: ev["k"][NAME].update({"exp(qk)": 1.0, "odds": 1.0})).verdict == "fails"


CQ4_PARTS = ("sharper than collapsed QK", "sharper than factorized QK", "sharper than the MLP-only control",
             "larger rho sharper (coupled)")


@pytest.mark.parametrize("edit, failing", [
    (_set(("attn_closed", "CACO", 1), [0.9999, 0.96]), CQ4_PARTS[0]),
    (_set(("attn_closed", "FACO", 0), [0.995, 0.97]), CQ4_PARTS[1]),
    (_set(("attn", CONTROL, 1), [0.99, 0.9999]), CQ4_PARTS[2]),
    (_set(("attn", NAME, 0), [0.9991, 0.995]), CQ4_PARTS[3])])
def test_cq4_each_part_fails_alone(edit, failing):
    claim = judged("CQ4", edit)
    assert claim.parts == {p: "fails" if p == failing else "holds" for p in CQ4_PARTS}, claim.summary


def test_cq4_is_inconclusive_where_attention_is_not_measured():
    unreached = judged("CQ4", _set(("attn", CONTROL, 0), [0.98, NAN]))  # a control misses a loss level
    assert unreached.verdict == "inconclusive" and not unreached.preconditions[0]["met"]
    closed = judged("CQ4", _set(("attn_closed", "FACO", 0), [NAN, 0.97]))
    assert closed.parts == {p: "inconclusive" if p == CQ4_PARTS[1] else "holds" for p in CQ4_PARTS}
    assert "Not measured (NaN)" in closed.summary and "FACO" in closed.summary


def test_a_tolerance_is_read_when_judging(monkeypatch):
    monkeypatch.setattr(cc, "SAME", 5e-11)
    assert judged("CQ1").parts[SAME_PART] == "holds" and judged("CQ2").verdict == "fails"
    monkeypatch.setattr(cc, "SAME", 1e-13)
    assert judged("CQ1").parts[SAME_PART] == "fails"
    monkeypatch.setattr(cc, "SAME", 1e-4)
    monkeypatch.setattr(cc, "RESOLVED", 1e-10)
    assert judged("CQ2").verdict == "inconclusive"
    monkeypatch.setattr(cc, "FACTOR_THRESHOLD", 0.15)
    assert judged("CQ3").parts == {"exp(qk) ~ (log t)^2": "holds", "odds ~ (log t)^2": "fails"}
    monkeypatch.setattr(cc, "FACTOR_THRESHOLD", 0.04)  # below CACO's |k| = 0.05: uncalibrated
    assert judged("CQ3").verdict == "inconclusive"


def test_the_judges_are_pure_and_read_a_stored_record(monkeypatch):
    def forbidden(*args, **kwargs):
        raise AssertionError("a judge solved, drew or measured")

    import qkdyn.simulate.sharpness
    import qkdyn.simulate.solve
    import qkdyn.simulate.specsolve
    for module, name in [(cc, n) for n in ("path", "matched_loss", "growth_k", "line_error", "rate_factor_difference",
                                           "drift", "plot_matched_loss", "save", "subplots", "measure")] + [
            (flowpaths, n) for n in ("path", "solve_spec", "reach", "line_error",
                                     "rate_factor_difference")] + [
            (qkdyn.simulate.solve, "solve"), (qkdyn.simulate.sharpness, "sharpness"),
            (qkdyn.simulate.specsolve, "spec_sharpness")]:
        monkeypatch.setattr(module, name, forbidden)
    stored = json.loads(json.dumps(evidence(), default=json_default))
    first, again = cc.judge(stored), cc.judge(stored)
    assert [dataclasses.asdict(c) for c in first] == [dataclasses.asdict(c) for c in again]
    unmeasured = evidence()
    _cq1_step(NAN)(unmeasured["CQ1"])  # NaN survives the record's JSON
    assert cc.judge(json.loads(json.dumps(unmeasured)))[0].parts[GROW_PART] == "inconclusive"
