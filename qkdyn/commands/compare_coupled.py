"""``qkdyn compare-coupled``: run (``--train``) and report the study of paper B's claims: the
``coupled`` study (:class:`qkdyn.empirical.coupled.study.CoupledStudy`) through the one driver
(:func:`qkdyn.verify.drive`), so ``qkdyn plan coupled`` / ``run`` / ``report`` work on its runs too.

``--budget`` picks the study's plan (:data:`qkdyn.empirical.coupled.study.BUDGETS`); every study
flag given explicitly overrides the budget's value (``--model`` is the model preset). CPU study:

    qkdyn compare-coupled --train --budget cpu --workers 2

GPU comparison (B1: standard vs coupled Euler at ``4M`` on ``kernel``, 10 seeds, ten runs at a time sharing
one GPU; ``scripts/coupled_gpu.py run`` does this within a time budget and packs what comes back):

    qkdyn compare-coupled --train --budget gpu --workers 10 --runs runs/gpu --out figures/coupled/gpu

Scale trend (standard vs coupled Euler at the ``tiny``, ``1M`` and ``4M`` presets):

    qkdyn compare-coupled --train --trend --runs runs/trend --out figures/coupled/trend
"""
from __future__ import annotations

import argparse
import functools

from qkdyn.commands.studyflags import add_budget_argument, add_executor_arguments
from qkdyn.configflags import add_config_flags, budget_defaults
from qkdyn.empirical.coupled.study import BUDGETS, LM_VARIANTS, StudyConfig

#: the LM variants of the study (a test checks they are study.LM_VARIANTS)
VARIANTS = tuple(LM_VARIANTS)
HELP = "run and/or report the coupled-QK study: perplexity by variant, seeds, steps, corpora, MQAR"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--runs", default="runs", help="run records go to RUNS/coupled/ (resumable)")
    parser.add_argument("--out", default="figures/coupled", help="where report.md, report.json and plots go")
    parser.add_argument("--train", action="store_true", help="first run the study's unfinished runs")
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")
    add_budget_argument(parser)
    add_executor_arguments(parser)
    add_config_flags(parser, StudyConfig, unset=functools.partial(budget_defaults, BUDGETS))


def study_of(args: argparse.Namespace):
    """The coupled study with every explicitly given study flag in place of the budget's value."""
    from qkdyn.configflags import values_from_args
    from qkdyn.empirical.coupled.study import CoupledStudy

    study = CoupledStudy(overrides=values_from_args(StudyConfig, args))
    study.config(args.budget)  # the combination checked before anything runs (InputError naming the field)
    return study


def flags_of(study) -> str:
    """The study flags that override the budget, as they would be typed (empty when none)."""
    import dataclasses

    from qkdyn.configflags import flag_of

    fields = {f.name: f for f in dataclasses.fields(StudyConfig)}
    out = []
    for name, value in sorted(study.overrides.items()):
        flag = flag_of(fields[name])
        if isinstance(value, bool):
            out.append(flag if value else "--no-" + flag.removeprefix("--"))
        else:
            out.append(f"{flag} {_words(value).replace(', ', ',')}")
    return "".join(" " + text for text in out)


def reductions(study, budget: str) -> str:
    """A sentence naming each field where the plan differs from the budget's own value (empty when none)."""
    own = study.budget(budget)
    changed = [(name, getattr(own, name), value) for name, value in sorted(study.overrides.items())
               if getattr(own, name) != value]
    if not changed:
        return ""
    return (f" This plan differs from the `{budget}` budget's: "
            + "; ".join(f"{name} {_words(value)} instead of {_words(base)}" for name, base, value in changed) + ".")


def _words(value) -> str:
    return ", ".join(map(str, value)) if isinstance(value, tuple) else str(value)


def check_corpora(config, needed: set[str]) -> None:
    """The corpora ``needed`` (by the runs to compute) of the study ``config`` usable before anything is created:
    each a registry name or an existing regular file (not empty) or directory (holding a file). Then a registry
    corpus not yet cached is fetched, so an offline machine fails with one line and no run folder made."""
    from pathlib import Path

    from qkdyn.empirical.data.fetch import fetch, is_cached
    from qkdyn.empirical.data.sources_lm import SOURCES
    from qkdyn.errors import InputError
    from qkdyn.inputs import check_not_special

    names = {source.name for source in SOURCES}
    for corpus in sorted(needed - names):
        field = "coherent" if corpus == config.coherent else "heterogeneous"
        path = Path(corpus)
        if not corpus:
            raise InputError("must name a corpus (a registry name or a path)", field)
        check_not_special(path, f"--{field}")
        if not path.exists():
            raise InputError(f"{corpus!r} is neither a corpus name ({', '.join(sorted(names))}) nor an existing path",
                             field)
        if path.is_file() and path.stat().st_size == 0:
            raise InputError(f"{corpus} is an empty file", field)
        if path.is_dir() and not any(p.is_file() and not p.name.startswith(".") for p in path.iterdir()):
            raise InputError(f"{corpus} holds no corpus files", field)
    for corpus in sorted(needed & names):
        if not is_cached(corpus):
            fetch(corpus)


def run(args: argparse.Namespace) -> int:
    from qkdyn.errors import InputError
    from qkdyn.executors import check_ray
    from qkdyn.runs import check_run_dir
    from qkdyn.studies import find
    from qkdyn.verify import drive

    # everything is checked (and a missing registry corpus fetched) before a folder is made or a bar shown
    study = study_of(args)
    check_run_dir(args.out, "--out")
    check_run_dir(args.runs, "--runs")
    specs = study.plan(args.budget)
    found = find(study, specs, args.runs)
    if not args.train and not found:
        raise InputError(f"no finished runs of this study's configuration (budget {args.budget}) under "
                         f"{args.runs}/coupled; add --train to run the study")
    if args.train:
        if args.executor == "ray":
            check_ray(args.ray_address)
        check_corpora(study.config(args.budget), {s.params["data"] for s in specs if s not in found and (
            s.params.get("kind") == "count" or s.params.get("task") == "lm")})
    claims = drive([study], args.budget, args.out, args.runs, executor=args.executor, workers=args.workers,
                   ray_address=args.ray_address, progress=not args.no_progress, compute=args.train,
                   title=f"{study.title}: study report",
                   intro=f"Generated by `qkdyn compare-coupled --budget {args.budget}{flags_of(study)}` from the run "
                         "records under `RUNS/coupled/`; claims with runs missing are inconclusive (k of n runs)."
                         + reductions(study, args.budget))
    for claim in claims:
        print(f"{claim.verdict:>12s}  {claim.id} {claim.summary}")
    return 0
