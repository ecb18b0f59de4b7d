"""MQAR steps per task: one count for every task, or one per task of ``mqar_tasks`` in order."""
import dataclasses

import pytest
from qkdyn.empirical.coupled.study import BUDGETS, StudyConfig, study_runs

from qkdyn.errors import InputError


def _mqar_steps(cfg: StudyConfig) -> dict[str, set[int]]:
    steps: dict[str, set[int]] = {}
    for run in study_runs(cfg):
        if run.task == "mqar":
            steps.setdefault(run.data, set()).add(run.train.max_steps)
            assert run.base_steps == run.train.max_steps  # a task's runs are named by its own length
    return steps


def test_the_cpu_budget_trains_medium_longer_than_easy():
    assert _mqar_steps(BUDGETS["cpu"]) == {"easy": {1000}, "medium": {2000}}


def test_one_count_applies_to_every_task():
    cfg = dataclasses.replace(BUDGETS["cpu"], mqar_steps=(300,))
    assert _mqar_steps(cfg) == {"easy": {300}, "medium": {300}}


@pytest.mark.parametrize("steps", [(1000, 2000, 3000), (1000, 2000)])
def test_counts_that_do_not_match_the_tasks_are_refused_naming_the_field(steps):
    tasks = ("easy", "medium") if len(steps) == 3 else ("easy",)
    with pytest.raises(InputError, match="step counts for") as err:
        dataclasses.replace(BUDGETS["cpu"], mqar_tasks=tasks, mqar_steps=steps)
    assert err.value.field == "mqar_steps"
