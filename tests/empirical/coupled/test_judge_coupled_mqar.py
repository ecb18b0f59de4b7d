"""MQAR sample efficiency (issue 41): steps to 99% recall read off each run's evaluation curve, censored at
max steps, and coupled vs standard judged by the shared rule where nothing is censored and by a sign test on
the pairs whose order censoring leaves known otherwise; hand-written evidence (hold, fail, inconclusive)."""
from __future__ import annotations

import math

import pytest
from qkdyn.empirical.coupled.mqar_speed import MIN_CURVE_EVALS, recall_steps, steps_to_recall
from test_judge_coupled import _claims

from qkdyn.stats import compare, compare_censored_times, known_order, sign_test_power

NEVER = (1000.0, True)  # a run of 1000 steps that never reached 99% recall


def test_steps_to_recall_is_read_off_the_curve_and_censored_at_max_steps():
    curve = [{"step": 0, "mqar_acc": 0.1}, {"step": 100, "mqar_acc": 0.5}, {"step": 200, "mqar_acc": 0.995},
             {"step": 300, "mqar_acc": 0.98}]
    assert steps_to_recall(curve) == pytest.approx(100 + 100 * (0.99 - 0.5) / (0.995 - 0.5))
    assert steps_to_recall(curve[:2]) is None and steps_to_recall([{"step": 0, "mqar_acc": 1.0}]) == 0.0
    assert steps_to_recall([{"step": 5, "tokens": 1}, {"step": 9, "mqar_acc": 0.99}]) == 9.0  # rows without recall skipped
    assert recall_steps({"evals": curve[:2], "max_steps": 1000}) == (1000.0, True)
    assert recall_steps({"evals": curve, "max_steps": 1000}) == (pytest.approx(198.99, abs=0.01), False)


def test_the_order_of_a_pair_is_known_only_where_censoring_leaves_it():
    assert known_order((200.0, False), NEVER) == 1 and known_order(NEVER, (300.0, False)) == -1
    assert known_order(NEVER, NEVER) == 0 and known_order((1000.0, False), NEVER) == 0  # reached at the very end
    assert known_order((200.0, False), (300.0, False)) == 1 and known_order((300.0, False), (300.0, False)) == 0


def test_without_censoring_it_is_the_shared_rule_on_log_step_ratios():
    coupled = [(s, False) for s in (200.0, 220.0, 190.0, 240.0, 210.0)]
    standard = [(s, False) for s in (400.0, 420.0, 450.0, 380.0, 500.0)]
    c = compare_censored_times(coupled, standard)
    expected = compare([math.log(s) for s, _ in standard], [math.log(s) for s, _ in coupled], "increase")
    assert c == expected and c.verdict == "holds" and c.mde > 0 and c.censored == 0


@pytest.mark.parametrize("coupled, standard, verdict", [
    ([(200.0, False)] * 5, [NEVER] * 5, "holds"),  # coupled reaches 99% in every seed, standard in none
    ([NEVER] * 5, [(300.0, False)] * 5, "fails"),  # the reverse
    ([(200.0, False)] * 3 + [NEVER] * 2, [NEVER] * 5, "inconclusive"),  # two pairs of unknown order: 3 known, p = 1/8
    ([(200.0, False)] * 4 + [NEVER], [(300.0, False)] * 5, "inconclusive"),  # 4 of 5 known one way: p = 6/32
])
def test_with_censoring_only_pairs_of_known_order_count(coupled, standard, verdict):
    c = compare_censored_times(coupled, standard)
    assert c.verdict == verdict and c.censored == sum(a[1] or b[1] for a, b in zip(coupled, standard, strict=True))
    assert "sign test" in c.test and math.isnan(c.mde) and math.isnan(c.interval[0])
    known = sum(known_order(a, b) != 0 for a, b in zip(coupled, standard, strict=True))
    assert f"over the {known} pairs of known order" in c.test
    if verdict != "inconclusive":
        assert c.p_value == pytest.approx(1 / 32)


def test_sign_test_power_is_computed_not_typed():
    needed, q = sign_test_power(5)
    assert needed == 5 and q == pytest.approx(0.8 ** (1 / 5))  # all 5 one way; power q^5 = 0.8
    assert sign_test_power(4) == (None, pytest.approx(math.nan, nan_ok=True))  # 1/16 > 0.05: never decides
    needed, q = sign_test_power(10)
    assert needed == 9 and 0.5 < q < 0.95


def _mqar_curves(reach: dict[str, float]):
    """An edit giving every MQAR run a curve of MIN_CURVE_EVALS + 1 evaluations: recall rising linearly to its
    final value at the share ``reach[variant]`` of its steps, then flat."""
    def edit(run, result):
        if run.task != "mqar":
            return
        final, steps = result["final"]["mqar_acc"], run.train.max_steps
        result["details"]["evals"] = [
            {"kind": "eval", "step": steps * i / MIN_CURVE_EVALS, "tokens": 0,
             "mqar_acc": final * min(1.0, i / (MIN_CURVE_EVALS * reach[run.variant]))} for i in range(MIN_CURVE_EVALS + 1)]
    return edit


def test_b9_judges_steps_to_99_percent_where_the_curves_resolve_them():
    fast = _claims(mqar_standard=1.0, edit=_mqar_curves({"coupled-euler": 0.3, "standard": 0.7}))["B9"]
    part = fast.stats["easy: fewer steps to 99%"]
    assert part["verdict"] == "holds" and part["censored"] == 0 and part["mde"] > 0  # the shared rule: nothing censored
    assert fast.parts["easy: fewer steps to 99%"] == "holds" and "steps to 99% recall" in fast.summary
    assert fast.evidence["easy"]["steps_to_99"]["coupled"][0] == (pytest.approx(0.3 * 0.99 * 10 / 1.0), False)
    # standard (recall 0.8) never reaches 99%: censored; coupled reaches it: known first on every seed
    censored = _claims(edit=_mqar_curves({"coupled-euler": 0.5, "standard": 0.5}))["B9"]
    part = censored.stats["medium: fewer steps to 99%"]
    assert part["verdict"] == "holds" and part["censored"] == 5 and "sign test" in part["test"]
    assert "detects with 80% power only a probability >= 0.956" in censored.summary
    slow = _claims(mqar_standard=1.0, mqar_coupled=0.95, edit=_mqar_curves({"coupled-euler": 0.3, "standard": 0.3}))
    assert slow["B9"].stats["easy: fewer steps to 99%"]["verdict"] == "fails"  # coupled never gets there, standard does


def test_b9_says_steps_are_not_measured_on_coarse_curves():
    b9 = _claims()["B9"]  # two evaluations per run (old records)
    assert not any("steps" in k for k in b9.stats) and "steps to 99% recall not measured (curves of 2" in b9.summary
