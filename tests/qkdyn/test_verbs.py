"""One public verb per operation: ``qkdyn.derive``, ``qkdyn.solve`` and ``qkdyn.sharpness`` take a form's
name or a circuit spec through one path (their return types are checked statically by
tests/project/typed_api.py), and no second public name does the same."""
import ast

import numpy as np
import pytest
from qkdyn.simulate.specsolve import SpecTrajectory, solve_spec
from qkdyn.simulate.trajectory import Trajectory
from qkdyn.theory import specflow
from qkdyn.theory.model import ETA
from repo_paths import ROOT

import qkdyn

SETTING = qkdyn.Setting(classes=3, distinct=2, commons=5)
#: a spec that is no exact form's model (weight decay), cheap to derive
DECAY = qkdyn.Spec("decay", qk=qkdyn.CircuitSpec(weight_decay=0.01))
EXAMPLE = ROOT / "examples" / "specs" / "deep_qk_decay.toml"


def same_trajectory(a, b) -> None:
    assert type(a) is type(b)
    for name in ("t", "state", "qk", "ov", "attn", "loss"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)
    assert a.variables == b.variables and a.event_t == b.event_t and a.param == b.param


def test_the_spec_duplicates_are_gone_from_the_public_api():
    for name in ("solve_spec", "derive_spec"):
        assert not hasattr(qkdyn, name), name
        assert name not in qkdyn.__all__ and name not in dir(qkdyn)
        assert name not in (qkdyn.__doc__ or ""), name


def test_the_type_checkers_view_of_the_api_is_the_lazy_one():
    """``qkdyn/__init__.py`` imports each public name under TYPE_CHECKING (so mypy types ``qkdyn.solve``
    by its overloads); that block names exactly what ``_API`` imports on first use."""
    tree = ast.parse((ROOT / "qkdyn" / "__init__.py").read_text())
    block = next(node for node in tree.body if isinstance(node, ast.If) and getattr(node.test, "id", "") == "TYPE_CHECKING")
    static = {}
    for node in block.body:
        assert isinstance(node, ast.ImportFrom)
        for alias in node.names:
            static[alias.asname or alias.name] = ((f"{node.module}.{alias.name}", None) if node.module == "qkdyn"
                                                  else (node.module, alias.name))
    assert static == qkdyn._API


def test_solve_takes_a_name_for_a_trajectory():
    tr = qkdyn.solve(SETTING, "CACO", t_max=1e4, points=10)
    assert type(tr) is Trajectory and tr.param == "CACO"


def test_solve_takes_a_spec_for_what_solve_spec_gave():
    for spec in (DECAY, qkdyn.load_spec(EXAMPLE)):
        tr = qkdyn.solve(SETTING, spec, t_max=1e4, points=10)
        assert isinstance(tr, SpecTrajectory) and tr.spec is spec and tr.param == spec.name
        same_trajectory(tr, solve_spec(SETTING, spec, t_max=1e4, points=10))


def test_solve_takes_a_sweep_of_settings_for_a_list():
    settings = [SETTING, SETTING.replace(eta_qk=4.0)]
    named = qkdyn.solve(settings, "CACO", t_max=1e4, points=10)
    assert isinstance(named, list) and [type(tr) for tr in named] == [Trajectory, Trajectory]
    specs = qkdyn.solve(tuple(settings), DECAY, t_max=1e4, points=10)
    assert isinstance(specs, list) and len(specs) == 2
    for one, tr in zip(settings, specs, strict=True):
        same_trajectory(tr, solve_spec(one, DECAY, t_max=1e4, points=10))
    with pytest.raises(ValueError, match="Setting"):
        qkdyn.solve([SETTING, "CACO"], DECAY, t_max=1e4)


def test_derive_of_a_spec_holds_what_derive_spec_gave():
    d = qkdyn.derive(DECAY)
    assert d.spec is DECAY and d.param == "decay"
    flow = specflow.derive_spec(DECAY)
    assert d.flow is flow  # the one derivation, cached per spec
    assert d.variables == flow.symbols and d.ode == dict(zip(flow.symbols, flow.rhs, strict=True)) and d.loss == flow.loss
    # the loss is the data loss, the weight decay its own penalty; the flow descends their sum
    assert d.penalty == flow.penalty != 0 and flow.objective == flow.loss + flow.penalty
    assert all(rhs == -(ETA[v.circuit] / v.orbit) * flow.objective.diff(v.symbol)
               for v, rhs in zip(flow.variables, flow.rhs, strict=True))
    assert qkdyn.derive(DECAY) is d


def test_derive_of_a_named_forms_spec_is_that_forms_result_and_flow():
    spec = qkdyn.SPECS["CACO"]
    d = qkdyn.derive(spec)
    assert d == qkdyn.derive("CACO") and d.spec is spec and qkdyn.derive("CACO").spec is None
    assert d.flow is specflow.derive_spec(spec) and qkdyn.derive("CACO").flow is d.flow
    with pytest.raises(qkdyn.InputError, match="paper_model"):
        qkdyn.derive("paper").flow  # noqa: B018


def test_sharpness_takes_a_spec():
    spec_result = qkdyn.sharpness(SETTING, qkdyn.SPECS["FACO"], rho=[1.0, 10.0], loss=0.1)
    named = qkdyn.sharpness(SETTING, "FACO", rho=[1.0, 10.0], loss=0.1)
    assert type(spec_result) is qkdyn.Sharpness
    for name in ("qk", "ov", "attn", "t"):
        np.testing.assert_array_equal(getattr(spec_result, name), getattr(named, name))
