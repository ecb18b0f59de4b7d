"""A spec's field in floating point (theory/stableflow.py) and the stiff hand-over of its solve
(simulate/specsolve.py, module docstring): weight decay on one circuit alone has no finite minimum, the decayed
circuit tracks a moving balance at a rate that grows like t in log time, and its solve reaches t = 1e15."""
import math

import mpmath
import numpy as np
import pytest
import sympy as sp
from qkdyn.simulate.specsolve import solve_spec
from qkdyn.theory.model import PARAMS
from qkdyn.theory.specflow import derive_spec
from qkdyn.theory.specnumeric import _jacobian, numeric
from repo_paths import ROOT
from scipy.integrate import solve_ivp

import qkdyn

SPEC = qkdyn.load_spec(ROOT / "examples" / "specs" / "deep_qk_decay.toml")
SETTING = qkdyn.Setting(classes=3, distinct=2, commons=5)


def exact_rhs(x: np.ndarray, p: np.ndarray) -> np.ndarray:
    """The derivation's own ``rhs`` (the quotient rule's form) at 40 digits."""
    d = derive_spec(SPEC)
    mpmath.mp.dps = 40
    function = sp.lambdify([list(d.symbols), list(PARAMS)], list(d.rhs), modules=[
        {"expit": lambda z: 1 / (1 + mpmath.exp(-z)), "softplus": lambda z: mpmath.log1p(mpmath.exp(z))}, "mpmath"])
    values = function([mpmath.mpf(float(v)) for v in x], [mpmath.mpf(float(v)) for v in p])
    return np.array([float(v) for v in values])


def reference(t_end: float) -> np.ndarray:
    """The state at ``t_end`` by SciPy's Radau in log time, rtol 1e-13, with the derived Jacobian."""
    functions, p = numeric(SPEC), np.asarray(SETTING.numeric(), dtype=float)
    x0 = functions.init(p, SETTING.qk0, SETTING.ov0)
    sol = solve_ivp(lambda tau, x: math.exp(tau) * functions.rhs(x, p), (0.0, math.log1p(t_end)), x0, method="Radau",
                    jac=lambda tau, x: math.exp(tau) * functions.jac(x, p), rtol=1e-13, atol=1e-16)
    assert sol.status == 0, sol.message
    return sol.y[:, -1]


@pytest.mark.parametrize("t", [1e2, 1e8, 1e11])
def test_the_float_field_is_the_derivation_to_round_off_where_attention_saturates(t):
    """At t = 1e11 the quotient rule's form carries a relative error ~4e-5 in the QK field (1e-8 at t = 1e8):
    the stable form stays within 1e-13 of the derivation evaluated at 40 digits."""
    p = np.asarray(SETTING.numeric(), dtype=float)
    x = solve_spec(SETTING, SPEC, t_max=t, points=2, rtol=1e-8, atol=1e-12).state[:, -1]
    exact = exact_rhs(x, p)
    ours = numeric(SPEC).rhs(x, p)
    qk = slice(0, 5)  # the QK variables, whose field falls like 1/t
    assert np.abs(ours[qk] - exact[qk]).max() <= 1e-13 * np.abs(exact[qk]).max()
    # the OV field at its moving balance is a gradient minus the decay lambda x (1e-3 x): round-off of those
    decay = 1e-3 * np.abs(x[qk.stop:]).max()
    assert np.abs(ours[qk.stop:] - exact[qk.stop:]).max() <= 1e-14 * decay


def test_the_float_field_equals_the_derivation_at_random_states():
    rng = np.random.default_rng(3)
    p = np.asarray(SETTING.numeric(), dtype=float)
    for _ in range(5):
        x = rng.uniform(-1.5, 1.5, len(numeric(SPEC).variables))
        exact = exact_rhs(x, p)
        assert np.abs(numeric(SPEC).rhs(x, p) - exact).max() <= 1e-14 * np.abs(exact).max()


def test_decay_on_one_circuit_hands_over_to_lsoda_and_agrees_with_a_tight_reference():
    tr = solve_spec(SETTING, SPEC, t_max=1e9, points=2)
    assert tr.stats["stiff_t"] is not None and tr.stats["method"] == "DOP853+LSODA"
    assert tr.stats["settled_t"] is None  # no finite minimum: qk keeps growing
    expected = reference(1e9)
    assert np.abs(tr.state[:, -1] - expected).max() / np.maximum(1.0, np.abs(expected)).max() <= 1e-8


def test_decay_on_one_circuit_reaches_1e15_in_steps_of_the_slow_motion():
    """Before the hand-over DOP853 alone took 2232 steps to t = 1e6 and did not reach 1e8 in minutes."""
    tr = solve_spec(SETTING, SPEC, t_max=1e15, points=2)
    assert tr.t[-1] == 1e15 and tr.stats["steps"] < 2000, tr.stats
    assert np.isfinite(tr.state).all() and tr.qk[-1] > tr.qk[0]


def test_the_one_state_jacobian_and_the_bound_functions_are_the_numpy_ones():
    """The solver's Jacobian printed with math for one state (its entries flat, one cse over all of them) is the
    NumPy function's to round-off, and the functions bound to p (what a solver calls per step) give the values of
    the calls with p."""
    rng = np.random.default_rng(5)
    p = np.asarray(SETTING.numeric(), dtype=float)
    functions = numeric(SPEC)
    rhs, jac = functions.bound(p)
    size = len(functions.variables)
    for _ in range(5):
        x = rng.uniform(-1.5, 1.5, size)
        one = functions.jac(x, p)
        vectorised = _jacobian(SPEC).slow(x, p)
        assert one.shape == (size, size)
        assert np.abs(one - vectorised).max() <= 1e-14 * np.abs(vectorised).max()
        np.testing.assert_array_equal(jac(x), one)
        np.testing.assert_array_equal(rhs(x), functions.rhs(x, p))
