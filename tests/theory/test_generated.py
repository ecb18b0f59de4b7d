"""The generated numeric modules: current with the derivation, and their kernels equal to it."""
import math

import numpy as np
import pytest
import sympy as sp
from numba import njit
from qkdyn.simulate.solve import solve
from qkdyn.theory import generate, model
from qkdyn.theory.compiled import load
from qkdyn.theory.functions import expit, softplus
from qkdyn.theory.setting import ALL_PARAMS, Setting


@pytest.mark.parametrize("param", ALL_PARAMS)
def test_committed_modules_equal_what_the_derivation_generates_now(param):
    committed = (generate.GENERATED / f"{param}.py").read_text()
    assert committed == generate.generate_source(param), f"run `python -m qkdyn.theory.generate` ({param})"


def _exact(expr, values):
    """An expression evaluated with 40-digit arithmetic (expit and softplus by their definitions)."""
    expr = expr.replace(expit, lambda x: 1 / (1 + sp.exp(-x))).replace(softplus, lambda x: sp.log(1 + sp.exp(x)))
    return float(sp.N(expr.subs(values), 40))


@pytest.mark.parametrize("param", ALL_PARAMS)
def test_compiled_kernels_equal_the_sympy_expressions_on_random_states(param):
    d, compiled = model.derive(param), load(param)
    rng = np.random.default_rng(7)
    for _ in range(3):
        setting = Setting(eta_qk=float(rng.uniform(0.1, 5)), scale=float(rng.uniform(0.5, 2)))
        p, x = setting.numeric(), rng.normal(size=len(d.symbols))
        values = {**dict(zip(model.PARAMS, p, strict=True)), **dict(zip(d.symbols, x, strict=True))}
        rhs, jac = compiled.rhs(x, p), compiled.jac(x, p)
        exact_rhs = np.array([_exact(e, values) for e in d.rhs])
        exact_jac = np.array([[_exact(e, values) for e in row] for row in d.jacobian.tolist()])
        np.testing.assert_allclose(rhs, exact_rhs, rtol=1e-12, atol=1e-15 * np.abs(exact_rhs).max())
        np.testing.assert_allclose(jac, exact_jac, rtol=1e-11, atol=1e-14 * np.abs(exact_jac).max())
        lanes = _lanes_field(compiled, [setting.replace(eta_ov=2.0), setting], [rng.normal(size=len(x)), x], [0.5, 3.0])
        np.testing.assert_allclose(lanes[:, 1] / 3.0, exact_rhs, rtol=1e-12, atol=1e-15 * np.abs(exact_rhs).max())
        loss = load(param).loss(*compiled.features(x, p), p)
        assert float(loss) == pytest.approx(_exact(d.loss, values), rel=1e-13)
        assert compiled.state_loss(x, p) == pytest.approx(_exact(d.loss, values), rel=1e-13)


def _lanes_field(compiled, settings, states, scales) -> np.ndarray:
    """``rhs_lanes_kernel`` at states[l] with settings[l], times scales[l]: (dim, lanes)."""
    from qkdyn.simulate.ccall import call as call_void

    @njit
    def call(f, x, p, scale, out):
        call_void(f, (x, p, scale, out, scale.size))

    x = np.ascontiguousarray(np.array(states, dtype=float).T)
    p = np.ascontiguousarray(np.array([compiled.kernel_parameters(one.numeric()) for one in settings]).T)
    out = np.empty_like(x)
    call(compiled.rhs_lanes_kernel.address, x, p, np.array(scales, dtype=float), out)
    return out


@pytest.mark.parametrize("param", ALL_PARAMS)
def test_the_lanes_kernel_is_the_field_lane_by_lane(param):
    """``rhs_lanes_kernel`` over 37 lanes (SIMD loops and their remainder) is scale[l] times the field of
    lane l's own setting and state, to round-off of ``rhs_into`` (its exp is ``lane_exp``), and the same
    bits as each lane alone."""
    compiled, rng = load(param), np.random.default_rng(3)
    settings = [Setting(eta_qk=float(rng.uniform(0.1, 5)), scale=float(rng.uniform(0.5, 2))) for _ in range(37)]
    states = rng.normal(size=(37, compiled.dim)) * 3
    scales = np.exp(rng.uniform(-5, 30, 37))
    together = _lanes_field(compiled, settings, states, scales)
    for l, (setting, x, scale) in enumerate(zip(settings, states, scales, strict=True)):
        expected = compiled.rhs(x, setting.numeric()) * scale
        np.testing.assert_allclose(together[:, l], expected, rtol=1e-14, atol=1e-15 * np.abs(expected).max())
        assert np.array_equal(together[:, l], _lanes_field(compiled, [setting], [x], [scale])[:, 0])


@pytest.mark.parametrize("param", ALL_PARAMS)
def test_psi_gain_is_the_difference_of_psi_to_round_off_even_for_tiny_steps(param):
    """psi_gain(a, s) = Psi(a + s) - Psi(a) to 1e-14 of the difference itself, down to s = 1e-14 a, where
    subtracting two doubles of Psi would keep only a few digits (the line near ov0: issue 21)."""
    from qkdyn.theory import invariants

    compiled, setting = load(param), Setting(classes=7, distinct=3)
    _, psi = invariants.line_coordinates(model.derive(param))
    values = dict(zip(model.PARAMS, setting.numeric(), strict=True))
    for a, s in ((1.7, 2.3e-14), (0.4, -1e-9), (3.0, 5.0), (0.0, 0.25)):
        exact = float(sp.N((psi.subs(model.ov, sp.Rational(a) + sp.Rational(s)) - psi.subs(model.ov, sp.Rational(a)))
                           .subs(values), 40))
        assert float(compiled.psi_gain(a, s, setting.numeric())) == pytest.approx(exact, rel=1e-14)


def test_vector_functions_return_arrays_of_the_input_shape():
    compiled, p = load("FAFO"), Setting().numeric()
    states = np.random.default_rng(1).normal(size=(len(compiled.variables), 7))
    qk, ov = compiled.features(states, p)
    assert qk.shape == ov.shape == (7,) and qk.dtype == float
    assert compiled.loss(qk, ov, p).shape == (7,) and compiled.attention(qk, p).shape == (7,)
    assert all(v.shape == (7,) for v in compiled.invariants(states, p))  # v_common is one state variable
    collapsed = load("CACO")
    kappa = collapsed.kappa(np.zeros((5, 4)), p)  # a collapsed QK circuit has kappa = 0, still one per state
    assert kappa.shape == (4,) and np.all(kappa == 0)
    assert float(compiled.attention(0.0, p)) == pytest.approx(8 / 32)


@pytest.mark.parametrize("param", ALL_PARAMS)
def test_compiled_dop853_agrees_with_scipy_lsoda(param):
    setting = Setting(eta_qk=3.0)
    ours = solve(setting, param, t_max=1e12, points=30, record_losses=[0.1])
    theirs = solve(setting, param, t_max=1e12, points=30, record_losses=[0.1], method="LSODA", rtol=1e-12)
    np.testing.assert_allclose(ours.state, theirs.state, rtol=1e-8, atol=1e-12)
    assert ours.crossings[0.1][0] == pytest.approx(theirs.crossings[0.1][0], rel=1e-8)
    assert ours.stats["method"] == "DOP853" and ours.stats["steps"] < 1000


def test_a_sweep_equals_its_one_at_a_time_solves():
    settings = [Setting(eta_qk=rho) for rho in (0.1, 1.0, 7.0)]
    sweep = solve(settings, "FACO", until_loss=1e-3, record_losses=[0.3], points=25)
    for setting, tr in zip(settings, sweep, strict=True):
        alone = solve(setting, "FACO", until_loss=1e-3, record_losses=[0.3], points=25)
        assert np.array_equal(tr.state, alone.state) and np.array_equal(tr.t, alone.t)
        assert tr.event_t == alone.event_t and tr.crossings[0.3][0] == alone.crossings[0.3][0]
        assert math.isclose(tr.loss[-1], 1e-3, rel_tol=1e-9)


@pytest.mark.parametrize("param", ALL_PARAMS)
def test_generated_frozen_time_equals_the_sympy_law(param):
    """``frozen_time`` (generated) is :func:`qkdyn.theory.sharpness.frozen_time_law` to round-off."""
    from qkdyn.theory import sharpness

    law, setting = sharpness.frozen_time_law(param), Setting(classes=5, distinct=7, eta_ov=2.0)
    alpha0, z0 = sharpness.FROZEN_START
    values = dict(zip(model.PARAMS, setting.numeric(), strict=True))
    for z, a0, start in ((0.7, 0.3, 0.05), (4.0, 0.9, 1.2), (25.0, 0.5, 0.01)):
        exact = float(sp.N(law.subs({**values, sharpness.z: z, alpha0: a0, z0: start}), 40))
        assert float(load(param).frozen_time(z, a0, start, setting.numeric())) == pytest.approx(exact, rel=1e-12)


def test_committed_spec_module_equals_what_the_derivations_generate_now():
    from qkdyn import generate_specs

    assert generate_specs.PATH.read_text() == generate_specs.generate_source(), \
        "run `python -m qkdyn.generate_specs`"


def test_generated_spec_functions_equal_the_sympy_expressions_on_random_states():
    """Every spec of the coupled claims: its committed functions (what numeric(spec) returns; no derivation is
    done for it) against its derived expressions in 40-digit arithmetic, at random states and settings."""
    from qkdyn.theory import specflow, specnumeric
    from qkdyn.theory.generated.specs import SPECS

    from qkdyn import generate_specs

    def derive(spec):
        raise AssertionError(f"{spec.name} was derived: numeric() should have found its generated functions")

    specs = generate_specs.specs()
    assert set(SPECS) == {repr(spec) for spec in specs}
    specnumeric.numeric.cache_clear()
    rng = np.random.default_rng(11)
    for spec in specs:
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(specflow, "derive_spec", derive)
            functions = specnumeric.numeric(spec)
        variables, outputs = specnumeric.expressions(spec)
        assert functions.variables == variables
        setting = Setting(eta_qk=float(rng.uniform(0.1, 5)), scale=float(rng.uniform(0.5, 2)))
        p, x = setting.numeric(), 0.5 * rng.normal(size=len(variables))
        (x_symbols, p_symbols), _ = outputs["rhs"]
        values = {**dict(zip(p_symbols, p, strict=True)), **dict(zip(x_symbols, x, strict=True))}
        for name in ("rhs", "loss", "features", "qk_metric"):
            exprs = outputs[name][1]
            exact = np.array([_exact(e, values) for e in (exprs if isinstance(exprs, list) else [exprs])])
            got = np.atleast_1d(getattr(functions, name)(x, p))
            np.testing.assert_allclose(got, exact, rtol=1e-12, atol=1e-15 * max(np.abs(exact).max(), 1e-300),
                                       err_msg=f"{spec.name}: {name}")
        (_, qk0, ov0), init = outputs["init"]
        exact = np.array([_exact(e, {**dict(zip(p_symbols, p, strict=True)), qk0: 0.3, ov0: 0.7}) for e in init])
        np.testing.assert_allclose(functions.init(p, 0.3, 0.7), exact, rtol=1e-12, atol=1e-15)


def test_the_lanes_kernel_takes_expit_and_its_negation_from_one_exponential():
    """codegen pairs expit(a) with expit(b) where b = -a once the common subexpressions and hoisted parameter
    constants are put back (k = -s here), and leaves an expit without its negation to lane_expit."""
    from qkdyn.theory import codegen

    x, y, s, k = sp.symbols("x y s _k0")
    outputs = [expit(s * x) * expit(k * x) * y, expit(y) * expit(s * x)]
    source = codegen.lanes_kernel_source("kernel", (x, y), (s, k), outputs, {-s: k})
    assert source.count("lane_expit_pair(") == 1 and source.count("lane_expit(") == 1, source
    for param in ALL_PARAMS:  # every form's derivative holds alpha and 1 - alpha
        assert "lane_expit_pair(" in (generate.GENERATED / f"{param}.py").read_text(), param
