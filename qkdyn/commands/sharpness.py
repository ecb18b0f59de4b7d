"""``qkdyn sharpness``: attention, qk, ov and time at matched loss, in closed form (no ODE)."""
from __future__ import annotations

import argparse
import math
import sys

from qkdyn.errors import InputError
from qkdyn.settingflags import add_setting_flags, setting_from_args

HELP = ("attention, qk, ov and time where the loss first reaches each level, for each rho, from the first "
        "integral (no ODE; a circuit spec --spec FILE: the same for an exact form's model, else from ODE events); "
        "CSV columns param,rho,loss,qk,ov,attn,t")
COLUMNS = ("param", "rho", "loss", "qk", "ov", "attn", "t")


def parse_list(text: str, field: str) -> list[float]:
    """``a,b,c`` (comma-separated numbers) or ``start:stop:num`` (num log-spaced values from start up to
    stop, both ends included; start must be below stop, or equal to it for num = 1)."""
    from argparse import ArgumentTypeError

    from qkdyn.configflags import parse_float
    from qkdyn.memory import check_memory

    parts = text.split(":")
    if len(parts) not in (1, 3):
        raise InputError(f"expects a,b,c or start:stop:num, got {text!r}", field)
    try:
        if len(parts) == 3:
            start, stop, num = parse_float(parts[0]), parse_float(parts[1]), int(parts[2])
        else:
            values = [parse_float(item) for item in text.split(",")]
    except ValueError:
        raise InputError(f"expects comma-separated numbers or start:stop:num, got {text!r}", field) from None
    except ArgumentTypeError as exc:
        raise InputError(str(exc), field) from None
    if len(parts) == 3:
        if not (math.isfinite(start) and math.isfinite(stop) and start > 0 and stop > 0 and num >= 1):
            raise InputError(f"start:stop:num needs positive finite ends and num >= 1, got {text!r}", field)
        if start > stop:
            raise InputError(f"start:stop:num needs start below stop, got {text!r} (did you mean "
                             f"'{parts[1]}:{parts[0]}:{parts[2]}'?)", field)
        if start == stop and num > 1:
            raise InputError(f"start:stop:num needs start below stop, got {text!r} (one value: {parts[0]!r})", field)
        if num == 1:
            return [start]
        check_memory(64 * num, f"{num} values", field)  # a Python float and its list slot, with room
        return [math.exp(math.log(start) + (math.log(stop) - math.log(start)) * i / (num - 1)) for i in range(num)]
    if not all(math.isfinite(v) for v in values):
        raise InputError(f"values must be finite, got {text!r}", field)
    return values


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_setting_flags(parser, spec=True)
    parser.add_argument("--rho", required=True,
                        help="rho = eta_QK/eta_OV values: a,b,c or start:stop:num (log-spaced, start < stop), each 0 "
                        "or from 1e-300 to 1e300; eta_QK = rho * eta_OV, so --eta-qk is not used")
    parser.add_argument("--loss", required=True,
                        help="loss levels below the initial loss: a,b,c or start:stop:num (log-spaced, start < stop)")
    parser.add_argument("--no-time", action="store_true", help="skip the time quadrature (t column empty)")
    parser.add_argument("--out", required=True, help="output CSV path")


def run(args: argparse.Namespace) -> int:
    import csv

    import numpy as np

    from qkdyn.atomic import atomic_path, check_writable
    from qkdyn.configflags import GIVEN
    from qkdyn.memory import check_memory
    from qkdyn.simulate.sharpness import sharpness

    if "eta_qk" in getattr(args, GIVEN, ()):
        raise InputError("is not used by sharpness (eta_QK = rho * eta_OV); give --rho instead", "eta_qk")
    setting = setting_from_args(args)
    rhos, losses = parse_list(args.rho, "rho"), parse_list(args.loss, "loss")
    # measured: ~10 KiB per grid point (path samples, quadrature panels and nodes, the CSV row)
    check_memory(16384 * len(rhos) * len(losses), f"a {len(rhos)} x {len(losses)} grid of rho and loss")
    check_writable(args.out)
    if args.spec is not None:  # any circuit spec: the closed form of an exact form's model, else ODE events
        from qkdyn.theory.spec import load

        spec = load(args.spec)
        spec.check_setting(setting)
        name, param = spec.name, spec
    else:
        name = param = args.param
    result = sharpness(setting, param, rhos, losses, time=not args.no_time, grid=True)  # every rho x loss
    axes = result.axes
    rho_grid, loss_grid = np.meshgrid(axes["rho"], axes["loss"], indexing="ij")
    columns = {"rho": rho_grid, "loss": loss_grid, "qk": result.qk, "ov": result.ov, "attn": result.attn,
               "t": result.t if result.t is not None and not args.no_time else None}
    with atomic_path(args.out) as tmp:
        with open(tmp, "w", newline="") as fh:
            writer = csv.writer(fh)
            writer.writerow(COLUMNS)
            for i in range(rho_grid.size):
                writer.writerow([name] + [repr(float(columns[c].flat[i])) if columns[c] is not None else ""
                                                for c in COLUMNS[1:]])
    unreached = int(np.isnan(columns["attn"]).sum())
    note = f" ({unreached} points not reached: their qk, ov, attn and t are nan)" if unreached else ""
    sys.stderr.write(f"{name}: {rho_grid.size} matched-loss points to {args.out}{note}\n")
    return 0
