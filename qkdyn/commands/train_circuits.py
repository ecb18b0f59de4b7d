"""``qkdyn train-circuits``: one training run with per-circuit learning rates on a real task."""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from qkdyn.commands.circuits_flags import add_config_arguments, config_from_args

HELP = "train a transformer with a QK learning-rate multiplier on a real task (resumable)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_config_arguments(parser)
    parser.add_argument("--out", help="run directory (default runs/circuits/TASK/qkR_sSEED)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


def run(args: argparse.Namespace) -> int:
    from qkdyn.empirical.circuits.train import train
    from qkdyn.runs import RESULT, pin_threads

    cfg = config_from_args(args)
    out = args.out if args.out is not None else f"runs/circuits/{cfg.task}/qk{cfg.qk_lr_mult:g}_s{cfg.seed}"
    pin_threads(args.threads)
    record = train(cfg, out, progress=not args.no_progress)
    test = record.final["test"]
    keys = ("accuracy", "macro_f1", "exact_match", "f1", "attention_mass", "ac_area", "acmc_area",
            "comprehensiveness", "sufficiency")
    print(json.dumps({k: round(test[k], 4) for k in keys if k in test}))
    print(f"wrote {Path(out) / RESULT}")
    return 0
