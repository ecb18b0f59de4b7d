"""Paper B's study as a registered study (``coupled`` in :data:`qkdyn.studies.STUDIES`): its budgets,
its plan and its runs.

The plan of a budget (:data:`BUDGETS`, every flag of ``qkdyn compare-coupled`` overriding a field):

* one count-model step per corpus (the unigram and bigram floors of the LM preconditions);
* LM, domain-coherent corpus x seed: standard, coupled Euler, coupled leapfrog, coupled Euler with f
  as wide as the head (``coupled-wide``) and with f's output layer zero at init (``coupled-identity``),
  the three MLP-only readings (flows with n = 1 step), at the preset's shape; heterogeneous corpus x
  seed: the ``heterogeneous_variants`` (standard and coupled Euler: it serves the corpus claim only);
* B7, Differential Attention given its best chance (when ``diff`` is among the variants): on the
  coherent corpus, for each of ``b7_seeds`` seeds, standard, coupled Euler and Differential Attention
  with ``diff_heads`` differential heads, all three with n_head = 2 x ``diff_heads`` at the preset's
  d_model (Differential Attention splits its heads in pairs), standard and coupled at the study's
  learning rate and Differential Attention at each multiple ``diff_lr_factors`` of it (its own
  learning-rate sweep; the records carry the lr, the judge picks its best);
* LM, coherent corpus, every seed: coupled Euler with n in ``sweep_steps`` (with n = 1 from the
  main grid this spans the paper's 1-7), for each integration horizon in ``sweep_horizons``
  ("step": n steps of dt; "fixed": n steps of dt / n);
* MQAR, for each task x seed: standard and coupled Euler, evaluated ``mqar_evals_per_run`` times
  (the recall curve that steps-to-99%-recall is read from);
* compute-matched standard attention (coherent corpus, every seed), each run with its own full
  warm-up + cosine schedule: the same training FLOPs as coupled Euler
  (:func:`qkdyn.empirical.coupled.model.flops_per_token`, the real kernels' matrix products
  counted) and ``efficiency_budgets`` x the coupled run's tokens, the ladder that locates the
  tokens at which standard attention reaches coupled attention's final perplexity. Their step
  counts are a function of the config alone (no second phase waits for the first); a matched run
  whose step count equals the base run's is the base run itself.

Wall-clock is not used to choose step counts (on a shared machine it is timing noise); it is
reported from repeated alternating timing (``python -m benchmarks coupled``). Scale trend
(``trend``): standard and coupled Euler on the coherent corpus for each preset in
``trend_presets`` x seed.

Every run is a :class:`CoupledRun`, held by one :class:`qkdyn.studies.RunSpec` (its nested config:
:meth:`CoupledRun.to_config`), executed by :mod:`qkdyn.executors` (local pool or Ray) or one line of
``qkdyn plan coupled``; its training directory is named by the hash of its whole config
(:mod:`qkdyn.empirical.coupled.identity`) and resumes when interrupted.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

from qkdyn.empirical.coupled.configs import HORIZONS, MQAR_TASKS, PRESET_NAMES, AttentionConfig, TrainConfig
from qkdyn.empirical.coupled.identity import RECORD

from qkdyn.configflags import (
    check_config,
    choice,
    choice_list,
    device,
    flag,
    fraction,
    number_list,
    optional,
    positive,
    positive_int,
    positive_int_list,
    text,
)
from qkdyn.errors import InputError
from qkdyn.recordschema import COUNT, FRACTION, PERPLEXITY, RUN_RECORD, SEED, Number, Text
from qkdyn.runs import CHECKPOINT, METRICS, RESULT, read_json, read_metrics
from qkdyn.studies import RunSpec, Study

LM_VARIANTS = {
    "standard": AttentionConfig(),
    "coupled-euler": AttentionConfig(kind="coupled", integrator="euler"),
    "coupled-leapfrog": AttentionConfig(kind="coupled", integrator="leapfrog"),
    "mlp-only": AttentionConfig(kind="mlp-only"),
    "mlp-only-shared": AttentionConfig(kind="mlp-only-shared"),
    "mlp-only-q": AttentionConfig(kind="mlp-only-q"),
    "diff": AttentionConfig(kind="diff"),
    "coupled-wide": AttentionConfig(kind="coupled", field_width="head"),
    "coupled-identity": AttentionConfig(kind="coupled", field_gain=0.0),
}
MQAR_VARIANTS = ("standard", "coupled-euler")
TREND_VARIANTS = ("standard", "coupled-euler")
#: the variants of the B7 grid (Differential Attention's, at 2 x ``diff_heads`` heads)
B7_VARIANTS = ("standard", "coupled-euler", "diff")


def variant_label(attention: dict) -> str:
    """The name of a run's attention config (its ``model.attention`` as a dict; fields missing from old
    records read as their defaults): a key of :data:`LM_VARIANTS` for the study's variants. Coupled
    attention is ``coupled-<integrator>``, with ``-wide`` for f as wide as the head and ``-identity``
    for f's output layer zero at init (gain 0) appended; for Euler these replace the integrator
    ('coupled-wide', 'coupled-identity')."""
    if attention["kind"] != "coupled":
        return str(attention["kind"])
    changes = [name for name, on in (("wide", attention.get("field_width", "hidden") == "head"),
                                     ("identity", attention.get("field_gain", 1.0) == 0)) if on]
    integrator = [] if changes and attention["integrator"] == "euler" else [attention["integrator"]]
    return "-".join(["coupled", *integrator, *changes])


@dataclasses.dataclass(frozen=True)
class StudyConfig:
    """The study's configuration (``CoupledStudy.config_class``), one instance per budget (:data:`BUDGETS`);
    the fields with a domain are the flags of ``qkdyn compare-coupled``, which override the values of the
    budget that ``--budget`` picks (their help shows each budget's)."""

    preset: str = dataclasses.field(default="tiny", metadata=choice(
        PRESET_NAMES, "model preset of the runs (e.g. tiny to try the 60M plan on a CPU)",
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
    mqar_steps: tuple[int, ...] = dataclasses.field(default=(500,), metadata=positive_int_list(
        "steps of each MQAR run: one number for every task, or one per task of --mqar-tasks, in its order"))
    mqar_evals_per_run: int = dataclasses.field(default=20, metadata=positive_int(
        "evaluations per MQAR run (plus one at initialisation): the recall curve of steps-to-99%%"))
    batch_size: int = dataclasses.field(default=8, metadata=positive_int("LM sequences per micro-batch"))
    mqar_batch_size: int = dataclasses.field(default=32, metadata=positive_int("MQAR sequences per batch"))
    grad_accum: int = dataclasses.field(default=1, metadata=positive_int("micro-batches per step"))
    lm_lr: float = dataclasses.field(default=3e-3, metadata=positive("LM learning rate", flag="--lr"))
    mqar_lr: float = dataclasses.field(default=3e-3, metadata=positive("MQAR learning rate"))
    eval_tokens: int | None = dataclasses.field(default=None, metadata=optional(positive_int(
        "cap on validation tokens (none: the whole split)")))
    val_fraction: float = dataclasses.field(default=0.05, metadata=fraction(
        "share of each corpus held out (its end) as the validation split", low_open=True, high_open=True))
    evals_per_run: int = dataclasses.field(default=5, metadata=positive_int(
        "evaluations per run (plus one at initialisation)"))
    device: str = dataclasses.field(default="auto", metadata=device("auto, cpu, cuda, cuda:1, ..."))
    tokenizer: str = dataclasses.field(default="bpe", metadata=choice(("bpe", "byte"), "LM tokens"))
    vocab_size: int = dataclasses.field(default=8192, metadata=positive_int("BPE vocabulary size"))
    block_size: int | None = dataclasses.field(default=None, metadata=optional(positive_int(
        "LM context length (none: the preset's)")))
    match_compute: bool = dataclasses.field(default=True, metadata=flag("the compute-matched standard runs"))
    efficiency_budgets: tuple[float, ...] = dataclasses.field(default=(1.6, 2.4), metadata=number_list(
        1.0, "standard-attention lengths, in multiples of the coupled run, for tokens-to-target"))
    compile: bool = dataclasses.field(default=False, metadata=flag("torch.compile the models (CUDA)"))
    trend: bool = dataclasses.field(default=False, metadata=flag("the scale trend instead of the main study"))
    trend_presets: tuple[str, ...] = dataclasses.field(default=("tiny", "1M", "4M"), metadata=choice_list(
        PRESET_NAMES, "model presets of the scale trend", empty_ok=False))
    diff_heads: int = dataclasses.field(default=8, metadata=positive_int(
        "differential heads of the B7 grid (its reference advises >= 8); its models have twice as many heads"))
    diff_lr_factors: tuple[float, ...] = dataclasses.field(default=(0.5, 1.0, 2.0), metadata=number_list(
        0.0, "Differential Attention's learning rates in the B7 grid, as multiples of --lr"))
    b7_seeds: int | None = dataclasses.field(default=None, metadata=optional(positive_int(
        "seeds of the B7 grid (none: as many as --seeds)")))
    gpus: float = 0.0  # the share of a GPU each run asks for when the runs use CUDA (not a flag: the budget's)

    def __post_init__(self):
        check_config(self)
        from qkdyn.empirical.data.text_bpe import MIN_VOCAB

        if self.tokenizer == "bpe" and self.vocab_size < MIN_VOCAB:
            raise InputError(f"must be >= {MIN_VOCAB} for byte-level BPE, got {self.vocab_size}", "vocab_size")
        if self.block_size is not None and self.block_size < 2:
            raise InputError(f"must be at least 2, got {self.block_size}", "block_size")
        if self.mqar_tasks and len(self.mqar_steps) not in (1, len(self.mqar_tasks)):
            raise InputError(f"has {len(self.mqar_steps)} step counts for {len(self.mqar_tasks)} MQAR task(s) "
                             f"({','.join(self.mqar_tasks)}): give one for every task or one per task", "mqar_steps")

    def mqar_steps_of(self, task: str) -> int:
        """The steps of ``task``'s MQAR runs (``mqar_steps``: one for all, or one per task in order)."""
        return self.mqar_steps[0] if len(self.mqar_steps) == 1 else self.mqar_steps[self.mqar_tasks.index(task)]


@dataclasses.dataclass(frozen=True)
class CoupledRun:
    """One training run of the study (LM or MQAR), held by a :class:`qkdyn.studies.RunSpec` whose
    config is these fields as nested JSON (:meth:`to_config`, :meth:`from_config`)."""

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
    val_fraction: float = 0.05
    n_head: int | None = None  # attention heads (default: the preset's); the B7 grid's models have 2 x diff_heads

    @property
    def name(self) -> str:
        """Readable prefix plus the hash of every field (:mod:`qkdyn.empirical.coupled.identity`)."""
        from qkdyn.empirical.coupled.identity import run_key

        data = Path(self.data).name or self.data
        tok = f"-{self.tokenizer}{self.vocab_size}" if self.task == "lm" and self.tokenizer == "bpe" else ""
        length = "" if self.train.max_steps == self.base_steps else f"-x{self.train.max_steps}"
        heads = f"-h{self.n_head}-lr{self.train.lr:g}" if self.n_head else ""
        return (f"{self.task}-{data}{tok}-{self.preset}{heads}-{self.variant}-n{self.attention.steps}"
                f"-s{self.train.seed}{length}-{run_key(self)}")

    def to_config(self) -> dict:
        """The run as the config of a :class:`qkdyn.studies.RunSpec`: ``kind`` ``train`` and every field,
        the attention and training configs nested as dicts (:meth:`from_config` inverts it)."""
        return {"kind": "train", **dataclasses.asdict(self)}

    @classmethod
    def from_config(cls, config: dict) -> CoupledRun:
        """The run of a spec's config (:meth:`to_config`); each config checks its own fields, and a
        missing or unknown field is an InputError."""
        fields = {k: v for k, v in config.items() if k != "kind"}
        try:
            return cls(**{**fields, "attention": AttentionConfig(**fields["attention"]),
                          "train": TrainConfig(**fields["train"])})
        except (KeyError, TypeError) as exc:
            raise InputError(f"the spec is not a coupled-study run ({type(exc).__name__}: {exc})", "spec") from None


def _on_cuda(device: str) -> bool:
    """Whether runs on ``device`` ("auto", "cpu", "cuda", "cuda:1", ...) use a GPU."""
    if device == "auto":
        import torch

        return torch.cuda.is_available()
    return device.startswith("cuda")


def _train_config(study: StudyConfig, steps: int, lr: float, batch_size: int, seed: int,
                  evals: int | None = None) -> TrainConfig:
    """Warm-up 10%, cosine to lr / 10, ``evals`` evaluations (default the study's ``evals_per_run``) and
    as many checkpoints."""
    interval = max(1, steps // (evals or study.evals_per_run))
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
           coupling_steps: int = 1, preset: str | None = None, horizon: str = "step", n_head: int | None = None,
           lr: float | None = None) -> CoupledRun:
    """One LM run of the study (``steps`` defaults to the study's ``lm_steps``, ``n_head`` to the preset's,
    ``lr`` to the study's ``lm_lr``)."""
    attention = dataclasses.replace(LM_VARIANTS[variant], steps=coupling_steps, horizon=horizon)
    cfg = _train_config(study, steps or study.lm_steps, lr or study.lm_lr, study.batch_size, seed)
    return CoupledRun("lm", corpus, variant, attention, cfg, preset or study.preset, study.eval_tokens,
                      study.tokenizer, study.vocab_size, study.block_size, study.lm_steps, study.val_fraction, n_head)


def b7_heads(study: StudyConfig) -> int:
    """The heads of the B7 grid's models: 2 x ``diff_heads`` (InputError when they do not divide the
    preset's d_model)."""
    from qkdyn.empirical.coupled.model import PRESETS

    n_head, d_model = 2 * study.diff_heads, PRESETS[study.preset]["d_model"]
    if d_model % n_head:
        raise InputError(f"gives 2 x {study.diff_heads} = {n_head} heads, which do not divide the {study.preset} "
                         f"preset's d_model {d_model}", "diff_heads")
    return n_head


def b7_runs(study: StudyConfig) -> list[CoupledRun]:
    """The B7 grid (module docstring): Differential Attention at each learning rate of its sweep beside
    standard and coupled Euler at the study's, all at 2 x ``diff_heads`` heads; none without ``diff``."""
    if "diff" not in study.variants:
        return []
    n_head = b7_heads(study)
    runs = []
    for seed in range(study.b7_seeds or study.seeds):
        runs += [lm_run(study, study.coherent, v, seed, n_head=n_head) for v in B7_VARIANTS if v != "diff"]
        runs += [lm_run(study, study.coherent, "diff", seed, n_head=n_head, lr=study.lm_lr * factor)
                 for factor in dict.fromkeys(study.diff_lr_factors)]
    return runs


def study_runs(study: StudyConfig) -> list[CoupledRun]:
    """The runs of the main grid, the B7 grid (or of the scale trend, when ``study.trend``), longest (MQAR)
    first."""
    seeds = range(study.seeds)
    if study.trend:
        return [lm_run(study, study.coherent, v, s, preset=p) for p in study.trend_presets for s in seeds
                for v in TREND_VARIANTS]
    runs = []
    for task in study.mqar_tasks:
        steps = study.mqar_steps_of(task)
        for seed in seeds:
            for variant in MQAR_VARIANTS:
                cfg = _train_config(study, steps, study.mqar_lr, study.mqar_batch_size, seed,
                                    study.mqar_evals_per_run)
                runs.append(CoupledRun("mqar", task, variant, LM_VARIANTS[variant], cfg, study.preset,
                                       study.eval_tokens, base_steps=steps))
    for corpus in corpora(study):
        variants = [v for v in study.variants if v != "diff"] if corpus == study.coherent else [
            v for v in study.variants if v in study.heterogeneous_variants]
        for seed in seeds:
            runs += [lm_run(study, corpus, variant, seed) for variant in variants]
    runs += b7_runs(study)
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


def matched_runs(study: StudyConfig) -> list[CoupledRun]:
    """The compute-matched standard runs (see :func:`matched_steps`; a function of the study's config
    alone, so a changed config never reuses another's), base-length ones left out."""
    lengths = sorted({n for n in matched_steps(study).values() if n != study.lm_steps})
    return [lm_run(study, study.coherent, "standard", s, steps=n) for n in lengths for s in range(study.seeds)]




# ---- the study as a registered study (qkdyn.studies) ------------------------------------------------

def count_model_spec(study_name: str, corpus: str, study: StudyConfig):
    """The plan step that fits the count models of one corpus (the LM preconditions' floor) on the
    training split of ``study``'s tokens, scored on its validation split."""
    tok = f"bpe{study.vocab_size}" if study.tokenizer == "bpe" else "byte"
    return RunSpec.make(study_name, f"count-{Path(corpus).name or corpus}-{tok}-val{study.val_fraction:g}",
                        kind="count", data=corpus, tokenizer=study.tokenizer,
                        vocab_size=study.vocab_size if study.tokenizer == "bpe" else 256, val_fraction=study.val_fraction)


#: the study's budgets, declared here once. ``quick`` checks the pipeline in seconds (its models
#: learn nothing: every language-modelling claim is inconclusive by the count-model floor);
#: ``cpu`` is the pilot's regime (106 runs, about three CPU-hours from the pilot's per-run costs; docs/coupled.md,
#: "The CPU regime"); ``gpu`` is B1 on one H100 in one command (ten runs at a time, each asking for a tenth of it);
#: ``paper`` the paper's 60M recipe (a cluster: docs/coupled.md, "The paper's runs").
BUDGETS = {
    "quick": StudyConfig(coherent="pydocs", heterogeneous="", tokenizer="byte", seeds=2,
                         variants=("standard", "coupled-euler", "mlp-only-q"), lm_steps=3, batch_size=2, block_size=32,
                         eval_tokens=1024, sweep_steps=(), efficiency_budgets=(2.0,), mqar_tasks=("easy",), mqar_steps=(3,),
                         mqar_batch_size=4, evals_per_run=1, mqar_evals_per_run=1, device="cpu"),
    # cpu: the run length and seeds the committed pilot chose (figures/coupled/pilot/pilot.md; a test checks
    # they agree), evaluated every 150 steps as the pilot was
    # MQAR: easy 1000 steps, medium 2000 (docs/coupled.md, "MQAR"): at 1000 steps medium's warm-up + cosine
    # decays before its transition (recall stays at 0.08-0.09); a 3000-step schedule crossed 0.99 by step 1000
    "cpu": StudyConfig(coherent="pydocs", heterogeneous="", tokenizer="byte", val_fraction=0.02, seeds=5,
                       lm_steps=1200, lm_lr=6e-3, batch_size=16, sweep_steps=(7,), efficiency_budgets=(2.4,),
                       mqar_tasks=("easy", "medium"), mqar_steps=(1000, 2000), mqar_batch_size=64, mqar_lr=3e-3,
                       evals_per_run=8, device="cpu"),
    # B1 on one H100 in one command (scripts/coupled_gpu.py, docs/coupled.md "The GPU plan"): standard vs
    # coupled Euler at 4M, 10 seeds (the 1% effect at the pilot's paired sd 0.01 with 80% power), 2900 steps of
    # 32 x 512 bytes = 47.5M bytes, under one epoch of `kernel`'s 49.0M training bytes; the script lowers the
    # steps to what its calibration on the device says fits
    "gpu": StudyConfig(preset="4M", coherent="kernel", heterogeneous="", tokenizer="byte", val_fraction=0.02,
                       variants=("standard", "coupled-euler"), seeds=10, lm_steps=2900, batch_size=32,
                       block_size=512, lm_lr=2e-3, eval_tokens=2**19, sweep_steps=(), mqar_tasks=(),
                       match_compute=False, efficiency_budgets=(), evals_per_run=8, gpus=1 / 10),
    "paper": StudyConfig(preset="60M", coherent="pydocs", heterogeneous="nlp-corpus", seeds=5, lm_steps=20000,
                         batch_size=16, grad_accum=4, block_size=1024, lm_lr=6e-4, mqar_tasks=("easy", "medium"),
                         mqar_steps=(20000,), compile=True, evals_per_run=20, gpus=1.0),
}


@dataclasses.dataclass
class CoupledStudy(Study[StudyConfig]):
    """Paper B's study as a :class:`qkdyn.studies.Study`: ``overrides`` (StudyConfig fields, the
    flags of ``qkdyn compare-coupled``) replace the budget's values. The plan: one count-model
    step per corpus, the main grid (:func:`study_runs`) and the compute-matched standard runs
    (:func:`matched_runs`: step counts computed from the config, so the tokens-to-target ladder is
    planned up front, not after a first phase). A run's record holds its ``result.json`` summary,
    its evaluation curve and its ablations, so the claims come from the records alone."""

    overrides: dict = dataclasses.field(default_factory=dict)

    name = "coupled"
    title = "Coupled query-key dynamics (paper B)"
    config_class = StudyConfig
    budgets = BUDGETS
    #: a training run's folder: its identity (:data:`.identity.RECORD`), the :class:`qkdyn.runs.RunDir` files and
    #: its ablations (:data:`.ablation.FILE`); a count-model step writes nothing
    outputs = (RECORD, CHECKPOINT, METRICS, RESULT, "ablation.json")
    #: a count-model step's perplexities (add-one and interpolated counts: finite), and a training run's record
    #: (:class:`qkdyn.runs.RunRecord`, its evaluations): a diverged LM run's loss and perplexity may be NaN or
    #: infinite (the analysis says "not finite"), never below their floor; an MQAR accuracy is a share
    schema = {
        "count-*": {"count_model.unigram_ppl": PERPLEXITY, "count_model.bigram_ppl": PERPLEXITY,
                    "count_model.discount": FRACTION, "count_model.train_tokens": COUNT, "count_model.val_targets": COUNT,
                    "count_model.vocab": COUNT, "data": Text(), "tokenizer": Text()},
        **{f"{task}-*": {**RUN_RECORD, "config.train.seed": SEED, "config.train.max_steps": COUNT,
                         "details.evals[].step": COUNT, **fields} for task, fields in (
            ("lm", {"final.val_loss?": Number(0, finite=False), "final.val_ppl": Number(1, finite=False),
                    "details.evals[].val_loss?": Number(0, finite=False), "details.evals[].val_ppl": Number(1, finite=False)}),
            ("mqar", {"final.mqar_acc": FRACTION}))},
    }

    def config(self, budget: str) -> StudyConfig:
        """The budget's StudyConfig with the overrides (an unknown budget: InputError, nearest name)."""
        return dataclasses.replace(self.budget(budget), **self.overrides)

    def specs(self, budget: str) -> list[CoupledRun]:
        study = self.config(budget)
        return study_runs(study) + ([] if study.trend else matched_runs(study))

    def plan(self, budget: str):
        study = self.config(budget)
        gpus = study.gpus if _on_cuda(study.device) else 0.0
        counts = [count_model_spec(self.name, c, study) for c in corpora(study)]
        return counts + [RunSpec.make(self.name, s.name, cpus=1, gpus=gpus, **s.to_config())
                         for s in self.specs(budget)]

    def claim_ids(self, budget: str) -> tuple[str, ...]:
        """The claims the plan's runs make (what is inconclusive while some are missing)."""
        study = self.config(budget)
        if study.trend:
            return tuple(f"T-{p}" for p in study.trend_presets)
        v, ids = set(study.variants), []
        pairs = [("B1", {"standard"}), ("B2", set(MLP_READINGS_KINDS)), ("B3", set(MLP_READINGS_KINDS)),
                 ("B4", {"coupled-leapfrog"}), ("B5", set()), ("B6", {"standard"}), ("B7", {"diff"}), ("B8", {"standard"})]
        for cid, needs in pairs:
            wanted = (cid not in ("B5", "B6", "B8") or {"B5": bool(study.sweep_steps),
                      "B6": bool(study.match_compute and study.efficiency_budgets), "B8": bool(study.heterogeneous)}[cid])
            if "coupled-euler" in v and wanted and (not needs or needs & v):
                ids.append(cid)
        return tuple(ids + (["B9"] if study.mqar_tasks else []))

    def check(self, spec) -> None:
        """Any run a StudyConfig can plan (the command plans from flags, not only from budgets)."""
        if spec.params.get("kind") == "count":
            return
        CoupledRun.from_config(spec.params)

    def measure(self, spec, scratch: Path) -> dict:
        """A count-model step, or one training run in ``scratch`` (resumed if interrupted; refused if
        ``scratch`` holds another configuration's run): its summary, evaluation curve and ablations."""
        from qkdyn.empirical.coupled.experiment import run_lm, run_mqar
        from qkdyn.empirical.coupled.identity import claim, run_record

        p = spec.params
        if p["kind"] == "count":
            from qkdyn.empirical.coupled.count_models import count_model_perplexities
            from qkdyn.empirical.coupled.experiment import lm_splits

            train, val, _, vocab = lm_splits(p["data"], p["tokenizer"], p["vocab_size"], p["val_fraction"])
            return {"count_model": count_model_perplexities(train, val, vocab), "data": p["data"],
                    "tokenizer": p["tokenizer"]}
        run = CoupledRun.from_config(p)
        claim(scratch, run_record(run))
        if run.task == "lm":
            run_lm(run.data, run.preset, run.attention, run.train, str(scratch), block_size=run.block_size,
                   eval_tokens=run.eval_tokens, val_fraction=run.val_fraction, tokenizer=run.tokenizer,
                   vocab_size=run.vocab_size, n_head=run.n_head)
        else:
            run_mqar(run.data, run.preset, run.attention, run.train, str(scratch))
        return result_of(scratch)

    def _analysis(self, records, budget: str) -> dict:
        from qkdyn.empirical.coupled.analysis import analyse, as_run, trend
        from qkdyn.empirical.coupled.count_models import key

        study = self.config(budget)
        counts, runs = {}, []
        for r in records:
            try:
                if r.spec.params["kind"] == "count":
                    counts[key(r.result["data"], r.result["tokenizer"], r.result["count_model"]["vocab"])] = \
                        r.result["count_model"]
                else:
                    runs.append(as_run(r.result))
            except (KeyError, TypeError, AttributeError) as exc:
                raise InputError(f"the record of run {r.spec.name} is damaged ({type(exc).__name__}: {exc}); delete "
                                 f"{r.scratch}.json to run it again") from None
        if study.trend:
            return trend(runs, study.coherent, counts)
        return analyse(runs, study.coherent, study.heterogeneous, matched_steps(study), counts)

    def claims(self, records, budget: str):
        return self._analysis(records, budget)["claims"]

    def report(self, records, claims, budget: str, figures: Path) -> dict:
        """The plots, the tables and ``README-section.md`` (:mod:`qkdyn.empirical.coupled.report`)."""
        from qkdyn.empirical.coupled import report
        from qkdyn.empirical.coupled.analysis import as_run

        runs = [as_run(r.result) for r in records if r.spec.params["kind"] != "count"]
        context = report.run_context(runs, self.config(budget), budget)
        return report.render(self._analysis(records, budget), claims, context, Path(figures))

    def context(self, budget: str) -> dict:
        study = self.config(budget)
        return {"budget": budget, **{k: list(v) if isinstance(v, tuple) else v for k, v in vars(study).items()}}


#: the variant names of the MLP-only readings (claims B2 and B3)
MLP_READINGS_KINDS = ("mlp-only", "mlp-only-shared", "mlp-only-q")


def result_of(run_dir: Path) -> dict:
    """A finished run's record (:class:`qkdyn.runs.RunRecord`, as a dict): ``result.json`` with its
    evaluation curve (``details.evals``, from ``metrics.jsonl``) and the changes of its ablations
    (``details.ablation``, from ``ablation.json``)."""
    from qkdyn.empirical.coupled.ablation import FILE

    from qkdyn.runs import METRICS, RESULT, read_record

    record = read_record(run_dir / RESULT)
    evals = [e for e in read_metrics(run_dir / METRICS) if e.get("kind") == "eval"]
    details = {**record.details, "evals": evals, "ablation": read_json(run_dir / FILE)["delta"]}
    return dataclasses.replace(record, details=details).to_dict()
