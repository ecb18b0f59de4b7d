"""``qkdyn mqar``: train on multi-query associative recall and report accuracy per setting."""
from __future__ import annotations

import argparse

from qkdyn.empirical.coupled.cli_common import add_model_arguments, add_train_arguments, attention_config, train_config

HELP = "train on multi-query associative recall (easy/medium/hard) and report accuracy"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--task", default="easy", choices=("easy", "medium", "hard"), help="MQAR preset")
    parser.add_argument("--n-test", type=int, default=256, help="test sequences per (length, kv pairs) setting")
    add_model_arguments(parser)
    add_train_arguments(parser, max_steps=1000, lr=1e-3)


def run(args: argparse.Namespace) -> int:
    from qkdyn.errors import InputError
    from qkdyn.empirical.coupled.experiment import run_mqar

    if args.n_test < 1:
        raise InputError("--n-test must be >= 1")
    summary = run_mqar(args.task, args.preset, attention_config(args), train_config(args), args.out, args.n_test)
    for key, value in summary.get("final", {}).items():
        print(f"{key}: {value:.4f}")
    return 0
