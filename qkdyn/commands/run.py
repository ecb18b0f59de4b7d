"""``qkdyn run STUDY --spec JSON``: one run of a study (what each line of ``qkdyn plan`` runs).
Idempotent: a finished run is not recomputed.

While the run computes, a progress bar on stderr names it and shows the time elapsed, refreshed at least
every 10 s (the heartbeat of ``qkdyn verify``'s runs bar, :mod:`qkdyn.verify`); ``--no-progress`` hides it."""
from __future__ import annotations

import argparse
import sys
import time

from qkdyn.commands.studyflags import add_study_argument

HELP = "run one planned run of a study (a line of `qkdyn plan`); finished runs are kept"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_study_argument(parser)
    parser.add_argument("--spec", required=True, help="the run spec (JSON, as `qkdyn plan` writes it)")
    parser.add_argument("--runs", default="runs/studies", help="directory of the study's run records")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


def run(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from qkdyn.errors import InputError
    from qkdyn.jsonio import loads
    from qkdyn.runs import check_run_dir
    from qkdyn.studies import RunSpec, get
    from qkdyn.verify import heartbeat

    spec = RunSpec.from_dict(loads(args.spec, "--spec", hint="give a line of `qkdyn plan`"))
    if spec.study != args.study:
        raise InputError(f"--spec belongs to study {spec.study!r}, not {args.study!r}")
    study = get(args.study)
    study.check(spec)
    check_run_dir(args.runs, "--runs")
    done_before, start = study.load(spec, args.runs) is not None, time.perf_counter()
    # a bar for a run that computes (one read back is reported at once)
    bar = tqdm(total=1, desc=f"{spec.study} run {spec.name}", unit="run", file=sys.stderr,
               disable=args.no_progress or done_before, dynamic_ncols=True)
    with bar, heartbeat(bar):
        record = study.run(spec, args.runs)
        bar.update()
    how = "already recorded, kept" if done_before else f"computed in {time.perf_counter() - start:.1f} s"
    print(f"{spec.study} run {spec.name}: {how}: {study.record_path(record.spec, args.runs)}")
    print(f"its claims are judged with the study's other runs: qkdyn report {spec.study} --budget BUDGET "
          f"--runs {args.runs}")
    return 0
