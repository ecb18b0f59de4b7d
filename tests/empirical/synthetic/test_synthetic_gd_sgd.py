"""A6 on the full matrix model: GD converges to the ODE at first order in h; SGD approaches the flow as
the batch grows."""
import pytest
from qkdyn.empirical.synthetic.experiment import flow_error, run, sgd_deviation
from qkdyn.empirical.synthetic.model import PARAMS
from qkdyn.theory.setting import Setting

SETTING = Setting(eta_qk=2.0, eta_ov=1.0, qk0=0.5, ov0=0.5)
T = 4.0


@pytest.mark.parametrize("param", PARAMS)
def test_gd_matches_ode_at_first_order(param):
    errors = [flow_error(run(param, SETTING, h, round(T / h), points=12), param, SETTING) for h in (0.005, 0.0025)]
    assert errors[0] < 2e-3
    assert abs(errors[0] / errors[1] - 2) < 0.3


def test_sgd_deviation_shrinks_with_batch():
    setting, h, steps = Setting(qk0=0.5, ov0=0.5), 0.05, 200
    deviations = [sum(sgd_deviation(run("CACO", setting, h, steps, optimizer="sgd", batch=b, seed=s, points=10), "CACO", setting)
                      for s in range(3)) / 3 for b in (4, 32, 256)]
    assert deviations[0] > deviations[1] > deviations[2]
