"""qkdyn.testing cannot mislead: right laws pass as ``derive`` prints them, every wrong law is caught, and a
window that cannot tell a law from its rival says so instead of failing a true law.

The negative controls run each wrong law through a property test as a user would write it, with
hypothesis's default ``max_examples`` (only shrinking is skipped: the first failing example decides),
and require hypothesis to report the failure with the failed criterion named.
"""
import math

import numpy as np
import pytest
from hypothesis import Phase, given, settings
from hypothesis import strategies as st
from qkdyn.simulate.growth import RIVALS, Law, decisive_shares, unexplained_shares
from qkdyn.simulate.solve import solve
from qkdyn.theory.setting import ALL_PARAMS, EXACT_PARAMS, Setting

import qkdyn
from qkdyn import testing

#: the documented window: late (t to 1e300 costs nothing in log time), where the orders separate best
WINDOW = (1e100, 1e300)


def late(param, setting=None):
    return solve(setting or Setting(), param, t_max=WINDOW[1], points=300)


@testing.for_each_param(include_paper=True)
def test_every_law_derive_prints_passes_as_printed(param):
    tr = late(param)
    for quantity, law in qkdyn.derive(param).growth.items():
        testing.assert_grows_like(tr, quantity, law, window=WINDOW, on_indistinct="fail")


#: (quantity, law claimed "in every form", the criterion that must catch it somewhere)
WRONG_LAWS = [
    ("ov", "(log t)^2"),
    ("ov", "log log t"),
    ("qk", "log t"),
    ("exp(qk)", "log t"),                 # right only for CAFO
    ("exp(qk)", "(log t)^2"),             # right only with collapsed QK and OV
    ("odds", "(log t)^2 log log t"),      # right only for FACO
    ("odds", "log t log log t"),          # right only for FAFO
    ("exp(qk)", 2.0),                     # an exponent: wrong for every factorized circuit
]

#: the strategy of the property tests below (the range the laws are stated for)
SETTINGS = testing.setting_strategy(classes=(2, 6), scale=(0.5, 2.0), eta_qk=1.0, qk0=(0.001, 0.5), ov0=(0.001, 0.5))


@pytest.mark.parametrize("quantity, law", WRONG_LAWS, ids=[f"{q}~{law}" for q, law in WRONG_LAWS])
def test_each_wrong_law_is_caught_with_the_default_max_examples(quantity, law):
    @settings(phases=[Phase.generate], database=None)  # default max_examples; first failure decides
    @given(setting=SETTINGS, param=testing.params(include_paper=True), rho=testing.rhos(min_value=1, max_value=100))
    def claim_in_every_form(setting, param, rho):
        tr = late(param, setting.replace(eta_qk=rho * setting.eta_ov))
        testing.assert_grows_like(tr, quantity, law, window=WINDOW)

    with pytest.raises(AssertionError, match=r"criterion '\w+' failed: .* \(passes if "):
        claim_in_every_form()


@testing.for_each_param(include_paper=True)
@settings(max_examples=3)
@given(setting=SETTINGS, rho=testing.rhos(min_value=1, max_value=100))
def test_the_right_laws_pass_on_the_strategy_the_negative_controls_use(param, setting, rho):
    """Positive control: the strategy above does not make every law fail."""
    tr = late(param, setting.replace(eta_qk=rho * setting.eta_ov))
    for quantity, law in qkdyn.derive(param).growth.items():
        testing.assert_grows_like(tr, quantity, law, window=WINDOW, criteria=("slope", "fit"))


def test_fafo_exp_qk_is_not_log_t_but_log_t_log_log_t():
    """The issue's case: 'log t' passed for FAFO although the local exponent is ~1.15."""
    tr = late("FAFO")
    with pytest.raises(AssertionError, match=r"criterion 'rivals' failed: closest rival log t log log t"):
        testing.assert_grows_like(tr, "exp(qk)", "log t", window=WINDOW)
    with pytest.raises(AssertionError, match=r"exp\(qk\) does not grow like log t on .*criterion 'exponent' failed: "
                                             r"local exponent .*\(passes if it stays within 1 \+- 0\.05"):
        testing.assert_grows_like(tr, "exp(qk)", 1.0, window=WINDOW)
    testing.assert_grows_like(tr, "exp(qk)", "log t log log t", window=WINDOW, on_indistinct="fail")


#: the issue's draw, shrunk by hypothesis from the property test docs/api.md showed (window 1e30-1e60):
#: K = 2, D = N = m = n = 1, rho = eta_QK / eta_OV = 90; 'log t' fitted FAFO's odds with residual 0.00209, the
#: true law 'log t log log t' with 0.00245, and the old rule (a rival 10% better fails the law) failed it
ISSUE_DRAW = Setting(classes=2, distinct=1, commons=1, m=1, n=1, scale=1.0, eta_ov=1.0, eta_qk=90.0, qk0=1.0, ov0=1.0)


@pytest.mark.parametrize("scale", [1.0, 0.3, 2.0])
def test_a_true_law_the_window_cannot_separate_from_its_rival_is_not_failed(scale):
    """On 1e30-1e60 the issue's draw lies between log t log log t and log t (each leaves about half of their
    separation unexplained): neither the true law nor the rival is decided, and neither fails."""
    tr = solve(ISSUE_DRAW.replace(scale=scale), "FAFO", t_max=1e60, points=200)
    for law in ("log t * log log t", "log t"):
        results = {c.name: c for c in testing.check_growth(tr, "odds", law, window=(1e30, 1e60))}
        assert results["rivals"].outcome == testing.INDISTINCT and results["rivals"].window == (1e30, 1e60)
        assert all(c.outcome != testing.FAILED for c in results.values())
    with pytest.raises(pytest.skip.Exception, match=r"FAFO \(rho = 90\): t in \[1e\+30, 1e\+60\] cannot tell whether "
                                                    r"odds grows like log t \* log log t; "
                                                    r"criterion 'rivals' cannot distinguish"):
        testing.assert_grows_like(tr, "odds", "log t * log log t", window=(1e30, 1e60))
    with pytest.raises(testing.CannotDistinguish, match="closest rival log t fits with residual"):
        testing.assert_grows_like(tr, "odds", "log t * log log t", window=(1e30, 1e60), on_indistinct="fail")
    # a wrong law the same window does separate still fails
    with pytest.raises(AssertionError,
                       match=r"odds does not grow like \(log t\)\^2 on .*criterion 'rivals' failed") as caught:
        testing.assert_grows_like(tr, "odds", "(log t)^2", window=(1e30, 1e60))
    assert not isinstance(caught.value, testing.CannotDistinguish)


def test_a_verdict_the_data_are_heading_away_from_is_not_drawn():
    """A slowly converging CAFO draw (scale 0.34, rho = 1; found by benchmarks/stress_growth.py): on 1e100-1e300
    its odds leave only 0.29 of the separation between log t log log t and the true log t unexplained by the
    former, but from the window's earlier half to its later half they move toward log t. Neither law is
    decided: the true one does not fail, the wrong one does not pass."""
    setting = Setting(classes=2, distinct=14, commons=15, m=15, n=40, scale=0.341, qk0=0.158, ov0=0.00496)
    tr = late("CAFO", setting)
    t, y = tr.t[tr.t >= WINDOW[0]], np.exp(tr.log_odds[tr.t >= WINDOW[0]])
    law, rival = Law.parse("log t"), Law.parse("log t log log t")
    assert unexplained_shares(t, y, law, rival)[1] < 1 / 3 < decisive_shares(t, y, law, rival)[1]
    for claim in (law, rival):
        rivals = testing.check_growth(tr, "odds", claim, window=WINDOW)[-1]
        assert rivals.name == "rivals" and rivals.outcome == testing.INDISTINCT, rivals


def test_an_undecided_window_is_extended_to_the_end_of_the_trajectory():
    """FAFO's default setting: 1e30-1e60 leaves 0.34 of the separation from log t unexplained (undecided);
    on 1e30-1e300 the law is told apart, and the extended window is the answer unless extend=False."""
    tr = late("FAFO")
    undecided = {c.name: c for c in testing.check_growth(tr, "exp(qk)", "log t log log t", window=(1e30, 1e60),
                                                         extend=False)}
    assert undecided["rivals"].outcome == testing.INDISTINCT
    extended = testing.check_growth(tr, "exp(qk)", "log t log log t", window=(1e30, 1e60))
    assert all(c.passed and c.window == (1e30, 1e300) for c in extended)
    with pytest.raises(AssertionError, match=r"does not grow like log t on t in \[1e\+30, 1e\+300\]"):
        testing.assert_grows_like(tr, "exp(qk)", "log t", window=(1e30, 1e60))
    with pytest.raises(ValueError, match="on_indistinct must be 'skip' or 'fail'"):
        testing.assert_grows_like(tr, "exp(qk)", "log t log log t", on_indistinct="pass")
    with pytest.raises(ValueError, match="resolution must exceed 2"):
        testing.check_growth(tr, "exp(qk)", "log t log log t", resolution=2.0)


@settings(max_examples=50, deadline=None)
@given(a=st.floats(0.1, 10.0), b=st.floats(-5.0, 5.0), c=st.floats(-100.0, 100.0),
       pair=st.sampled_from([(law, rival) for law in RIVALS for rival in RIVALS if law.leading != rival.leading]))
def test_the_unexplained_shares_bound_the_rivals_residual_by_the_laws(a, b, c, pair):
    """| ||e_psi|| - s_phi | <= ||e_phi|| (growth.unexplained_shares' bound), checked through its shares: data
    exactly on a law leave none of the separation unexplained by it and all of it (1 / cos of the angle between
    the centred shapes) by the rival."""
    law, rival = pair
    t = np.geomspace(1e100, 1e300, 200)
    u_law, u_rival = unexplained_shares(t, a * law(t) + c, law, rival)
    assert u_law < 1e-6 and u_rival >= 1 - 1e-9
    y = a * law(t) + b * rival(t) + c
    u_law, u_rival = unexplained_shares(t, y, law, rival)
    # with s_phi = ||e_phi|| / u_law, s_psi = ||e_psi|| / u_rival: ||e_psi|| / s_phi = u_law * ||e_psi|| / ||e_phi||
    e_phi = np.linalg.norm(y - np.polyval(np.polyfit(law(t), y, 1), law(t)))
    e_psi = np.linalg.norm(y - np.polyval(np.polyfit(rival(t), y, 1), rival(t)))
    if math.isfinite(u_law) and e_phi > 1e-6 * np.linalg.norm(y - y.mean()):  # a residual above round-off
        s_phi = e_phi / u_law
        assert abs(e_psi - s_phi) <= e_phi * (1 + 1e-6)


def test_a_failure_names_only_the_failed_criteria_with_numbers():
    tr = late("CACO")
    results = {c.name: c for c in testing.check_growth(tr, "ov", "(log t)^2", window=WINDOW)}
    assert set(results) == {"regime", "slope", "fit", "rivals"}
    assert results["slope"].passed and not results["rivals"].passed
    with pytest.raises(AssertionError) as caught:
        testing.assert_grows_like(tr, "ov", "(log t)^2", window=WINDOW)
    message = str(caught.value)
    assert "criterion 'rivals' failed" in message and "criterion 'slope'" not in message
    assert "closest rival log t fits with residual" in message
    with pytest.raises(ValueError, match="unknown criteria"):
        testing.assert_grows_like(tr, "ov", "log t", window=WINDOW, criteria=("speed",))


def test_every_documented_quantity_and_every_reduced_variable_is_accepted_by_name():
    tr = late("FAFO")
    for name in [*testing.QUANTITIES, *tr.variables]:
        testing.check_growth(tr, name, "log t", window=WINDOW)
    testing.assert_grows_like(tr, "e^qk", "log t log log t", window=WINDOW, on_indistinct="fail")
    testing.assert_grows_like(tr, "log_odds", "log log t + log log log t", window=WINDOW, on_indistinct="fail")
    with pytest.raises(ValueError, match=r"unknown quantity 'speed'; known: ov, qk, .*exp\(qk\), e\^qk, odds"):
        testing.check_growth(tr, "speed", "log t")
    with pytest.raises(ValueError, match="only 0 rows"):
        testing.check_growth(tr, "ov", "log t", window=(1e301, 1e302))


def test_laws_read_as_derive_prints_them_and_print_as_a_person_writes_them():
    assert str(Law.parse("(log t)^1 * log log t")) == "log t log log t"
    assert str(Law.parse("1 log log t")) == "log log t"
    assert str(Law.parse("log^2 t")) == "(log t)^2"
    assert str(Law.parse("2 log log t + log log log t")) == "2 log log t + log log log t"
    assert Law.parse("log t + log log t").leading == (1, 0, 0)
    with pytest.raises(ValueError, match=r"cannot read the growth law 'log t\^2' at '\^2'"):
        Law.parse("log t^2")


def test_strategies_do_not_shadow_hypothesis_and_setting_has_a_registered_strategy():
    assert not hasattr(testing, "settings")
    drawn = []

    @settings(max_examples=5)
    @given(setting=st.from_type(Setting), rho=testing.rhos(min_value=2.0, max_value=3.0),
           fixed=testing.setting_strategy(classes=st.just(3), m=(4, 4)))
    def draw(setting, rho, fixed):
        drawn.append((setting, rho, fixed))

    draw()
    assert all(isinstance(s, Setting) and 2.0 <= rho <= 3.0 and f.classes == 3 and f.m == 4 for s, rho, f in drawn)
    with pytest.raises(ValueError, match="need 0 < min_value <= max_value"):
        testing.rhos(min_value=3.0, max_value=2.0)
    with pytest.raises(ValueError, match="unknown Setting fields"):
        testing.setting_strategy(deadline=None)


def test_for_each_param_covers_every_form():
    marks = {mark.args[0]: tuple(mark.args[1]) for mark in (testing.for_each_param().mark,
                                                          testing.for_each_param(include_paper=True).mark)}
    assert set(marks) == {"param"}
    assert tuple(testing.for_each_param().mark.args[1]) == EXACT_PARAMS
    assert tuple(testing.for_each_param(include_paper=True).mark.args[1]) == ALL_PARAMS


RANK2 = qkdyn.Spec("rank2_qk", qk=qkdyn.CircuitSpec("factorized", rank=2))


def test_for_each_param_runs_specs_too():
    mark = testing.for_each_param(specs=[RANK2]).mark
    assert tuple(mark.args[1]) == EXACT_PARAMS + (RANK2,) and mark.kwargs["ids"][-1] == "rank2_qk"
    assert tuple(testing.for_each_param(specs=[RANK2], only_specs=True).mark.args[1]) == (RANK2,)


def test_assert_conserved_and_growth_laws_take_a_spec_trajectory():
    """qkdyn.solve takes a spec; its conserved polynomials hold along the flow, a planted drift is caught,
    a spec without any says so, and assert_grows_like reads the spec's ov."""
    import numpy as np

    setting = Setting(classes=3, distinct=2, commons=3, m=2, n=3, eta_qk=3.0, qk0=0.2, ov0=0.3)
    tr = qkdyn.solve(setting, RANK2, t_max=1e40, points=200)
    assert set(tr.drifts()) >= {"I_QK1", "I_QK2"}
    testing.assert_conserved(tr, rel=1e-8)
    tr.state[0, -1] *= 1.01  # q_query at the last time: the QK balance breaks
    with pytest.raises(AssertionError, match="I_QK"):
        testing.assert_conserved(tr, rel=1e-8)
    tr.state[0, -1] /= 1.01
    testing.assert_grows_like(tr, "ov", "log t", window=(1e30, 1e40), on_indistinct="fail")
    decay = qkdyn.CircuitSpec(weight_decay=0.01)
    decayed = qkdyn.solve(setting, qkdyn.Spec("decay", qk=decay, ov=decay), t_max=10.0, points=5)
    with pytest.raises(AssertionError, match="no conserved quantity"):
        testing.assert_conserved(decayed)
    assert np.all(np.isfinite(decayed.ov))
