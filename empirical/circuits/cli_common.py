"""Command-line flags shared by ``train-circuits`` and ``compare-circuits``: one flag per
:class:`RunConfig` field (default: the preset's value)."""
from __future__ import annotations

import argparse
import dataclasses

from qkdyn.empirical.circuits.presets import PRESETS, TASKS, RunConfig, resolve

#: fields that the compare command sets itself
COMPARE_OWNED = ("qk_lr_mult", "seed")


def add_config_arguments(parser: argparse.ArgumentParser, skip: tuple[str, ...] = ()) -> None:
    parser.add_argument("--task", required=True, choices=TASKS)
    parser.add_argument("--preset", choices=sorted(PRESETS), help="default: cpu-TASK if it exists, else paper-TASK")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1: the cores are shared)")
    for field in dataclasses.fields(RunConfig):
        if field.name == "task" or field.name in skip:
            continue
        flag = "--" + field.name.replace("_", "-")
        if field.type in ("bool", bool):
            parser.add_argument(flag, action=argparse.BooleanOptionalAction, default=None)
        else:
            kind = {"int": int, "float": float, "str": str}[field.type if isinstance(field.type, str) else field.type.__name__]
            parser.add_argument(flag, type=kind, default=None, metavar=field.name.upper())


def config_from_args(args: argparse.Namespace, **fixed) -> RunConfig:
    overrides = {f.name: getattr(args, f.name, None) for f in dataclasses.fields(RunConfig) if f.name != "task"}
    return resolve(args.task, args.preset, {**overrides, **fixed})


def set_threads(n: int) -> None:
    import torch

    from qkdyn.errors import InputError

    if n < 1:
        raise InputError("--threads must be >= 1")
    torch.set_num_threads(n)
