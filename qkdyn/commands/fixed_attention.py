"""``qkdyn fixed-attention``: Paper A's fixed-attention experiment beside the frozen-QK flow.

Writes a CSV (one row per form, alpha, seed and checkpoint: ``factorized,alpha,seed,t,loss,minus_dL_dalpha,
theory_loss,theory_minus_dL_dalpha``; factorized = 1 for the factorized OV circuit, 0 for the collapsed one), the figure ``fixed_attention.png`` into ``--figures``, and prints
claim FA's verdict with its parts (:mod:`qkdyn.empirical.synthetic.fixed_attention`).
"""
from __future__ import annotations

import argparse
import dataclasses
import functools
import sys

from qkdyn.commands.studyflags import add_budget_argument
from qkdyn.configflags import add_config_flags, budget_defaults
from qkdyn.empirical.synthetic.budgets import FIXED_ATTENTION, FORMS, FixedAttentionConfig

HELP = "attention held at alpha on the distinct tokens, OV trained by SGD, beside the frozen-QK flow"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_budget_argument(parser)
    add_config_flags(parser, FixedAttentionConfig, unset=functools.partial(budget_defaults, FIXED_ATTENTION))
    parser.add_argument("--forms", choices=("collapsed", "factorized", "both"), default="both",
                        help="OV circuit: collapsed (with bias) or factorized (default both)")
    parser.add_argument("--figures", default="figures", help="folder for fixed_attention.png (default figures)")
    parser.add_argument("--out", required=True, help="output CSV path")


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from qkdyn.atomic import check_writable
    from qkdyn.configflags import values_from_args
    from qkdyn.csvio import write_columns
    from qkdyn.empirical.synthetic import fixed_attention as fa
    from qkdyn.empirical.synthetic import plots
    from qkdyn.empirical.synthetic.authors import SEQ_LEN, VOCAB
    from qkdyn.errors import InputError
    from qkdyn.memory import check_memory
    from qkdyn.runs import check_run_dir

    cfg = dataclasses.replace(FIXED_ATTENTION[args.budget], **values_from_args(FixedAttentionConfig, args))
    # the evaluation batch: float32 counts and sampling probabilities (V each), a bool mask, int64
    # tokens, float32 ones (~ the context each), and as much again for the forward pass
    check_memory(2 * cfg.eval_size * (9 * VOCAB + 12 * SEQ_LEN[fa.SEQ]), f"{cfg.eval_size} evaluation samples",
                 "eval_size")
    check_writable(args.out)
    check_run_dir(args.figures, "--figures")
    figures = Path(args.figures)
    try:
        figures.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(f"cannot create {figures}: {exc.strerror}", "figures") from None
    forms = FORMS if args.forms == "both" else (args.forms,)
    runs = fa.grid(forms, cfg.alphas, cfg.seeds, cfg.steps, cfg.eval_size, max(cfg.checkpoints, 2))
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
