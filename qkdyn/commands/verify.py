"""``qkdyn verify``: every claim of the verify studies, one report (:func:`qkdyn.verify.verify`), ending with the
terminal summary ``qkdyn report`` prints (:func:`qkdyn.report.terminal_summary`: one line per claim)."""
from __future__ import annotations

import argparse

from qkdyn.commands.studyflags import add_budget_argument, add_executor_arguments
from qkdyn.studies import STUDIES, VERIFY

HELP = "check claims A1-A6 with verdicts, figures and figures/report.md + report.json"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_budget_argument(parser)
    parser.add_argument("--quick", action="store_true", help="the same as --budget quick (a few minutes)")
    parser.add_argument("--figures", default="figures", help="output directory of the report and figures")
    parser.add_argument("--runs", default=None,
                        help="keep the run records here and resume from them (default: a temporary directory)")
    parser.add_argument("--study", action="append", choices=sorted(STUDIES), metavar="STUDY",
                        help=f"run only this study (repeatable; default: {', '.join(VERIFY)})")
    parser.add_argument("--skip-empirical", action="store_true", help="theory claims only (no torch runs)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")
    add_executor_arguments(parser)


def run(args: argparse.Namespace) -> int:
    from qkdyn.executors import check_ray
    from qkdyn.report import terminal_summary
    from qkdyn.runs import check_run_dir
    from qkdyn.verify import verify

    check_run_dir(args.figures, "--figures")  # before any figure is written
    if args.runs is not None:
        check_run_dir(args.runs, "--runs")
    if args.executor == "ray":
        check_ray(args.ray_address)  # an unreachable cluster: one line before any folder or progress bar
    claims = verify(figures=args.figures, empirical=not args.skip_empirical,
                    budget="quick" if args.quick else args.budget, runs_dir=args.runs, executor=args.executor,
                    workers=args.workers, ray_address=args.ray_address, progress=not args.no_progress,
                    studies=args.study)
    print(terminal_summary(claims))
    return 0
