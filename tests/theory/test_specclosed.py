"""No form label downstream (issue 18, item 2): the rate factor, the line, the laws and matched loss
of any spec come from the spec itself (theory/specclosed.py, theory/invariants.py), or a statement."""
import numpy as np
import pytest
import sympy as sp
from qkdyn.theory import derived, invariants, model, specclosed, specflow
from qkdyn.theory.spec import NAMED, Spec
from qkdyn.theory.spec import CircuitSpec as C
from scipy.interpolate import CubicSpline

import qkdyn

DEPTH3 = Spec("depth3_qk", qk=C("factorized", depth=3))
UNBALANCED = Spec("unbalanced_qk", qk=C("factorized", imbalance=1.5))
SETTING = qkdyn.Setting(classes=3, distinct=2, commons=3, m=2, n=3, eta_qk=2.0, qk0=0.3, ov0=0.4)


def test_a_depth3_qk_circuit_gets_its_own_rate_factor_not_the_depth2_one():
    """invariants.balanced_metric on a user-built depth-3 circuit is a statement (NotDerived), and the
    spec's exact rate factor at its init differs from the depth-2 closed form at the same qk; the
    depth-2 spec's circuit gets exactly the FACO closed form."""
    d = specflow.derive_spec(DEPTH3)
    with pytest.raises(invariants.NotDerived, match="not derived for this QK circuit"):
        invariants.balanced_metric(d.circuit("QK"))
    with pytest.raises(invariants.NotDerived):
        invariants.kappa_of(d.circuit("QK"))
    p = dict(zip(model.PARAMS, SETTING.numeric(), strict=True))
    x0 = {v: e.subs({**p, model.qk0: SETTING.qk0, model.ov0: SETTING.ov0}) for v, e in d.init.items()}
    depth3 = float(d.metrics["QK"]["rate_factor"].subs({**p, **x0}))
    faco = specflow.named("FACO")
    assert sp.simplify(invariants.balanced_metric(faco.circuit("QK"))
                       - invariants.balanced_metric(model.qk_circuit("factorized"))) == 0
    f0 = {v: e.subs({**p, model.qk0: SETTING.qk0, model.ov0: SETTING.ov0}) for v, e in faco.init.items()}
    kappa0 = invariants.kappa_of(faco.circuit("QK")).subs({**p, **f0})
    depth2 = float(invariants.rate_factor(model.qk_circuit("factorized")).subs(
        {**p, model.qk: SETTING.qk0, invariants.kappa: kappa0}))
    assert abs(depth3 / depth2 - 1) > 0.1, (depth3, depth2)
    # the depth-3 factor is the chain rule of the derived flow (itself checked against autograd in test_specs)
    qk_rate = sum(sp.diff(d.qk, v.symbol) * rhs for v, rhs in zip(d.variables, d.rhs, strict=True) if v.circuit == "QK")
    slope = sp.diff(model.reduced_loss(model.qk, model.ov), model.qk).subs({model.qk: d.qk, model.ov: d.ov})
    collapsed = invariants.metric(model.qk_circuit("collapsed"))
    measured = float((qk_rate / (-model.eta_qk * collapsed * slope)).subs({**p, **x0}).rewrite(sp.exp))
    assert abs(measured - depth3) <= 1e-12 * depth3


def test_collapsed_and_paper_circuits_need_no_label():
    for circuit in (model.qk_circuit("collapsed"), model.ov_circuit("collapsed"), *model.paper_circuits()):
        assert invariants.metric_is_constant(circuit)
        assert invariants.balanced_metric(circuit) == invariants.metric(circuit)
        assert invariants.kappa_of(circuit) == 0 and invariants.balanced_metric_residual(circuit) == 0


@pytest.mark.parametrize("name", list(NAMED))
def test_a_spec_that_is_an_exact_form_gets_its_closed_forms(name, monkeypatch):
    spec = Spec("mine", qk=NAMED[name].qk, ov=NAMED[name].ov)
    assert specclosed.exact_form(spec) == name
    assert specclosed.exact_form(Spec("other", qk=C(NAMED[name].qk.form, imbalance=2.0), ov=NAMED[name].ov)) is None
    assert specclosed.line(spec)[0] is True
    monkeypatch.setattr(derived, "derive", lambda param: ("the exact form", param))  # derive(name) costs seconds
    assert derived._derive_spec(spec) == ("the exact form", name)


def test_weight_decay_square_loss_and_self_attention_have_no_line_and_say_why():
    cases = {"weight decay": Spec(qk=C(weight_decay=0.01)), "square": Spec(loss="square"),
             "self": Spec(self_attention=True)}
    for why, spec in cases.items():
        exists, text = specclosed.line(spec)
        assert exists is False and text.startswith("no first integral"), (why, text)
    assert "weight decay" in specclosed.line(cases["weight decay"])[1]
    assert "not softplus" in specclosed.line(cases["square"])[1]


def test_the_line_stated_for_an_unbalanced_factorized_qk_holds_along_its_flow():
    """The statement "exists" for an unbalanced rank-1 QK (one degree of freedom beyond its conserved
    quantities) could fail: M_QK read along the rho = 1 solution as a function of qk must be the same
    function along the rho = 8 solution (so Phi(qk) is one function for both)."""
    exists, text = specclosed.line(UNBALANCED)
    assert exists is True and "exists" in text
    assert specclosed.degrees_of_freedom(UNBALANCED, "QK")[0] == 1
    d = specflow.derive_spec(UNBALANCED)
    metric = sp.lambdify([list(d.symbols), list(model.PARAMS)], d.metrics["QK"]["metric"])
    p = SETTING.numeric()
    runs = [qkdyn.solve(SETTING.replace(eta_qk=rho), UNBALANCED, t_max=1e4, points=150) for rho in (1.0, 8.0)]
    curves = [(tr.qk, np.array([metric(x, p) for x in tr.state.T])) for tr in runs]
    (qk1, m1), (qk2, m2) = curves
    inside = (qk2 > qk1.min()) & (qk2 < qk1.max())
    assert inside.sum() > 30 and np.all(np.diff(qk1) > 0)
    predicted = CubicSpline(qk1, m1)(qk2[inside])
    assert np.abs(predicted / m2[inside] - 1).max() < 1e-5
    assert np.ptp(m2[inside]) / m2[inside].mean() > 0.1  # M_QK changes along the way: the comparison has reach


def test_derive_takes_any_spec_and_states_what_is_not_derived():
    derived = qkdyn.derive(Spec("sq", loss="square"))
    assert derived.param == "sq" and derived.line == () and derived.laws == {}
    assert set(derived.not_derived) == {"first-integral line", "late-time laws", "matched loss"}
    assert derived.not_derived["first-integral line"].startswith("no first integral")
    assert "not derived for this spec" in derived.not_derived["late-time laws"]


def test_sharpness_takes_a_spec_closed_form_or_events():
    exact = qkdyn.sharpness(SETTING, Spec("mine"), rho=[0.5, 4.0], loss=1e-2)
    caco = qkdyn.sharpness(SETTING, "CACO", rho=[0.5, 4.0], loss=1e-2)
    assert np.array_equal(exact.attn, caco.attn)
    events = qkdyn.sharpness(SETTING, Spec("events", qk=C("factorized", depth=3)), rho=[[0.5], [4.0]],
                             loss=[1e-1, 1e-2])
    assert events.attn.shape == (2, 2) and np.all(np.isfinite(events.t))
    assert np.all(events.attn[1] > events.attn[0])  # A4's direction, read off the events
    with pytest.raises(qkdyn.InputError, match="one Setting"):
        qkdyn.sharpness({"m": [2, 3]}, Spec("events", qk=C("factorized", depth=3)), rho=1.0, loss=1e-2)


def test_closed_forms_keyed_by_a_form_take_a_spec_or_say_why_not():
    from qkdyn.theory import asymptotics, sharpness

    assert model.derive(Spec("mine", qk=C("factorized"))) is model.derive("FACO")
    assert sharpness.line_normal_form(Spec("mine")) == sharpness.line_normal_form("CACO")
    for closed_form in (sharpness.line_normal_form, asymptotics.ov_law, asymptotics.log_t_exponents):
        with pytest.raises(invariants.NotDerived, match="depth3_qk is not the model of an exact form"):
            closed_form(DEPTH3)
