"""Negative controls: every verdict is decided by a measurement that fails on a planted wrong input
(a wrong law for A3, a wrong right-hand side for A1, disagreeing magnitudes for FA, an unreachable
level for A4)."""
import math
import tempfile
from pathlib import Path

import numpy as np
import pytest
from qkdyn.empirical.synthetic import fixed_attention as fa
from qkdyn.empirical.synthetic.rates import gd_rate_factors
from qkdyn.simulate import claims_sharpness, claims_theory
from qkdyn.simulate.solve import solve
from qkdyn.theory.setting import Setting


def _judged(param: str, laws):
    tr = solve(Setting(), param, t_max=claims_theory.WINDOW[1], points=50, at=list(claims_theory.WINDOW))
    t1, t2 = claims_theory.WINDOW
    ends = np.searchsorted(tr.t, [t1, t2])
    measured = {name: tuple(float(v) for v in log_y(tr)[ends]) for name, (log_y, _) in claims_theory.READINGS.items()}
    pairs = lambda values: {k: tuple(map(float, v)) for k, v in values.items()}  # noqa: E731
    claimed = {name: p for name, (_, p) in claims_theory.READINGS.items()}
    return claims_theory.judge_growth(t1, t2, measured, pairs(laws(tr, np.array([t1, t2]))),
                                      pairs(laws(tr, np.array(claims_theory.FAR))), claimed)


def test_a3_derived_laws_are_confirmed_and_decide_the_log_log_factor():
    caco, faco = (_judged(p, claims_theory.derived_log_readings) for p in ("CACO", "FACO"))
    assert all(row["derived_law_confirmed"] for row in (*caco.values(), *faco.values()))
    assert caco["exp(qk)"]["holds"] is True and caco["ov"]["holds"] is True
    assert faco["exp(qk)"]["holds"] is False  # e^qk ~ (log t)^2 log log t, not log^2 t
    assert caco["qk"]["holds"] is False  # the gap grows like log log t


def test_a3_fails_on_a_planted_law_one_log_log_factor_off():
    def planted(tr, t):  # FACO's law without its log log t factor
        laws = claims_theory.derived_log_readings(tr, t)
        drop = np.log(np.log(np.log(t)))
        return {**laws, "exp(qk)": laws["exp(qk)"] - drop, "odds": laws["odds"] - drop}

    judged = _judged("FACO", planted)
    assert not judged["exp(qk)"]["derived_law_confirmed"] and judged["exp(qk)"]["holds"] is None
    assert judged["ov"]["derived_law_confirmed"]


SMALL = Setting(classes=2, distinct=2, commons=2, m=2, n=4)


def test_a1_holds_with_the_full_models_update_and_fails_with_a_planted_wrong_rhs():
    with tempfile.TemporaryDirectory() as tmp:
        right = claims_theory.check_a1(SMALL, 1e15, Path(tmp), measure=gd_rate_factors, points=6)
        assert right.verdict == "holds"

        def wrong(flow, theta):  # the QK update 1% too fast for a factorized QK circuit
            field = flow.field(theta)
            qk = np.concatenate([np.full(size, name in ("W_Q", "W_K")) for (name, _, _), size in
                                 zip(flow.blocks, flow.sizes, strict=True)])
            return np.where(qk, 1.01 * field, field)

        planted = claims_theory.check_a1(SMALL, 1e15, Path(tmp), points=6,
                                         measure=lambda s, p, x: gd_rate_factors(s, p, x, field=wrong))
        assert planted.verdict == "fails"
        assert planted.evidence["FACO/QK"]["max_rel_deviation_from_closed_form"] == pytest.approx(0.01, rel=1e-3)
        assert claims_theory.check_a1(SMALL, 1e15, Path(tmp), points=6).verdict == "inconclusive"


def _fa_inputs(theory_scale: float):
    t = np.array([0.0, 1.0, 2.0])
    runs, curves = {}, {}
    for alpha in (0.2, 0.6):
        for seed in (0, 1, 2):
            fall = np.array([0.0, 0.5, 0.4]) * alpha * (1 + 0.01 * seed)
            runs[("collapsed", alpha, seed)] = fa.Run("collapsed", alpha, seed, t, 1.0 - fall * t, fall, alpha)
        curves[("collapsed", alpha)] = (1.0 - 0.4 * alpha * t, theory_scale * np.array([0.0, 0.5, 0.4]) * alpha)
    return runs, curves


@pytest.mark.parametrize("scale, verdict", [(1.0, "holds"), (9.0, "fails")])
def test_fa_fails_when_sampled_and_theory_magnitudes_disagree(scale, verdict):
    runs, curves = _fa_inputs(scale)
    claim = fa.claim(runs, curves, fa.summary_table(runs, curves), "fa.png")
    part = f"collapsed: sampled -dL/dalpha within {fa.MAGNITUDE_FACTOR:g}x of the frozen-QK theory"
    assert claim.parts[part] == verdict


def test_a4_reachability_fails_on_an_unreachable_level():
    frozen_ov = Setting(eta_ov=0.0, eta_qk=1.0)  # the loss has a floor above these levels
    stopped = claims_sharpness.reached(frozen_ov, "CACO", [0.5, 1e-3])
    assert stopped["outcome"] == "ode stopped" and claims_sharpness.judge_reached(stopped) is False
    ok = claims_sharpness.reached(Setting(ov0=-0.5), "CACO", [1.0, 1e-8])
    assert claims_sharpness.judge_reached(ok) is True and ok["max_rel_time_difference_closed_form"] < 1e-6
    assert math.isfinite(ok["ode_times"][-1])
