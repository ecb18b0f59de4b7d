"""``qkdyn verify``: a thin wrapper over :func:`qkdyn.verify.verify`."""
from __future__ import annotations

import argparse

HELP = "check claims A1-A6 with verdicts, figures and figures/report.md + report.json"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--quick", action="store_true", help="shorter horizons and coarser sweeps (< 2 min)")
    parser.add_argument("--figures", default="figures", help="output directory (default figures/)")
    parser.add_argument("--skip-empirical", action="store_true", help="theory claims only (no torch runs)")


def run(args: argparse.Namespace) -> int:
    from qkdyn.runs import check_run_dir
    from qkdyn.verify import verify

    check_run_dir(args.figures, "--figures")  # before any figure is written
    claims = verify(quick=args.quick, figures=args.figures, empirical=not args.skip_empirical)
    for claim in claims:
        print(f"{claim.id:14s} {claim.verdict:12s} {claim.statement}")
    return 0
