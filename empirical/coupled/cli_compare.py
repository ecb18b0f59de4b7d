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

from qkdyn.configflags import add_config_flags, config_from_args
from qkdyn.empirical.coupled.study import LM_VARIANTS, StudyConfig
from qkdyn.settingflags import positive_int

#: the LM variants of the study (a test checks they are study.LM_VARIANTS)
VARIANTS = tuple(LM_VARIANTS)
HELP = "run and/or report the coupled-QK study: perplexity by variant, seeds, steps, corpora, MQAR"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--runs", default="runs/coupled/cpu", help="directory of the study's runs")
    parser.add_argument("--out", default="figures/coupled", help="where report.md, summary.json and plots go")
    parser.add_argument("--train", action="store_true", help="first run the study's unfinished runs")
    parser.add_argument("--workers", type=positive_int, default=2,
                        help="parallel training processes (1 torch thread each)")
    add_config_flags(parser, StudyConfig)


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

    study = config_from_args(StudyConfig, args)
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
