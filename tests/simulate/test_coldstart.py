"""A cold start (qkdyn.simulate.coldstart): SciPy's DOP853 on the plain-Python right-hand side until the
rent reaches a compilation, the same trajectories to the tolerance, and numba's cache read right; the
matched-loss closed form's own code run as plain Python until its rent is paid, the same numbers to round-off."""
import importlib
import itertools
import sys

import numpy as np
import pytest
from qkdyn.simulate import closedform, coldstart, integrate
from qkdyn.simulate import sharpness as sharpness_module
from qkdyn.simulate import solve as solve_module
from qkdyn.simulate.sharpness import initial_loss, reachable_losses, sharpness
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


# -- the matched-loss closed form: its own code as plain Python until compiling pays -------------------------

@pytest.fixture
def cold_closed_form(monkeypatch):
    """A process whose numba cache lacks the compiled closed form: a fresh rent that finds no machine code, a
    fresh estimate per point and the plain run's note not yet said."""
    policy = coldstart.RentOrBuy(coldstart.CLOSED_FORM_RENT_SECONDS)
    monkeypatch.setattr(sharpness_module, "FIRST_CLOSED_FORMS", policy)
    monkeypatch.setattr(sharpness_module, "_plain_rate", dict(coldstart.PLAIN_SECONDS_PER_POINT))
    monkeypatch.setattr(sharpness_module, "_said_plain", [])
    monkeypatch.setattr(integrate, "ready", lambda *functions: False)
    return policy


#: plain Python against compiled code, relative: a few roundings (the same operations, but a math function may
#: round its last bit otherwise in numba than in CPython: FACO's qk 1 ulp apart)
PLAIN_BOUND = 1e-14
#: settings whose paths take every branch of the kernel: both QK and OV circuits collapsed and factorized (the
#: forms), a start below 0, a tiny attention, a fast QK circuit, frozen attention, levels next to the initial loss
CLOSED_FORM_CASES = [(Setting(), [0.0, 0.1, 1.0, 10.0], [0.5, 1e-3, 1e-8]),
                     (Setting(attn0=1e-12), [1e-3, 1.0, 1e4], [0.1, 1e-6]),
                     (Setting(qk0=-0.7, ov0=-0.3), [0.5, 5.0], [0.3, 1e-4]),
                     (Setting(eta_ov=0.2, scale=0.5), [1e6], [1e-2])]


@pytest.mark.parametrize("param", ALL_PARAMS)
def test_a_cold_sharpness_runs_its_own_code_uncompiled_to_round_off(cold_closed_form, param):
    for setting, rhos, levels in CLOSED_FORM_CASES:
        if param in ("CAFO", "FAFO") and setting.ov0 < 0:
            levels = [level for level in levels if level > reachable_losses(setting, param)[0]]
        loss0 = initial_loss(setting, param)
        levels = [*levels, loss0 * (1 - 1e-9)]
        plain = sharpness(setting, param, np.array(rhos)[:, None], np.array(levels)[None, :])
        assert "closed form" not in cold_closed_form.ready and cold_closed_form.rented > 0  # it ran uncompiled
        cold_closed_form.ready.add("closed form")  # as once the rent is paid
        compiled = sharpness(setting, param, np.array(rhos)[:, None], np.array(levels)[None, :])
        cold_closed_form.ready.discard("closed form")
        for name in ("qk", "ov", "attn", "t"):
            np.testing.assert_allclose(getattr(plain, name), getattr(compiled, name), rtol=PLAIN_BOUND, atol=0,
                                       err_msg=name)
    problem = sharpness_module._Problem(Setting(), param)  # the time alone, to given states
    plain_t = problem.time_to([0.5, 2.0, 4.0], 1.0)
    cold_closed_form.ready.add("closed form")
    np.testing.assert_allclose(plain_t, problem.time_to([0.5, 2.0, 4.0], 1.0), rtol=PLAIN_BOUND, atol=0)


def test_the_first_plain_run_says_so_once(cold_closed_form, capsys):
    for _ in range(2):
        sharpness(Setting(), "CACO", rho=[0.1, 1.0], loss=1e-3)
    err = capsys.readouterr().err.splitlines()
    assert err == [line for line in err if line.startswith("qkdyn: numba's cache lacks the compiled closed form")]
    assert len(err) == 1 and "plain Python" in err[0] and "qkdyn warm" in err[0]


def test_a_plain_run_that_meets_an_infinity_is_taken_compiled(cold_closed_form):
    """A time beyond the largest double: the compiled kernel carries inf on, Python's float arithmetic raises;
    the call is then taken compiled, with the compiled call's answer (here its clear error)."""
    from qkdyn.errors import InputError

    with pytest.raises(InputError, match="beyond the largest double"):
        sharpness(Setting(), "CACO", rho=1.0, loss=1e-307)
    assert "closed form" in cold_closed_form.ready


def test_a_call_too_big_to_rent_compiles_at_once(cold_closed_form):
    cold_closed_form.rent_seconds = 1.0
    points = int(1.0 / coldstart.PLAIN_SECONDS_PER_POINT[True]) + 1  # estimated beyond the rent
    sharpness(Setting(), "FAFO", rho=np.geomspace(0.1, 10.0, points), loss=1e-2)
    assert cold_closed_form.rented == 0.0 and "closed form" in cold_closed_form.ready


def test_the_rent_paid_switches_to_the_compiled_closed_form(cold_closed_form):
    cold_closed_form.rent_seconds = 0.05
    calls = 0
    while "closed form" not in cold_closed_form.ready:
        rented = cold_closed_form.rented
        sharpness(Setting(), "FACO", rho=[0.1, 1.0, 10.0], loss=[1e-3])
        calls += 1
        assert calls < 1000
    assert cold_closed_form.rented == rented  # the last call ran compiled: it rented nothing
    assert rented + 3 * sharpness_module._plain_rate[True] >= 0.05 and calls > 1


def test_one_signature_serves_every_shape():
    """Scalars, vectors, a grid, unordered settings of a mapping, read-only inputs and the time alone: the kernel
    is called with one signature, so the warm-up (scalars) compiles what every later call needs, and numba's
    index of it holds one entry (concurrent writers write the same one)."""
    rho = np.array([0.1, 1.0])
    rho.setflags(write=False)
    sharpness(Setting(), "CACO", 1.0, 0.5)
    sharpness(Setting(), "CACO", rho, 1e-3)
    sharpness(Setting(), "FAFO", rho[:, None], np.array([0.1, 1e-3])[None, :], time=False)
    sharpness({"m": [8, 4, 8]}, "CAFO", [1.0, 2.0, 3.0], 1e-2)
    sharpness({"m": [4, 8]}, "FACO", rho, [0.1, 1e-2], grid=True)
    sharpness_module._Problem(Setting(), "CACO").time_to(np.array([0.5, 1.0])[::2], 1.0)
    assert len(closedform.solve_points.signatures) == 1
