"""Typed uses of the public verbs: mypy reads this file with the public API (tests/project/test_types.py),
nothing runs it (pytest collects only test_*.py). Each ``assert_type`` fails the type check where a verb's
overloads give a wrong or a looser type (``Any`` included) for what it returns at run time."""
from __future__ import annotations

from qkdyn.simulate.specsolve import SpecTrajectory
from qkdyn.simulate.trajectory import Trajectory
from qkdyn.theory.specflow import SpecDerivation
from typing_extensions import assert_type

import qkdyn

setting = qkdyn.Setting()
spec = qkdyn.SPECS["FACO"]

# solve: a named form -> Trajectory, a spec (named or loaded) -> SpecTrajectory, a sweep -> a list of them
assert_type(qkdyn.solve(setting, "CACO", t_max=1e6), Trajectory)
assert_type(qkdyn.solve(setting, spec, t_max=1e6), SpecTrajectory)
assert_type(qkdyn.solve(setting, qkdyn.load_spec("my_spec.toml"), until_loss=1e-3), SpecTrajectory)
assert_type(qkdyn.solve([setting, setting], "FAFO", t_max=1e6, points=10), list[Trajectory])
assert_type(qkdyn.solve((setting,), spec, t_max=1e6), list[SpecTrajectory])


def either(param: str | qkdyn.Spec) -> None:
    assert_type(qkdyn.solve(setting, param, t_max=1e6), Trajectory | SpecTrajectory)


# derive: one Derived for a name or a spec; a spec's own reduced flow is its .flow
assert_type(qkdyn.derive("CACO"), qkdyn.Derived)
assert_type(qkdyn.derive(spec), qkdyn.Derived)
assert_type(qkdyn.derive(spec).flow, SpecDerivation)

# sharpness: one Sharpness for a name or a spec
assert_type(qkdyn.sharpness(setting, "CACO", rho=1.0, loss=1e-2), qkdyn.Sharpness)
assert_type(qkdyn.sharpness(setting, spec, rho=[1.0, 10.0], loss=1e-2), qkdyn.Sharpness)
