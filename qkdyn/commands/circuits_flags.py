"""Command-line flags shared by ``train-circuits`` and ``compare-circuits``: one flag per
:class:`RunConfig` field (default: the preset's value), each checked against the field's domain
at parse time (:mod:`qkdyn.configflags`)."""
from __future__ import annotations

import argparse

from qkdyn.configflags import add_config_flags, check_applicable, values_from_args
from qkdyn.empirical.circuits.presets import PRESETS, TASKS, RunConfig, check_sizes, resolve
from qkdyn.settingflags import positive_int

#: fields that the compare command sets itself
COMPARE_OWNED = ("qk_lr_mult", "seed")


def add_config_arguments(parser: argparse.ArgumentParser, skip: tuple[str, ...] = ()) -> None:
    parser.add_argument("--task", required=True, choices=TASKS)
    parser.add_argument("--preset", choices=sorted(PRESETS), help="default: cpu-TASK if it exists, else paper-TASK")
    parser.add_argument("--threads", type=positive_int, default=1,
                        help="torch CPU threads (default 1: the cores are shared)")
    add_config_flags(parser, RunConfig, skip=("task",) + tuple(skip), all_none=True)


def config_from_args(args: argparse.Namespace, **fixed) -> RunConfig:
    cfg = resolve(args.task, args.preset, values_from_args(RunConfig, args, **fixed))
    check_applicable(cfg, args)
    check_sizes(cfg)
    return cfg

