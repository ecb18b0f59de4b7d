"""The compiled closed form (qkdyn.simulate.closedform) equals the numpy closed form it replaced to
round-off: tests/golden/sharpness_closed_form.json holds that form's answers on random settings of
every parameterisation (attention from 1e-278 to 1 - 1e-16, rho from 1e-12 to 1e12 and 0, negative
starts, levels down to 1e-300, times up to 1e302), recorded before the change."""
import json

import mpmath as mp
import numpy as np
import pytest
from qkdyn.simulate.sharpness import sharpness
from qkdyn.theory.setting import ALL_PARAMS, Setting
from repo_paths import GOLDEN

CASES = json.loads((GOLDEN / "sharpness_closed_form.json").read_text())["cases"]


@pytest.mark.parametrize("param", ALL_PARAMS)
def test_the_compiled_closed_form_equals_the_numpy_one_to_round_off(param):
    cases = [c for c in CASES if c["param"] == param]
    assert len(cases) >= 15
    for case in cases:
        r = sharpness(Setting(**case["setting"]), param, case["rho"], case["loss"])
        where = f"{case['setting']} rho={case['rho']} loss={case['loss']}"
        # the roots are converged to 1e-13 relative; the time is the same quadrature on the same panels
        assert float(r.ov) == pytest.approx(case["ov"], rel=1e-12, abs=1e-300), where
        assert float(r.qk) == pytest.approx(case["qk"], rel=1e-12, abs=1e-12), where
        assert float(r.attn) == pytest.approx(case["attn"], rel=1e-12, abs=1e-300), where
        assert float(r.t) == pytest.approx(case["t"], rel=1e-12), where


def test_one_kernel_call_over_settings_equals_one_call_per_setting():
    """Settings interleaved (points of one setting not contiguous): the same answers as one by one."""
    m = np.array([3, 40, 7])
    grid = sharpness({"m": m[None, :]}, "FAFO", np.array([0.1, 3.0])[:, None], 1e-3)
    for j, one in enumerate(m):
        alone = sharpness(Setting(m=int(one)), "FAFO", [0.1, 3.0], 1e-3)
        np.testing.assert_array_equal(grid.attn[:, j], alone.attn)
        np.testing.assert_array_equal(grid.t[:, j], alone.t)



@pytest.mark.parametrize("param", ALL_PARAMS)
@pytest.mark.parametrize("setting", [Setting(), Setting(ov0=-0.5, qk0=0.2), Setting(attn0=1e-30, m=3, n=40)])
def test_the_levels_of_one_path_take_its_partial_sums(param, setting):
    """Points of one setting and rho share a path: one quadrature to the farthest level, the panel holding
    each nearer level split there. Their times equal each point's own quadrature (its own panels) to the
    quadrature's accuracy, for levels in any order and repeated, starts below 0 and tiny attention, and
    where the farthest level's time is beyond the largest double (inf) but nearer ones are not (FACO from
    ov0 < 0 at rho = 40)."""
    from qkdyn.simulate.sharpness import _Problem, reachable_losses

    floor, loss0 = reachable_losses(setting, param)
    levels = floor + (loss0 - floor) * np.array([0.3, 0.9, 1e-3, 0.3, 0.999, 1e-6])
    rhos = np.repeat([0.0, 0.05, 1.0, 40.0], levels.size)
    ov = sharpness(setting, param, rhos, np.tile(levels, 4), time=False).ov
    problem = _Problem(setting, param)
    shared = problem.time_to(ov, rhos)
    alone = [problem.time_to(ov[i:i + 1], rhos[i])[0] for i in range(ov.size)]
    np.testing.assert_allclose(shared, alone, rtol=1e-12)
    assert np.any(np.isfinite(shared))


def collapsed_line_root(a, m, n, u0, lam, start) -> float:
    """u with (A/n)(m (e^u - e^u0) + n (u - u0)) = lam (a collapsed QK line), at 40 digits from ``start``."""
    with mp.workdps(40):
        a, m, n, u0 = (mp.mpf(v) for v in (a, m, n, u0))
        return float(mp.findroot(lambda u: a / n * (m * (mp.exp(u) - mp.exp(u0)) + n * (u - u0)) / lam - 1, start))


@pytest.mark.parametrize("param", ["CACO", "CAFO"])
def test_a_collapsed_qk_line_read_off_its_inverse_table_is_the_exact_inversion(param):
    """Unpolished (the time quadrature's nodes and path samples), a collapsed QK line is read off the
    setting's inverse table where that reaches (Phi up to 1e300), beyond exactly (e^u past 709.78 overflows):
    at random settings (attention from 1e-300) and lam = Phi - Phi(qk0) from -1e5 to 1e308, the same u as the
    exact inversion (Wright omega and Newton) to round-off."""
    from qkdyn.simulate import closedform, qkline
    from qkdyn.simulate.sharpness import _Problem

    rng = np.random.default_rng(22)
    beyond = 0
    # the random settings, then one whose Phi reaches the largest double only past e^u's overflow (n / (A m) > 1)
    for setting in [Setting(m=int(rng.integers(1, 300)), n=int(rng.integers(1, 300)),
                            attn0=float(10 ** rng.uniform(-300, -1e-3))) for _ in range(8)] + [
                    Setting(m=1, n=300, attn0=1e-250)]:
        problem = _Problem(setting, param)
        c = np.array(problem.constants)
        addr = np.array([problem.compiled.psi_gain_kernel.address, problem.compiled.m_ov_kernel.address,
                         *closedform.SPECIAL])
        tab, coef, ext = qkline.new_table()
        ext[:] = qkline.CENTER, qkline.CENTER + 1, -1  # as solve_points starts a setting
        qkline.new_edge(c, tab, qkline.CENTER, c[qkline.U0], 0.0)
        for lam in np.concatenate([10 ** rng.uniform(-12, 308, 200), [1e307, 1e308, 1.7e308], -10 ** rng.uniform(-12, 5, 40)]):
            exact = qkline.invert_collapsed(c, addr, tab, coef, lam)
            beyond += 709.78 < exact < np.inf
            if exact > 690:  # near the largest double: the root of Phi(u) - Phi(u0) = lam at 40 digits
                root = collapsed_line_root(*(float(c[i]) for i in (qkline.A, qkline.M, qkline.N, qkline.U0)), lam, exact)
                assert abs(root - exact) <= 1e-12 * (1 + exact)  # the state tests' 1e-11 (docs/sharpness.md), tighter
            assert qkline.invert(c, addr, tab, coef, ext, lam, False) == pytest.approx(exact, rel=1e-14, abs=1e-14)
    assert beyond > 0
