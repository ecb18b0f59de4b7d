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

from qkdyn.configflags import add_config_flags, values_from_args
from qkdyn.empirical.coupled.configs import PRESET_NAMES
from qkdyn.empirical.coupled.study import LM_VARIANTS, StudyConfig
from qkdyn.settingflags import positive_int

#: the LM variants of the study (a test checks they are study.LM_VARIANTS)
VARIANTS = tuple(LM_VARIANTS)
HELP = "run and/or report the coupled-QK study: perplexity by variant, seeds, steps, corpora, MQAR"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--runs", default="runs/coupled/cpu", help="directory of the study's runs")
    parser.add_argument("--out", default="figures/coupled", help="where report.md, report.json and plots go")
    parser.add_argument("--train", action="store_true", help="first run the study's unfinished runs")
    parser.add_argument("--workers", type=positive_int, default=2,
                        help="parallel training processes (1 torch thread each)")
    parser.add_argument("--preset", dest="plan", default="tiny", choices=PRESET_NAMES,
                        help="study plan / model: tiny = the CPU study, 60M = the GPU comparison (default tiny); "
                             "every flag below given explicitly overrides the plan's value")
    add_config_flags(parser, StudyConfig, all_none=True)


def study_config(args: argparse.Namespace) -> StudyConfig:
    """The plan of ``--preset`` with every explicitly given study flag in place of the plan's value."""
    import dataclasses

    from qkdyn.empirical.coupled.study import study_plan

    return dataclasses.replace(study_plan(args.plan), **values_from_args(StudyConfig, args))


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
    from pathlib import Path

    from qkdyn.errors import InputError
    from qkdyn.empirical.coupled.analysis import analyse, load_runs, trend
    from qkdyn.empirical.coupled.report import write_report, write_trend_report
    from qkdyn.empirical.coupled.count_models import read_count_models
    from qkdyn.empirical.coupled.study import check_study_files, matched_runs, matched_steps, run_study, study_runs
    from qkdyn.runs import check_run_dir

    study = study_config(args)
    out = check_run_dir(args.out)
    check_run_dir(args.runs, "--runs")
    check_study_files(args.runs)
    if args.train:
        run_study(study, args.runs, args.workers)
        check_study_files(args.runs)
    specs = study_runs(study) + ([] if study.trend else matched_runs(study))
    runs = load_runs(args.runs, None if study.trend else study.preset, {s.name for s in specs})  # this config's runs only
    if not runs:
        raise InputError(f"no finished runs of this study's configuration (preset {study.preset}) under {args.runs}; "
                         "add --train to run the study")
    out.mkdir(parents=True, exist_ok=True)
    if study.trend:
        result = trend(runs, study.coherent, read_count_models(args.runs))
        written = write_trend_report(result, _context(study, runs, args.runs, None), args.out)
    else:
        result = analyse(runs, study.coherent, study.heterogeneous, matched_steps(study), read_count_models(args.runs))
        written = write_report(result, _context(study, runs, args.runs, result["lm_steps"]), args.out)
    for claim in result["claims"]:
        print(f"{claim.verdict:>12s}  {claim.id} {claim.summary}")
    print(f"wrote {', '.join(str(Path(args.out) / w) for w in written)}")
    return 0
