"""Stability of the symmetric subspace (claim SUB): the exact gradient and Hessian of the full model,
the symmetric subspace, the linearised transverse flow against perturbed nonlinear flows."""
import numpy as np
import pytest
import torch
from qkdyn.empirical.synthetic import claim_stability
from qkdyn.empirical.synthetic import stability as st
from qkdyn.empirical.synthetic.layout import Layout
from qkdyn.theory.compiled import load
from qkdyn.theory.setting import Setting
from torch.func import grad, jacrev


@pytest.fixture(autouse=True)
def one_thread():
    with st.one_thread():
        yield


@pytest.mark.parametrize("param", ["CACO", "FACO", "CAFO", "FAFO"])
def test_numpy_gradient_is_autograd_of_the_torch_loss(param):
    flow = st.FullFlow(Setting(classes=3, distinct=2, commons=2, m=2, n=3, eta_qk=5.0, scale=1.3), param, width=4)
    theta = np.random.default_rng(1).standard_normal(sum(flow.sizes))
    reference = grad(flow.loss)(torch.as_tensor(theta)).numpy()
    assert flow.loss_value(theta) == pytest.approx(float(flow.loss(torch.as_tensor(theta))), rel=1e-13)
    assert np.allclose(flow.gradient(theta), reference, rtol=1e-10, atol=1e-14)


@pytest.mark.parametrize("param", ["CACO", "FACO", "CAFO", "FAFO"])
def test_closed_form_hessian_is_autograd_hessian(param):
    """The chain rule through the factors (J^T L_ff J + C + C^T) against autograd's Hessian of the torch loss."""
    flow = st.FullFlow(Setting(classes=3, distinct=2, commons=2, m=2, n=3, scale=1.3), param, width=4)
    theta = np.random.default_rng(2).standard_normal(sum(flow.sizes))
    reference = jacrev(jacrev(flow.loss))(torch.as_tensor(theta)).numpy()
    assert np.allclose(flow.hessian(theta), reference, rtol=1e-10, atol=1e-14)


@pytest.mark.parametrize("param", ["CACO", "FACO", "CAFO", "FAFO"])
def test_hessians_of_a_batch_of_states_are_each_states_hessian(param):
    """hessian on a (points, len(theta)) batch (what linearisation evaluates along a trajectory) equals the
    Hessian of each state alone, to round-off; so do the batched loss, gradient and function Hessian."""
    flow = st.FullFlow(Setting(classes=3, distinct=2, commons=2, m=2, n=3, scale=1.3), param, width=4)
    thetas = np.random.default_rng(5).standard_normal((6, sum(flow.sizes)))
    batch = flow.hessian(thetas)
    assert batch.shape == (6, len(flow.eta), len(flow.eta))
    for theta, hessian in zip(thetas, batch, strict=True):
        assert np.allclose(hessian, flow.hessian(theta), rtol=1e-13, atol=1e-15)
    a, B = flow.function(thetas)
    loss, d_a, d_B = flow.function_gradient(a, B)
    for i in range(len(thetas)):
        one = flow.function_gradient(a[i], B[i])
        assert loss[i] == pytest.approx(float(one[0]), rel=1e-14)
        assert np.allclose(d_a[i], one[1], rtol=1e-13, atol=1e-15) and np.allclose(d_B[i], one[2], rtol=1e-13,
                                                                                      atol=1e-15)


def test_symmetric_subspace_is_the_reduced_state_and_is_invariant():
    """For CACO, Fix(G) has one dimension per reduced variable, holds every embedded state, and the
    full model's gradient there has no transverse part (the subspace is invariant)."""
    setting = Setting(classes=2, distinct=2, commons=2, m=2, n=4)
    flow = st.FullFlow(setting, "CACO")
    assert flow.fix_basis.shape[1] == len(load("CACO").variables)
    theta = flow.embed(np.array([0.3, -0.1, 0.7, 0.2, -0.4]))
    T = flow.transverse_basis()
    assert np.abs(T.T @ theta).max() < 1e-14 and np.abs(T.T @ flow.field(theta)).max() < 1e-14
    assert T.shape[1] + flow.fix_basis.shape[1] == len(theta)


def test_linearisation_predicts_the_perturbed_full_flow_where_it_is_stable():
    setting = Setting(classes=2, distinct=2, commons=2, m=2, n=4, eta_qk=1.0)
    lin = st.linearisation(setting, 1e-4)
    run = st.perturbed_flow(setting, "CACO", 1e-4)
    predicted = st.EPS * lin.size[0] * lin.predicted(run.direction) / lin.size[-1]
    assert lin.bounded and run.follows
    assert 0.5 < run.transverse / predicted < 2


def test_subspace_is_unstable_at_large_rho_and_the_full_flow_leaves_it():
    """The issue's case: CACO, K = D = N = 2, m = 2, n = 4, rho = 50: a 1e-8 perturbation breaks the
    symmetry before loss 1e-4 (the time to that loss is off, two distinct tokens of a class part)."""
    setting = Setting(classes=2, distinct=2, commons=2, m=2, n=4, eta_qk=50.0)
    lin = st.linearisation(setting, 1e-4)
    run = st.perturbed_flow(setting, "CACO", 1e-4)
    assert not lin.bounded and lin.growth_rate.max() > 0.4
    assert not run.follows and run.sym_dist > 1e-2 and run.time_error > 1e-3


def test_factorized_linearisation_at_width_k_plus_1_is_that_of_width_v():
    """exact_width: the unused inner columns are identical decoupled blocks, so r = K + 1 and r = V give
    the same growth rate and propagator gain (and a width without an unused column would not)."""
    setting = Setting(classes=2, distinct=2, commons=2, m=2, n=4, eta_qk=30.0)
    small = st.linearisation(setting, 1e-4, points=16, param="FAFO")
    full = st.linearisation(setting, 1e-4, points=16, param="FAFO", width=Layout.of(setting).vocab)
    assert small.basis.shape[1] < full.basis.shape[1]
    assert np.allclose(small.growth_rate, full.growth_rate, rtol=1e-9, atol=1e-12)
    assert np.allclose(small.log_gain, full.log_gain, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("param, rho, stable", [("FACO", 1.0, True), ("FACO", 30.0, False), ("CAFO", 30.0, True),
                                                 ("FAFO", 30.0, True)])
def test_factorized_linearisation_predicts_the_perturbed_full_flow(param, rho, stable):
    """K = D = N = 2 to loss 1e-6: where the linearisation says bounded, the full flow follows and its transverse
    size is the predicted one for the same direction (within 2x); FACO at rho = 30 is predicted to break and does."""
    setting = Setting(classes=2, distinct=2, commons=2, m=2, n=4, eta_qk=rho)
    lin = st.linearisation(setting, 1e-6, param=param)
    run = st.perturbed_flow(setting, param, 1e-6, width=st.exact_width(setting))
    predicted = st.EPS * lin.size[0] * lin.predicted(run.direction) / lin.size[-1]
    assert lin.bounded == stable and run.follows == stable
    if stable:
        assert 0.5 < run.transverse / predicted < 2
    else:
        assert run.sym_dist > 1e-2 and predicted > 1


def test_one_distinct_token_per_class_is_stable_at_large_rho():
    lin = st.linearisation(Setting(classes=2, distinct=1, commons=2, m=2, n=4, eta_qk=100.0), 1e-6)
    assert lin.bounded


def test_diagram_boundary_and_its_figure(tmp_path):
    """The diagram where the issue's case breaks (K = D = N = 2 at rho = 50 before loss 1e-4; D = 1 stays bounded),
    its boundary per shape (:func:`.stability.boundary`: the last rho before the first unbounded one, None when the
    first is unbounded), and the phase figure drawn from evidence holding it (claim SUB's verdicts: the judge's
    tests, tests/empirical/synthetic/test_judge_stability.py)."""
    d = st.diagram([(2, 1, 2), (2, 2, 2)], [1.0, 50.0], 1e-4, points=24)
    assert d.bounded.tolist() == [[True, True], [True, False]] and d.boundary() == [50.0, 1.0]
    assert st.boundary([1.0, 2.0, 3.0], [[True, False, True], [False, True, True]]) == [1.0, None]
    run = {"param": "CACO", "K": 2, "D": 2, "N": 2, "rho": 50.0, "eps x worst linear gain": float(d.eps_gain[1, 1]),
           "eps x linear gain (this run)": 0.1, "nonlinear size": 0.05, "sym_dist": 0.2, "time error": 0.02}
    evidence = {"level": d.level, "eps": st.EPS, "shapes": [list(s) for s in d.shapes], "rhos": d.rhos.tolist(),
                "eps_x_linear_gain": {"CACO": d.eps_gain.tolist()}, "validation": [run]}
    assert claim_stability._plot(evidence, tmp_path) == "stability_phase.png"
    assert (tmp_path / "stability_phase.png").exists()
