"""The stacked GD / SGD program of the full model: every run's rows equal its run alone, to round-off."""
import pytest
from qkdyn.empirical.synthetic import experiment, stacked
from qkdyn.empirical.synthetic.model import PARAMS
from qkdyn.theory.setting import Setting

from qkdyn.errors import InputError

SETTING = Setting(qk0=0.5, ov0=0.5, eta_qk=3.0)


def assert_rows_equal(got, reference, tol=1e-10):
    assert [r["step"] for r in got] == [r["step"] for r in reference]
    for g, r in zip(got, reference, strict=True):
        assert list(g) == list(r)
        for key, value in r.items():
            assert g[key] == pytest.approx(value, rel=tol, abs=1e-14), key


def test_stacked_runs_equal_their_runs_alone():
    # every form, two steps (so runs leave the stack at different steps), GD and two SGD batch sizes
    arms = [stacked.Arm(p, h, round(1.2 / h), None, 0, 8) for p in PARAMS for h in (0.04, 0.02)]
    arms += [stacked.Arm(p, 0.04, 30, batch, seed, 6) for p in ("CACO", "FAFO") for batch in (8, 16) for seed in (0, 1)]
    together = stacked.run(SETTING, arms)
    assert list(together) == arms
    for arm in arms:
        reference = experiment.run(arm.param, SETTING, arm.step, arm.steps, optimizer="sgd" if arm.batch else "gd",
                                   batch=arm.batch, seed=arm.seed, points=arm.points)
        assert_rows_equal(together[arm], reference)
    moved = together[arms[0]]
    assert moved[-1]["qk"] != moved[0]["qk"] and moved[-1]["step"] == arms[0].steps  # the runs trained
    alone = stacked.run(SETTING, [arms[-1]])[arms[-1]]  # one row: independent of the other rows
    assert_rows_equal(alone, together[arms[-1]], tol=1e-12)


def test_a_diverging_run_stops_as_it_does_alone():
    arms = [stacked.Arm("CACO", 0.04, 5, None, 0, 5), stacked.Arm("FAFO", 1.0, 5, None, 0, 5)]
    with pytest.raises(InputError, match="not finite at step 1"):
        stacked.run(SETTING.replace(eta_qk=1e200), arms)
