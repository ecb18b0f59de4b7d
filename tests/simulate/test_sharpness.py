"""Closed-form matched-loss sharpness against the ODE, the frozen-attention law, A4 as a theorem."""
import csv
import math

import numpy as np
import pytest
import sympy as sp
from hypothesis import given, settings
from hypothesis import strategies as st
from qkdyn.simulate.sharpness import sharpness
from qkdyn.simulate.solve import solve
from qkdyn.theory import asymptotics
from qkdyn.theory import sharpness as theory
from qkdyn.theory.compiled import load
from qkdyn.theory.setting import ALL_PARAMS, Setting

from qkdyn import testing
from qkdyn.cli import main
from qkdyn.errors import InputError

settings_strategy = st.builds(
    Setting,
    classes=st.integers(2, 8), distinct=st.integers(1, 20), commons=st.integers(1, 40),
    m=st.integers(1, 20), n=st.integers(1, 40), scale=st.floats(0.3, 2.0),
    eta_ov=st.floats(0.1, 10.0), qk0=st.floats(0.001, 1.0), ov0=st.floats(0.001, 1.0), b=st.floats(1.0, 60.0),
)


def ode_crossings(setting, param, rho, levels):
    """(attn, t) where the ODE's event finder sees the loss cross each level."""
    run = setting.replace(eta_qk=rho * setting.eta_ov)
    tr = solve(run, param, until_loss=min(levels), record_losses=[lv for lv in levels if lv != min(levels)], points=2)
    crossings = {**tr.crossings, min(levels): (tr.event_t, tr.state[:, -1])}
    compiled, p = load(param), run.numeric()
    out = []
    for level in levels:
        t, x = crossings[level]
        qk, _ = compiled.features(x, p)
        out.append((float(compiled.attention(qk, p)), t))
    return np.array(out)


@pytest.mark.parametrize("param", ALL_PARAMS)
@settings(max_examples=6)
@given(setting=settings_strategy, log_rho=st.floats(-2, 2),
       fractions=st.lists(st.floats(0.0, 1.0), min_size=2, max_size=3, unique=True))
def test_agrees_with_the_ode_event_crossing(param, setting, log_rho, fractions):
    """attn to 1e-9 and t to 1e-7 relative, for levels log-uniform in (1e-6, L0)."""
    rho = 10.0**log_rho
    compiled, p = load(param), setting.numeric()
    loss0 = float(compiled.loss(*compiled.features(compiled.init(p, setting.qk0, setting.ov0), p), p))
    levels = sorted({float(math.exp(math.log(1e-6) + f * (math.log(loss0) - math.log(1e-6))) * (1 - 1e-3))
                     for f in fractions}, reverse=True)
    closed = sharpness(setting, param, rho, levels)
    reference = ode_crossings(setting, param, rho, levels)
    np.testing.assert_allclose(closed.attn, reference[:, 0], rtol=0, atol=1e-9)
    np.testing.assert_allclose(closed.t, reference[:, 1], rtol=1e-7)
    assert np.allclose(compiled.loss(closed.qk, closed.ov, p), levels, rtol=1e-12)


def test_paper_form_matches_qkdyn_solve(tmp_path, capsys):
    """(m, n, b, classes) = (5, 50, 50, 20), qk0 = ov0 = 0, loss 1e-4: the CLIs agree at rho = 0.01, 1, 100."""
    flags = ["--param", "paper", "--m", "5", "--n", "50", "--b", "50", "--classes", "20", "--qk0", "0", "--ov0", "0"]
    out = tmp_path / "sharp.csv"
    assert main(["sharpness", *flags, "--rho", "0.01,1,100", "--loss", "1e-4", "--out", str(out)]) == 0
    rows = list(csv.DictReader(out.open()))
    assert list(rows[0]) == ["param", "rho", "loss", "qk", "ov", "attn", "t"]
    for row, rho in zip(rows, ("0.01", "1", "100"), strict=True):
        solved = tmp_path / f"solve{rho}.csv"
        assert main(["solve", *flags, "--eta-qk", rho, "--until-loss", "1e-4", "--points", "2", "--out", str(solved)]) == 0
        last = list(csv.DictReader(solved.open()))[-1]
        assert float(row["attn"]) == pytest.approx(float(last["attn"]), abs=1e-9)
        assert float(row["t"]) == pytest.approx(float(last["t"]), rel=1e-7)
    capsys.readouterr()


def test_frozen_attention_matches_the_elementary_time_law():
    """rho = 0 (CACO): e^z + (K-1) z = e^z0 + (K-1) z0 + eta_OV alpha0^2 t / D, derived in theory."""
    setting = Setting(classes=5, distinct=7, ov0=0.3, qk0=0.2, eta_ov=2.0)
    levels = np.array([0.5, 1e-3, 1e-8])
    result = sharpness(setting, "CACO", 0.0, levels)
    alpha0 = float(load("CACO").attention(setting.qk0, setting.numeric()))
    law = theory.frozen_time_law("CACO")
    symbols = {sp.Symbol(name, positive=True): value for name, value in
               (("K", 5), ("D", 7), ("eta_OV", 2.0), ("alpha0", alpha0), ("z0", alpha0 * 0.3))}
    z_star = np.log(4) - np.log(np.expm1(levels))
    expected = [float(law.subs(symbols).subs(theory.z, z)) for z in z_star]
    np.testing.assert_allclose(result.t, expected, rtol=1e-10)
    np.testing.assert_allclose(result.qk, setting.qk0, atol=1e-13)


def test_setting_fields_broadcast_like_rho_and_loss():
    grid = sharpness({"m": [[4], [8], [16]], "classes": 3}, "FAFO", rho=[0.1, 10.0], loss=1e-2)
    assert grid.attn.shape == (3, 2)
    for i, m in enumerate((4, 8, 16)):
        one = sharpness(Setting(m=m, classes=3), "FAFO", rho=[0.1, 10.0], loss=1e-2)
        np.testing.assert_array_equal(grid.attn[i], one.attn)
        np.testing.assert_array_equal(grid.t[i], one.t)


@pytest.mark.parametrize("param", ALL_PARAMS)
def test_a4_proof_steps_all_hold(param):
    """The steps as committed in the generated module (tests/theory/test_generated.py: equal to what sympy proves now)."""
    from qkdyn.theory.compiled import load

    steps = dict(load(param).a4_proof)
    assert steps and all(steps.values()), steps


@pytest.mark.parametrize("param", ("CACO", "FAFO"))
def test_a4_derivative_matches_finite_differences(param):
    """The implicit derivative (and its sign) against a central difference of the closed form."""
    setting, rho, level, h = Setting(), 2.0, 1e-3, 1e-5
    at = sharpness(setting, param, [rho - h, rho, rho + h], level, time=False)
    compiled, p = load(param), setting.numeric()
    kappa = float(compiled.kappa(compiled.init(p, setting.qk0, setting.ov0), p))
    derivative = theory.a4_derivative(param)
    names = {"K": setting.classes, "D": setting.distinct, "N": setting.commons, "m": setting.m, "n": setting.n,
             "s": setting.scale, "kappa": kappa, "qk": at.qk[1], "ov": at.ov[1], "ov0": setting.ov0,
             "rho": rho, "b": setting.b}
    value = float(derivative.subs({s: names[str(s)] for s in derivative.free_symbols}).rewrite(sp.exp))
    assert value > 0
    assert value == pytest.approx((at.attn[2] - at.attn[0]) / (2 * h), rel=1e-5)


def test_negative_initial_margin_breaks_a4_as_the_derivative_predicts():
    """ov0 < 0 (collapsed OV): at losses reached while |ov| < |ov0|, larger rho gives softer attention."""
    setting = Setting(ov0=-1.0, qk0=0.0)
    compiled, p = load("CACO"), setting.numeric()
    loss0 = float(compiled.loss(0.0, -1.0, p))
    level = loss0 * 0.999  # reached almost at once: |ov| < |ov0| there
    result = sharpness(setting, "CACO", [1.0, 2.0], level, time=False)
    assert abs(result.ov[0]) < 1 and result.attn[1] < result.attn[0]


@pytest.mark.parametrize("kwargs, field", [
    ({"loss": 5.0}, "loss"), ({"loss": 0.0}, "loss"), ({"loss": float("nan")}, "loss"),
    ({"rho": -1.0}, "rho"), ({"rho": float("inf")}, "rho"), ({"rho": 1e-310}, "rho"), ({"rho": 1.7e308}, "rho"),
    ({"rho": [1.0, 5e-324]}, "rho"),
    ({"setting": Setting(qk0=0.0), "param": "FACO"}, "qk0"), ({"setting": Setting(ov0=0.0), "param": "CAFO"}, "ov0"),
    ({"param": "XAXO"}, "param"), ({"setting": {"m": 2.5}}, "m"), ({"setting": {"bogus": 1}}, "setting"),
])
def test_bad_requests_are_user_errors(kwargs, field):
    call = {"setting": Setting(), "param": "CACO", "rho": 1.0, "loss": 0.1, **kwargs}
    with pytest.raises(InputError) as info:
        sharpness(call["setting"], call["param"], call["rho"], call["loss"])
    assert info.value.field == field


@pytest.mark.parametrize("argv", [
    ["--rho", "1:100:x", "--loss", "0.1"], ["--rho", "1", "--loss", "5"], ["--rho", "-1", "--loss", "0.1"],
    ["--rho", "1", "--loss", "0:1:3"], ["--rho", "nan", "--loss", "0.1"], ["--rho", "1", "--loss", "1,,2"],
])
def test_cli_bad_input_is_one_line_and_exit_2(tmp_path, capsys, argv):
    out = tmp_path / "never.csv"
    code = main(["sharpness", "--param", "CACO", *argv, "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1 and "error" in err
    assert list(tmp_path.iterdir()) == []


def test_cli_log_spaced_lists(tmp_path, capsys):
    out = tmp_path / "s.csv"
    assert main(["sharpness", "--param", "CAFO", "--rho", "0.01:100:5", "--loss", "0.1,1e-3", "--out", str(out)]) == 0
    rows = list(csv.DictReader(out.open()))
    assert len(rows) == 10
    assert sorted({float(r["rho"]) for r in rows}) == pytest.approx([0.01, 0.1, 1.0, 10.0, 100.0])
    capsys.readouterr()


def test_phase_diagram_boundaries_match_direct_evaluation():
    from qkdyn.simulate import phase

    rhos = np.geomspace(0.1, 10, 7)
    d = phase.diagram(Setting(), "K", rhos, 3, 1e-2)
    assert d.attn["FAFO"].shape == (3, 7) and list(d.values) == [2, 3, 4]
    for row, k in enumerate(d.values):
        direct = sharpness(Setting(classes=int(k)), "FAFO", rhos, 1e-2, time=False).attn
        np.testing.assert_array_equal(d.attn["FAFO"][row], direct)
        caco_one = sharpness(Setting(classes=int(k)), "CACO", 1.0, 1e-2, time=False).attn
        first = d.boundaries()["FAFO overtakes CACO(rho=1) from rho"][row]
        assert first == rhos[np.argmax(direct >= caco_one)]


def test_phase_diagram_colours_only_the_computed_range_without_steps_between_rows(tmp_path, monkeypatch):
    """The A5 panels colour the grid's points and interpolate between them (no cell reaching below
    m = 1: drawn as cells m +- 1/2, the m = 1 row covered m/n = 1/(2n)..3/(2n) and its edge with m = 2
    showed as a seam at m/n = 0.0625 on the log axis); and the closed form itself is smooth there (no
    branch switch): attn at m = 1 is where the quadratic through m = 2, 3, 4 puts it, to within 30% of
    the step from m = 1 to 2 (attn = log m gives 24%) or 2e-3 (half of one of the 256 colour levels)."""
    from qkdyn.simulate import phase

    rhos = np.geomspace(0.01, 100, 17)
    d = phase.diagram(Setting(), "m/n", rhos, 4, 1e-3)
    for param in phase.EXACT_PARAMS:
        a = d.attn[param]
        off = np.abs(a[0] - (3 * a[1] - 3 * a[2] + a[3]))
        assert np.all(off <= 0.3 * np.abs(a[1] - a[0]) + 2e-3), (param, off, a[1] - a[0])
    drawn = {}
    monkeypatch.setattr(phase, "save", lambda fig, directory, name: drawn.setdefault("fig", fig) and name)
    phase.plot([d], 1e-3, tmp_path)
    for ax in drawn["fig"].axes[:len(phase.EXACT_PARAMS)]:
        assert ax.get_ylim() == pytest.approx((d.y[0], d.y[-1])) and ax.get_xlim() == pytest.approx((rhos[0], rhos[-1]))
        # the colour field: samples at the grid's points (first and last row on the panel's edges),
        # linear in the panel's y coordinate between rows (log m/n), never a cell reaching beyond
        image = ax.images[0]
        values = np.asarray(image.get_array())
        a = d.attn[ax.get_title().split(":")[0]]
        assert np.array_equal(values[0], a[0]) and np.array_equal(values[-1], a[-1])
        x0, x1, y0, y1 = image.get_extent()
        assert image.get_transform() == ax.transAxes and image.get_interpolation() == "bilinear"
        assert (x0 + x1, y0 + y1) == pytest.approx((1, 1)) and (x1 - x0) * (values.shape[1] - 1) / values.shape[1] \
            == pytest.approx(1) and (y1 - y0) * (values.shape[0] - 1) / values.shape[0] == pytest.approx(1)
        lo, hi = np.minimum(a[:-1], a[1:]), np.maximum(a[:-1], a[1:])  # each drawn row between its two grid rows
        rows = np.searchsorted(np.log(d.y), np.linspace(np.log(d.y[0]), np.log(d.y[-1]), len(values)), "right") - 1
        rows = np.clip(rows, 0, len(d.y) - 2)
        assert np.all((values >= lo[rows] - 1e-15) & (values <= hi[rows] + 1e-15))


def test_derive_prints_the_a4_derivative_and_its_proof(capsys):
    assert main(["derive", "--param", "paper"]) == 0
    out = capsys.readouterr().out
    assert "A4: d attn / d rho at fixed loss" in out and "sign proof" in out
    assert out.count(": holds") == len(theory.a4_proof("paper")) and "NOT shown" not in out


def test_latex_of_powers_of_the_stable_primitives():
    from qkdyn.theory.functions import expit, softplus

    x = sp.Symbol("x")
    assert sp.latex(expit(x) ** 2) == r"\sigma\left(x\right)^{2}"
    assert sp.latex(softplus(x) ** 3) == r"\operatorname{softplus}\left(x\right)^{3}"


def test_cafo_ov_law_carries_the_derived_constant():
    """docs/sharpness.md: the leading CAFO law misses delta -> c = 2A/(rho sqrt(D)(K-1)); the law that
    `derive` prints and the compiled ov_law carry e^c and are within 2% at rho = 1, t = 1e15, while the
    law without it is not."""
    setting = Setting(eta_qk=1.0)
    assert theory.ov_shift_limit("CACO") == 0
    c_expr = theory.ov_shift_limit("CAFO")
    names = {"K": setting.classes, "D": setting.distinct, "N": setting.commons, "s": setting.scale, "rho": 1.0,
             "m": setting.m, "n": setting.n}
    c = float(c_expr.subs({s: names[str(s)] for s in c_expr.free_symbols}))
    tr = solve(setting, "CAFO", t_max=1e15, points=2)
    ov = tr.ov[-1]
    law = asymptotics.ov_law("CAFO").solution  # the law `derive` prints, with its shift
    values = {**names, "eta_OV": setting.eta_ov, "eta_QK": setting.eta_qk, "t": 1e15}
    corrected = float(law.subs({x: values[str(x)] for x in law.free_symbols}))
    leading = float(law.subs({x: values[str(x)] * (np.exp(-c) if str(x) == "t" else 1) for x in law.free_symbols}))
    assert "exp(" in str(asymptotics.ov_law("CAFO").argument)  # the printed law has the shift
    assert abs(leading / ov - 1) > 0.02
    assert abs(corrected / ov - 1) < 0.02 and abs(corrected - ov) < 0.25 * abs(leading - ov)
    assert ov - leading == pytest.approx(c, rel=0.3)


@pytest.mark.parametrize("param", ("CACO", "paper"))
def test_negative_initial_margin_time_and_attention_match_the_ode(param):
    """ov0 < 0: qk first falls, then rises; the quadrature follows the turn."""
    from qkdyn.simulate.sharpness import initial_loss

    setting = Setting(ov0=-1.0, qk0=0.2)
    loss0 = initial_loss(setting, param)
    levels = [loss0 * 0.999, loss0 * 0.5, 1e-3]
    closed = sharpness(setting, param, 3.0, levels)
    reference = ode_crossings(setting, param, 3.0, levels)
    np.testing.assert_allclose(closed.attn, reference[:, 0], rtol=0, atol=1e-9)
    np.testing.assert_allclose(closed.t, reference[:, 1], rtol=1e-7)


def test_the_positivity_check_can_fail():
    """Negative controls: the sign inference behind the proof does not prove false or unknown signs."""
    from qkdyn.theory.model import K, ov, qk

    ov0 = sp.Symbol("ov0", negative=True)
    assert theory.provably_positive(sp.exp(qk) * (K - 1) * ov)
    assert not theory.provably_positive(qk)  # qk is any real
    assert not theory.provably_positive(ov**2 - ov0**2)  # the A4 gain when ov0 < 0: sign unknown
    assert not theory.provably_positive(1 - K)


def test_attn0_broadcasts_as_a_setting_field():
    grid = sharpness({"attn0": [0.3, 0.6]}, "CACO", rho=1.0, loss=1e-2, time=False)
    one = [sharpness(Setting(attn0=a), "CACO", rho=1.0, loss=1e-2, time=False).attn for a in (0.3, 0.6)]
    np.testing.assert_allclose(grid.attn, np.ravel(one), rtol=1e-12)


@pytest.mark.parametrize("param", ["CACO", "FACO", "CAFO", "FAFO", "paper"])
@settings(max_examples=6, deadline=None)
@given(setting=testing.setting_strategy(eta_qk=1.0, qk0=(0.01, 1.0), ov0=(0.01, 1.0)), rho=testing.rhos(1e-2, 1e2),
       fraction=st.floats(0.05, 0.999))
def test_time_quadrature_is_accurate_to_1e_8(param, setting, rho, fraction):
    """The default panels (6 units of progress each, 16 Gauss nodes) against 8x finer ones, polished."""
    from qkdyn.simulate.sharpness import _Problem

    problem = _Problem(setting, param)
    level = problem.loss0 * (1 - fraction) + 1e-6 * fraction
    result = sharpness(setting, param, rho, level)
    fine = problem.time_to(np.atleast_1d(result.ov), np.atleast_1d(float(rho)), per_panel=0.75, polish=True)
    assert float(result.t) == pytest.approx(float(fine[0]), rel=1e-8)


@pytest.mark.parametrize("param", ["CACO", "FACO", "CAFO", "FAFO", "paper"])
def test_the_line_normal_form_is_exact(param):
    """dPhi/dqk = A (m e^qk + n) / (n sqrt(qk^2 + beta^2)) (beta = 0: no root), symbolically."""
    assert theory.normal_form_residual(param) == 0


def test_one_input_convention_broadcast_with_a_clear_error_or_an_explicit_grid():
    with pytest.raises(InputError, match=r"do not broadcast: rho \(3,\), loss \(2,\); pass grid=True .* rho=np.array"):
        sharpness(Setting(), "CACO", [1.0, 2.0, 3.0], [0.1, 0.01])
    with pytest.raises(InputError, match=r"do not broadcast: rho \(2,\), loss \(\), m \(3,\)"):
        sharpness({"m": [4, 8, 16]}, "CACO", [1.0, 2.0], 0.1)
    grid = sharpness({"m": [4, 8, 16], "classes": 3}, "FAFO", [0.1, 10.0], [0.1, 1e-2], grid=True)
    assert grid.attn.shape == (2, 2, 3) and list(grid.axes) == ["rho", "loss", "m"]
    by_hand = sharpness({"m": np.array([4, 8, 16])[None, None, :], "classes": 3}, "FAFO",
                        np.array([0.1, 10.0])[:, None, None], np.array([0.1, 1e-2])[None, :, None])
    np.testing.assert_array_equal(grid.attn, by_hand.attn)
    with pytest.raises(InputError, match="with grid=True must be a scalar or a 1-D list"):
        sharpness(Setting(), "CACO", [[1.0, 2.0]], 0.1, grid=True)


def test_a_grid_exports_to_xarray_and_pandas_with_named_axes():
    grid = sharpness({"m": [4, 8]}, "CACO", [0.5, 2.0], [0.1, 1e-2, 1e-3], grid=True)
    data = grid.to_xarray()
    assert data.attn.dims == ("rho", "loss", "m") and list(data.m.values) == [4, 8]
    assert float(data.attn.sel(rho=2.0, loss=1e-2, m=8)) == grid.attn[1, 1, 1]
    frame = grid.to_pandas()
    assert frame.index.names == ["rho", "loss", "m"] and len(frame) == 12
    assert frame.loc[(0.5, 1e-3, 4), "t"] == grid.t[0, 2, 0]
    with pytest.raises(ValueError, match="needs named axes: call sharpness"):
        sharpness(Setting(), "CACO", [1.0, 2.0], 0.1).to_xarray()
