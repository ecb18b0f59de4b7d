"""The shared claims rule (qkdyn.stats): each verdict can come out, and the numbers are the textbook ones."""
import math

import numpy as np
import pytest
from hypothesis import given, strategies as st
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
