"""Claim SUB's judge (:func:`claim_stability.judge`) on hand-written evidence: each verdict and each part, the
tolerances read when it runs, NaN never deciding a part, purity; and the golden quick claim judged again from
the evidence stored in it. Each test takes milliseconds."""
import copy
import json
import math
import types

import numpy as np
import pytest
from qkdyn.empirical.synthetic import claim_stability as cs
from qkdyn.empirical.synthetic import stability as st
from repo_paths import GOLDEN

from qkdyn.studies import json_default

BOUNDED = "bounded region: the full model follows the reduced flow"
BEYOND = "beyond the boundary: the full model leaves the reduced flow"
LINEARISATION = "linearisation confirmed by perturbed flows and GD"
NAN = float("nan")


def run(rho: float, eps_gain: float, follows: bool, linear: float = 1e-10, nonlinear: float = 1.1e-10) -> dict:
    """A validation run of CACO at K = D = N = 2 as :func:`claim_stability.measure` records it: EPS x the cell's
    worst linear gain, EPS x the linear gain of this run's direction, its nonlinear size."""
    off = 1e-10 if follows else 0.2
    return {"param": "CACO", "K": 2, "D": 2, "N": 2, "rho": rho, "eps x worst linear gain": eps_gain,
            "eps x linear gain (this run)": linear, "nonlinear size": nonlinear, "sym_dist": off, "time error": off}


def gd(rho: float, transverse: float, predicted: float) -> dict:
    return {"rho": rho, "step": 0.02, "steps": 10, "t": 0.2, "t_reduced": 0.2, "transverse": transverse,
            "predicted": predicted, "eps": 1e-8}


def evidence(bounded_everywhere: bool = False) -> dict:
    """CACO, one shape, rho = 1 and 50. Default: rho = 50 is predicted unbounded and its flow leaves (a confirmed
    departure, its nonlinear size saturating below its linear gain), rho = 1 follows, the flows and GD agree with
    the linear gain, GD amplifies 1000x more at rho = 50: parts holds / fails / holds. ``bounded_everywhere``: both
    cells bounded, one run at rho = 50 that follows."""
    eps_gain = [[1e-8, 1e-6]] if bounded_everywhere else [[1e-8, 1.0]]
    runs = ([run(50.0, 1e-6, True)] if bounded_everywhere else
            [run(1.0, 1e-8, True), run(50.0, 1.0, False, linear=0.1, nonlinear=0.03)])
    return {"level": 1e-6, "m": 2, "n": 4, "eps": 1e-8, "shapes": [[2, 2, 2]], "rhos": [1.0, 50.0],
            "eps_x_linear_gain": {"CACO": eps_gain}, "max_growth_rate": {"CACO": [[0.1, 0.5]]},
            "log_gain_at_level": {"CACO": [[1.0, 20.0]]}, "validation": runs, "gd_level": 0.1,
            "gd": [gd(1.0, 1e-10, 1e-10), gd(50.0, 1e-7, 1.1e-7)], "fafo_level": 1e-4,
            "fafo_flows_width_V": [{"param": "FAFO", "rho": rho, "eps": 1e-8, "t": 700.0, "t_reduced": 700.0 + dt,
                                    "sym_dist": off, "transverse": off} for rho, dt, off in [(1.0, 0.0, 1e-10),
                                                                                             (50.0, 0.5, 4e-3)]],
            "plot": "stability_phase.png"}


def test_holds_when_every_cell_is_bounded_and_every_check_agrees():
    claim = cs.judge(evidence(bounded_everywhere=True))
    assert claim.verdict == "holds" and set(claim.parts.values()) == {"holds"}
    assert claim.evidence["boundary_rho"] == {"CACO": [50.0]} and claim.plots == ["stability_phase.png"]
    assert "Not measured" not in claim.summary


def test_each_part_on_the_default_evidence():
    """The unscoped claim fails beyond the boundary, the bounded region and the linearisation hold."""
    claim = cs.judge(evidence())
    assert claim.verdict == "partial"
    assert claim.parts == {BOUNDED: "holds", BEYOND: "fails", LINEARISATION: "holds"}
    assert [(r["bounded (linearisation)"], r["follows"]) for r in claim.evidence["validation"]] == [(True, True),
                                                                                                    (False, False)]
    assert claim.evidence["boundary_rho"] == {"CACO": [1.0]} and claim.table[0]["boundary rho"] == 1.0


def test_the_linear_gain_and_the_nonlinear_size_are_reported_side_by_side():
    """Where EPS x the linear gain is beyond the linear regime and the nonlinear flow stays below it, the summary
    says that the flow saturates at its measured size; the table shows the nonlinear size where a flow ran."""
    claim = cs.judge(evidence())
    assert "relative transverse size 3.00e-02 nonlinear vs EPS x linear gain 1.00e-01: the nonlinear flow " \
           "saturates at 3.00e-02" in claim.summary
    assert "relative transverse size 1.10e-10 nonlinear vs EPS x linear gain 1.00e-10)" in claim.summary
    assert "nonlinear flow saturates at a relative transverse size of 0.03 to 0.03" in claim.summary
    assert claim.table[0]["EPS x gain, rho=1"] == "1.0e-08 (run: 1.0e-10 linear, 1.1e-10 nonlinear)"
    assert claim.table[0]["EPS x gain, rho=50"] == "1.0e+00 (run: 1.0e-01 linear, 3.0e-02 nonlinear)"
    e = evidence()
    e["validation"][1]["nonlinear size"] = 0.08  # within FACTOR of its linear gain: no saturation said
    assert "saturates" not in cs.judge(e).summary


def test_fails_when_every_part_fails():
    """A flow inside the boundary leaves, the one beyond it leaves, GD is 3x off its prediction."""
    e = evidence()
    e["validation"][0] = run(1.0, 1e-8, False)
    e["gd"][1] = gd(50.0, 1e-7, 3e-7)
    claim = cs.judge(e)
    assert claim.verdict == "fails" and set(claim.parts.values()) == {"fails"}


@pytest.mark.parametrize("change, part, verdict", [
    (lambda e: e["validation"][1].update(sym_dist=1e-10, **{"time error": 1e-10}), BEYOND, "inconclusive"),
    (lambda e: e["gd"].__setitem__(1, gd(50.0, 5e-9, 5e-9)), LINEARISATION, "fails"),  # amplified only 50x more
    (lambda e: e["validation"][0].update(**{"nonlinear size": 3e-10}), LINEARISATION, "fails"),
    (lambda e: e.update(eps_x_linear_gain={"CACO": [[1e-8, 1e-6]]}, validation=[run(50.0, 1e-6, True)]),
     BEYOND, "holds"),
    (lambda e: e.update(eps_x_linear_gain={"CACO": [[1.0, 1.0]]}, validation=[run(1.0, 1.0, False)]),
     BOUNDED, "fails"),  # no cell is bounded
])
def test_each_part_turns(change, part, verdict):
    e = evidence()
    change(e)
    assert cs.judge(e).parts[part] == verdict


def test_inconclusive_when_the_flows_did_not_reach_their_loss():
    """Both validation flows failed (recorded NaN with their error, as measure records them): the bounded region
    and the boundary are not decided, and neither is the linearisation (the flow it needs is missing)."""
    e = evidence()
    for r in e["validation"]:
        r.update({k: NAN for k in ("eps x linear gain (this run)", "nonlinear size", "sym_dist", "time error")},
                 error="CACO: the full flow did not reach loss 1e-06: step size too small")
    claim = cs.judge(e)
    assert claim.verdict == "inconclusive" and set(claim.parts.values()) == {"inconclusive"}
    assert [r["follows"] for r in claim.evidence["validation"]] == [None, None]
    assert "Not measured (NaN): CACO K,D,N=(2,2,2) rho=1 (CACO: the full flow did not reach" in claim.summary
    assert "rho=50: not measured (time error nan" in claim.summary


@pytest.mark.parametrize("where, key", [(("validation", 0), key) for key in
                                        ("eps x worst linear gain", "eps x linear gain (this run)",
                                         "nonlinear size", "sym_dist", "time error")]
                         + [(("gd", i), key) for i in (0, 1) for key in ("transverse", "predicted")])
def test_a_number_not_measured_never_makes_the_claim_hold(where, key):
    """Each number the verdict is decided from, NaN in evidence that otherwise holds: a part is inconclusive."""
    e = evidence(bounded_everywhere=True)
    e[where[0]][where[1]][key] = NAN
    claim = cs.judge(e)
    assert claim.verdict != "holds" and "inconclusive" in claim.parts.values() and "Not measured" in claim.summary


def test_a_measured_failure_is_not_hidden_by_a_number_not_measured():
    e = evidence()
    e["gd"][0]["predicted"] = NAN
    e["gd"][1] = gd(50.0, 1e-7, 3e-7)
    assert cs.judge(e).parts[LINEARISATION] == "fails"


def test_tolerances_are_read_when_the_judge_runs(monkeypatch):
    """TOLERANCE = 10: the cell at rho = 50 is bounded and its flow follows, so the claim holds; FACTOR and
    AMPLIFICATION fail the linearisation."""
    assert cs.judge(evidence()).verdict == "partial"
    with monkeypatch.context() as m:
        m.setattr(st, "TOLERANCE", 10.0)
        claim = cs.judge(evidence())
        assert claim.verdict == "holds" and claim.evidence["tolerance"] == 10.0
    with monkeypatch.context() as m:
        m.setattr(cs, "FACTOR", 1.05)
        assert cs.judge(evidence()).parts[LINEARISATION] == "fails"
    with monkeypatch.context() as m:
        m.setattr(cs, "AMPLIFICATION", 2000.0)
        assert cs.judge(evidence()).parts[LINEARISATION] == "fails"


def test_judge_is_pure_and_reads_the_stored_evidence(monkeypatch, tmp_path):
    """No solve, no run, no plot, no file; the evidence is left as it was; a JSON round trip (what a record
    stores) gives the same claim, and so does judging twice."""
    def forbidden(*args, **kwargs):
        raise AssertionError("the judge computed or drew something")

    for name in ("diagram", "linearisation", "perturbed_flow", "perturbed_gd", "solve", "FullFlow"):
        monkeypatch.setattr(st, name, forbidden)
    for name in ("_plot", "save", "subplots"):
        monkeypatch.setattr(cs, name, forbidden)
    monkeypatch.chdir(tmp_path)
    e = evidence()
    before = copy.deepcopy(e)
    claim = cs.judge(e)
    assert e == before and cs.judge(e) == claim
    assert cs.judge(json.loads(json.dumps(e, default=json_default))) == claim
    assert list(tmp_path.iterdir()) == []


def test_a_run_that_does_not_reach_its_loss_is_recorded_not_measured(monkeypatch):
    """measure's side: NotReached from the flow or GD gives a record of NaN with the error, which the judge reads."""
    def not_reached(*args, **kwargs):
        raise st.NotReached("did not reach loss 1e-06")

    monkeypatch.setattr(st, "perturbed_flow", not_reached)
    monkeypatch.setattr(st, "perturbed_gd", not_reached)
    d = types.SimpleNamespace(param="CACO", shapes=[(2, 2, 2)], rhos=[1.0, 50.0], m=2, n=4, level=1e-6,
                              eps_gain=np.array([[1e-8, 1.0]]))
    record = cs._validate(d, 0, 1)
    assert set(record) == set(run(1.0, 1e-8, True)) | {"error"} and math.isnan(record["nonlinear size"])
    e = evidence()
    e["validation"][1] = record
    e["gd"][1] = cs._gd(50.0)
    assert set(e["gd"][1]) == set(gd(1.0, 0, 0)) | {"error"}
    claim = cs.judge(e)
    assert claim.parts == {BOUNDED: "holds", BEYOND: "inconclusive", LINEARISATION: "inconclusive"}
    assert "GD rho=50 (did not reach loss 1e-06)" in claim.summary


def test_the_golden_quick_claim_is_judged_again_from_its_evidence():
    """The quick verify's SUB (tests/golden): its evidence as measure records it (without the judge's decisions)
    judged now gives the same verdict, parts, summary, table and evidence."""
    golden = next(c for c in json.loads((GOLDEN / "verify_quick_claims.json").read_text())["claims"]
                  if c["id"] == "SUB")
    stored = {k: v for k, v in golden["evidence"].items() if k not in ("tolerance", "boundary_rho")}
    stored["validation"] = [{k: v for k, v in r.items() if k not in ("bounded (linearisation)", "follows")}
                            for r in stored["validation"]]
    stored.update(gd_level=cs.GD_LEVEL, fafo_level=cs.FAFO_LEVEL, plot="stability_phase.png")
    claim = cs.judge(stored)
    assert (claim.verdict, claim.parts, claim.summary, claim.table, claim.evidence) == (
        golden["verdict"], golden["parts"], golden["summary"], golden["table"], golden["evidence"])


def test_the_grids_are_the_budgets_and_measure_runs_the_one_it_is_given(monkeypatch, tmp_path):
    """The phase diagrams' grid is the budget's StabilityConfig (quick: the golden file's 3 shapes x 4 rhos; the
    full run 5 x 6); the study hands the planned grid to measure, which builds every diagram over it."""
    from qkdyn.empirical.synthetic import budgets
    from qkdyn.empirical.synthetic.study import StabilityStudy

    golden = next(c for c in json.loads((GOLDEN / "verify_quick_claims.json").read_text())["claims"]
                  if c["id"] == "SUB")["evidence"]
    quick, full = budgets.STABILITY["quick"], budgets.STABILITY["cpu"]
    assert [list(s) for s in quick.shapes] == golden["shapes"] and list(quick.rhos) == golden["rhos"]
    assert (len(full.shapes), len(full.rhos)) == (5, 6) and budgets.STABILITY["paper"] == full
    grids = []

    def diagram(shapes, rhos, level, param):
        grids.append((param, [tuple(s) for s in shapes], list(rhos)))
        raise StopIteration  # the grid is what is checked: no solve
    monkeypatch.setattr(st, "diagram", diagram)
    study = StabilityStudy()
    for budget, cfg in (("quick", quick), ("cpu", full)):
        (spec,) = study.plan(budget)
        with pytest.raises(StopIteration):
            study.measure(spec, tmp_path)
        assert grids.pop() == ("CACO", list(cfg.shapes), list(cfg.rhos))


@pytest.mark.parametrize("field, value", [("shapes", ()), ("shapes", ((2, 2),)), ("shapes", ((2, 0, 2),)),
                                          ("rhos", ()), ("rhos", (10.0, 1.0)), ("rhos", (-1.0,))])
def test_a_grid_outside_its_domain_is_refused(field, value):
    from qkdyn.empirical.synthetic import budgets

    from qkdyn.errors import InputError

    with pytest.raises(InputError, match=field):
        budgets.StabilityConfig(**{field: value})
