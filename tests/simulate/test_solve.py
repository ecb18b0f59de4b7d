"""Long-horizon integration: conservation, balance, finiteness, output rows, events."""
import numpy as np
import pytest
from hypothesis import given, settings
from qkdyn.simulate.integrate import MAX_LOG_STEP
from qkdyn.simulate.solve import solve
from qkdyn.theory.setting import ALL_PARAMS, EXACT_PARAMS, Setting

import qkdyn
from qkdyn import testing
from qkdyn.errors import InputError


@pytest.mark.parametrize("param", EXACT_PARAMS)
@settings(max_examples=6)
@given(setting=testing.setting_strategy())
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


@pytest.mark.parametrize("param", ["CACO", "paper"])
def test_late_rows_are_as_accurate_as_the_tolerance(param):
    """No step spans more than MAX_LOG_STEP in log time, so a solve to 1e300 at the default rtol has its rows beyond
    t = 1e30 within 1e-12 of a solve at rtol 1e-13 (with SciPy's unbounded steps, 2-4 in log time there, they were
    1e-9 to 3e-9 off)."""
    tr = solve(Setting(), param, t_max=1e300, points=300)
    tight = solve(Setting(), param, t_max=1e300, points=300, rtol=1e-13, atol=1e-17)
    assert tr.stats["compiled"] and tr.dense.log_time_states.hs.max() <= MAX_LOG_STEP * (1 + 1e-12)
    late = tr.t > 1e30
    for name in ("qk", "ov"):
        np.testing.assert_allclose(getattr(tr, name)[late], getattr(tight, name)[late], rtol=1e-12, err_msg=name)


@pytest.mark.parametrize("param", ["CACO", "paper"])
def test_rows_at_a_loose_tolerance_stay_near_it(param):
    """At rtol 1e-8 every row of a solve to 1e15 is within 1e-7 of a solve at rtol 1e-13 (a long step through the
    rise of attention, accepted by DOP853's error estimate, left the paper form's rows 5e-5 off without the bound)."""
    setting = Setting(eta_qk=1.8992947832089895)  # a sweep's draw where that happened
    loose = solve(setting, param, t_max=1e15, points=200, rtol=1e-8)
    tight = solve(setting, param, t_max=1e15, points=200, rtol=1e-13, atol=1e-17)
    for name in ("qk", "ov"):
        np.testing.assert_allclose(getattr(loose, name), getattr(tight, name), rtol=1e-7, err_msg=name)


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


@pytest.mark.parametrize("field,value", [("classes", 1), ("distinct", 0), ("m", -2), ("eta_qk", -0.5),
                                         ("eta_qk", float("nan")), ("eta_ov", -1.0), ("eta_ov", float("inf")),
                                         ("scale", float("nan")), ("qk0", float("inf")), ("attn0", 1.0),
                                         ("attn0", 0.0), ("attn0", float("nan"))])
def test_bad_settings_are_user_errors(field, value):
    with pytest.raises(ValueError) as caught:  # a plain ValueError for library users ...
        Setting(**{field: value})
    assert isinstance(caught.value, InputError) and caught.value.field == field  # ... naming the field
    assert str(caught.value).startswith(field)


def test_both_circuits_frozen_and_ambiguous_init_are_user_errors():
    with pytest.raises(InputError) as caught:
        Setting(eta_qk=0.0, eta_ov=0.0)
    assert caught.value.field == "eta_ov"
    with pytest.raises(InputError) as caught:
        Setting(attn0=0.5, qk0=2.0)
    assert caught.value.field == "attn0"


def test_attn0_sets_the_initial_attention():
    setting = Setting(attn0=0.7, m=3, n=9)
    tr = solve(setting, "CACO", t_max=1.0, points=3)
    assert tr.attn[0] == pytest.approx(0.7, rel=1e-14)
    assert setting.replace(m=5).qk0 == pytest.approx(np.log(0.7 / 0.3) - np.log(5 / 9))  # recomputed
    assert setting.replace(qk0=1.0).attn0 is None and setting.replace(eta_qk=0.0).attn0 == 0.7


@pytest.mark.parametrize("param", EXACT_PARAMS)
def test_frozen_qk_keeps_attention_exactly_constant(param):
    tr = solve(Setting(eta_qk=0.0, attn0=0.35, ov0=0.2), param, t_max=1e12, points=60)
    assert np.all(tr.attn == tr.attn[0]) and np.all(tr.qk == tr.qk[0])
    assert tr.ov[-1] > 10 * tr.ov[0]  # the OV circuit does move


@pytest.mark.parametrize("param", EXACT_PARAMS)
def test_frozen_ov_keeps_the_margin_exactly_constant(param):
    tr = solve(Setting(eta_ov=0.0, ov0=0.5), param, t_max=1e6, points=40)
    assert np.all(tr.ov == tr.ov[0]) and tr.qk[-1] > tr.qk[0] + 1.0
    assert tr.setting.rho == np.inf


@pytest.mark.parametrize("param", ["CACO", "FACO"])
@pytest.mark.parametrize("attn0,ov0", [(0.3, 0.01), (0.9, 1.5)])
def test_frozen_qk_ov_matches_the_closed_form(param, attn0, ov0):
    from qkdyn.theory.frozen import caco_ov

    setting = Setting(eta_qk=0.0, eta_ov=0.7, attn0=attn0, ov0=ov0, classes=5, distinct=3)
    tr = solve(setting, param, t_max=1e9, points=80)
    closed = caco_ov(tr.t, setting)
    assert np.max(np.abs(tr.ov - closed) / np.abs(closed)) < 1e-8
    assert tr.ov[-1] > 5 * closed[0]  # far from the start: the test can see a wrong law


def test_frozen_qk_law_is_derived_from_the_model():
    import sympy as sp
    from qkdyn.theory.frozen import alpha, derive_frozen_qk, z
    from qkdyn.theory.model import D, K, eta_ov

    for param in ("CACO", "FACO"):
        law = derive_frozen_qk(param)
        # G(z) = D (e^z + (K-1) z) / (eta_OV alpha^2): the law in this setting's normalisation
        assert sp.simplify(law.G - D * (sp.exp(z) + (K - 1) * z) / (eta_ov * alpha**2)) == 0
    law = derive_frozen_qk("FAFO")
    assert sp.simplify(sp.diff(law.G, z) * law.g - 1) == 0


@pytest.mark.parametrize("param", ["CAFO", "FAFO"])
def test_frozen_qk_factorized_ov_follows_its_separated_law(param):
    import sympy as sp
    from qkdyn.theory.frozen import alpha, derive_frozen_qk, z
    from qkdyn.theory.model import PARAMS

    setting = Setting(eta_qk=0.0, attn0=0.4, ov0=0.3)
    law = derive_frozen_qk(param)
    G = sp.lambdify((z, alpha, *PARAMS), law.G, modules=["mpmath"])
    tr = solve(setting, param, t_max=1e6, points=30)
    a = float(tr.attn[0])
    elapsed = np.array([float(G(a * x, a, *setting.numeric()) - G(a * tr.ov[0], a, *setting.numeric()))
                        for x in tr.ov])
    assert np.allclose(elapsed, tr.t, rtol=1e-7, atol=1e-9)


def test_negative_start_of_a_factorized_circuit_has_signed_balanced_factors():
    """qk0 < 0 (attn0 below m/(m+n)) and ov0 < 0 are legal for factorized circuits (issue 21): the
    balanced factors carry the sign and the initial features are exactly (qk0, ov0)."""
    for param, setting in (("FACO", Setting(attn0=0.1)), ("CAFO", Setting(ov0=-0.1))):
        tr = solve(setting, param, t_max=1.0, points=2)
        assert tr.qk[0] == pytest.approx(setting.qk0, rel=1e-14) and tr.ov[0] == pytest.approx(setting.ov0, rel=1e-14)
        assert np.all(np.isfinite(tr.state))


def test_a_trajectory_exports_labelled_tables():
    tr = solve(Setting(), "FACO", t_max=1e4, points=20)
    frame = tr.to_pandas()
    assert frame.index.name == "t" and list(frame.columns[:4]) == ["qk", "ov", "attn", "loss"]
    np.testing.assert_array_equal(frame["attn"].to_numpy(), tr.attn)
    assert frame.attrs["param"] == "FACO" and frame.attrs["classes"] == Setting().classes
    data = tr.to_xarray()
    assert data.ov.dims == ("t",) and data.attrs["param"] == "FACO"
    np.testing.assert_array_equal(data.t.values, tr.t)


def test_a_stiff_stretch_falls_back_to_lsoda_and_matches_the_closed_form():
    """CACO, ov0 < 0 at rho = 100: ov crosses 0 on a stiff stretch where the explicit DOP853 step
    collapses; the solve must still reach the level (by LSODA) at the closed form's time."""
    setting = Setting(ov0=-0.5, eta_qk=100.0)
    tr = solve(setting, "CACO", until_loss=1e-30, t_max=1e100)
    closed = qkdyn.sharpness(setting.replace(eta_qk=1.0), "CACO", rho=100.0, loss=1e-30)
    assert tr.stats["method"] == "LSODA"
    assert abs(tr.event_t / float(np.asarray(closed.t).ravel()[0]) - 1) < 1e-6


def test_record_losses_on_a_stiff_stretch_are_located_and_match_the_closed_form():
    """The same stiff case with several recorded levels: scipy's own event bracket can lose its sign
    change there; the crossings are then found on the dense solution and agree with the closed form."""
    from qkdyn.simulate.claims_sharpness import initial_loss, judge_reached, reached

    setting = Setting(ov0=-0.5, eta_qk=100.0)
    loss0 = initial_loss(setting, "CACO")
    result = reached(setting, "CACO", [loss0 * (1 - 1e-3), loss0 / 2, 1e-8, 1e-30])
    assert judge_reached(result) is True, result


@pytest.mark.parametrize("param", ["CACO", "FAFO"])
def test_a_sweep_integrated_in_one_compiled_loop_equals_its_solves_bit_for_bit(param):
    """solve(list) runs every setting through integrate_many: the same rows, states, events and counts
    as each setting alone, with exact output times and a level that is never reached."""
    settings = [Setting(eta_qk=rho, ov0=ov0) for rho, ov0 in ((0.1, 0.01), (3.0, 0.2), (30.0, 0.05))]
    options = dict(t_max=1e9, points=30, at=(2.5, 1e3), record_losses=(0.5, 1e-300))
    for setting, tr in zip(settings, solve(settings, param, **options), strict=True):
        assert tr.features is not None  # the sweep's (qk, ov), computed for all of them at once
        alone = solve(setting, param, **options)
        assert np.array_equal(tr.t, alone.t) and np.array_equal(tr.state, alone.state)
        assert np.array_equal(tr.qk, alone.qk) and np.array_equal(tr.ov, alone.ov)  # the sweep's at once
        assert tr.crossings.keys() == alone.crossings.keys() == {0.5}
        assert tr.crossings[0.5][0] == alone.crossings[0.5][0]
        assert np.array_equal(tr.crossings[0.5][1], alone.crossings[0.5][1])
        assert {k: tr.stats[k] for k in ("nfev", "steps", "method")} == {k: alone.stats[k] for k in ("nfev", "steps", "method")}
    assert solve([], param, t_max=1.0) == []


@pytest.mark.parametrize("sweep", [False, True])
def test_crossing_states_do_not_depend_on_the_order_of_the_levels(sweep):
    """A level given after one that is crossed later (record_losses not in crossing order) is read off the
    step that holds its crossing: the same time and state as when it is recorded alone."""
    def crossings(levels):
        options = dict(t_max=1e9, record_losses=levels)
        return (solve([Setting()], "CACO", **options)[0] if sweep else solve(Setting(), "CACO", **options)).crossings

    both = crossings((1e-3, 0.5))
    for level in (1e-3, 0.5):
        alone = crossings((level,))[level]
        assert both[level][0] == alone[0] and np.array_equal(both[level][1], alone[1]), level


def test_a_sweep_refuses_a_member_that_is_not_a_setting():
    with pytest.raises(InputError, match="must be a Setting"):
        solve([Setting(), {"eta_qk": 2.0}], "CACO", t_max=10.0)


@pytest.mark.parametrize("enabled", [True, False])
def test_a_sweep_pauses_the_garbage_collector_and_leaves_it_as_it_found_it(enabled, monkeypatch):
    """A sweep runs with the cyclic collector paused (its temporaries would trigger full collections), resumed
    after it, after a failing one too; a collector the caller disabled stays disabled."""
    import gc

    import qkdyn.simulate.solve as solve_module

    seen = []
    integrate_many = solve_module.integrate.integrate_many

    def watched(*args):
        seen.append(gc.isenabled())
        return integrate_many(*args)

    monkeypatch.setattr(solve_module.integrate, "integrate_many", watched)
    (gc.enable if enabled else gc.disable)()
    try:
        assert len(solve([Setting(), Setting(eta_qk=2.0)], "CACO", t_max=1e6)) == 2
        assert seen == [False] and gc.isenabled() == enabled
        with pytest.raises(InputError, match="must be a Setting"):
            solve([Setting(), 3.0], "CACO", t_max=1e6)
        assert gc.isenabled() == enabled
    finally:
        gc.enable()


def test_a_sweep_wider_than_a_block_of_lanes_equals_its_solves_bit_for_bit():
    """More settings than one lockstep block (integrate.LANES), the lanes' step counts, rejections and
    events all different, a frozen circuit among them: every trajectory equals its own solve bit for bit."""
    from qkdyn.simulate.integrate import LANES

    rng = np.random.default_rng(5)
    settings = [Setting(eta_qk=float(rho), ov0=float(ov0)) for rho, ov0 in
                zip(np.geomspace(0.01, 100, LANES + 5), rng.uniform(0.01, 0.5, LANES + 5), strict=True)]
    settings[3] = settings[3].replace(eta_qk=0.0)
    options = dict(t_max=1e12, points=17, record_losses=(0.3,))
    sweep = solve(settings, "CAFO", **options)
    assert len({tr.stats["steps"] for tr in sweep}) > 5
    for setting, tr in zip(settings, sweep, strict=True):
        alone = solve(setting, "CAFO", **options)
        assert np.array_equal(tr.state, alone.state) and tr.crossings.keys() == alone.crossings.keys()
        assert np.array_equal(tr.qk, alone.qk) and np.array_equal(tr.ov, alone.ov) and np.array_equal(tr.t, alone.t)
        assert all(np.array_equal(tr.crossings[k][1], alone.crossings[k][1]) for k in tr.crossings)
        assert {k: tr.stats[k] for k in ("nfev", "steps")} == {k: alone.stats[k] for k in ("nfev", "steps")}


def test_a_sweeps_dense_tables_are_read_in_place_and_equal_each_solve_alone():
    """integrate_many leaves each block's tables where the integrator wrote them (no join, no concatenation):
    trajectory i's steps are rows lane_rows(...) of its block's tables, the same bits as integrate_one's tables
    of it alone; a sweep's trajectories of one block hold views of that block's tables."""
    from qkdyn.simulate import integrate
    from qkdyn.theory.compiled import load

    compiled = load("FACO")
    settings = [Setting(eta_qk=float(rho)) for rho in np.geomspace(0.05, 20.0, integrate.LANES + 3)]
    P = np.array([compiled.kernel_parameters(one.numeric()) for one in settings])
    X0 = np.array([compiled.init(one.numeric(), one.qk0, one.ov0) for one in settings])
    addresses = (compiled.rhs_lanes_kernel.address, compiled.loss_kernel.address)
    status, steps, nfev, _, final, tables, capacities = integrate.integrate_many(*addresses, P, X0, 20.0, 1e-10,
                                                                                 1e-14, np.empty(0), False)
    assert len(tables) == 2 and len(set(steps.tolist())) > 3
    for i in (0, 7, integrate.LANES - 1, integrate.LANES, integrate.LANES + 2):
        block, lo, hi = integrate.lane_rows(capacities, steps, i)
        alone = integrate.integrate_one(*addresses, P[i], X0[i], 20.0, 1e-10, 1e-14, np.empty(0), False)
        assert alone[:3] == (status[i], steps[i], nfev[i]) and np.array_equal(alone[4], final[i])
        for part, own in zip(tables[block], alone[5:], strict=True):
            assert np.array_equal(part[lo:hi], own)
    sweep = solve(settings[:3], "FACO", t_max=1e6, points=20)
    first, third = (tr.dense.log_time_states.Fs for tr in (sweep[0], sweep[2]))
    assert first.base is not None and first.base is third.base  # views of the block's one table
