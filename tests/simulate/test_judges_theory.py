"""The judges of A1-A3 on hand-written evidence: each decides holds, fails and inconclusive from the evidence
alone, reads its tolerance when it is called, and neither solves nor touches the filesystem; the figures the
claims name are drawn from the evidence alone (draw_a1 ... draw_a3), and measuring draws nothing."""
import copy
import dataclasses
import json
import math

import pytest
from qkdyn.simulate import claims_theory as ct

NAN = float("nan")
DERIVED_PART = "derived laws (all factors) match the measured late growth"


def a1_evidence(measured=(1.0, 2.0, 4.0), closed=(1.0, 2.0, 4.0), magnitude=(0.1, 1.0, 10.0)) -> dict:
    """One factorized circuit (FACO/QK) at three states, as :func:`measure_a1` returns it."""
    circuit = {"magnitude": list(magnitude), "closed_factor": list(closed),
               "measured_factor": None if measured is None else list(measured)}
    return {"t_max": 1e15, "points": 3, "loss": 1e-6, "circuits": {"FACO/QK": circuit}}


def a2_evidence(line=1e-12) -> dict:
    """One run (CACO at rho = 1) whose line drifts by ``line`` and whose polynomial invariant does not."""
    curve = {"t": [1.0, 10.0, 100.0], "rho_psi": [0.1, 1.0, 10.0], "phi": [0.1, 1.0, 10.0], "drift": [1e-17, 1e-16, line]}
    return {"t_max": 1e15, "rhos": [1.0], "per_run": {"CACO/rho=1": {"qk_mean": 0.0, "line": line}},
            "curves": {"CACO": [curve]}}


def _log_y(k: float, p: float, times) -> list[float]:
    """log y at ``times`` for y = (log t)^p (log log t)^k: its drift (claims_theory.drift) is k."""
    return [p * math.log(math.log(t)) + k * math.log(math.log(math.log(t))) for t in times]


def a3_evidence(**k) -> dict:
    """One parameterisation (CACO); every reading's (k measured, k derived, k derived far) is (0, 0, 0)
    unless ``k`` gives it (a NaN k makes its log y NaN)."""
    readings = {}
    for name, (_, p) in ct.READINGS.items():
        k_meas, k_der, k_far = k.get(name, (0.0, 0.0, 0.0))
        readings[name] = {"log_y": _log_y(k_meas, p, ct.WINDOW), "derived_log_y": _log_y(k_der, p, ct.WINDOW),
                          "derived_log_y_far": _log_y(k_far, p, ct.FAR), "local_exponent": {"1e+30": p},
                          "fits": {"log t": {"a": 1.0, "c": 0.0, "rel_rms": 0.5},
                                   "(log t)^2": {"a": 1.0, "c": 0.0, "rel_rms": 0.01}}}
    caco = {"readings": readings, "law_check": {"1e+30": {"ov/ov_law - 1": 1e-3, "exp(qk - qk_law(ov)) - 1": -2e-3}},
            "derived_growth": {"ov": "log t", "exp(qk)": "(log t)^2", "odds": "(log t)^2", "qk": "2 log log t"},
            "fitted_vs_derived_constants": {"ov slope in log t": {"fitted": 1.0, "derived": 1.0}}}
    # what a run record stores and reads back
    return json.loads(json.dumps({"window": list(ct.WINDOW), "far_window": list(ct.FAR), "read_at": [1e30],
                                  "t_far": 1e30, "per_param": {"CACO": caco},
                                  "curves": {"CACO": {"log10_t": [3.0, 30.0], "local_exponent": {
                                      name: [p + 1.0, p] for name, (_, p) in ct.READINGS.items()}}}}))


def reading_part(name: str) -> str:
    return f"{name} ~ {ct.PAPER_LAWS[name]}"


def test_a1_holds_when_the_measured_factor_is_the_derived_one_and_grows():
    claim = ct.judge_a1(a1_evidence())
    assert claim.verdict == "holds" and claim.plots == ["a1_rate_factor.png"]
    assert claim.evidence == {"FACO/QK": {"max_rel_deviation_from_closed_form": 0.0, "increasing_with_magnitude": True,
                                          "factor_at_start": 1.0, "factor_at_end": 4.0, "magnitude_at_end": 10.0}}


def test_a1_fails_on_a_deviation_above_tolerance():
    claim = ct.judge_a1(a1_evidence(measured=(1.0, 2.0, 4.0 * (1 + 1e-5))))
    assert claim.verdict == "fails"
    assert claim.evidence["FACO/QK"]["max_rel_deviation_from_closed_form"] == pytest.approx(1e-5)


def test_a1_fails_when_the_factor_does_not_increase_with_the_magnitude():
    claim = ct.judge_a1(a1_evidence(measured=(1.0, 3.0, 2.0), closed=(1.0, 3.0, 2.0)))
    assert claim.verdict == "fails" and claim.evidence["FACO/QK"]["increasing_with_magnitude"] is False


@pytest.mark.parametrize("measured, reason", [(None, "no full-model measurement"), ((1.0, NAN, 4.0), "NaN")])
def test_a1_is_inconclusive_without_a_measurement(measured, reason):
    claim = ct.judge_a1(a1_evidence(measured=measured))
    assert claim.verdict == "inconclusive" and reason in claim.evidence["reason"]
    assert claim.summary.startswith("Not measured")


@pytest.mark.parametrize("line, verdict", [(1e-12, "holds"), (1e-6, "fails"), (NAN, "inconclusive")])
def test_a2_decides_by_the_largest_drift(line, verdict):
    claim = ct.judge_a2(a2_evidence(line))
    assert claim.verdict == verdict and claim.plots == ["a2_line.png"]
    if verdict == "inconclusive":
        assert claim.evidence["not_measured"] == ["CACO/rho=1 line"] and "NaN" in claim.summary
    else:
        assert claim.evidence == {"max_relative_drift": line, "per_run": a2_evidence(line)["per_run"]}


def test_a3_holds_when_every_reading_follows_the_papers_law_and_the_derived_laws_are_confirmed():
    claim = ct.judge_a3(a3_evidence())
    assert claim.verdict == "holds" and set(claim.parts.values()) == {"holds"}
    assert claim.evidence["derived_law_confirmed"] == {"CACO": True}
    assert claim.evidence["per_param"]["CACO"]["qk"]["best_family_on_1e10..1e15"] == "(log t)^2"
    assert claim.table[0]["holds"] == "yes" and "Not measured" not in claim.summary


@pytest.mark.parametrize("name", list(ct.READINGS))
def test_a3_reading_part_fails_with_a_log_log_factor_left_over(name):
    claim = ct.judge_a3(a3_evidence(**{name: (1.0, 1.0, 1.0)}))  # a confirmed law with one log log t factor
    assert claim.parts[reading_part(name)] == "fails" and claim.parts[DERIVED_PART] == "holds"
    assert claim.verdict == "partial"
    assert all(verdict == "holds" for part, verdict in claim.parts.items() if part != reading_part(name))


@pytest.mark.parametrize("name", list(ct.READINGS))
@pytest.mark.parametrize("k, derived_part", [((1.0, 0.0, 0.0), "fails"),  # the derived law is not confirmed
                                             ((0.0, 0.0, NAN), "holds"),  # its far drift is not measured
                                             ((NAN, 0.0, 0.0), "inconclusive")])  # the solution is not measured
def test_a3_reading_part_is_inconclusive_when_its_law_is_unconfirmed_or_not_measured(name, k, derived_part):
    claim = ct.judge_a3(a3_evidence(**{name: k}))
    assert claim.parts[reading_part(name)] == "inconclusive" and claim.parts[DERIVED_PART] == derived_part
    assert ("Not measured" in claim.summary) == any(math.isnan(v) for v in k)
    assert claim.table[list(ct.READINGS).index(name)]["holds"] == "inconclusive"


@pytest.mark.parametrize("judge, evidence, constant, value, before, after", [
    (ct.judge_a1, a1_evidence(measured=(1.0, 2.0, 4.0 * (1 + 1e-5))), "A1_TOLERANCE", 1e-4, "fails", "holds"),
    (ct.judge_a1, a1_evidence(measured=(1.0, 2.0, 2.0 * (1 - 1e-10)), closed=(1.0, 2.0, 2.0)),
     "A1_MONOTONE_SLACK", 0.0, "holds", "fails"),
    (ct.judge_a2, a2_evidence(1e-6), "A2_DRIFT_BOUND", 1e-5, "fails", "holds"),
    (ct.judge_a3, a3_evidence(ov=(0.3, 0.0, 0.0)), "LAW_TOLERANCE", 0.1, "holds", "partial"),
    (ct.judge_a3, a3_evidence(ov=(0.3, 0.3, 0.3)), "FACTOR_THRESHOLD", 0.2, "holds", "partial"),
])
def test_the_judges_read_their_tolerance_when_called(judge, evidence, constant, value, before, after, monkeypatch):
    assert judge(evidence).verdict == before
    monkeypatch.setattr(ct, constant, value)
    assert judge(evidence).verdict == after


def test_the_judges_are_pure(tmp_path, monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("a judge must not solve, draw or save")

    for name in ("solve", "subplots", "save"):
        monkeypatch.setattr(ct, name, refuse)
    monkeypatch.chdir(tmp_path)
    cases = [(ct.judge_a1, a1_evidence()), (ct.judge_a1, a1_evidence(measured=None)), (ct.judge_a2, a2_evidence()),
             (ct.judge_a2, a2_evidence(NAN)), (ct.judge_a3, a3_evidence()), (ct.judge_a3, a3_evidence(qk=(NAN, 0, 0)))]
    for judge, evidence in cases:
        before = copy.deepcopy(evidence)
        first, second = judge(evidence), judge(evidence)
        assert repr(dataclasses.asdict(first)) == repr(dataclasses.asdict(second))  # deterministic (NaN included)
        assert repr(evidence) == repr(before)  # the evidence is not changed
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("judge, draw, evidence", [(ct.judge_a1, ct.draw_a1, a1_evidence()),
                                                   (ct.judge_a1, ct.draw_a1, a1_evidence(measured=None)),
                                                   (ct.judge_a2, ct.draw_a2, a2_evidence()),
                                                   (ct.judge_a3, ct.draw_a3, a3_evidence())])
def test_each_claim_names_the_figure_drawn_from_its_evidence_alone(judge, draw, evidence, tmp_path, monkeypatch):
    monkeypatch.setattr(ct, "solve", lambda *args, **kwargs: pytest.fail("drawing solved"))
    stored = json.loads(json.dumps(evidence))
    assert [draw(stored, tmp_path)] == judge(stored).plots
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([judge(stored).plots[0],
                                                                 judge(stored).plots[0].replace(".png", ".pdf")])


def test_measuring_draws_nothing_and_its_evidence_draws_the_figure(tmp_path, monkeypatch):
    import matplotlib.figure
    from qkdyn.theory.setting import Setting

    def refuse(*args, **kwargs):
        raise AssertionError("a measure drew a figure")

    with monkeypatch.context() as patched:
        patched.setattr(matplotlib.figure.Figure, "savefig", refuse)
        patched.setattr(ct, "subplots", refuse)
        measured = [(ct.judge_a1, ct.draw_a1, ct.measure_a1(Setting(), 1e15, points=6)),
                    (ct.judge_a2, ct.draw_a2, ct.measure_a2(Setting(), 1e5, [1.0])),
                    (ct.judge_a3, ct.draw_a3, ct.measure_a3(Setting(), [1e6, 1e15], 1e15))]
    assert list(tmp_path.iterdir()) == []
    for judge, draw, evidence in measured:
        stored = json.loads(json.dumps(evidence))
        assert "plots" not in stored and [draw(stored, tmp_path)] == judge(stored).plots
