"""Long-horizon integration: conservation, balance, finiteness, output rows, events."""
import numpy as np
import pytest
from hypothesis import given, settings

from qkdyn import testing
from qkdyn.errors import InputError
from qkdyn.simulate.solve import solve
from qkdyn.theory.setting import ALL_PARAMS, EXACT_PARAMS, Setting

@pytest.mark.parametrize("param", EXACT_PARAMS)
@settings(max_examples=6)
@given(setting=testing.settings())
def test_first_integrals_and_balance_hold_to_1e15(param, setting):
    tr = solve(setting, param, t_max=1e15, points=80)
    testing.assert_conserved(tr, rel=1e-8)
    balance = {name: drift for name, drift in tr.drifts().items() if "balance" in name}
    assert all(drift < 1e-10 for drift in balance.values()), balance


def test_assert_conserved_reports_a_broken_invariant():
    tr = solve(Setting(), "FAFO", t_max=1e6, points=20)
    tr.state[0, -1] *= 1.01  # break the balance of the QK factors at the last row
    with pytest.raises(AssertionError, match=r"FAFO .*drift beyond rel = 1e-08.*balance"):
        testing.assert_conserved(tr, rel=1e-8)


@pytest.mark.parametrize("param", ALL_PARAMS)
def test_finite_far_beyond_1e15(param):
    tr = solve(Setting(eta_qk=50.0), param, t_max=1e300, points=50)
    for values in tr.columns().values():
        assert np.all(np.isfinite(values))
    assert tr.loss[-1] < 1e-100
    assert np.all(np.diff(tr.loss) <= 0)


def test_rows_are_ascending_and_contain_the_requested_times():
    at = [0.5, 3.0, 1234.5]
    tr = solve(Setting(), "CACO", t_max=1e6, points=20, at=at)
    assert tr.t[0] == 0 and tr.t[-1] == 1e6 and np.all(np.diff(tr.t) > 0)
    for value in at:
        assert value in tr.t
    assert tr.state[0, 0] == Setting().qk0 / Setting().scale


def test_until_loss_stops_exactly_at_the_target():
    tr = solve(Setting(), "FAFO", until_loss=1e-3, points=30, record_losses=[0.1])
    assert tr.loss[-1] == pytest.approx(1e-3, rel=1e-9)
    t_cross, _ = tr.crossings[0.1]
    assert 0 < t_cross < tr.event_t == tr.t[-1]


def test_dense_rows_agree_with_a_direct_solve():
    """Rows come from the dense interpolant: they match a run that ends at that very time."""
    long = solve(Setting(), "CAFO", t_max=1e9, points=40, at=[777.0])
    short = solve(Setting(), "CAFO", t_max=777.0, points=2)
    row = np.flatnonzero(long.t == 777.0)[0]
    np.testing.assert_allclose(long.state[:, row], short.state[:, -1], rtol=1e-7, atol=1e-12)


@pytest.mark.parametrize("kwargs", [
    {"t_max": -1.0}, {"t_max": 0.0}, {}, {"until_loss": 5.0}, {"until_loss": -1.0},
    {"t_max": 10.0, "at": [20.0]}, {"t_max": 10.0, "points": 0},
])
def test_bad_requests_are_user_errors(kwargs):
    with pytest.raises(InputError):
        solve(Setting(), "CACO", **kwargs)


def test_factorized_saddle_is_reported_for_loss_targets():
    with pytest.raises(InputError, match="saddle"):
        solve(Setting(ov0=0.0), "CAFO", until_loss=0.5, t_max=1e6)


@pytest.mark.parametrize("field,value", [("classes", 1), ("distinct", 0), ("m", -2), ("eta_qk", 0.0),
                                         ("eta_ov", -1.0), ("scale", float("nan")), ("qk0", float("inf"))])
def test_bad_settings_are_user_errors(field, value):
    with pytest.raises(ValueError) as caught:  # a plain ValueError for library users ...
        Setting(**{field: value})
    assert isinstance(caught.value, InputError) and caught.value.field == field  # ... naming the field
    assert str(caught.value).startswith(field)
