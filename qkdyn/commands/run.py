"""``qkdyn run STUDY --spec JSON``: one run of a study (what each line of ``qkdyn plan`` runs).
Idempotent: a finished run is not recomputed."""
from __future__ import annotations

import argparse
import time

from qkdyn.commands.studyflags import add_study_argument

HELP = "run one planned run of a study (a line of `qkdyn plan`); finished runs are kept"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_study_argument(parser)
    parser.add_argument("--spec", required=True, help="the run spec (JSON, as `qkdyn plan` writes it)")
    parser.add_argument("--runs", default="runs/studies", help="directory of the study's run records")


def run(args: argparse.Namespace) -> int:
    from qkdyn.errors import InputError
    from qkdyn.jsonio import loads
    from qkdyn.runs import check_run_dir
    from qkdyn.studies import RunSpec, get

    spec = RunSpec.from_dict(loads(args.spec, "--spec", hint="give a line of `qkdyn plan`"))
    if spec.study != args.study:
        raise InputError(f"--spec belongs to study {spec.study!r}, not {args.study!r}")
    study = get(args.study)
    study.check(spec)
    check_run_dir(args.runs, "--runs")
    done_before, start = study.load(spec, args.runs) is not None, time.perf_counter()
    record = study.run(spec, args.runs)
    how = "already recorded, kept" if done_before else f"computed in {time.perf_counter() - start:.1f} s"
    print(f"{spec.study} run {spec.name}: {how}: {study.record_path(record.spec, args.runs)}")
    print(f"its claims are judged with the study's other runs: qkdyn report {spec.study} --budget BUDGET "
          f"--runs {args.runs}")
    return 0
