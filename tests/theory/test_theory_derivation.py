"""The symbolic derivation: reduction lemma, conserved quantities, closed forms, codegen."""
import math

import numpy as np
import pytest
import sympy as sp
from hypothesis import given, settings
from hypothesis import strategies as st
from qkdyn.theory import invariants, model
from qkdyn.theory.compiled import load
from qkdyn.theory.setting import EXACT_PARAMS, Setting

settings_strategy = st.builds(
    Setting,
    classes=st.integers(2, 6), distinct=st.integers(1, 6), commons=st.integers(1, 6),
    m=st.integers(1, 6), n=st.integers(1, 6), scale=st.floats(0.2, 3.0),
    eta_qk=st.floats(0.1, 10.0), eta_ov=st.floats(0.1, 10.0),
)


@pytest.mark.parametrize("param", EXACT_PARAMS)
@settings(max_examples=10)
@given(setting=settings_strategy, seed=st.integers(0, 2**31))
def test_reduction_lemma(param, setting, seed):
    """The population loss built from the model definition equals softplus(log(K-1) - alpha ov)."""
    d = model.derive(param)
    full = sp.lambdify([d.symbols, model.PARAMS], d.model_loss(), "mpmath")
    x = np.random.default_rng(seed).normal(0, 1.5, len(d.symbols))
    p = setting.numeric()
    compiled = load(param)
    reduced = compiled.loss(*compiled.features(x, p), p)
    assert float(full(list(x), list(p))) == pytest.approx(float(reduced), rel=1e-12, abs=1e-13)


@pytest.mark.parametrize("param", EXACT_PARAMS)
def test_named_invariants_are_conserved_and_complete(param):
    d = model.derive(param)
    for circuit in (d.qk_circuit, d.ov_circuit):
        for name, expr in circuit.invariants.items():
            assert invariants.lie_derivative(circuit, expr) == 0, name
        assert len(invariants.polynomial_invariants(circuit)) == len(circuit.invariants)


@pytest.mark.parametrize("param", ["FACO", "CAFO"])
def test_balanced_closed_form_of_the_rate(param):
    d = model.derive(param)
    for circuit in (d.qk_circuit, d.ov_circuit):
        assert invariants.balanced_metric_residual(circuit) == 0


@pytest.mark.parametrize("param", EXACT_PARAMS + ("paper",))
def test_the_balanced_flow_is_the_chain_rule_of_the_full_flow(param):
    """d(qk, ov)/dt of the full reduced flow (chain rule through every variable), at the init of random settings,
    equals invariants.balanced_flow at that state's (qk, ov, kappa), to 30 digits."""
    d = model.derive(param)
    chain = [sum(sp.diff(feature, v.symbol) * rhs for v, rhs in zip(d.variables, d.rhs, strict=True))
             for feature in (d.qk, d.ov)]
    kappa = invariants.kappa_of(d.qk_circuit)
    balanced = [e.subs({model.qk: d.qk, model.ov: d.ov, invariants.kappa: kappa}) for e in invariants.balanced_flow(d)]
    rng = np.random.default_rng(7)
    for _ in range(3):
        draws = [rng.uniform(0.5, 2), rng.uniform(0.1, 10), rng.uniform(0.1, 10), rng.uniform(10, 60),
                 rng.uniform(-2, 2), rng.uniform(-2, 2)]  # as exact rationals: every digit below is sympy's
        values = [3, 5, 4, 2, 6, *(sp.Rational(x) for x in draws)]
        point = dict(zip((*model.PARAMS, model.qk0, model.ov0), values, strict=True))
        for full, reduced in zip(chain, balanced, strict=True):
            a = sp.N(full.subs(d.init).subs(point).rewrite(sp.exp), 40)
            b = sp.N(reduced.subs(d.init).subs(point).rewrite(sp.exp), 40)
            assert abs(a - b) <= 1e-30 * (1 + abs(a)), (param, full, a, b)


def test_gradient_ratio_is_one_minus_alpha_times_ov():
    expected = model.ov * (1 - model.attention(model.qk))
    assert sp.simplify((invariants.gradient_ratio() - expected).rewrite(sp.exp)) == 0


@pytest.mark.parametrize("param", EXACT_PARAMS + ("paper",))
@settings(max_examples=10)
@given(setting=settings_strategy, seed=st.integers(0, 2**31))
def test_generated_rhs_is_the_metric_gradient_of_the_loss(param, setting, seed):
    """Codegen check: rhs_i = -(eta_i / w_i) dL/dx_i with dL/dx_i by central differences."""
    compiled, p = load(param), setting.numeric()
    d = model.derive(param)
    x = np.random.default_rng(seed).normal(0, 1, len(d.symbols))
    weights = [float(v.orbit.subs(dict(zip(model.PARAMS, p, strict=True)))) for v in d.variables]
    etas = [setting.eta_qk if v.circuit == "QK" else setting.eta_ov for v in d.variables]

    def loss(y):
        return float(compiled.loss(*compiled.features(y, p), p))

    rhs = compiled.rhs(x, p)
    for i in range(len(x)):
        h = 1e-6
        e = np.zeros_like(x)
        e[i] = h
        grad = (loss(x + e) - loss(x - e)) / (2 * h)
        assert rhs[i] == pytest.approx(-etas[i] / weights[i] * grad, rel=1e-5, abs=1e-9)
    jac = compiled.jac(x, p)
    for i in range(len(x)):
        e = np.zeros_like(x)
        e[i] = 1e-6
        column = (compiled.rhs(x + e, p) - compiled.rhs(x - e, p)) / 2e-6
        np.testing.assert_allclose(jac[:, i], column, rtol=1e-5, atol=1e-8)


@pytest.mark.parametrize("param", EXACT_PARAMS)
def test_balanced_init_gives_the_requested_gap_and_margin(param):
    setting = Setting(qk0=0.3, ov0=0.7, scale=0.5)
    compiled, p = load(param), setting.numeric()
    x0 = compiled.init(p, setting.qk0, setting.ov0)
    qk, ov = compiled.features(x0, p)
    assert (float(qk), float(ov)) == pytest.approx((0.3, 0.7), rel=1e-14)
    values = dict(zip(compiled.invariant_names, compiled.invariants(x0, p), strict=True))
    for name in ("qk_balance", "ov_balance"):
        if name in values:
            assert abs(float(values[name])) < 1e-14 * np.max(np.abs(x0)) ** 2  # round-off, relative


def test_paper_form_is_exact_caco_with_mapped_constants():
    """paper(M=K, b=D) equals the exact CACO flow when s^2 = N / (D (N + K D))."""
    from qkdyn.simulate.solve import solve

    base = Setting(classes=5, distinct=7, commons=9, m=3, n=11, b=7.0, eta_qk=3.0, qk0=0.05, ov0=0.1)
    setting = base.replace(scale=math.sqrt(9 / (7 * (9 + 5 * 7))))
    caco = solve(setting, "CACO", t_max=1e8, points=50)
    paper = solve(setting, "paper", t_max=1e8, points=50)
    np.testing.assert_allclose(paper.qk, caco.qk, rtol=1e-8)
    np.testing.assert_allclose(paper.ov, caco.ov, rtol=1e-8)
