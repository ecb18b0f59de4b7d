"""Command-line flags shared by ``train-circuits`` and ``compare-circuits``: one flag per
:class:`RunConfig` field (default: the preset's value), each checked against the field's domain
at parse time (:mod:`qkdyn.configflags`), its help showing each preset's value (:func:`preset_text`); and, for ``compare-circuits``, the help text of each budget's
:class:`~qkdyn.empirical.circuits.study.CircuitsConfig` value (:func:`budget_text`)."""
from __future__ import annotations

import argparse
import collections
import dataclasses

from qkdyn.configflags import add_config_flags, by_budget, check_applicable, grouped, shown, values_from_args
from qkdyn.empirical.circuits.presets import PRESETS, TASKS, RunConfig, check_sizes, resolve
from qkdyn.settingflags import positive_int
from qkdyn.studies import BUDGETS

#: fields that the compare command sets itself (the seed, the QK multiplier of each arm, the budget's target)
COMPARE_OWNED = ("qk_lr_mult", "seed", "target_loss")


def add_config_arguments(parser: argparse.ArgumentParser, skip: tuple[str, ...] = (), preset: bool = True) -> None:
    """``--task``, ``--threads``, a flag per RunConfig field but ``skip``, and ``--preset`` unless
    ``preset`` is false (the command then takes it from elsewhere)."""
    parser.add_argument("--task", required=True, choices=TASKS)
    if preset:
        parser.add_argument("--preset", choices=sorted(PRESETS),
                            help="default: cpu-TASK if it exists, else paper-TASK")
    parser.add_argument("--threads", type=positive_int, default=1,
                        help="torch CPU threads (default 1: the cores are shared)")
    add_config_flags(parser, RunConfig, skip=("task",) + tuple(skip), unset=preset_text)


def preset_text(name: str) -> str:
    """Each preset's value of RunConfig field ``name`` (the field's default where a preset leaves it),
    as the help shows it: the presets grouped by value, the largest group last as "the other presets"."""
    default = next(f.default for f in dataclasses.fields(RunConfig) if f.name == name)
    texts = {preset: shown(fields.get(name, default)) for preset, fields in PRESETS.items()}
    counts = collections.Counter(texts.values())
    common = counts.most_common(1)[0][0]
    if len(counts) == 1:
        return f"{common} in every preset"
    rest = grouped({preset: text for preset, text in texts.items() if text != common}, "in")
    return f"{rest}; {common} in the other presets"


def budget_text(name: str) -> str:
    """Each budget's value of the circuits study's config field ``name``, as the help shows it; where
    the tasks' budgets differ, each task's (:func:`qkdyn.empirical.circuits.study.budgets_of`)."""
    from qkdyn.empirical.circuits.study import budgets_of

    by_task = {task: budgets_of(task) for task in TASKS}
    texts = {}
    for budget in BUDGETS:
        values = {task: shown(getattr(budgets[budget], name)) for task, budgets in by_task.items()}
        texts[budget] = (next(iter(values.values())) if len(set(values.values())) == 1
                         else f"the task's ({grouped(values, 'for')})")
    return by_budget(texts)


def config_from_args(args: argparse.Namespace, **fixed) -> RunConfig:
    cfg = resolve(args.task, args.preset, values_from_args(RunConfig, args, **fixed))
    check_applicable(cfg, args)
    check_sizes(cfg)
    return cfg
