"""Weight decay in a spec (theory/specflow.py, steps 4-6): ``loss`` is the data loss and the penalty and the
objective are their own quantities; loss events fire on the data loss; the homogeneous invariants decay as
e^{-eta lambda deg(I) t}, so their ratios are rational first integrals and the balanced manifold is invariant."""
import dataclasses

import numpy as np
import pytest
from qkdyn.theory.compiled import load
from qkdyn.theory.model import PARAMS
from qkdyn.theory.spec import NAMED, Spec
from qkdyn.theory.spec import CircuitSpec as C
from qkdyn.theory.specnumeric import lambdify, numeric

import qkdyn

#: FACO with weight decay 1e-3 on its QK factors
FACO_DECAY = dataclasses.replace(NAMED["FACO"], name="faco_decay", qk=C("factorized", weight_decay=1e-3))
#: both circuits collapsed and decayed: the objective has a floor above 0
BOTH_DECAY = Spec("both_decay", qk=C(weight_decay=1e-2), ov=C(weight_decay=1e-2))
SETTING = qkdyn.Setting(classes=3, distinct=2, commons=5, eta_qk=3.0)  # rho = 3


def values(d, expr, tr) -> np.ndarray:
    """``expr`` (a function of the spec's state) along the rows of ``tr``."""
    f = lambdify([list(d.variables), list(PARAMS)], expr)
    p = np.array(tr.setting.numeric())
    return np.array([float(f(x, p)) for x in tr.state.T])


def test_the_loss_of_a_decay_spec_is_the_cross_entropy_and_the_penalty_its_own_column():
    """FACO, QK decay 1e-3, rho = 3, t = 1e4: the loss is FACO's closed-form cross-entropy
    softplus(log(K-1) - attn ov) of the state's (qk, ov), and the cross-entropy of the spec without decay
    at the same state; the penalty is (lambda/2)(q^2 + KD k_d^2 + N k_c^2); the objective their sum."""
    tr = qkdyn.solve(SETTING, FACO_DECAY, t_max=1e4, points=20)
    p = np.array(SETTING.numeric())
    closed = load("FACO").loss(tr.qk, tr.ov, p)
    undecayed = np.array([float(numeric(NAMED["FACO"]).loss(x, p)) for x in tr.state.T])
    assert np.abs(tr.loss / closed - 1).max() <= 1e-12 and np.abs(tr.loss / undecayed - 1).max() <= 1e-12
    q, kd, kc = tr.state[:3]
    K, D, N = SETTING.classes, SETTING.distinct, SETTING.commons
    assert np.allclose(tr.penalty, 1e-3 / 2 * (q**2 + K * D * kd**2 + N * kc**2), rtol=1e-13, atol=0)
    np.testing.assert_array_equal(tr.objective, tr.loss + tr.penalty)
    assert tr.loss[-1] == pytest.approx(9.989e-4, rel=1e-3) and tr.objective[-1] == pytest.approx(4.935e-3, rel=1e-3)
    columns = tr.columns()
    assert list(columns)[:7] == ["t", "qk", "ov", "attn", "loss", "penalty", "objective"]
    assert "penalty" not in qkdyn.solve(SETTING, NAMED["FACO"], t_max=1e4, points=5).columns()
    d = qkdyn.derive(FACO_DECAY)
    assert d.loss == d.flow.loss and d.penalty == d.flow.penalty != 0


def test_a_loss_level_below_the_objectives_floor_is_reached():
    """Both circuits decayed (lambda = 1e-2): the objective falls monotonically to a floor of ~0.4307 (it
    is a Lyapunov function of the flow), while the cross-entropy goes down to ~0.161; the level 0.3 lies
    between, and ``until_loss`` and ``record_losses`` reach it on the cross-entropy."""
    long = qkdyn.solve(SETTING, BOTH_DECAY, t_max=1e5, points=100)
    floor = long.objective[-1]
    assert np.all(np.diff(long.objective) <= 1e-15) and 0.43 < floor < 0.431 and long.loss[-1] < 0.17
    level = 0.3
    assert np.all(long.objective > level)
    tr = qkdyn.solve(SETTING, BOTH_DECAY, until_loss=level, points=10)
    assert tr.event_t is not None and tr.loss[-1] == pytest.approx(level, rel=1e-9)
    assert tr.objective[-1] > floor
    recorded = qkdyn.solve(SETTING, BOTH_DECAY, t_max=1e3, points=5, record_losses=(level,))
    assert recorded.crossings[level][0] == pytest.approx(tr.event_t, rel=1e-8)
    events = qkdyn.sharpness(SETTING, BOTH_DECAY, rho=3.0, loss=level)
    assert float(events.t) == pytest.approx(tr.event_t, rel=1e-7)


def test_solve_writes_the_penalty_and_the_objective_and_stops_on_the_loss(tmp_path, capsys):
    from qkdyn.cli import main

    spec = tmp_path / "d.toml"
    spec.write_text('name = "both"\n[qk]\nweight_decay = 0.01\n[ov]\nweight_decay = 0.01\n')
    out = tmp_path / "d.csv"
    assert main(["solve", "--spec", str(spec), "--classes", "3", "--distinct", "2", "--commons", "5",
                 "--eta-qk", "3", "--until-loss", "0.3", "--points", "5", "--out", str(out)]) == 0
    assert "loss target reached" in capsys.readouterr().err
    rows = [line.split(",") for line in out.read_text().splitlines()]
    assert rows[0][:7] == ["t", "qk", "ov", "attn", "loss", "penalty", "objective"]
    last = [float(v) for v in rows[-1][4:7]]
    assert last[0] == pytest.approx(0.3, rel=1e-9) and last[2] == pytest.approx(last[0] + last[1], rel=1e-15)


def test_the_rational_first_integrals_of_a_decay_spec_are_conserved_and_the_balance_stays_zero():
    """FACO, QK decay: the two QK invariants of the undecayed flow (the key mean mode I_1, degree 1, and
    I_2, degree 2) fall 20x and 400x by t = 1e3, I_2 / I_1^2 stays put to 1e-9, and the balance
    q^2 - KD k_d^2 - N k_c^2, 0 at the canonical init, stays 0 to round-off."""
    d = qkdyn.derive(FACO_DECAY)
    assert set(d.invariants) == {"QK (none listed)", "I_OV1", "I_OV2", "R_QK1"}
    assert d.invariants["QK (none listed)"].startswith("no polynomial first integral")
    first, second = d.flow.homogeneous_invariants["QK"]
    assert d.invariants["R_QK1"] == second / first**2 and set(d.balances) == {"B_QK1"}
    tr = qkdyn.solve(SETTING, FACO_DECAY, t_max=1e3, points=100)
    one, two, ratio = (values(d, e, tr) for e in (first, second, d.invariants["R_QK1"]))
    assert one[0] / one[-1] > 19 and two[0] / two[-1] > 380
    assert np.abs(ratio / ratio[0] - 1).max() <= 1e-9
    norm = values(d, d.flow.penalty, tr) / 1e-3 * 2  # q^2 + KD k_d^2 + N k_c^2
    assert np.abs(values(d, d.balances["B_QK1"], tr)).max() <= 1e-12 * norm.max()


def test_the_example_decay_spec_states_its_rational_integrals_and_balance():
    """examples/specs/deep_qk_decay.toml (factorized OV with decay 1e-3): R_OV1 = I_v / I_o of the two
    mean modes is 1/sqrt(D) at the init and keeps it to 1e-9 while both fall ~2e4x by t = 1e4; the OV
    balance |W_O|^2 - |W_V|^2 stays 0; the undecayed QK circuit keeps its conserved polynomials."""
    from repo_paths import ROOT

    spec = qkdyn.load_spec(ROOT / "examples" / "specs" / "deep_qk_decay.toml")
    d = qkdyn.derive(spec)
    assert {"I_QK1", "I_QK2", "I_QK3", "R_OV1", "R_OV2", "R_OV3", "R_OV4"} <= set(d.invariants)
    assert set(d.balances) == {"B_OV1"} and d.line == ()
    setting = qkdyn.Setting(classes=3, distinct=2, commons=5)
    tr = qkdyn.solve(setting, spec, t_max=1e4, points=60)
    ratio = values(d, d.invariants["R_OV1"], tr)
    assert ratio[0] == pytest.approx(1 / np.sqrt(setting.distinct), rel=1e-14)
    assert np.abs(ratio / ratio[0] - 1).max() <= 1e-9
    mean = values(d, d.flow.homogeneous_invariants["OV"][0], tr)
    assert mean[0] / mean[-1] > 1e4
    scale = values(d, d.flow.penalty, tr).max() / 1e-3 * 2
    assert np.abs(values(d, d.balances["B_OV1"], tr)).max() <= 1e-12 * scale


def test_an_unbalanced_factor_balance_decays_at_twice_the_decay_rate():
    """Imbalance 1.5 (B != 0 at the init): B(t) = B(0) e^{-2 eta_QK lambda t} to 1e-9 while it falls ~400x."""
    spec = Spec("unbalanced_decay", qk=C("factorized", imbalance=1.5, weight_decay=1e-3))
    d = qkdyn.derive(spec)
    tr = qkdyn.solve(SETTING, spec, t_max=1e3, points=50)
    balance = values(d, d.balances["B_QK1"], tr)
    law = balance[0] * np.exp(-2 * SETTING.eta_qk * 1e-3 * tr.t)
    assert balance[0] / balance[-1] > 380 and np.abs(balance / law - 1).max() <= 1e-9
