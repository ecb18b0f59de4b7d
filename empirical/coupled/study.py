"""The comparison study of paper B's claims: the grid of runs, and running the missing ones.

Grid (every run is one ``result.json`` under ``runs_dir / name``):

* LM, for each corpus (one domain-coherent, one heterogeneous) x seed: standard, coupled Euler,
  coupled leapfrog, MLP-only and Differential Attention (coupled and MLP-only with n = 1 step);
* LM, coherent corpus, first seed: coupled Euler with n in ``sweep_steps`` (default 2, 4, 7; with
  n = 1 from the main grid this spans the paper's 1-7);
* MQAR, for each task: standard and coupled Euler, first seed.

Runs already finished are skipped and interrupted ones resume, so the study can be restarted.
Workers are separate processes with one torch thread each.
"""
from __future__ import annotations

import dataclasses
import multiprocessing
from pathlib import Path

from qkdyn.configflags import check_config, choice, choice_list, device, positive, positive_int, positive_int_list, text
from qkdyn.empirical.coupled.configs import MQAR_TASKS, PRESET_NAMES, AttentionConfig, TrainConfig
from qkdyn.errors import InputError

LM_VARIANTS = {
    "standard": AttentionConfig(),
    "coupled-euler": AttentionConfig(kind="coupled", integrator="euler"),
    "coupled-leapfrog": AttentionConfig(kind="coupled", integrator="leapfrog"),
    "mlp-only": AttentionConfig(kind="mlp-only"),
    "diff": AttentionConfig(kind="diff"),
}
MQAR_VARIANTS = ("standard", "coupled-euler")


def variant_label(attention: dict) -> str:
    """'standard', 'coupled-euler', 'coupled-leapfrog', 'mlp-only' or 'diff' for a stored config."""
    if attention["kind"] == "coupled":
        return f"coupled-{attention['integrator']}"
    return attention["kind"]


@dataclasses.dataclass(frozen=True)
class StudyConfig:
    """The study's grid; the fields with a domain are the flags of ``qkdyn compare-coupled``."""

    preset: str = dataclasses.field(default="tiny", metadata=choice(PRESET_NAMES, "model shape"))
    coherent: str = dataclasses.field(default="wiki", metadata=text("domain-coherent corpus (name or path)"))
    heterogeneous: str = dataclasses.field(default="nlp-corpus", metadata=text(
        "heterogeneous corpus (name or path; '' for none)"))
    seeds: int = dataclasses.field(default=3, metadata=positive_int("seeds of the LM runs"))
    variants: tuple[str, ...] = dataclasses.field(default=tuple(LM_VARIANTS), metadata=choice_list(
        tuple(LM_VARIANTS), "attention variants of the LM runs", empty_ok=False))
    lm_steps: int = dataclasses.field(default=200, metadata=positive_int("steps of each LM run"))
    sweep_steps: tuple[int, ...] = dataclasses.field(default=(2, 4, 7), metadata=positive_int_list(
        "coupling steps n tried besides n = 1"))
    mqar_tasks: tuple[str, ...] = dataclasses.field(default=("easy", "medium"), metadata=choice_list(
        MQAR_TASKS, "comma-separated MQAR presets ('' for none)"))
    mqar_steps: int = dataclasses.field(default=500, metadata=positive_int("steps of each MQAR run"))
    batch_size: int = dataclasses.field(default=8, metadata=positive_int("LM sequences per micro-batch"))
    mqar_batch_size: int = 32
    grad_accum: int = dataclasses.field(default=1, metadata=positive_int("micro-batches per step"))
    lm_lr: float = dataclasses.field(default=3e-3, metadata=positive("LM learning rate", flag="--lr"))
    mqar_lr: float = 3e-3
    eval_tokens: int = 16384
    evals_per_run: int = 10
    device: str = dataclasses.field(default="auto", metadata=device("auto, cpu, cuda, cuda:1, ..."))

    def __post_init__(self):
        check_config(self)


@dataclasses.dataclass(frozen=True)
class RunSpec:
    task: str  # "lm" or "mqar"
    data: str  # corpus (lm) or MQAR preset (mqar)
    variant: str
    attention: AttentionConfig
    train: TrainConfig
    preset: str
    eval_tokens: int

    @property
    def name(self) -> str:
        data = Path(self.data).name or self.data
        return f"{self.task}-{data}-{self.variant}-n{self.attention.steps}-s{self.train.seed}"


def _train_config(study: StudyConfig, steps: int, lr: float, batch_size: int, seed: int) -> TrainConfig:
    interval = max(1, steps // study.evals_per_run)
    return TrainConfig(max_steps=steps, batch_size=batch_size, grad_accum=study.grad_accum, lr=lr, min_lr=lr / 10,
                       warmup_steps=max(1, steps // 10), eval_interval=interval, ckpt_interval=interval,
                       log_interval=interval, seed=seed, device=study.device, progress=False)


def corpora(study: StudyConfig) -> list[str]:
    """The study's corpora: coherent, then heterogeneous (empty names and repeats dropped)."""
    return list(dict.fromkeys(c for c in (study.coherent, study.heterogeneous) if c))


def study_runs(study: StudyConfig) -> list[RunSpec]:
    """All runs of the study, longest (MQAR) first."""
    runs = []
    for task in study.mqar_tasks:
        for variant in MQAR_VARIANTS:
            cfg = _train_config(study, study.mqar_steps, study.mqar_lr, study.mqar_batch_size, 0)
            runs.append(RunSpec("mqar", task, variant, LM_VARIANTS[variant], cfg, study.preset, study.eval_tokens))
    for corpus in corpora(study):
        for seed in range(study.seeds):
            for variant in study.variants:
                attention = LM_VARIANTS[variant]
                cfg = _train_config(study, study.lm_steps, study.lm_lr, study.batch_size, seed)
                runs.append(RunSpec("lm", corpus, variant, attention, cfg, study.preset, study.eval_tokens))
    for steps in study.sweep_steps if "coupled-euler" in study.variants else ():
        attention = dataclasses.replace(LM_VARIANTS["coupled-euler"], steps=steps)
        cfg = _train_config(study, study.lm_steps, study.lm_lr, study.batch_size, 0)
        runs.append(RunSpec("lm", study.coherent, "coupled-euler", attention, cfg, study.preset, study.eval_tokens))
    return runs


def execute(spec: RunSpec, runs_dir: str, threads: int | None = None) -> str:
    """Run one spec (resuming it if interrupted) with ``threads`` torch threads; returns its name."""
    from qkdyn.empirical.coupled.experiment import run_lm, run_mqar
    from qkdyn.runs import pin_threads

    pin_threads(threads)
    out = str(Path(runs_dir) / spec.name)
    if spec.task == "lm":
        run_lm(spec.data, spec.preset, spec.attention, spec.train, out, eval_tokens=spec.eval_tokens)
    else:
        run_mqar(spec.data, spec.preset, spec.attention, spec.train, out)
    return spec.name


def check_study_files(runs_dir: str) -> None:
    """InputError naming the first finished run under ``runs_dir`` whose ``result.json`` or
    ``metrics.jsonl`` is unreadable or malformed (the report reads both)."""
    from qkdyn.runs import read_json, read_metrics

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


def run_study(study: StudyConfig, runs_dir: str, workers: int) -> list[str]:
    """Run every unfinished run of ``study`` with ``workers`` processes; returns the names run."""
    from tqdm import tqdm

    todo = [s for s in study_runs(study) if not (Path(runs_dir) / s.name / "result.json").exists()]
    from qkdyn.empirical.data.text_corpus import load_splits

    for corpus in corpora(study):  # fetch once, before the workers start
        load_splits(corpus)
    done = []
    if workers == 1:
        for spec in tqdm(todo, desc="study", unit="run"):
            done.append(execute(spec, runs_dir))
        return done
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(workers) as pool:
        for name in tqdm(pool.imap_unordered(_execute_one_thread, [(s, runs_dir) for s in todo]), total=len(todo),
                         desc="study", unit="run"):
            done.append(name)
    return done
