"""``qkdyn compare-coupled``: run (``--train``) and report the study of paper B's claims.

``--preset`` picks a study plan (:data:`qkdyn.empirical.coupled.study.STUDY_PLANS`); every flag given
explicitly overrides the plan's value. CPU study (``tiny`` models, BPE 8k):

    qkdyn compare-coupled --train --workers 2

GPU comparison at 60M (standard vs coupled Euler, 3 seeds, ~8 minutes on one H100/H200-class GPU,
bf16 autocast and torch.compile on CUDA):

    qkdyn compare-coupled --train --preset 60M --device cuda --workers 1 --runs runs/coupled/60M --out figures/coupled/60M

Scale trend (standard vs coupled Euler at the ``tiny``, ``1M`` and ``4M`` presets):

    qkdyn compare-coupled --train --trend --runs runs/coupled/trend --out figures/coupled/trend
"""
from __future__ import annotations

import argparse

#: the keys of study.LM_VARIANTS, repeated here so that `--help` needs no torch import (a test checks)
VARIANTS = ("standard", "coupled-euler", "coupled-leapfrog", "mlp-only", "mlp-only-shared", "diff")
HELP = "run and/or report the coupled-QK study: perplexity by variant, seeds, steps, corpora, MQAR"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--runs", default="runs/coupled/cpu", help="directory of the study's runs")
    parser.add_argument("--out", default="figures/coupled", help="where report.md, report.json and plots go")
    parser.add_argument("--train", action="store_true", help="first run the study's unfinished runs")
    parser.add_argument("--workers", type=int, default=2, help="parallel training processes (1 torch thread each)")
    parser.add_argument("--preset", default="tiny", choices=("tiny", "1M", "4M", "60M", "150M", "350M"),
                        help="study plan / model: tiny = the CPU study, 60M = the GPU comparison (default tiny)")
    parser.add_argument("--coherent", default="wiki", help="domain-coherent corpus (name or path)")
    parser.add_argument("--heterogeneous", default="nlp-corpus", help="heterogeneous corpus (name or path; '' for none)")
    parser.add_argument("--variants", default=",".join(VARIANTS), help="attention variants of the LM runs")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--lm-steps", type=int, default=200)
    parser.add_argument("--sweep-steps", default="4,7", help="coupling steps n tried besides n = 1")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--grad-accum", type=int, default=1)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--mqar-tasks", default="easy,medium", help="comma-separated MQAR presets ('' for none)")
    parser.add_argument("--mqar-steps", type=int, default=500)
    parser.add_argument("--mqar-batch-size", type=int, default=32)
    parser.add_argument("--evals-per-run", type=int, default=5, help="evaluations per run (plus one at initialisation)")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--tokenizer", default="bpe", choices=("bpe", "byte"), help="LM tokens (default bpe)")
    parser.add_argument("--vocab-size", type=int, default=8192, help="BPE vocabulary size")
    parser.add_argument("--block-size", type=int, default=None, help="LM context length (default: the preset's)")
    parser.add_argument("--eval-tokens", type=int, default=None, help="cap on validation tokens (default: all)")
    parser.add_argument("--efficiency-budgets", default="1.6,2.4",
                        help="standard-attention lengths, in multiples of the coupled run, for tokens-to-target")
    parser.add_argument("--no-match-compute", action="store_true", help="skip the compute-matched standard runs")
    parser.add_argument("--trend", action="store_true", help="the scale trend instead of the main study")
    parser.add_argument("--model", default=None, choices=("tiny", "1M", "4M", "60M", "150M", "350M"),
                        help="model preset of the runs (default: the plan's; e.g. tiny to try the 60M plan on a CPU)")
    parser.add_argument("--trend-presets", default="tiny,1M,4M", help="model presets of the scale trend")


def _given(args) -> set[str]:
    """The flags whose value differs from the parser's default (they override the study plan)."""
    defaults = argparse.ArgumentParser()
    add_arguments(defaults)
    return {k for k, v in vars(defaults.parse_args([])).items() if getattr(args, k, v) != v}


def _ints(flag: str, text: str) -> tuple[int, ...]:
    from qkdyn.errors import InputError

    try:
        values = tuple(int(n) for n in text.split(",") if n)
    except ValueError:
        raise InputError(f"{flag} must be comma-separated integers, got {text!r}")
    if any(n < 1 for n in values):
        raise InputError(f"{flag} must be >= 1")
    return values


def _study_config(args):
    import dataclasses

    from qkdyn.empirical.coupled.model import PRESETS as MODEL_PRESETS
    from qkdyn.empirical.coupled.mqar import PRESETS
    from qkdyn.empirical.coupled.study import study_plan
    from qkdyn.errors import InputError

    tasks = tuple(t for t in args.mqar_tasks.split(",") if t)
    sweep = _ints("--sweep-steps", args.sweep_steps)
    variants = tuple(v for v in args.variants.split(",") if v)
    if not variants or set(variants) - set(VARIANTS):
        raise InputError(f"--variants must be a comma-separated subset of {', '.join(VARIANTS)}")
    unknown = set(tasks) - set(PRESETS)
    if unknown:
        raise InputError(f"unknown MQAR task(s) {sorted(unknown)}; known: {', '.join(PRESETS)}")
    for flag in ("workers", "seeds", "lm_steps", "batch_size", "grad_accum", "mqar_steps", "mqar_batch_size",
                 "evals_per_run"):
        if getattr(args, flag) < 1:
            raise InputError(f"--{flag.replace('_', '-')} must be >= 1")
    for flag in ("block_size", "eval_tokens"):
        if getattr(args, flag) is not None and getattr(args, flag) < 2:
            raise InputError(f"--{flag.replace('_', '-')} must be >= 2")
    from qkdyn.empirical.data.text_bpe import MIN_VOCAB

    if args.tokenizer == "bpe" and args.vocab_size < MIN_VOCAB:
        raise InputError(f"--vocab-size must be >= {MIN_VOCAB} for byte-level BPE")
    try:
        budgets = tuple(float(b) for b in args.efficiency_budgets.split(",") if b)
    except ValueError:
        raise InputError(f"--efficiency-budgets must be comma-separated numbers, got {args.efficiency_budgets!r}")
    if any(not b > 1 for b in budgets):
        raise InputError("--efficiency-budgets must be > 1 (multiples of the coupled run's tokens)")
    trend_presets = tuple(p for p in args.trend_presets.split(",") if p)
    if not trend_presets or set(trend_presets) - set(MODEL_PRESETS):
        raise InputError(f"--trend-presets must be a comma-separated subset of {', '.join(MODEL_PRESETS)}")
    flags = {"coherent": args.coherent, "heterogeneous": args.heterogeneous, "seeds": args.seeds,
             "variants": variants, "lm_steps": args.lm_steps, "sweep_steps": sweep, "mqar_tasks": tasks,
             "mqar_steps": args.mqar_steps, "batch_size": args.batch_size, "grad_accum": args.grad_accum,
             "lm_lr": args.lr, "device": args.device, "tokenizer": args.tokenizer, "vocab_size": args.vocab_size,
             "block_size": args.block_size, "eval_tokens": args.eval_tokens, "efficiency_budgets": budgets,
             "match_compute": not args.no_match_compute, "trend": args.trend, "trend_presets": trend_presets,
             "preset": args.model, "mqar_batch_size": args.mqar_batch_size, "evals_per_run": args.evals_per_run}
    dest = {"lm_lr": "lr", "match_compute": "no_match_compute", "preset": "model"}
    given = _given(args)
    return dataclasses.replace(study_plan(args.preset), **{k: v for k, v in flags.items() if dest.get(k, k) in given})


def _context(study, runs: list[dict], runs_dir: str, lm_steps: int | None) -> dict:
    from qkdyn.empirical.coupled.attention import AttentionConfig
    from qkdyn.empirical.coupled.model import count_parameters, flops_per_token, preset_config

    lm = [r for r in runs if r["task"] == "lm"]
    vocab = study.vocab_size if study.tokenizer == "bpe" else 256
    overhead = []
    for p in ("tiny", "1M", "4M", "60M", "150M", "350M"):
        std, cpl = (preset_config(p, vocab_size=vocab, attention=AttentionConfig(kind=k)) for k in ("standard", "coupled"))
        overhead.append((p, count_parameters(std), count_parameters(cpl), flops_per_token(cpl) / flops_per_token(std)))
    params = sorted({r["parameters"] for r in lm if r["variant"] == "standard"})
    return {"preset": study.preset, "runs_dir": runs_dir, "n_runs": len(runs),
            "tokenizer": f"BPE {study.vocab_size}" if study.tokenizer == "bpe" else "byte",
            "parameters": ", ".join(f"{p:,} parameters" for p in params) or "n/a",
            "lm_tokens": max((r["tokens"] for r in lm if r["max_steps"] == lm_steps), default=0),
            "seeds": sorted({r["seed"] for r in lm}), "overhead": overhead,
            "study": {k: v for k, v in vars(study).items()}}


def run(args: argparse.Namespace) -> int:
    import json
    from pathlib import Path

    from qkdyn.atomic import check_writable
    from qkdyn.errors import InputError
    from qkdyn.empirical.coupled.analysis import analyse, load_runs, trend
    from qkdyn.empirical.coupled.report import write_report, write_trend_report
    from qkdyn.empirical.coupled.study import run_study

    study = _study_config(args)
    Path(args.out).mkdir(parents=True, exist_ok=True)
    check_writable(Path(args.out) / "report.md")
    if args.train:
        run_study(study, args.runs, args.workers)
    runs = load_runs(args.runs, None if study.trend else study.preset)
    if not runs:
        raise InputError(f"no finished runs of preset {study.preset} under {args.runs}; add --train to run the study")
    if study.trend:
        result = trend(runs, study.coherent)
        written = write_trend_report(result, _context(study, runs, args.runs, None), args.out)
    else:
        matched = Path(args.runs) / "matched.json"
        result = analyse(runs, study.coherent, study.heterogeneous,
                         json.loads(matched.read_text()) if matched.exists() else None)
        written = write_report(result, _context(study, runs, args.runs, result["lm_steps"]), args.out)
    for claim in result["claims"]:
        print(f"{claim.verdict:>12s}  {claim.id} {claim.summary}")
    print(f"wrote {', '.join(str(Path(args.out) / w) for w in written)}")
    return 0
