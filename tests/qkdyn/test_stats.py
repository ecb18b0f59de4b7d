"""The shared claims rule (qkdyn.stats): each verdict can come out, and the numbers are the textbook ones."""
import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from scipy import stats as sps

from qkdyn.claims import Claim, combine
from qkdyn.stats import compare

CONTROL = [1.0, 2.0, 3.0, 4.0, 5.0]


def test_a_clear_rise_holds_and_a_clear_fall_fails():
    up = compare([c + 1.0 + 0.01 * i for i, c in enumerate(CONTROL)], CONTROL, "increase")
    assert up.verdict == "holds" and up.effect == pytest.approx(1.02) and up.p_value < 1e-4
    down = compare([c - 1.0 - 0.01 * i for i, c in enumerate(CONTROL)], CONTROL, "increase")
    assert down.verdict == "fails" and down.effect < 0


def test_noise_is_inconclusive_whatever_the_sign_of_the_mean():
    noisy = compare([1.1, 1.8, 3.3, 3.9, 5.05], CONTROL, "decrease")
    assert noisy.effect > 0 and noisy.p_value > 0.05 and noisy.verdict == "inconclusive"


def test_p_value_and_interval_are_the_paired_t_test():
    a, b = [2.0, 2.5, 4.1, 4.0, 6.2], CONTROL
    result = compare(a, b, "increase")
    assert result.p_value == pytest.approx(sps.ttest_rel(a, b).pvalue, rel=1e-12)
    d = np.subtract(a, b)
    half = sps.t.ppf(0.975, len(d) - 1) * d.std(ddof=1) / math.sqrt(len(d))
    assert result.interval == pytest.approx((d.mean() - half, d.mean() + half))


def test_an_effect_smaller_than_the_papers_fails():
    small = compare([c + 0.1 + 0.001 * i for i, c in enumerate(CONTROL)], CONTROL, "increase", smallest_effect=1.0)
    assert small.p_value < 0.05 and small.verdict == "fails"


def test_equivalence_needs_the_interval_inside_the_margin():
    same = compare([c + 0.001 * (-1) ** i for i, c in enumerate(CONTROL)], CONTROL, "same", margin=0.1)
    assert same.verdict == "holds"
    apart = compare([c + 1.0 + 0.01 * i for i, c in enumerate(CONTROL)], CONTROL, "same", margin=0.1)
    assert apart.verdict == "fails"
    vague = compare([c + 0.3 * (-1) ** i for i, c in enumerate(CONTROL)], CONTROL, "same", margin=0.1)
    assert vague.verdict == "inconclusive"


def test_no_worse_holds_for_a_rise_and_fails_for_a_clear_drop():
    assert compare([c + 0.05 + 0.001 * i for i, c in enumerate(CONTROL)], CONTROL, "no-worse", margin=0.01).verdict == "holds"
    assert compare([c - 0.2 - 0.001 * i for i, c in enumerate(CONTROL)], CONTROL, "no-worse", margin=0.01).verdict == "fails"
    assert compare([c + 0.3 * (-1) ** i for i, c in enumerate(CONTROL)], CONTROL, "no-worse", margin=0.01).verdict == "inconclusive"


def test_one_seed_is_always_inconclusive_and_zero_spread_decides_by_sign():
    assert compare([2.0], [1.0], "increase").verdict == "inconclusive"
    assert compare([2.0, 3.0], [1.0, 2.0], "increase").verdict == "holds"
    assert compare([1.0, 2.0], [1.0, 2.0], "increase").verdict == "inconclusive"


@given(st.lists(st.floats(-10, 10), min_size=2, max_size=8), st.floats(-3, 3))
def test_swapping_sides_mirrors_the_verdict(control, shift):
    treatment = [c + shift + 0.1 * math.sin(i) for i, c in enumerate(control)]
    forward, backward = compare(treatment, control, "increase"), compare(control, treatment, "decrease")
    assert forward.verdict == backward.verdict
    assert forward.p_value == pytest.approx(backward.p_value, abs=1e-9)


def test_claims_speak_one_vocabulary():
    with pytest.raises(ValueError):
        Claim("X", "s", "does not hold", {}, "")
    with pytest.raises(ValueError):
        Claim("X", "s", "partial", {}, "")  # partial must name its parts
    assert Claim("X", "s", "partial", {}, "", parts={"a": "holds", "b": "fails"}).verdict == "partial"
    with pytest.raises(ValueError):
        Claim("X", "s", "holds", {}, "", parts={"a": "holds", "b": "fails"})  # verdict must follow its parts
    assert combine({"a": "holds", "b": "holds"}) == "holds" and combine({"a": "holds", "b": "fails"}) == "partial"


def test_variance_comparison_follows_the_same_rule():
    from qkdyn.stats import compare_variance

    rng = np.random.default_rng(0)
    control = rng.normal(0, 1.0, 12)
    steady = 0.1 * control + rng.normal(0, 0.01, 12)
    holds = compare_variance(steady, control, "decrease")
    assert holds.verdict == "holds" and holds.effect < 0 and holds.p_value < 0.05
    assert holds.interval[0] < holds.effect < holds.interval[1] < 0
    assert compare_variance(control, steady, "decrease").verdict == "fails"
    assert compare_variance(steady, control, "decrease", smallest_effect=10.0).verdict == "fails"
    assert compare_variance([1.0, 2.0], [1.0, 3.0], "decrease").verdict == "inconclusive"  # too few seeds


def test_variance_comparison_is_pitman_morgan():
    a = np.array([1.0, 2.5, 2.9, 4.4, 5.1, 7.0])
    b = np.array([1.2, 1.9, 3.4, 3.8, 5.6, 6.1])
    result = __import__("qkdyn.stats", fromlist=["x"]).compare_variance(a, b, "increase")
    r = np.corrcoef(a + b, a - b)[0, 1]
    t = r * math.sqrt(4) / math.sqrt(1 - r * r)
    assert result.p_value == pytest.approx(2 * sps.t.sf(abs(t), 4))
    assert result.effect == pytest.approx(math.log(a.var(ddof=1) / b.var(ddof=1)))


# ---- power, censoring, preconditions -------------------------------------------------------------

def test_detectable_effect_has_the_stated_power_by_simulation():
    from qkdyn.stats import detectable_effect

    rng = np.random.default_rng(0)
    n, sd = 5, 0.05
    mde = detectable_effect("two-sided", sd, n)
    d = rng.normal(mde, sd, (40000, n))
    t = d.mean(1) / (d.std(1, ddof=1) / math.sqrt(n))
    assert np.mean(np.abs(t) > sps.t.ppf(0.975, n - 1)) == pytest.approx(0.8, abs=0.01)
    # the numbers: B1 at 3 seeds and its measured spread detects only ~0.24 in log ppl
    assert detectable_effect("two-sided", 0.0734, 3) == pytest.approx(0.24, abs=0.005)
    assert detectable_effect("two-sided", 2 * sd, n) == pytest.approx(2 * mde)  # linear in the spread


def test_tost_power_by_simulation_and_seeds_needed_reach_it():
    from qkdyn.stats import _t_power, detectable_effect, seeds_needed

    rng = np.random.default_rng(1)
    n, sd = 6, 0.03
    margin = detectable_effect("tost", sd, n)
    d = rng.normal(0.0, sd, (40000, n))
    se = d.std(1, ddof=1) / math.sqrt(n)
    crit = sps.t.ppf(0.95, n - 1)
    both = ((d.mean(1) + margin) / se > crit) & ((d.mean(1) - margin) / se < -crit)
    assert np.mean(both) == pytest.approx(0.8, abs=0.03)  # the shifted-t approximation
    need = seeds_needed("tost", 0.01, 0.0447)
    assert _t_power("tost", 0.01, 0.0447, need) >= 0.8 > _t_power("tost", 0.01, 0.0447, need - 1)
    assert seeds_needed("two-sided", 1e-9, 1.0) is None  # beyond any budget: said, not looped forever


def test_every_comparison_prints_its_power():
    c = compare([1.1, 2.0, 3.3, 3.9, 5.2], CONTROL, "increase", smallest_effect=0.5)
    assert c.mde > 0 and c.paper_effect == 0.5 and c.seeds_needed >= 2
    assert "with 80% power" in c.describe() and f"needs {c.seeds_needed} seeds" in c.describe()
    same = compare([1.1, 2.0, 3.3, 3.9, 5.2], CONTROL, "same", margin=0.2)
    assert same.paper_effect == 0.2 and same.mde > 0
    from qkdyn.stats import compare_variance

    v = compare_variance([1.0, 2.1, 2.9, 4.2], [1.1, 1.9, 3.0, 4.0], "decrease", paper_effect=4.1)
    assert v.mde == pytest.approx(2 * (sps.norm.ppf(0.975) + sps.norm.ppf(0.8)))
    assert compare_variance([1.0, 2.1, 2.9], [1.1, 1.9, 3.0], "decrease").mde == math.inf  # one degree of freedom


def test_censored_values_are_never_decided_by_zero_spread():
    from qkdyn.stats import compare_censored

    bounds = [0.9, 0.9, 0.9]  # every seed censored at the same bound: no spread, but no p = 0 either
    c = compare_censored(bounds, [True] * 3, "increase", smallest_effect=0.875)
    assert c.verdict == "inconclusive" and c.p_value == pytest.approx(0.125) and c.censored == 3
    five = compare_censored([0.9] * 5, [True] * 5, "increase")
    assert five.verdict == "holds" and five.p_value == pytest.approx(1 / 32)  # every bound above 0 decides
    down = compare_censored([-0.5, -0.4, -0.6, -0.5, 0.3], [False] * 4 + [True], "increase")
    assert down.verdict == "inconclusive"  # 4 of 5 below zero: sign-test p = 3/16
    assert compare_censored([-0.5] * 7 + [0.3], [False] * 7 + [True], "increase").verdict == "fails"  # p = 9/256
    plain = compare_censored([0.1, 0.2, 0.15], [False] * 3, "increase")
    assert plain.test == "paired t-test"  # nothing censored: the ordinary rule


def test_a_claim_with_an_unmet_precondition_is_inconclusive_and_says_so():
    from qkdyn.claims import Precondition, gate, unmet

    floor = Precondition("baseline below the bigram model", 400.0, "<", 310.0, "worst seed")
    ok = Precondition("attention used", 0.5, ">", 0.1)
    assert not floor.met and ok.met and not Precondition("x", math.nan, ">", 0.0).met
    assert gate({"a": "holds", "b": "fails"}, [floor, ok]) == {"a": "inconclusive", "b": "inconclusive"}
    assert gate({"a": "holds"}, [ok]) == {"a": "holds"}
    with pytest.raises(ValueError, match="unmet"):
        Claim("X", "s", "holds", {}, "", preconditions=[floor])
    claim = Claim("X", "s", "inconclusive", {}, "", preconditions=[floor, ok])
    assert unmet(claim.preconditions) == ["baseline below the bigram model"]
    from qkdyn.report import claims_markdown

    text = "\n".join(claims_markdown([claim]))
    assert "baseline below the bigram model: 400 < 310: NOT MET (worst seed)" in text
