"""``qkdyn compare-circuits``: same-lr vs faster-QK training over seeds, with a table, plots and a
verdict for "sharper attention, same accuracy" (Paper A) at the scale run: the circuits study
(:class:`qkdyn.empirical.circuits.study.CircuitsStudy`) through the one driver (:func:`qkdyn.verify.drive`)."""
from __future__ import annotations

import argparse

from qkdyn.commands.circuits_flags import COMPARE_OWNED, add_config_arguments, budget_text
from qkdyn.commands.studyflags import add_budget_argument, add_executor_arguments
from qkdyn.configflags import add_config_flags
from qkdyn.empirical.circuits.study import CircuitsConfig
from qkdyn.settingflags import non_negative_float

HELP = "compare same-lr and faster-QK training over seeds: table, plots and verdict in figures/circuits/"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_config_arguments(parser, skip=COMPARE_OWNED, preset=False)
    add_budget_argument(parser)
    add_config_flags(parser, CircuitsConfig, unset=budget_text)
    parser.add_argument("--runs", default="runs", help="run records go to RUNS/circuits/ (resumable)")
    parser.add_argument("--out", default="figures/circuits", help="report, figures and per-task summaries")
    parser.add_argument("--acc-tolerance", type=non_negative_float, default=0.01,
                        help="largest accuracy drop that still counts as 'no accuracy loss' (non-inferiority margin)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")
    add_executor_arguments(parser)


def run(args: argparse.Namespace) -> int:
    import dataclasses
    import sys

    from qkdyn.configflags import check_applicable, values_from_args
    from qkdyn.empirical.circuits.presets import RunConfig
    from qkdyn.empirical.circuits.study import CHOICES, CircuitsStudy, write_report
    from qkdyn.runs import check_run_dir
    from qkdyn.studies import find
    from qkdyn.verify import drive

    choices = values_from_args(CircuitsConfig, args)
    fields = {k: v for k, v in values_from_args(RunConfig, args).items() if k not in CHOICES}
    study = CircuitsStudy(task=args.task, overrides=fields, acc_tolerance=args.acc_tolerance, threads=args.threads,
                          **choices)
    study = dataclasses.replace(study, report_notes=tuple(study.reductions(args.budget)))
    out = check_run_dir(args.out, "--out")
    check_run_dir(args.runs, "--runs")
    for cfg in study.configs(args.budget).values():  # every config checked before anything is written
        check_applicable(cfg, args)
    specs = study.plan(args.budget)
    drive([study], args.budget, out, args.runs, executor=args.executor, workers=args.workers,
          ray_address=args.ray_address, progress=not args.no_progress, title=study.title, intro="")
    cpu, wall = study.seconds(find(study, specs, args.runs).values())
    sys.stderr.write(f"{len(specs)} runs: {cpu / 60:.1f} CPU minutes, {wall / 60:.1f} wall-clock minutes "
                     "(training and final evaluation, summed)\n")
    for claim in write_report(out)[args.task]:
        print(f"{claim.verdict:>12s}  {claim.id}: {claim.summary}")
    return 0
