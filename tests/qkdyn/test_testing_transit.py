"""A growth check's precondition (qkdyn.testing.regime_criterion): a trajectory still in transit on the window is
reported as such, neither a pass nor a failure, and the outcome can come out each way.

Hand-made trajectories: ov = log t + log log t and odds = r log t log log t (FAFO's laws) on t in 1e100-1e300.
With r = 1 the attention is near its limit (the margin it leaves unused, (1 - attn) ov ~ 1 / log log t, moves by
0.03 over the window, far below 0.05 of ov's change there, 23): the right law passes and a wrong one fails. With
r = 0.0008 the odds still have exactly the law's shape, but the attention is 0.5-0.78 (as in the stress run's slow
draws) and the unused margin moves by 33: in transit, whatever the law. A real draw of the stress run (FAFO at rho = 0.0157, attention 0.5-0.8 at
t = 1e100-1e300), where the derived laws used to fail, is in transit too.
"""
import dataclasses

import numpy as np
import pytest
from qkdyn.theory.setting import Setting
from scipy.special import expit

import qkdyn
from qkdyn import testing

WINDOW = (1e100, 1e300)


@dataclasses.dataclass
class HandMade:
    """What a growth check reads of a trajectory, written by hand: times, ov and the log attention odds."""

    t: np.ndarray
    ov: np.ndarray
    log_odds: np.ndarray
    param: str = "hand-made"
    setting: Setting = dataclasses.field(default_factory=Setting)
    variables: tuple = ()

    @property
    def attn(self) -> np.ndarray:
        return np.asarray(expit(self.log_odds), dtype=float)


def fafo_like(r: float) -> HandMade:
    t = np.geomspace(*WINDOW, 300)
    L = np.log(t)
    return HandMade(t, L + np.log(L), np.log(r * L * np.log(L)))


def test_the_regime_passes_where_the_attention_is_at_its_limit():
    regime = testing.regime_criterion(fafo_like(1.0), WINDOW)
    assert regime.name == "regime" and regime.outcome == testing.PASSED, regime
    assert "moves by 0.0337" in regime.measured and "ov by 461" in regime.measured
    assert "at most rel = 0.05 times ov's change, 23" in regime.needed


def test_a_right_law_passes_and_a_wrong_law_fails_in_the_regime():
    tr = fafo_like(1.0)
    right = testing.check_growth(tr, "odds", "log t log log t", window=WINDOW)
    assert [c.name for c in right] == ["regime", "slope", "fit", "rivals"]
    assert testing.verdict(right) == testing.PASSED and all(c.passed for c in right)
    testing.assert_grows_like(tr, "odds", "log t log log t", window=WINDOW, on_indistinct="fail")
    wrong = testing.check_growth(tr, "odds", "(log t)^2", window=WINDOW)
    assert testing.verdict(wrong) == testing.FAILED and wrong[0].outcome == testing.PASSED
    with pytest.raises(AssertionError, match=r"criterion 'rivals' failed") as caught:
        testing.assert_grows_like(tr, "odds", "(log t)^2", window=WINDOW, on_indistinct="fail")
    assert not isinstance(caught.value, testing.CannotDistinguish)


@pytest.mark.parametrize("law", ["log t log log t", "(log t)^2"])
def test_in_transit_neither_passes_nor_fails_a_law(law):
    """The same shapes with the attention far from its limit: the right law (which fits exactly) and the wrong
    one (which fails in the regime) are both in transit, every criterion keeping what it found on its own."""
    tr = fafo_like(0.0008)
    results = testing.check_growth(tr, "odds", law, window=WINDOW)
    assert testing.verdict(results) == testing.IN_TRANSIT
    assert all(c.outcome == testing.IN_TRANSIT for c in results) and not any(c.passed for c in results)
    assert "attn from 0.50" in results[0].measured and results[0].window == WINDOW
    on_its_own = "passed" if law == "log t log log t" else "failed"
    assert [c.own_outcome for c in results] == [None, "passed", "passed", on_its_own]
    assert str(results[-1]).startswith(f"rivals: IN TRANSIT (on its own: {on_its_own}): closest rival")
    with pytest.raises(testing.InTransit, match=r"hand-made \(rho = 1\): on t in \[1e\+100, 1e\+300\] the trajectory "
                                                r"is still in transit, .*criterion 'regime': the margin the attention "
                                                r"leaves unused, \(1 - attn\) ov, moves by 33\.\d"):
        testing.assert_grows_like(tr, "odds", law, window=WINDOW, on_indistinct="fail")
    with pytest.raises(pytest.skip.Exception, match="still in transit"):
        testing.assert_grows_like(tr, "odds", law, window=WINDOW)


def test_the_verdict_puts_transit_before_failure_and_failure_before_indistinct():
    def criterion(outcome):
        return testing.Criterion("c", outcome, "", "", WINDOW)

    passed, failed = criterion(testing.PASSED), criterion(testing.FAILED)
    indistinct, transit = criterion(testing.INDISTINCT), criterion(testing.IN_TRANSIT)
    assert testing.verdict([passed, passed]) == testing.PASSED
    assert testing.verdict([passed, indistinct]) == testing.INDISTINCT
    assert testing.verdict([indistinct, failed]) == testing.FAILED
    assert testing.verdict([failed, transit, indistinct]) == testing.IN_TRANSIT
    assert "IN TRANSIT" in str(transit)


#: a draw of the stress run's library-defaults section (benchmarks/STRESS_GROWTH.md) whose derived laws failed
STRESS_DRAW = Setting(classes=2, distinct=11, commons=28, m=4, n=4, scale=1.32, eta_qk=0.0157, eta_ov=1.0, qk0=0.001,
                      ov0=0.001)


def test_the_stress_runs_slow_fafo_draw_is_in_transit_not_failed():
    tr = qkdyn.solve(STRESS_DRAW, "FAFO", t_max=WINDOW[1], points=300)
    for quantity, law in qkdyn.derive("FAFO").growth.items():
        results = testing.check_growth(tr, quantity, law, window=WINDOW)
        assert testing.verdict(results) == testing.IN_TRANSIT, (quantity, results[0])
    # at rho = 1 the same setting is in the regime and every derived law is judged (none fails)
    settled = qkdyn.solve(STRESS_DRAW.replace(eta_qk=1.0), "FAFO", t_max=WINDOW[1], points=300)
    for quantity, law in qkdyn.derive("FAFO").growth.items():
        results = testing.check_growth(settled, quantity, law, window=WINDOW)
        assert results[0].outcome == testing.PASSED and testing.verdict(results) != testing.FAILED, results
