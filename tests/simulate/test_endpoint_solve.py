"""A solve asked only for its ends (one point, no ``at``, no loss levels) skips the dense output's three extra
stages per step (issue 43, item 1) and still answers ``at(t)``: the dense output is integrated again when first
read, the same steps to the bit."""
import pickle

import numpy as np
import pytest
from qkdyn.simulate import integrate
from qkdyn.simulate.logtime import ends_only
from qkdyn.simulate.solve import solve
from qkdyn.theory.compiled import load
from qkdyn.theory.setting import Setting

SETTING = Setting(eta_qk=3.0, ov0=0.2)


@pytest.mark.parametrize("param", ["CACO", "FAFO"])
def test_an_endpoint_solve_skips_the_dense_stages_and_keeps_every_step(param):
    ends = solve(SETTING, param, t_max=1e12, points=1)
    rows = solve(SETTING, param, t_max=1e12, points=50)
    assert ends.stats["compiled"] and rows.stats["compiled"]
    assert ends.stats["steps"] == rows.stats["steps"]
    assert rows.stats["nfev"] - ends.stats["nfev"] == 3 * rows.stats["steps"]  # the three dense stages a step
    assert np.array_equal(ends.t, [0.0, 1e12])
    assert np.array_equal(ends.state[:, 0], rows.state[:, 0]) and np.array_equal(ends.state[:, -1], rows.state[:, -1])


def test_its_dense_output_is_integrated_again_when_first_read_and_agrees_bit_for_bit():
    ends = solve(SETTING, "CACO", t_max=1e12, points=1)
    rows = solve(SETTING, "CACO", t_max=1e12, points=50)
    times = np.sqrt(rows.t[1:-1] * rows.t[2:])[::7]  # between the rows
    assert not np.isin(times, rows.t).any()
    assert np.array_equal(ends.at(times).state, rows.at(times).state)
    assert np.array_equal(pickle.loads(pickle.dumps(solve(SETTING, "CACO", t_max=1e12, points=1))).at(times).state,
                          rows.at(times).state)


def test_an_endpoint_sweep_equals_its_solves_bit_for_bit():
    settings = [SETTING.replace(eta_qk=rho) for rho in (0.3, 3.0, 30.0)]
    swept = solve(settings, "CAFO", t_max=1e12, points=1)
    for one, tr in zip(settings, swept, strict=True):
        alone = solve(one, "CAFO", t_max=1e12, points=1)
        assert np.array_equal(tr.state, alone.state) and np.array_equal(tr.qk, alone.qk)
        assert {k: tr.stats[k] for k in ("nfev", "steps")} == {k: alone.stats[k] for k in ("nfev", "steps")}
        assert np.array_equal(tr.at([5.0, 1e6]).state, alone.at([5.0, 1e6]).state)


@pytest.mark.parametrize("points,at,levels,expected", [
    (1, (), (), True), (1, (1e12,), (), True), (2, (), (), False), (1, (3.0,), (), False), (1, (), (0.5,), False),
])
def test_only_the_two_ends_without_levels_skip_the_dense_output(points, at, levels, expected):
    assert ends_only(1e12, points, at, levels) is expected


def test_loss_levels_without_the_dense_output_are_refused():
    setting, compiled = Setting(), load("CACO")
    p = setting.numeric()
    with pytest.raises(ValueError, match="dense output"):
        integrate.integrate_one(compiled.rhs_lanes_kernel.address, compiled.loss_kernel.address,
                                compiled.kernel_parameters(p), compiled.init(p, setting.qk0, setting.ov0), 10.0, 1e-11,
                                1e-14, np.log([0.5]), False, dense_output=False)
