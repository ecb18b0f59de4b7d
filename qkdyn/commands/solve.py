"""``qkdyn solve``: the reduced ODE solution as CSV (docs/setting.md sections 2 and 4)."""
from __future__ import annotations

import argparse
import sys

from qkdyn.configflags import fraction
from qkdyn.configflags import parser as parser_of
from qkdyn.settingflags import add_setting_flags, finite_float, horizon, positive_int, setting_from_args, warn_if_saddle

HELP = ("solve the reduced gradient-flow ODE (of --param P, or of a circuit spec --spec FILE) to --t-max or "
        "--until-loss and write a CSV")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_setting_flags(parser, spec=True)
    stop = parser.add_argument_group("horizon (one or both)")
    stop.add_argument("--t-max", type=horizon, help="final gradient-flow time (at least 1e-100; default: none, then --until-loss is needed)")
    stop.add_argument("--until-loss", type=finite_float, help="stop when the loss reaches this value (default: none, then --t-max is needed)")
    parser.add_argument("--points", type=positive_int, default=200, help="log-spaced output rows (default 200)")
    parser.add_argument("--at", help="comma-separated times that must appear as exact rows (default: none)")
    parser.add_argument("--method", default="DOP853", choices=("DOP853", "LSODA", "Radau", "BDF"),
                        help="integrator (default DOP853, compiled; LSODA, Radau and BDF are scipy's, with the "
                             "analytic Jacobian)")
    parser.add_argument("--rtol", type=parser_of(fraction(low_open=True, high_open=True)), default=1e-11,
                        help="relative tolerance in (0, 1) (default 1e-11)")
    parser.add_argument("--out", required=True, help="output CSV path")


def run(args: argparse.Namespace) -> int:
    from qkdyn.atomic import check_writable
    from qkdyn.csvio import parse_times, write_columns
    from qkdyn.memory import check_memory
    from qkdyn.simulate.solve import solve

    setting = setting_from_args(args)
    # ~16 float64 columns per row, a few copies (solver output, columns, CSV rows)
    check_memory(8 * 16 * 4 * args.points, "--points output rows", "points")
    check_writable(args.out)
    if args.spec is not None:
        from qkdyn.theory.spec import load

        spec = load(args.spec)
        trajectory = solve(setting, spec, t_max=args.t_max, until_loss=args.until_loss, points=args.points,
                           at=parse_times(args.at), method=args.method, rtol=args.rtol)
        name = spec.name
    else:
        warn_if_saddle("solve", args.param, setting)
        trajectory = solve(setting, args.param, t_max=args.t_max, until_loss=args.until_loss,
                           points=args.points, at=parse_times(args.at), method=args.method, rtol=args.rtol)
        name = args.param
    write_columns(args.out, trajectory.columns())
    stats = trajectory.stats
    reached = f", loss target reached at t = {trajectory.event_t:.6g}" if trajectory.event_t is not None else ""
    scipys = ", SciPy's: the compiled integrator is not in numba's cache yet" if stats.get("compiled") is False else ""
    sys.stderr.write(f"{name}: {len(trajectory.t)} rows to {args.out} ({stats['steps']} {stats['method']} "
                     f"steps{scipys}, {stats['seconds']:.3f} s{reached})\n")
    return 0
