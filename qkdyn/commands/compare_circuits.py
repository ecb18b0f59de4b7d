"""``qkdyn compare-circuits``: same-lr vs faster-QK training over seeds, with a table, plots and a
verdict for "sharper attention, same accuracy" (Paper A) at the scale run: the circuits study
(:class:`qkdyn.empirical.circuits.study.CircuitsStudy`) through the one driver (:func:`qkdyn.verify.drive`)."""
from __future__ import annotations

import argparse

from qkdyn.commands.circuits_flags import COMPARE_OWNED, add_config_arguments
from qkdyn.commands.studyflags import add_budget_argument, add_executor_arguments
from qkdyn.configflags import int_list, number_list, positive
from qkdyn.configflags import parser as parser_of
from qkdyn.settingflags import non_negative_float

HELP = "compare same-lr and faster-QK training over seeds: table, plots and verdict in figures/circuits/"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_config_arguments(parser, skip=COMPARE_OWNED)
    add_budget_argument(parser)
    parser.add_argument("--mults", type=parser_of(number_list(0)), default=None,
                        help="comma-separated QK multipliers; 1 (same lr) is always included (default: the budget's, 1,30)")
    parser.add_argument("--seeds", type=parser_of(int_list(0)), default=None,
                        help="comma-separated seeds (default: the budget's, 0,1,2; quick: 0,1)")
    parser.add_argument("--runs", default="runs", help="run records go to RUNS/circuits/ (resumable)")
    parser.add_argument("--out", default="figures/circuits", help="report, figures and per-task summaries")
    parser.add_argument("--no-controls", action="store_true",
                        help="leave out the control arms (all parameters x R; vader: QK without the token embedding)")
    parser.add_argument("--max-epochs", type=parser_of(positive()), default=None,
                        help="cap on the epochs of training to the target loss (default: the task's, 4 for brown-qa, else 12)")
    parser.add_argument("--acc-tolerance", type=non_negative_float, default=0.01,
                        help="largest accuracy drop that still counts as 'no accuracy loss' (non-inferiority margin)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")
    add_executor_arguments(parser)


def run(args: argparse.Namespace) -> int:
    import dataclasses
    import sys

    from qkdyn.configflags import check_applicable, values_from_args
    from qkdyn.empirical.circuits.presets import RunConfig
    from qkdyn.empirical.circuits.study import CircuitsStudy, write_report
    from qkdyn.errors import InputError
    from qkdyn.runs import check_run_dir
    from qkdyn.studies import find
    from qkdyn.verify import drive

    for flag, values in (("--mults", args.mults), ("--seeds", args.seeds)):
        if values is not None and not values:
            raise InputError(f"{flag} must name at least one value")
    study = CircuitsStudy(task=args.task, preset=args.preset, overrides=values_from_args(RunConfig, args),
                          mults=args.mults or None, seeds=args.seeds or None,
                          acc_tolerance=args.acc_tolerance, threads=args.threads,
                          controls=False if args.no_controls else None,
                          max_epochs=args.max_epochs)
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
