"""Flows that settle (simulate/specsolve.py, module docstring): a spec with a finite minimum (a square loss,
weight decay on both circuits) is solved by DOP853 (handed to LSODA once its step is held by stability) until it
has settled, then by the equilibrium's exact linear approach, so t = 1e15 costs what the transient does; the solution agrees with an independent tight
reference (SciPy's Radau in linear time, rtol 1e-12, with the derived Jacobian) to 1e-8 at every row."""
import dataclasses

import numpy as np
import pytest
from qkdyn.simulate.specsolve import _equilibrium, _Field, _vanished, solve_spec
from qkdyn.theory.spec import NAMED, Spec
from qkdyn.theory.spec import CircuitSpec as C
from qkdyn.theory.specnumeric import numeric
from scipy.integrate import solve_ivp

import qkdyn

SETTING = qkdyn.Setting(classes=3, distinct=2, commons=5, eta_qk=3.0)  # rho = 3
#: the issue's square-loss CAFO (its factorized OV keeps a balance: the minima form a manifold, J* has zero modes)
SQUARE = dataclasses.replace(NAMED["CAFO"], name="cafo_square", loss="square")
#: both circuits decayed: an isolated minimum
BOTH_DECAY = Spec("both_decay", qk=C(weight_decay=1e-2), ov=C(weight_decay=1e-2))
#: FACO with decay on both circuits
FACO_BOTH = dataclasses.replace(NAMED["FACO"], name="faco_both_decay", qk=C("factorized", weight_decay=1e-3),
                                ov=C(weight_decay=1e-3))
#: decay on QK only: QK decays to 0 while ov grows like log t; no finite minimum, so it never settles
FACO_QK_DECAY = dataclasses.replace(NAMED["FACO"], name="faco_decay", qk=C("factorized", weight_decay=1e-3))


def reference(spec: Spec, times: np.ndarray) -> np.ndarray:
    """The states at ``times`` by SciPy's Radau in linear time t, rtol 1e-12, atol 1e-15, with the derived
    Jacobian: an implicit method (its steps grow geometrically once the flow has settled) that shares nothing
    with the settling solver but the flow."""
    functions, p = numeric(spec), np.asarray(SETTING.numeric(), dtype=float)
    x0 = functions.init(p, SETTING.qk0, SETTING.ov0)
    sol = solve_ivp(lambda t, x: functions.rhs(x, p), (0.0, times[-1]), x0, method="Radau",
                    jac=lambda t, x: functions.jac(x, p), rtol=1e-12, atol=1e-15, t_eval=times)
    assert sol.status == 0, sol.message
    return sol.y


@pytest.mark.parametrize("spec", [SQUARE, BOTH_DECAY, FACO_BOTH], ids=lambda s: s.name)
def test_a_settling_spec_reaches_1e15_in_few_steps_and_agrees_with_a_tight_reference(spec):
    tr = solve_spec(SETTING, spec, t_max=1e15, points=60)
    settled = tr.stats["settled_t"]
    assert settled is not None and settled < 1e5 and tr.stats["steps"] < 300, tr.stats
    expected = reference(spec, tr.t)
    error = np.abs(tr.state - expected).max(axis=0) / np.maximum(1.0, np.abs(expected).max(axis=0))
    assert error.max() <= 1e-8, (error.max(), tr.t[error.argmax()])
    # the settled rows are the equilibrium itself: the flow's residual there is round-off
    p = np.asarray(SETTING.numeric(), dtype=float)
    assert np.abs(numeric(spec).rhs(tr.state[:, -1], p)).max() <= 1e-12


def test_the_settled_solution_is_the_plain_dop853_solution_before_and_after_the_switch():
    """Both circuits decayed: to t = 1e4 (past the switch) the settling solve and DOP853 alone agree to 1e-9
    (DOP853's own error at rtol 1e-11 on the stiff stretch is ~1e-10), and a loss level crossed after the switch (halfway between the loss there and the loss at the minimum) is
    found where the reference's loss is that level to 1e-3 of the remaining gap (the crossing time itself is
    ill-conditioned there: the loss moves by ~1e-10)."""
    settling = solve_spec(SETTING, BOTH_DECAY, t_max=1e4, points=40)
    plain = solve_spec(SETTING, BOTH_DECAY, t_max=1e4, points=40, settle=False)
    switch = settling.stats["settled_t"]
    assert switch is not None and switch < 5e3 and plain.stats.get("settled_t") is None
    np.testing.assert_allclose(settling.state, plain.state, rtol=0, atol=1e-9)
    at_switch, final = float(settling.at([switch]).loss[0]), float(settling.loss[-1])
    level = final + 0.5 * (at_switch - final)
    late = solve_spec(SETTING, BOTH_DECAY, t_max=1e4, points=5, record_losses=(level,))
    crossed, state = late.crossings[level]
    assert crossed > switch
    p = np.asarray(SETTING.numeric(), dtype=float)
    exact = float(numeric(BOTH_DECAY).loss(reference(BOTH_DECAY, np.array([0.0, crossed]))[:, -1], p))
    assert float(numeric(BOTH_DECAY).loss(state, p)) == pytest.approx(level, rel=1e-12)
    assert abs(exact - level) <= 1e-3 * (at_switch - final)


def test_a_flow_without_a_finite_minimum_never_switches_and_is_the_plain_solution():
    """QK decayed, OV not: the state is never an equilibrium, and to t = 1e3 DOP853's step is not yet held by
    stability, so the solve is DOP853's throughout, row for row (tests/theory/test_stable_flow.py goes further)."""
    settling = solve_spec(SETTING, FACO_QK_DECAY, t_max=1e3, points=30)
    plain = solve_spec(SETTING, FACO_QK_DECAY, t_max=1e3, points=30, settle=False)
    assert settling.stats["settled_t"] is None and settling.stats["stiff_t"] is None
    np.testing.assert_allclose(settling.state, plain.state, rtol=1e-12, atol=1e-13)


def test_a_saddle_or_a_moving_state_is_not_taken_for_a_settled_one():
    """The check itself: at the factorized QK's saddle (all QK factors 0, an unstable equilibrium of the
    decayed FACO when ov is large) and at the init (moving), no equilibrium is accepted; at a converged state
    of BOTH_DECAY it is, with every rate <= 0."""
    field, p = _Field(FACO_BOTH), np.asarray(SETTING.numeric(), dtype=float)
    x0 = field.init(p, SETTING.qk0, SETTING.ov0)
    assert _equilibrium(field, p, x0, 1e-11, 1e-14)[0] is None
    tr = solve_spec(SETTING, FACO_QK_DECAY, t_max=1e5, points=3, settle=False)
    assert _equilibrium(_Field(FACO_QK_DECAY), p, tr.state[:, -1], 1e-11, 1e-14)[0] is None
    both = _Field(BOTH_DECAY)
    end = solve_spec(SETTING, BOTH_DECAY, t_max=1e15, points=3).state[:, -1]
    found, _ = _equilibrium(both, p, end, 1e-11, 1e-14)
    assert found is not None and found[2].max() <= 0


@pytest.mark.parametrize(("ov", "q", "vanishes"), [((25.96, -12.975, 0.0), 1e-15, True),  # attracting, below atol
                                                   ((25.96, -12.975, 0.0), 1e-13, False),  # above atol
                                                   ((7.95, -3.97, 0.0), 1e-15, False)])  # q = 0 is a saddle here
def test_a_collapsed_circuit_vanishes_only_below_atol_onto_an_attracting_invariant_subspace(ov, q, vanishes):
    """FACO with QK decay: QK = 0 is invariant; it attracts once ov has grown (t ~ 1e6: ov_own ~ 26) and repels
    at t ~ 3e4 (ov_own ~ 8, where QK sits at a balance away from 0). Only QK components within atol of 0 on the
    attracting side are set to 0, and nothing else moves."""
    p = np.asarray(SETTING.numeric(), dtype=float)
    rhs, jac = numeric(FACO_QK_DECAY).bound(p)
    x = np.array([q, 0.3 * q, -0.4 * q, *ov])
    snapped = _vanished(rhs, jac, x, 1e-14)
    if not vanishes:
        assert snapped is None
        return
    assert snapped is not None
    np.testing.assert_array_equal(snapped, np.array([0.0, 0.0, 0.0, *ov]))
    assert not np.any(rhs(snapped)[:3])  # the subspace is invariant: its rates are exactly 0
    assert _vanished(rhs, jac, snapped, 1e-14) is None  # nothing newly vanishes twice


def test_decay_on_one_circuit_collapses_exactly_to_0_and_agrees_with_a_tight_reference_to_1e15():
    """QK decayed, OV not: QK collapses near t = 1e6 (it falls 20 orders of magnitude within t = 8e5-1.2e6) while
    ov keeps growing like log t. The solve sets the collapsed components to exactly 0 and agrees with Radau in
    log time (rtol 1e-13, the derived Jacobian) to 1e-8 at every row."""
    tr = solve_spec(SETTING, FACO_QK_DECAY, t_max=1e15, points=40)
    assert tr.stats["method"] == "DOP853+LSODA" and tr.stats["settled_t"] is None
    assert not np.any(tr.state[:3, -1]) and tr.ov[-1] > tr.ov[0]
    functions, p = numeric(FACO_QK_DECAY), np.asarray(SETTING.numeric(), dtype=float)
    x0 = functions.init(p, SETTING.qk0, SETTING.ov0)
    sol = solve_ivp(lambda tau, x: np.exp(tau) * functions.rhs(x, p), (0.0, np.log1p(1e15)), x0, method="Radau",
                    jac=lambda tau, x: np.exp(tau) * functions.jac(x, p), rtol=1e-13, atol=1e-16,
                    t_eval=np.log1p(tr.t))
    assert sol.status == 0, sol.message
    error = np.abs(tr.state - sol.y).max(axis=0) / np.maximum(1.0, np.abs(sol.y).max(axis=0))
    assert error.max() <= 1e-8, (error.max(), tr.t[error.argmax()])
