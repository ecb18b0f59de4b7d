"""``qkdyn mqar``: train on multi-query associative recall and report accuracy per setting."""
from __future__ import annotations

import argparse

from qkdyn.commands.coupled_flags import add_model_arguments, add_train_arguments, attention_config, train_config
from qkdyn.empirical.coupled.configs import MQAR_TASKS
from qkdyn.settingflags import positive_int

HELP = "train on multi-query associative recall (easy/medium/hard) and report accuracy"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--task", default="easy", choices=MQAR_TASKS, help="MQAR preset")
    parser.add_argument("--n-test", type=positive_int, default=256,
                        help="test sequences per (length, kv pairs) setting")
    add_model_arguments(parser)
    add_train_arguments(parser, max_steps=1000, lr=1e-3)


def run(args: argparse.Namespace) -> int:
    from qkdyn.empirical.coupled.experiment import run_mqar
    from qkdyn.runs import pin_threads

    attention, train = attention_config(args), train_config(args)
    pin_threads(args.threads)
    record = run_mqar(args.task, args.preset, attention, train, args.out, args.n_test)
    for key, value in (record.final if record is not None else {}).items():
        print(f"{key}: {value:.4f}")
    return 0
