"""``qkdyn plan STUDY``: the study's runs at a budget, one JSON line each with a self-contained
command (for a Slurm array, a shell loop or any scheduler); then ``qkdyn report`` judges them."""
from __future__ import annotations

import argparse

from qkdyn.commands.studyflags import add_budget_argument, add_study_argument

HELP = "list a study's runs as JSON lines, each with one self-contained `qkdyn run` command"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_study_argument(parser)
    add_budget_argument(parser)
    parser.add_argument("--runs", default="runs/studies", help="where each command writes its run record")
    parser.add_argument("--all", action="store_true", help="list finished runs too (default: only missing ones)")


def run(args: argparse.Namespace) -> int:
    import json
    import shlex

    from qkdyn.runs import check_run_dir
    from qkdyn.studies import find, get

    study = get(args.study)
    check_run_dir(args.runs, "--runs")
    specs = study.plan(args.budget)
    done = {} if args.all else find(study, specs, args.runs)
    for spec in specs:
        if spec in done:
            continue
        command = ["qkdyn", "run", spec.study, "--spec", spec.to_json(), "--runs", str(args.runs)]
        print(json.dumps({"study": spec.study, "name": spec.name, "cpus": spec.cpus, "gpus": spec.gpus,
                          "command": shlex.join(command)}))
    return 0
