"""Command-line flags shared by ``qkdyn lm`` and ``qkdyn mqar``: the fields of
:class:`~qkdyn.empirical.coupled.configs.AttentionConfig` and
:class:`~qkdyn.empirical.coupled.configs.TrainConfig`, each checked against its domain at parse time
(:mod:`qkdyn.configflags`). Imports nothing heavy.
"""
from __future__ import annotations

import argparse

from qkdyn.configflags import add_config_flags, config_from_args
from qkdyn.empirical.coupled.configs import DERIVED, PRESET_NAMES, AttentionConfig, TrainConfig
from qkdyn.errors import InputError
from qkdyn.settingflags import positive_int


def add_model_arguments(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("model")
    g.add_argument("--preset", default="tiny", choices=PRESET_NAMES, help="model shape (default tiny)")
    add_config_flags(g, AttentionConfig)


def add_train_arguments(parser: argparse.ArgumentParser, max_steps: int, lr: float) -> None:
    g = parser.add_argument_group("training")
    g.add_argument("--out", required=True, help="run directory (resumes if it holds checkpoint.pt)")
    add_config_flags(g, TrainConfig, skip=DERIVED,
                     defaults={"max_steps": max_steps, "lr": lr, "min_lr": None, "warmup_steps": None})
    g.add_argument("--threads", type=positive_int, default=None, help="torch CPU threads (default: torch's choice)")
    g.add_argument("--no-progress", action="store_true", help="no tqdm progress bar")


def attention_config(args: argparse.Namespace) -> AttentionConfig:
    return config_from_args(AttentionConfig, args)


def train_config(args: argparse.Namespace) -> TrainConfig:
    """The TrainConfig of the flags; ``--min-lr`` defaults to lr/10, ``--warmup-steps`` to 10%. The schedule
    decays from ``--lr`` to ``--min-lr``, so a ``--min-lr`` above ``--lr`` (a reversed range) is refused."""
    if args.min_lr is not None and args.min_lr > args.lr:
        raise InputError(f"--min-lr {args.min_lr:g} is above --lr {args.lr:g}: the learning rate decays from --lr "
                         "down to --min-lr (did you swap them?)")
    return config_from_args(
        TrainConfig, args,
        min_lr=args.lr / 10 if args.min_lr is None else args.min_lr,
        warmup_steps=max(1, args.max_steps // 10) if args.warmup_steps is None else args.warmup_steps,
        log_interval=min(10, args.eval_interval), progress=not args.no_progress)
