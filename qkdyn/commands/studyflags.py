"""Flags shared by the study commands (``verify``, ``plan``, ``run``, ``report``, ``compare-circuits``):
one spelling each (``--budget``, ``--runs``, ``--executor``, ``--workers``, ``--ray-address``)."""
from __future__ import annotations

import argparse

from qkdyn.settingflags import positive_int
from qkdyn.studies import BUDGETS, STUDIES


def add_study_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("study", choices=sorted(STUDIES), metavar="STUDY",
                        help=f"one of {', '.join(sorted(STUDIES))}")


def add_budget_argument(parser: argparse.ArgumentParser, default: str = "cpu") -> None:
    parser.add_argument("--budget", choices=BUDGETS, default=default,
                        help="the study's budget: quick (minutes, checks the pipeline), cpu, gpu, paper")


def add_executor_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("execution")
    group.add_argument("--executor", choices=("local", "ray"), default="local",
                       help="local: a process pool on this machine; ray: tasks on a Ray cluster (pip install "
                            "'qkdyn[ray]')")
    group.add_argument("--workers", type=positive_int, default=2,
                       help="local executor: parallel runs (1 torch thread each; 1 runs in this process)")
    group.add_argument("--ray-address", default=None,
                       help="ray executor: address of a running cluster (default: start a local one)")
