"""``qkdyn compare-coupled``: run (``--train``) and report the study of paper B's claims.

CPU study (the default flags, ~0.1M-parameter ``tiny`` models; 15-40 minutes on 2 shared cores):

    qkdyn compare-coupled --train --workers 2

Paper scale on GPUs, e.g. 60M on WikiText-103 vs OpenWebText dumps the user has (one GPU; for
several, run each ``qkdyn lm`` under torchrun instead):

    qkdyn compare-coupled --train --workers 1 --preset 60M --coherent /data/wikitext-103 \\
        --heterogeneous /data/openwebtext --lm-steps 20000 --sweep-steps 2,3,4,5,6,7 --batch-size 32 --grad-accum 4 \\
        --lr 6e-4 --runs runs/coupled/60M --out figures/coupled/60M --mqar-tasks ""
"""
from __future__ import annotations

import argparse

from qkdyn.configflags import device, parser as parser_of
from qkdyn.settingflags import positive_float, positive_int

#: the keys of study.LM_VARIANTS, repeated here so that `--help` needs no torch import (a test checks)
VARIANTS = ("standard", "coupled-euler", "coupled-leapfrog", "mlp-only", "diff")
HELP = "run and/or report the coupled-QK study: perplexity by variant, seeds, steps, corpora, MQAR"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--runs", default="runs/coupled/cpu", help="directory of the study's runs")
    parser.add_argument("--out", default="figures/coupled", help="where report.md, summary.json and plots go")
    parser.add_argument("--train", action="store_true", help="first run the study's unfinished runs")
    parser.add_argument("--workers", type=positive_int, default=2, help="parallel training processes (1 torch thread each)")
    parser.add_argument("--preset", default="tiny", choices=("tiny", "60M", "150M", "350M"))
    parser.add_argument("--coherent", default="wiki", help="domain-coherent corpus (name or path)")
    parser.add_argument("--heterogeneous", default="nlp-corpus", help="heterogeneous corpus (name or path; '' for none)")
    parser.add_argument("--variants", default=",".join(VARIANTS), help="attention variants of the LM runs")
    parser.add_argument("--seeds", type=positive_int, default=3)
    parser.add_argument("--lm-steps", type=positive_int, default=200)
    parser.add_argument("--sweep-steps", default="2,4,7", help="coupling steps n tried besides n = 1")
    parser.add_argument("--batch-size", type=positive_int, default=8)
    parser.add_argument("--grad-accum", type=positive_int, default=1)
    parser.add_argument("--lr", type=positive_float, default=3e-3)
    parser.add_argument("--mqar-tasks", default="easy,medium", help="comma-separated MQAR presets ('' for none)")
    parser.add_argument("--mqar-steps", type=positive_int, default=500)
    parser.add_argument("--device", type=parser_of(device()), default="auto", help="auto, cpu, cuda, cuda:1, ...")


def _study_config(args):
    from qkdyn.empirical.coupled.mqar import PRESETS
    from qkdyn.empirical.coupled.study import StudyConfig
    from qkdyn.errors import InputError

    tasks = tuple(t for t in args.mqar_tasks.split(",") if t)
    try:
        sweep = tuple(int(n) for n in args.sweep_steps.split(",") if n)
    except ValueError:
        raise InputError(f"--sweep-steps must be comma-separated integers, got {args.sweep_steps!r}")
    variants = tuple(v for v in args.variants.split(",") if v)
    if not variants or set(variants) - set(VARIANTS):
        raise InputError(f"--variants must be a comma-separated subset of {', '.join(VARIANTS)}")
    if any(n < 1 for n in sweep):
        raise InputError("--sweep-steps must be >= 1")
    unknown = set(tasks) - set(PRESETS)
    if unknown:
        raise InputError(f"unknown MQAR task(s) {sorted(unknown)}; known: {', '.join(PRESETS)}")
    return StudyConfig(preset=args.preset, coherent=args.coherent, heterogeneous=args.heterogeneous,
                       seeds=args.seeds, variants=variants, lm_steps=args.lm_steps, sweep_steps=sweep, mqar_tasks=tasks, mqar_steps=args.mqar_steps,
                       batch_size=args.batch_size, grad_accum=args.grad_accum, lm_lr=args.lr, device=args.device)


def _context(study, runs: list[dict], runs_dir: str) -> dict:
    from qkdyn.empirical.coupled.attention import AttentionConfig
    from qkdyn.empirical.coupled.model import count_parameters, preset_config

    lm = [r for r in runs if r["task"] == "lm"]
    overhead = [(p, count_parameters(preset_config(p)), count_parameters(preset_config(p, attention=AttentionConfig(kind="coupled"))))
                for p in ("tiny", "60M", "150M", "350M")]
    params = sorted({r["parameters"] for r in lm if r["variant"] == "standard"})
    return {"preset": study.preset, "runs_dir": runs_dir, "n_runs": len(runs),
            "parameters": ", ".join(f"{p:,} parameters" for p in params) or "n/a",
            "lm_tokens": max((r["tokens"] for r in lm), default=0),
            "seeds": sorted({r["seed"] for r in lm}), "overhead": overhead}


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from qkdyn.errors import InputError
    from qkdyn.empirical.coupled.analysis import analyse, load_runs
    from qkdyn.empirical.coupled.report import write_report
    from qkdyn.empirical.coupled.study import check_study_files, run_study
    from qkdyn.runs import check_run_dir

    study = _study_config(args)
    out = check_run_dir(args.out)
    check_run_dir(args.runs, "--runs")
    check_study_files(args.runs)
    if args.train:
        run_study(study, args.runs, args.workers)
        check_study_files(args.runs)
    runs = load_runs(args.runs, study.preset)
    if not runs:
        raise InputError(f"no finished runs of preset {study.preset} under {args.runs}; add --train to run the study")
    result = analyse(runs, study.coherent, study.heterogeneous)
    out.mkdir(parents=True, exist_ok=True)
    written = write_report(result, _context(study, runs, args.runs), args.out)
    for claim in result["claims"]:
        print(f"{claim['verdict']:>12s}  {claim['claim']}: {claim['measured']}")
    print(f"wrote {', '.join(str(Path(args.out) / w) for w in written)}")
    return 0
