"""A cold start (qkdyn.simulate.coldstart): SciPy's DOP853 on the plain-Python right-hand side until the
rent reaches a compilation, the same trajectories to the tolerance, and numba's cache read right."""
import importlib
import itertools
import sys

import numpy as np
import pytest
from qkdyn.simulate import coldstart, integrate
from qkdyn.simulate import solve as solve_module
from qkdyn.simulate.solve import solve
from qkdyn.theory.compiled import load
from qkdyn.theory.kernels import has_machine_code
from qkdyn.theory.setting import ALL_PARAMS, Setting

OPTIONS = dict(t_max=1e12, points=40, at=(2.5,), record_losses=(0.3, 1e-3))
#: settings of the cold-warm bound: the default, fast and slow QK, a small OV rate at half scale, few distinct tokens
BOUND_SETTINGS = [Setting(), Setting(eta_qk=30.0), Setting(eta_qk=0.3), Setting(eta_ov=0.2, scale=0.5),
                  Setting(distinct=2)]


def assert_within_the_bound(cold_columns, warm_columns):
    """Cold rows against warm ones within the stated bound (coldstart.COLUMN_BOUND and ENTRY_BOUND)."""
    assert cold_columns.keys() == warm_columns.keys()
    for name, warm in warm_columns.items():
        difference = np.abs(np.asarray(cold_columns[name]) - warm)
        assert difference.max() <= coldstart.COLUMN_BOUND * np.abs(warm).max(), name
        assert np.all(difference <= coldstart.ENTRY_BOUND * (np.abs(warm) + 1e-12)), name


@pytest.fixture
def cold(monkeypatch):
    """A process whose numba cache holds nothing: a fresh rent-or-buy choice that finds no machine code."""
    policy = coldstart.RentOrBuy()
    monkeypatch.setattr(solve_module, "FIRST_SOLVES", policy)
    monkeypatch.setattr(integrate, "cached", lambda *kernels: False)
    return policy


@pytest.mark.parametrize("param", ALL_PARAMS)
def test_a_cold_solve_runs_scipy_and_agrees_with_the_compiled_one(cold, param):
    setting = Setting(eta_qk=3.0)
    plain = solve(setting, param, **OPTIONS)
    assert plain.stats["compiled"] is False and plain.stats["method"] == "DOP853"
    assert cold.rented == pytest.approx(plain.stats["seconds"])
    cold.ready.add(param)  # as once the rent is paid
    compiled = solve(setting, param, **OPTIONS)
    assert compiled.stats["compiled"] is True
    np.testing.assert_array_equal(plain.t, compiled.t)
    np.testing.assert_allclose(plain.state, compiled.state, rtol=1e-8, atol=1e-12)
    assert plain.crossings.keys() == compiled.crossings.keys() == {0.3, 1e-3}
    for level, (t, state) in compiled.crossings.items():
        assert plain.crossings[level][0] == pytest.approx(t, rel=1e-8)
        np.testing.assert_allclose(plain.crossings[level][1], state, rtol=1e-8, atol=1e-12)


@pytest.mark.parametrize("param", ALL_PARAMS)
def test_cold_and_warm_rows_agree_within_the_stated_bound(cold, param):
    """Whatever the cache state, a solve's rows (its CSV) are the compiled ones to the bound the docs state."""
    for setting, horizon in itertools.product(BOUND_SETTINGS, (dict(t_max=1e15), dict(until_loss=1e-4))):
        plain = solve(setting, param, points=100, **horizon)
        cold.ready.add(param)
        compiled = solve(setting, param, points=100, **horizon)
        cold.ready.discard(param)
        assert not plain.stats["compiled"] and compiled.stats["compiled"]
        assert_within_the_bound(plain.columns(), compiled.columns())


def test_the_rent_paid_switches_to_the_compiled_integrator(cold):
    cold.rent_seconds = 0.05
    runs = []
    while not runs or not runs[-1].stats["compiled"]:
        runs.append(solve(Setting(), "CACO", t_max=1e15, points=10))
        assert len(runs) < 1000
    rented = sum(tr.stats["seconds"] for tr in runs[:-1])
    assert rented == pytest.approx(cold.rented) and rented >= 0.05 > rented - runs[-2].stats["seconds"]
    assert solve(Setting(), "CACO", t_max=1e15, points=10).stats["compiled"]


def test_a_cold_sweep_is_its_cold_solves_one_at_a_time(cold):
    settings = [Setting(), Setting(eta_ov=2.0), Setting(scale=0.5)]
    sweep = solve(settings, "FAFO", until_loss=1e-2, points=20)
    for setting, tr in zip(settings, sweep, strict=True):
        alone = solve(setting, "FAFO", until_loss=1e-2, points=20)
        assert not tr.stats["compiled"]
        np.testing.assert_array_equal(tr.state, alone.state)
        assert tr.event_t == alone.event_t


def test_an_until_loss_solve_that_falls_short_still_says_so_when_cold(cold):
    from qkdyn.errors import InputError

    with pytest.raises(InputError, match="did not reach"):
        solve(Setting(eta_qk=0.0), "CACO", t_max=10.0, until_loss=1e-3)


def test_the_cache_of_this_install_is_recognised():
    """After a compiled solve every piece of the integrator and the form's kernels count as cached (in
    this process; ``make install`` fills numba's cache, so a fresh process sees the same)."""
    compiled = load("CACO")
    solve(Setting(), "CACO", t_max=10.0, points=3)
    assert integrate.cached(compiled.rhs_lanes_kernel, compiled.loss_kernel)


def test_has_machine_code_reads_numbas_cache_index(tmp_path, monkeypatch):
    """A cached function: no machine code before its first call, machine code after it, and none once
    its source has changed (numba's cache is stale then)."""
    source = "from numba import njit\n\n@njit(cache=True)\ndef twice(x):\n    return {} * x\n"
    module = tmp_path / "cold_module.py"
    module.write_text(source.format(2))
    monkeypatch.syspath_prepend(str(tmp_path))

    def fresh():
        sys.modules.pop("cold_module", None)
        importlib.invalidate_caches()
        function = importlib.import_module("cold_module").twice
        return function, has_machine_code(function._cache, function.targetctx)

    twice, present = fresh()
    assert not present
    assert twice(2.0) == 4.0
    assert fresh()[1]
    module.write_text(source.format(3) + "\n")  # another size: a new source stamp
    assert not fresh()[1]


def test_qkdyn_solve_says_when_scipy_ran(cold, tmp_path, capsys):
    from qkdyn.cli import main

    assert main(["solve", "--param", "CACO", "--t-max", "1e6", "--out", str(tmp_path / "cold.csv")]) == 0
    assert "DOP853 steps, SciPy's: the compiled integrator is not in numba's cache yet" in capsys.readouterr().err
    cold.ready.add("CACO")
    assert main(["solve", "--param", "CACO", "--t-max", "1e6", "--out", str(tmp_path / "warm.csv")]) == 0
    assert "SciPy" not in capsys.readouterr().err

    def columns(name: str) -> dict:
        table = np.genfromtxt(tmp_path / name, delimiter=",", names=True)
        return {column: table[column] for column in table.dtype.names}

    assert_within_the_bound(columns("cold.csv"), columns("warm.csv"))  # the CSV, whatever the cache state


def test_a_c_callback_compiles_on_first_use_only():
    import ctypes

    from numba import types
    from qkdyn.theory.kernels import c_callback

    @c_callback(types.float64(types.float64), cache=False)
    def halve(x):
        return 0.5 * x

    assert halve.callback.address is None and not halve.cached()  # nothing compiled by the decorator
    assert ctypes.CFUNCTYPE(ctypes.c_double, ctypes.c_double)(halve.address)(3.0) == 1.5
    assert halve.cached() and halve.ctypes(5.0) == 2.5
