"""qkdyn.sweep: the balanced flow of (qk, ov) alone, as arrays, against the full state's solve."""
import numpy as np
import pytest
from hypothesis import given, settings
from qkdyn.simulate import coldstart, integrate
from qkdyn.simulate import solve as solve_module
from qkdyn.simulate import sweep as sweep_module
from qkdyn.simulate.solve import solve
from qkdyn.simulate.sweep import sweep
from qkdyn.theory.setting import ALL_PARAMS, Setting
from qkdyn.theory.spec import NAMED

from qkdyn import testing
from qkdyn.errors import InputError

RATES = [Setting(eta_qk=float(eta)) for eta in np.geomspace(0.1, 10.0, 9)] + [Setting(scale=0.5, qk0=-0.5),
                                                                              Setting(classes=2, attn0=0.9)]
#: a collapsed OV started below 0 crosses it (a factorized one only approaches it: ov = 0 is a saddle there, and
#: where round-off carries a run across, any two integrations part ways, sweep and solve alike)
CROSSING = {"CACO": [Setting(ov0=-0.3)], "FACO": [Setting(ov0=-0.3)]}


@pytest.mark.parametrize("param", ALL_PARAMS)
@pytest.mark.parametrize("options", [dict(t_max=1e15), dict(until_loss=1e-3, points=60), dict(t_max=1e8, at=(3.0,))])
def test_a_sweep_is_as_accurate_as_the_full_solves(param, options):
    """Both integrate the same flow (in other variables): at the default rtol the sweep's worst relative error
    against solves at rtol 1e-13, column by column, is within 3x the full solves' own (plus 1e-10), and 1e-7."""
    rates = RATES + CROSSING.get(param, [])
    out = sweep(rates, param, **options)
    tight, own = (solve(rates, param, **options, **tolerances) for tolerances in (dict(rtol=1e-13, atol=1e-17), {}))
    assert out.compiled and out.qk.shape == out.ov.shape == out.t.shape == (len(rates), tight[0].t.size)
    for name in ("t", "qk", "ov", "attn", "loss"):
        reference = np.array([getattr(tr, name) for tr in tight])

        def worst(got, reference=reference):
            return np.max(np.abs(got - reference) / np.maximum(np.abs(reference), 1e-300))

        error, own_error = worst(getattr(out, name)), worst(np.array([getattr(tr, name) for tr in own]))
        assert error <= min(3 * own_error + 1e-10, 1e-7), (param, name, error, own_error)
    if "until_loss" in options:
        np.testing.assert_array_equal(out.event_t, out.t[:, -1])
        np.testing.assert_allclose(out.loss[:, -1], 1e-3, rtol=1e-10)
    else:
        assert out.event_t is None and np.all(out.t[:, -1] == options["t_max"])


@settings(max_examples=8)
@given(setting=testing.setting_strategy(), param=testing.params())
def test_a_sweep_of_any_setting_follows_its_solve(setting, param):
    out = sweep([setting, setting.replace(eta_ov=2 * setting.eta_ov)], param, t_max=1e30, points=40)
    for i, tr in enumerate(solve([setting, setting.replace(eta_ov=2 * setting.eta_ov)], param, t_max=1e30, points=40,
                                 rtol=1e-13, atol=1e-17)):
        scale = np.abs(tr.ov).max()
        np.testing.assert_allclose(out.ov[i], tr.ov, rtol=1e-7, atol=1e-7 * scale)
        np.testing.assert_allclose(out.qk[i], tr.qk, rtol=1e-7, atol=1e-7 * (np.abs(tr.qk).max() + 1e-300))


def test_the_rows_of_a_horizon_are_shared_and_read_only():
    out = sweep(RATES[:3], "FAFO", t_max=1e6, points=5, at=(2.5,))
    assert np.shares_memory(out.t[0], out.t[1]) and not out.t.flags.writeable
    assert 2.5 in out.t[0] and out.t[0, 0] == 0.0 and len(out) == 3
    ends = sweep(RATES[:3], "FAFO", t_max=1e6, points=1)
    np.testing.assert_array_equal(ends.t[0], [0.0, 1e6])
    np.testing.assert_allclose(ends.qk[:, -1], out.qk[:, -1], rtol=1e-12)


def test_the_long_form_exports_hold_every_row_and_the_varied_fields(tmp_path):
    out = sweep(RATES[:3], "FACO", until_loss=1e-2, points=7)
    columns = out.columns()
    assert list(columns) == ["setting", "eta_qk", "t", "qk", "ov", "attn", "loss"]
    np.testing.assert_array_equal(columns["setting"], np.repeat([0.0, 1.0, 2.0], 7))
    np.testing.assert_array_equal(columns["eta_qk"], np.repeat([one.eta_qk for one in RATES[:3]], 7))
    np.testing.assert_array_equal(columns["loss"], out.loss.ravel())
    out.to_csv(tmp_path / "sweep.csv")
    read = np.genfromtxt(tmp_path / "sweep.csv", delimiter=",", names=True)
    for name, values in columns.items():
        np.testing.assert_array_equal(read[name], values)
    frame = out.to_pandas()
    assert frame.index.names == ["setting", "t"] and frame.attrs["param"] == "FACO"
    np.testing.assert_array_equal(frame.loc[2]["attn"].to_numpy(), out.attn[2])
    mixed = sweep([Setting(), Setting(attn0=0.5)], "CACO", t_max=10.0, points=2).columns()
    assert np.isnan(mixed["attn0"][0]) and mixed["attn0"][-1] == 0.5 and "qk0" in mixed


def test_a_collapsed_step_is_solved_again_alone(monkeypatch):
    """Where the explicit step collapses for a setting, that setting's full solve (LSODA taking over) gives its rows."""
    real = integrate.integrate_many

    def collapsing(*args, **kwargs):
        status, *rest = real(*args, **kwargs)
        status = status.copy()
        status[1] = -1
        return (status, *rest)

    monkeypatch.setattr(integrate, "integrate_many", collapsing)
    for options in (dict(t_max=1e10), dict(until_loss=1e-2)):
        out = sweep(RATES[:3], "CAFO", points=30, **options)
        alone = solve(RATES[1], "CAFO", points=30, **options)
        np.testing.assert_array_equal(out.qk[1], alone.qk)
        np.testing.assert_array_equal(out.ov[1], alone.ov)
        np.testing.assert_array_equal(out.t[1], alone.t)


def test_a_cold_sweep_takes_its_features_from_the_cold_solves(monkeypatch):
    policy = coldstart.RentOrBuy()
    monkeypatch.setattr(solve_module, "FIRST_SOLVES", policy)
    monkeypatch.setattr(sweep_module, "FIRST_SOLVES", policy)
    monkeypatch.setattr(integrate, "cached", lambda *kernels: False)
    out = sweep(RATES[:2], "FACO", until_loss=1e-2, points=20)
    assert not out.compiled and policy.rented > 0
    for i, tr in enumerate(solve(RATES[:2], "FACO", until_loss=1e-2, points=20)):
        np.testing.assert_array_equal(out.qk[i], tr.qk)
        np.testing.assert_array_equal(out.t[i], tr.t)
        assert out.event_t[i] == tr.event_t


@pytest.mark.parametrize("call, field", [
    (lambda: sweep(RATES, NAMED["FACO"], t_max=1.0), "param"),
    (lambda: sweep(RATES, "XY", t_max=1.0), "param"),
    (lambda: sweep([], "FACO", t_max=1.0), "settings"),
    (lambda: sweep(Setting(), "FACO", t_max=1.0), "settings"),
    (lambda: sweep([Setting(), 3], "FACO", t_max=1.0), "settings"),
    (lambda: sweep(RATES, "FACO"), None),
    (lambda: sweep(RATES, "FACO", t_max=-1.0), "t_max"),
    (lambda: sweep(RATES, "FACO", t_max=10.0, at=(20.0,)), "at"),
    (lambda: sweep(RATES, "FACO", until_loss=1e-3, at=(2.0,)), "at"),
    (lambda: sweep(RATES, "FACO", until_loss=5.0), "until_loss"),
    (lambda: sweep(RATES, "FACO", until_loss=1e-3, t_max=1.0), "until_loss"),
])
def test_bad_input_is_an_input_error(call, field):
    with pytest.raises(InputError) as error:
        call()
    assert error.value.field == field
