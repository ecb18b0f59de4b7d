"""``qkdyn sgd``: train the full matrix model of the canonical setting, write docs/setting.md rows as CSV.

Columns: t = step * H, qk, ov, attn, loss, the reduced state read from the matrices (orbit means),
acc (fixed sampled test batch), sym_dist (distance from the symmetric subspace), step. Rows at
``--points`` log-spaced steps plus the step nearest each ``--at`` time.
"""
from __future__ import annotations

import argparse
import sys

from qkdyn.settingflags import add_setting_flags, positive_float, positive_int, seed, setting_from_args, warn_if_saddle

HELP = ("train the full matrix model (GD, SGD or Adam) from the canonical init (the guide 'The setting', section 1) "
        "and write a CSV")
PARAMS = ("CACO", "FACO", "CAFO", "FAFO")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_setting_flags(parser, params=PARAMS)
    parser.add_argument("--step", type=positive_float, required=True, help="step size H (time per step)")
    parser.add_argument("--steps", type=positive_int, required=True, help="number of optimiser steps S")
    parser.add_argument("--batch", default="population",
                        help="'population' (the mean-count batch: the exact population gradient on the symmetric "
                             "subspace, where GD stays; Adam leaves it) or a batch size B (default population)")
    parser.add_argument("--optimizer", choices=("gd", "sgd", "adam"), default="gd",
                        help="gd (population), sgd (sampled batches) or adam; lr = H * eta_c per circuit")
    parser.add_argument("--seed", type=seed, default=None, help="seed of the sampled batches (sgd, adam; default 0)")
    parser.add_argument("--points", type=positive_int, default=200, help="log-spaced output rows (default 200)")
    parser.add_argument("--at", help="comma-separated times; the step nearest each appears as a row (default: none)")
    parser.add_argument("--out", required=True, help="output CSV path")


def parse_batch(text: str) -> int | None:
    """'population' -> None, a positive integer -> itself; anything else is a InputError."""
    from qkdyn.errors import InputError

    if text == "population":
        return None
    try:
        value = int(text)
    except ValueError:
        raise InputError(f"--batch must be 'population' or a positive integer, got {text!r}") from None
    if value < 1:
        raise InputError(f"--batch must be 'population' or a positive integer, got {text!r}")
    return value


def check_sizes(setting, batch: int | None, points: int) -> None:
    """Refuse sizes that cannot fit: float64 V x V matrices (collapsed, or two V x V factors per
    circuit), their gradients and Adam's two moments (<= 16 V^2 numbers), a batch of count vectors
    (B x V) and ~1 KiB per output row."""
    from qkdyn.memory import check_memory

    vocab = setting.classes * setting.distinct + setting.commons + 1 + setting.classes
    check_memory(8 * (16 * vocab ** 2 + 4 * (batch or 1) * vocab), f"a vocabulary of V = {vocab} tokens, batch {batch}")
    check_memory(1024 * points, "--points output rows", "points")


def check_finite(rec) -> None:
    """InputError naming the first recorded step with a value that is not finite (a diverged run, or a time
    t = step * H beyond the largest double)."""
    import numpy as np

    from qkdyn.errors import InputError

    bad = ~np.isfinite(np.column_stack(list(rec.columns.values()))).all(axis=1)
    if bad.any():
        raise InputError(f"training diverged: values are not finite at step {int(rec.step[bad.argmax()])} "
                         "(a smaller --step keeps it finite); nothing written")


def run(args: argparse.Namespace) -> int:
    from qkdyn.atomic import check_writable
    from qkdyn.csvio import parse_times
    from qkdyn.empirical.synthetic.experiment import gd, sgd
    from qkdyn.errors import InputError

    setting = setting_from_args(args)
    batch = parse_batch(args.batch)
    check_sizes(setting, batch, args.points)
    if args.optimizer == "gd" and batch is not None:
        raise InputError("--optimizer gd uses the population gradient; use --optimizer sgd with --batch B")
    if args.optimizer == "gd" and args.seed is not None:
        raise InputError("--seed applies only to the sampled optimizers (sgd, adam); gd samples nothing")
    check_writable(args.out)
    warn_if_saddle("sgd", args.param, setting)
    common = dict(points=args.points, at=parse_times(args.at), progress=True)
    if args.optimizer == "gd":
        rec = gd(setting, args.param, args.step, args.steps, **common)
    else:
        rec = sgd(setting, args.param, args.step, args.steps, batch=batch, seed=args.seed or 0,
                  optimizer=args.optimizer, **common)
    check_finite(rec)
    rec.to_csv(args.out)
    sys.stderr.write(f"{args.param} {args.optimizer}: {len(rec.t)} rows to {args.out}; final t = {rec.t[-1]:.6g}, "
                     f"loss {rec.loss[-1]:.6g}, attn {rec.attn[-1]:.4g}, sym_dist {rec.sym_dist[-1]:.2g}\n")
    return 0
