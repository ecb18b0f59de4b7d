"""The configurations of one coupled-QK run, free of torch so the command line can build its flags
from them (:mod:`qkdyn.configflags`): :class:`AttentionConfig` (which attention variant, nested in
the model's config) and :class:`TrainConfig` (the optimisation loop). Each field declares its domain;
building a config checks it and the relations between fields (InputError naming the field).
"""
from __future__ import annotations

import dataclasses

from qkdyn.configflags import (
    check_config,
    choice,
    device,
    flag,
    fraction,
    non_negative,
    non_negative_int,
    only_when,
    positive,
    positive_int,
)
from qkdyn.configflags import seed as seed_domain
from qkdyn.errors import InputError

KINDS = ("standard", "coupled", "mlp-only", "mlp-only-shared", "mlp-only-q", "diff")
#: the variants that evolve q and k by a flow before scoring
FLOW_KINDS = ("coupled", "mlp-only", "mlp-only-shared", "mlp-only-q")
#: what n integration steps span: n dt ("step") or dt ("fixed": n steps of dt / n)
HORIZONS = ("step", "fixed")
#: the hidden width of the flow's per-head MLPs: ``hidden`` units, or as wide as the head (d_head)
FIELD_WIDTHS = ("hidden", "head")
#: the context length of each model preset (torch-free, so `qkdyn lm --help` can state it; model.PRESETS reads it)
PRESET_BLOCK_SIZES = {"tiny": 128, "1M": 128, "4M": 128, "60M": 1024, "150M": 1024, "350M": 1024}
#: the keys of :data:`qkdyn.empirical.coupled.model.PRESETS` (a torch module; a test checks they agree)
PRESET_NAMES = tuple(PRESET_BLOCK_SIZES)


@dataclasses.dataclass(frozen=True)
class MQARPreset:
    """An MQAR task (:mod:`qkdyn.empirical.coupled.mqar`): vocabulary, the (sequence length, kv
    pairs) settings a model trains on (one per batch, in turn) and is scored on, the power of the
    query gaps, and whether the positions that are neither pairs nor queries hold random tokens
    (Zoology's ``random_non_queries``) or token 0."""

    vocab_size: int
    settings: tuple[tuple[int, int], ...]  # (sequence length, kv pairs)
    power_a: float = 0.01
    random_non_queries: bool = True

    @property
    def block_size(self) -> int:
        return max(t for t, _ in self.settings)


#: the MQAR tasks by name (see :mod:`qkdyn.empirical.coupled.mqar` for what each is for)
MQAR_PRESETS = {
    "small": MQARPreset(256, ((32, 8),)),
    "easy": MQARPreset(256, ((64, 4), (64, 8))),
    "medium": MQARPreset(256, ((128, 8), (128, 16))),
    "hard": MQARPreset(512, ((256, 16), (256, 32), (256, 64))),
}
MQAR_TASKS = tuple(MQAR_PRESETS)
#: the initialisation of every MQAR model (:data:`qkdyn.empirical.coupled.model.INITS`): PyTorch's
#: defaults with an untied output head; under the language models' nanoGPT init (tied head, N(0, 0.02^2))
#: the tiny model stays at the query order's positional prior (docs/coupled.md, "MQAR")
MQAR_INIT = "torch"
#: the integrators of :mod:`qkdyn.empirical.coupled.qk_flow` (a test checks they agree)
INTEGRATOR_NAMES = ("euler", "leapfrog")


def _coupled(cfg) -> bool:
    return cfg.kind == "coupled"


def _flows(cfg) -> bool:
    return cfg.kind in FLOW_KINDS


def _fixed_width(cfg) -> bool:
    return cfg.kind in FLOW_KINDS and cfg.field_width == "hidden"


_FLOWS_WORDS = f"with --attention {', '.join(FLOW_KINDS)}"


@dataclasses.dataclass(frozen=True)
class AttentionConfig:
    """Which attention variant to build, and its knobs (ignored by variants that lack them)."""

    kind: str = dataclasses.field(default="standard", metadata=choice(KINDS, "attention variant", flag="--attention"))
    integrator: str = dataclasses.field(default="euler", metadata=only_when(choice(
        INTEGRATOR_NAMES, "coupled: Euler, or leapfrog (kick-drift-kick)"), _coupled, "with --attention coupled"))
    steps: int = dataclasses.field(default=1, metadata=only_when(positive_int(
        "integration steps n (coupled, mlp-only)", flag="--coupling-steps"), _flows, _FLOWS_WORDS))
    horizon: str = dataclasses.field(default="step", metadata=only_when(choice(
        HORIZONS, "n steps of dt (step: horizon n dt) or of dt/n (fixed: horizon dt)"), _flows, _FLOWS_WORDS))
    hidden: int = dataclasses.field(default=4, metadata=only_when(positive_int(
        "hidden width of the per-head MLP f (4: ~0.1%% overhead at 60M)", flag="--coupling-hidden"), _fixed_width,
        f"{_FLOWS_WORDS} and --field-width hidden"))
    field_width: str = dataclasses.field(default="hidden", metadata=only_when(choice(
        FIELD_WIDTHS, "hidden width of f: --coupling-hidden units, or head (d_head units: f as wide as the head)"),
        _flows, _FLOWS_WORDS))
    dt_init: float = dataclasses.field(default=0.1, metadata=only_when(positive(
        "initial per-head step dt > 0"), _flows, _FLOWS_WORDS))
    field_gain: float = dataclasses.field(default=1.0, metadata=only_when(non_negative(
        "init scale of f: W1 ~ N(0, 1/d_head), W2 ~ N(0, gain^2/hidden) (1: |f(q)|/|k| ~ 0.5; 0: f's output "
        "layer zero, the flow starts as the drift q += dt k)"), _flows, _FLOWS_WORDS))

    def __post_init__(self):
        check_config(self)
        if self.kind == "mlp-only" and self.field_width == "hidden" and self.hidden % 2:
            raise InputError("must be even for mlp-only (it splits the hidden width between q and k), "
                             f"got {self.hidden}", "coupling_hidden")

    def field_hidden(self, d_head: int) -> int:
        """The hidden width of the flow's per-head MLP f for heads of width ``d_head``: ``hidden``, or
        ``d_head`` when ``field_width`` is "head"."""
        return d_head if self.field_width == "head" else self.hidden


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    max_steps: int = dataclasses.field(default=300, metadata=positive_int("optimiser steps"))
    batch_size: int = dataclasses.field(default=16, metadata=positive_int("sequences per micro-batch per process"))
    grad_accum: int = dataclasses.field(default=1, metadata=positive_int("micro-batches per step"))
    lr: float = dataclasses.field(default=3e-3, metadata=positive("peak learning rate"))
    min_lr: float = dataclasses.field(default=3e-4, metadata=non_negative("final learning rate (default lr/10)"))
    warmup_steps: int = dataclasses.field(default=30, metadata=non_negative_int(
        "warm-up steps (default 10%% of max steps)"))
    weight_decay: float = dataclasses.field(default=0.1, metadata=non_negative("AdamW weight decay"))
    beta1: float = dataclasses.field(default=0.9, metadata=fraction("AdamW beta1", high_open=True))
    beta2: float = dataclasses.field(default=0.95, metadata=fraction("AdamW beta2", high_open=True))
    grad_clip: float = dataclasses.field(default=1.0, metadata=non_negative("gradient-norm clip, 0 = off"))
    eval_interval: int = dataclasses.field(default=50, metadata=positive_int("steps between evaluations"))
    ckpt_interval: int = dataclasses.field(default=50, metadata=positive_int("steps between checkpoints"))
    log_interval: int = dataclasses.field(default=10, metadata=positive_int("steps between training-loss rows"))
    seed: int = dataclasses.field(default=0, metadata=seed_domain("seed"))
    device: str = dataclasses.field(default="auto", metadata=device("auto, cpu, cuda, cuda:1, ..."))
    compile: bool = dataclasses.field(default=False, metadata=flag("torch.compile the model"))
    progress: bool = True
    eval_at_start: bool = True  # also evaluate (and log, with the coupling strength) the initial model

    def __post_init__(self):
        check_config(self)


#: TrainConfig fields the commands derive instead of offering as flags
DERIVED = ("beta1", "beta2", "log_interval", "eval_at_start")
