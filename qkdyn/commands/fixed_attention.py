"""``qkdyn fixed-attention``: Paper A's fixed-attention experiment beside the frozen-QK flow.

Writes a CSV (one row per form, alpha, seed and checkpoint: ``factorized,alpha,seed,t,loss,minus_dL_dalpha,
theory_loss,theory_minus_dL_dalpha``; factorized = 1 for the factorized OV circuit, 0 for the collapsed one), the figure ``fixed_attention.png`` into ``--figures``, and prints
claim FA's verdict with its parts (:mod:`qkdyn.empirical.synthetic.fixed_attention`).
"""
from __future__ import annotations

import argparse
import sys

from qkdyn.settingflags import positive_int

HELP = "attention held at alpha on the distinct tokens, OV trained by SGD, beside the frozen-QK flow"


def _alphas(text: str) -> tuple[float, ...]:
    try:
        values = tuple(float(x) for x in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a comma-separated list of numbers: {text!r}") from None
    if not values or not all(0 < a <= 1 for a in values) or list(values) != sorted(set(values)):
        raise argparse.ArgumentTypeError(f"alphas must be increasing values in (0, 1], got {text!r}")
    return values


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--alphas", type=_alphas, default=(0.2, 0.4, 0.6, 0.8, 1.0),
                        help="comma-separated attention masses on distinct tokens (default 0.2,0.4,0.6,0.8,1)")
    parser.add_argument("--forms", choices=("collapsed", "factorized", "both"), default="both",
                        help="OV circuit: collapsed (with bias) or factorized (default both)")
    parser.add_argument("--seeds", type=positive_int, default=3, help="seeds 0..S-1 (default 3; >= 2 for a verdict)")
    parser.add_argument("--steps", type=positive_int, default=1200,
                        help="SGD steps, lr scaled so lr x steps equals the notebooks' 1e-2 x 125000 (default 1200)")
    parser.add_argument("--eval-size", type=positive_int, default=4096, help="evaluation samples (default 4096)")
    parser.add_argument("--checkpoints", type=positive_int, default=13, help="evaluation points (default 13)")
    parser.add_argument("--figures", default="figures", help="folder for fixed_attention.png (default figures)")
    parser.add_argument("--out", required=True, help="output CSV path")


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from qkdyn.atomic import check_writable
    from qkdyn.csvio import write_columns
    from qkdyn.empirical.synthetic import budgets, plots
    from qkdyn.empirical.synthetic import fixed_attention as fa
    from qkdyn.empirical.synthetic.authors import SEQ_LEN, VOCAB
    from qkdyn.errors import InputError
    from qkdyn.memory import check_memory
    from qkdyn.runs import check_run_dir

    # the evaluation batch: float32 counts and sampling probabilities (V each), a bool mask, int64
    # tokens, float32 ones (~ the context each), and as much again for the forward pass
    check_memory(2 * args.eval_size * (9 * VOCAB + 12 * SEQ_LEN[fa.SEQ]), f"{args.eval_size} evaluation samples",
                 "eval_size")
    check_writable(args.out)
    check_run_dir(args.figures, "--figures")
    figures = Path(args.figures)
    try:
        figures.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(f"cannot create {figures}: {exc.strerror}", "figures") from None
    forms = budgets.FORMS if args.forms == "both" else (args.forms,)
    seeds = list(range(args.seeds))
    runs = fa.grid(forms, args.alphas, seeds, args.steps, args.eval_size, max(args.checkpoints, 2))
    curves = fa.theory_curves(runs)
    plots.fixed_attention(runs, curves, figures / "fixed_attention.png")
    cols = {k: [] for k in ("factorized", "alpha", "seed", "t", "loss", "minus_dL_dalpha", "theory_loss",
                            "theory_minus_dL_dalpha")}
    for (form, alpha, seed), r in runs.items():
        th_loss, th_fall = curves[(form, alpha)]
        for i, t in enumerate(r.t):
            for key, value in zip(cols, (float(form == "factorized"), alpha, seed, t, r.loss[i], r.fall[i], th_loss[i], th_fall[i]), strict=True):
                cols[key].append(value)
    write_columns(args.out, cols)
    verdict = fa.claim(runs, curves, fa.summary_table(runs, curves), "fixed_attention.png")
    sys.stdout.write(f"FA {verdict.verdict}\n" + "".join(f"  {k}: {v}\n" for k, v in verdict.parts.items()))
    return 0
