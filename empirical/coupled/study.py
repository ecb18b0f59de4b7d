"""The comparison study of paper B's claims: the grid of runs, and running the missing ones.

Main grid (every run is one ``result.json`` under ``runs_dir / name``), sub-word (BPE) tokens by default:

* LM, domain-coherent corpus x seed: standard, coupled Euler, coupled leapfrog, the two MLP-only
  readings and Differential Attention (flows with n = 1 step); heterogeneous corpus x seed: the
  ``heterogeneous_variants`` (standard and coupled Euler: it serves the corpus claim only);
* LM, coherent corpus, every seed: coupled Euler with n in ``sweep_steps`` (default 4 and 7; with
  n = 1 from the main grid this spans the paper's 1-7), for each integration horizon in
  ``sweep_horizons`` ("step": n steps of dt; "fixed": n steps of dt / n);
* MQAR, for each task x seed: standard and coupled Euler.

Compute-matched phase (after the main grid; coherent corpus, every seed), standard attention only,
each run with its own full warm-up + cosine schedule:

* the same training FLOPs as coupled Euler (:func:`qkdyn.empirical.coupled.model.flops_per_token`,
  the real kernels' matrix products counted);
* ``efficiency_budgets`` x the coupled run's tokens, the runs that locate the tokens at which
  standard attention reaches coupled attention's final perplexity (sample efficiency).

A matched run whose step count equals the base run's is the base run itself. Wall-clock is not
used to choose step counts (on a shared machine it is timing noise); it is reported from
repeated alternating timing (``python -m benchmarks coupled``). Scale trend (``trend``):
standard and coupled Euler on the coherent corpus for each preset in ``trend_presets`` x seed.

Runs already finished are skipped and interrupted ones resume, so the study can be restarted.
Workers are separate processes with one torch thread each.
"""
from __future__ import annotations

import dataclasses
import json
import multiprocessing
from pathlib import Path

from qkdyn.configflags import (check_config, choice, choice_list, device, flag, number_list, optional, positive,
                               positive_int, positive_int_list, text)
from qkdyn.empirical.coupled.configs import HORIZONS, MQAR_TASKS, PRESET_NAMES, AttentionConfig, TrainConfig
from qkdyn.errors import InputError
from qkdyn.runs import read_json, read_metrics

LM_VARIANTS = {
    "standard": AttentionConfig(),
    "coupled-euler": AttentionConfig(kind="coupled", integrator="euler"),
    "coupled-leapfrog": AttentionConfig(kind="coupled", integrator="leapfrog"),
    "mlp-only": AttentionConfig(kind="mlp-only"),
    "mlp-only-shared": AttentionConfig(kind="mlp-only-shared"),
    "mlp-only-q": AttentionConfig(kind="mlp-only-q"),
    "diff": AttentionConfig(kind="diff"),
}
MQAR_VARIANTS = ("standard", "coupled-euler")
TREND_VARIANTS = ("standard", "coupled-euler")


def variant_label(attention: dict) -> str:
    """'standard', 'coupled-euler', 'coupled-leapfrog', 'mlp-only', 'mlp-only-shared' or 'diff'."""
    if attention["kind"] == "coupled":
        return f"coupled-{attention['integrator']}"
    return attention["kind"]


@dataclasses.dataclass(frozen=True)
class StudyConfig:
    """The study's grid; the fields with a domain are the flags of ``qkdyn compare-coupled``, which
    override the plan that ``--preset`` picks (:data:`STUDY_PLANS`)."""

    preset: str = dataclasses.field(default="tiny", metadata=choice(
        PRESET_NAMES, "model preset of the runs (default: the plan's; e.g. tiny to try the 60M plan on a CPU)",
        flag="--model"))
    coherent: str = dataclasses.field(default="wiki", metadata=text("domain-coherent corpus (name or path)"))
    heterogeneous: str = dataclasses.field(default="nlp-corpus", metadata=text(
        "heterogeneous corpus (name or path; '' for none)"))
    seeds: int = dataclasses.field(default=5, metadata=positive_int(
        "seeds of the runs (5: the fewest at which a paired design has power at the measured spreads)"))
    variants: tuple[str, ...] = dataclasses.field(default=tuple(LM_VARIANTS), metadata=choice_list(
        tuple(LM_VARIANTS), "attention variants of the LM runs", empty_ok=False))
    heterogeneous_variants: tuple[str, ...] = ("standard", "coupled-euler")  # it serves the corpus claim only
    lm_steps: int = dataclasses.field(default=200, metadata=positive_int("steps of each LM run"))
    sweep_steps: tuple[int, ...] = dataclasses.field(default=(4, 7), metadata=positive_int_list(
        "coupling steps n tried besides n = 1"))
    sweep_horizons: tuple[str, ...] = dataclasses.field(default=HORIZONS, metadata=choice_list(
        HORIZONS, "integration horizons of the steps sweep: step (n steps of dt), fixed (n steps of dt/n)",
        empty_ok=False))
    mqar_tasks: tuple[str, ...] = dataclasses.field(default=("easy", "medium"), metadata=choice_list(
        MQAR_TASKS, "comma-separated MQAR presets ('' for none)"))
    mqar_steps: int = dataclasses.field(default=500, metadata=positive_int("steps of each MQAR run"))
    batch_size: int = dataclasses.field(default=8, metadata=positive_int("LM sequences per micro-batch"))
    mqar_batch_size: int = dataclasses.field(default=32, metadata=positive_int("MQAR sequences per batch"))
    grad_accum: int = dataclasses.field(default=1, metadata=positive_int("micro-batches per step"))
    lm_lr: float = dataclasses.field(default=3e-3, metadata=positive("LM learning rate", flag="--lr"))
    mqar_lr: float = 3e-3
    eval_tokens: int | None = dataclasses.field(default=None, metadata=optional(positive_int(
        "cap on validation tokens (default: the whole split)")))
    evals_per_run: int = dataclasses.field(default=5, metadata=positive_int(
        "evaluations per run (plus one at initialisation)"))
    device: str = dataclasses.field(default="auto", metadata=device("auto, cpu, cuda, cuda:1, ..."))
    tokenizer: str = dataclasses.field(default="bpe", metadata=choice(("bpe", "byte"), "LM tokens"))
    vocab_size: int = dataclasses.field(default=8192, metadata=positive_int("BPE vocabulary size"))
    block_size: int | None = dataclasses.field(default=None, metadata=optional(positive_int(
        "LM context length (default: the preset's)")))
    match_compute: bool = dataclasses.field(default=True, metadata=flag("the compute-matched standard runs"))
    efficiency_budgets: tuple[float, ...] = dataclasses.field(default=(1.6, 2.4), metadata=number_list(
        1.0, "standard-attention lengths, in multiples of the coupled run, for tokens-to-target"))
    compile: bool = dataclasses.field(default=False, metadata=flag("torch.compile the models (CUDA)"))
    trend: bool = dataclasses.field(default=False, metadata=flag("the scale trend instead of the main study"))
    trend_presets: tuple[str, ...] = dataclasses.field(default=("tiny", "1M", "4M"), metadata=choice_list(
        PRESET_NAMES, "model presets of the scale trend", empty_ok=False))

    def __post_init__(self):
        check_config(self)
        from qkdyn.empirical.data.text_bpe import MIN_VOCAB

        if self.tokenizer == "bpe" and self.vocab_size < MIN_VOCAB:
            raise InputError(f"must be >= {MIN_VOCAB} for byte-level BPE, got {self.vocab_size}", "vocab_size")
        if self.block_size is not None and self.block_size < 2:
            raise InputError(f"must be at least 2, got {self.block_size}", "block_size")


#: the CPU study (``--preset tiny``), sized by probe runs (docs/coupled.md, "The CPU regime"): byte
#: tokens on ``pydocs`` (10.49M training bytes), 600 steps of 16 x 128 = 1,228,800 bytes per base
#: run (0.117 epochs), lr 6e-3; the 600-step probe of standard attention reached 10.29 per byte
#: (bigram count model 16.16, unigram 33.36) and removing its attention cost 0.67 nats
CPU_PLAN = StudyConfig(coherent="pydocs", tokenizer="byte", seeds=5, lm_steps=600, lm_lr=6e-3, batch_size=16,
                       sweep_steps=(7,), efficiency_budgets=(2.4,), mqar_tasks=("easy",), mqar_steps=1500,
                       mqar_batch_size=64, evals_per_run=1)
#: study plans selected by ``--preset``: the CPU study (tiny) and the GPU comparison at 60M, sized
#: for about 8 minutes on one H100/H200-class GPU (3 seeds x 2 variants x 600 steps x 16 x 1024 tokens)
STUDY_PLANS = {
    "tiny": CPU_PLAN,
    "60M": StudyConfig(preset="60M", heterogeneous="", variants=("standard", "coupled-euler"), lm_steps=600,
                       sweep_steps=(), mqar_tasks=(), batch_size=16, lm_lr=1e-3, match_compute=False,
                       efficiency_budgets=(), compile=True, evals_per_run=4),
}


def study_plan(preset: str) -> StudyConfig:
    """The study plan of ``--preset``: its own plan if it has one, else the CPU plan with that model."""
    return STUDY_PLANS.get(preset, dataclasses.replace(STUDY_PLANS["tiny"], preset=preset))


@dataclasses.dataclass(frozen=True)
class RunSpec:
    task: str  # "lm" or "mqar"
    data: str  # corpus (lm) or MQAR preset (mqar)
    variant: str
    attention: AttentionConfig
    train: TrainConfig
    preset: str
    eval_tokens: int | None
    tokenizer: str = "bpe"
    vocab_size: int = 8192
    block_size: int | None = None
    base_steps: int = 0  # the study's step count for this task; runs of another length are named by it

    @property
    def name(self) -> str:
        """Readable prefix plus the hash of every field (:mod:`qkdyn.empirical.coupled.identity`)."""
        from qkdyn.empirical.coupled.identity import run_key

        data = Path(self.data).name or self.data
        tok = f"-{self.tokenizer}{self.vocab_size}" if self.task == "lm" and self.tokenizer == "bpe" else ""
        length = "" if self.train.max_steps == self.base_steps else f"-x{self.train.max_steps}"
        return (f"{self.task}-{data}{tok}-{self.preset}-{self.variant}-n{self.attention.steps}-s{self.train.seed}"
                f"{length}-{run_key(self)}")


def _on_cuda(device: str) -> bool:
    """Whether runs on ``device`` ("auto", "cpu", "cuda", "cuda:1", ...) use a GPU."""
    if device == "auto":
        import torch

        return torch.cuda.is_available()
    return device.startswith("cuda")


def _train_config(study: StudyConfig, steps: int, lr: float, batch_size: int, seed: int) -> TrainConfig:
    interval = max(1, steps // study.evals_per_run)
    compile_ = study.compile and _on_cuda(study.device)
    return TrainConfig(max_steps=steps, batch_size=batch_size, grad_accum=study.grad_accum, lr=lr, min_lr=lr / 10,
                       warmup_steps=max(1, steps // 10), eval_interval=interval, ckpt_interval=interval,
                       log_interval=interval, seed=seed, device=study.device, compile=compile_, progress=False,
                       eval_at_start=True)


def corpora(study: StudyConfig) -> list[str]:
    """The study's corpora: coherent, then heterogeneous (empty names and repeats dropped)."""
    if study.trend:
        return [study.coherent]
    return list(dict.fromkeys(c for c in (study.coherent, study.heterogeneous) if c))


def lm_run(study: StudyConfig, corpus: str, variant: str, seed: int, steps: int | None = None,
           coupling_steps: int = 1, preset: str | None = None, horizon: str = "step") -> RunSpec:
    """One LM run of the study (``steps`` defaults to the study's ``lm_steps``)."""
    attention = dataclasses.replace(LM_VARIANTS[variant], steps=coupling_steps, horizon=horizon)
    cfg = _train_config(study, steps or study.lm_steps, study.lm_lr, study.batch_size, seed)
    return RunSpec("lm", corpus, variant, attention, cfg, preset or study.preset, study.eval_tokens, study.tokenizer,
                   study.vocab_size, study.block_size, study.lm_steps)


def study_runs(study: StudyConfig) -> list[RunSpec]:
    """The runs of the main grid (or of the scale trend, when ``study.trend``), longest (MQAR) first."""
    seeds = range(study.seeds)
    if study.trend:
        return [lm_run(study, study.coherent, v, s, preset=p) for p in study.trend_presets for s in seeds
                for v in TREND_VARIANTS]
    runs = []
    for task in study.mqar_tasks:
        for seed in seeds:
            for variant in MQAR_VARIANTS:
                cfg = _train_config(study, study.mqar_steps, study.mqar_lr, study.mqar_batch_size, seed)
                runs.append(RunSpec("mqar", task, variant, LM_VARIANTS[variant], cfg, study.preset, study.eval_tokens,
                                    base_steps=study.mqar_steps))
    for corpus in corpora(study):
        variants = study.variants if corpus == study.coherent else [
            v for v in study.variants if v in study.heterogeneous_variants]
        for seed in seeds:
            runs += [lm_run(study, corpus, variant, seed) for variant in variants]
    if "coupled-euler" in study.variants:
        runs += [lm_run(study, study.coherent, "coupled-euler", s, coupling_steps=n, horizon=h)
                 for h in study.sweep_horizons for n in study.sweep_steps for s in seeds]
    return runs


def matched_steps(study: StudyConfig) -> dict[str, int]:
    """Step counts of the standard runs matched to coupled Euler: ``flops`` (counted FLOPs of the
    real kernels) and each ``tokens x<budget>``."""
    from qkdyn.empirical.coupled.model import flops_per_token, preset_config

    if not study.match_compute or "coupled-euler" not in study.variants or "standard" not in study.variants:
        return {}
    shape = {"vocab_size": study.vocab_size if study.tokenizer == "bpe" else 256}
    if study.block_size:
        shape["block_size"] = study.block_size
    flops = {v: flops_per_token(preset_config(study.preset, attention=LM_VARIANTS[v], **shape))
             for v in ("standard", "coupled-euler")}
    steps = {"flops": round(study.lm_steps * flops["coupled-euler"] / flops["standard"])}
    for budget in study.efficiency_budgets:
        steps[f"tokens x{budget:g}"] = round(study.lm_steps * budget)
    return steps


def matched_runs(study: StudyConfig) -> list[RunSpec]:
    """The compute-matched standard runs (see :func:`matched_steps`; a function of the study's config
    alone, so a changed config never reuses another's), base-length ones left out."""
    lengths = sorted({n for n in matched_steps(study).values() if n != study.lm_steps})
    return [lm_run(study, study.coherent, "standard", s, steps=n) for n in lengths for s in range(study.seeds)]


def execute(spec: RunSpec, runs_dir: str, threads: int | None = None) -> str:
    """Run one spec (resuming it if interrupted) with ``threads`` torch threads; returns its name."""
    from qkdyn.empirical.coupled.experiment import run_lm, run_mqar
    from qkdyn.runs import pin_threads

    from qkdyn.empirical.coupled.identity import claim, run_record

    pin_threads(threads)
    out = str(Path(runs_dir) / spec.name)
    claim(out, run_record(spec))
    if spec.task == "lm":
        run_lm(spec.data, spec.preset, spec.attention, spec.train, out, block_size=spec.block_size,
               eval_tokens=spec.eval_tokens, tokenizer=spec.tokenizer, vocab_size=spec.vocab_size)
    else:
        run_mqar(spec.data, spec.preset, spec.attention, spec.train, out)
    return spec.name


def check_study_files(runs_dir: str) -> None:
    """InputError naming the first finished run under ``runs_dir`` whose ``result.json`` or
    ``metrics.jsonl`` is unreadable or malformed (the report reads both)."""
    for result in sorted(Path(runs_dir).glob("*/result.json")):
        record = read_json(result)
        if not isinstance(record, dict) or not isinstance(record.get("model"), dict) or "train" not in record:
            raise InputError(f"{result} is not the result of a run; delete its run directory to run it again")
        metrics = result.parent / "metrics.jsonl"
        if not metrics.is_file():
            raise InputError(f"{metrics} is missing; delete its run directory to run it again")
        read_metrics(metrics)


def _execute_one_thread(args):
    return execute(*args, threads=1)


def _run_all(specs: list[RunSpec], runs_dir: str, workers: int, desc: str) -> list[str]:
    from tqdm import tqdm

    from qkdyn.empirical.coupled.ablation import FILE

    todo = [s for s in specs if not (Path(runs_dir) / s.name / FILE).exists()]  # finished: trained and ablated
    if workers == 1:
        return [execute(spec, runs_dir) for spec in tqdm(todo, desc=desc, unit="run")]
    from qkdyn.studies import die_with_parent

    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(workers, initializer=die_with_parent) as pool:  # no orphans when the driver is killed
        return list(tqdm(pool.imap_unordered(_execute_one_thread, [(s, runs_dir) for s in todo]), total=len(todo),
                         desc=desc, unit="run"))


def run_study(study: StudyConfig, runs_dir: str, workers: int) -> list[str]:
    """Write the count models of the study's corpora, then run every unfinished run of ``study`` and
    its compute-matched runs with ``workers`` processes (``matched.json`` records their lengths);
    returns the names run."""
    from qkdyn.empirical.coupled.count_models import write_count_models

    for corpus in corpora(study):  # fetch and tokenise once, before the workers start; the count-model floor
        write_count_models(runs_dir, corpus, study.tokenizer, study.vocab_size)
    if not study.trend:
        from qkdyn import atomic

        atomic.write_text(Path(runs_dir) / "matched.json", json.dumps(matched_steps(study), indent=2) + "\n")
    return _run_all(study_runs(study) + ([] if study.trend else matched_runs(study)), runs_dir, workers, "study")
