"""A coupled report run with study flags says so: the flags as typed, and each field where the plan differs
from the budget's own value (a reduced plan must not read as the budget's)."""
from __future__ import annotations

from qkdyn.empirical.coupled.study import BUDGETS, CoupledStudy

from qkdyn.commands.compare_coupled import flags_of, reductions


def test_a_plan_with_overrides_names_them_and_what_the_budget_had():
    study = CoupledStudy(overrides={"mqar_tasks": ("easy",), "match_compute": False, "seeds": 5})
    assert flags_of(study) == " --no-match-compute --mqar-tasks easy --seeds 5"
    text = reductions(study, "cpu")
    assert "mqar_tasks easy instead of easy, medium" in text and "match_compute False instead of True" in text
    assert "seeds" not in text  # the cpu budget's own value: not a reduction
    assert BUDGETS["cpu"].seeds == 5


def test_the_budget_as_it_stands_adds_nothing():
    assert flags_of(CoupledStudy()) == "" and reductions(CoupledStudy(), "cpu") == ""
