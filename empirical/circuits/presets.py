"""Run configurations: the fields of one training run, and the named presets.

``paper-<task>`` (the equal-rate arm) and ``paper-<task>-faster`` (the faster-QK arm) follow the
authors' notebooks, whose two arms differ in more than the QK rate (weight decay, base rate, epochs,
the frozen MLP of the faster HateXplain arm), as do ``paper-hatexplain-4layer[-faster]`` (their 4-layer
HateXplain notebooks); ``paper-hatexplain-faster-mlp`` (the 1-layer faster arm with its MLP trained, as
the 4-layer notebook groups it) and ``paper-squad-qk20``, ``paper-squad-slow-rest`` (faster QK alone,
and the SQuAD faster arm's slower everything else alone) are qkdyn's readings of those arms.
docs/authors-experiments.md lists every field with its notebook cell and what remains different, with
the reason. ``cpu-*`` presets are sized so that one run of the CPU study takes about a minute on one
core; ``tiny`` is for tests. Any field can be overridden from the command line.
"""
from __future__ import annotations

import dataclasses

from qkdyn.empirical.circuits.vocab import SPECIALS

from qkdyn.configflags import (
    at_least,
    check_config,
    choice,
    device,
    existing_path,
    flag,
    fraction,
    int_at_least,
    non_negative,
    non_negative_int,
    only_when,
    positive,
    positive_int,
    probability,
    text,
)
from qkdyn.configflags import seed as seed_domain
from qkdyn.errors import InputError

TASKS = ("hatexplain", "sva", "squad", "brown-sva", "vader", "brown-qa")
#: the parts ``--frozen`` may name (:data:`qkdyn.empirical.circuits.optim.FROZEN` tells their parameters)
FROZEN_PARTS = ("mlp", "layernorm")
#: the seeds every notebook trains (HateXplain cell 60, SVA cell 49, SQuAD cell 4 of each notebook)
NOTEBOOK_SEEDS = (1234, 1235, 1236, 1237, 1238)
#: the authors' SQuAD loader: 60000 training questions (TRAIN_SUBSET_SIZE) in batches of 32 (cell 4)
_SQUAD_BATCHES = -(-60000 // 32)


@dataclasses.dataclass
class RunConfig:
    task: str = dataclasses.field(default="vader", metadata=choice(TASKS, "task"))
    data: str = dataclasses.field(default="", metadata=existing_path(
        "data file or directory ('': the registry-fetched copy, brown-sva, brown-qa and vader only)"))
    # model
    d_model: int = dataclasses.field(default=64, metadata=positive_int("model width"))
    n_head: int = dataclasses.field(default=4, metadata=positive_int("attention heads"))
    n_layer: int = dataclasses.field(default=1, metadata=positive_int("layers"))
    d_mlp: int = dataclasses.field(default=256, metadata=non_negative_int("MLP width, 0 = attention-only"))
    layernorm: bool = dataclasses.field(default=False, metadata=flag("LayerNorm in each block"))
    readout: str = dataclasses.field(default="last", metadata=text("read-out position: last or an index"))
    max_len: int = dataclasses.field(default=64, metadata=positive_int("tokens per example"))
    vocab_size: int = dataclasses.field(default=10000, metadata=int_at_least(
        len(SPECIALS) + 1, f"cap on the word vocabulary (its {len(SPECIALS)} specials included, so at least one word)"))
    min_count: int = dataclasses.field(default=2, metadata=non_negative_int("minimum word count"))
    # optimisation
    optimizer: str = dataclasses.field(default="adamw", metadata=choice(("adamw", "sgd"), "optimiser"))
    lr: float = dataclasses.field(default=1e-3, metadata=positive("base learning rate"))
    weight_decay: float = dataclasses.field(default=0.01, metadata=non_negative("weight decay"))
    momentum: float = dataclasses.field(default=0.9, metadata=only_when(
        fraction("SGD momentum (sgd only)", high_open=True), lambda c: c.optimizer == "sgd", "with --optimizer sgd"))
    qk_lr_mult: float = dataclasses.field(default=1.0, metadata=positive("QK learning-rate multiplier"))
    qk_ramp_steps: int = dataclasses.field(default=0,
        metadata=non_negative_int(">0: ramp the QK multiplier linearly from 1 over this many steps"))
    qk_embedding: bool = dataclasses.field(default=False,
        metadata=flag("put the token embedding in the QK group (authors' HateXplain code)"))
    warmup_frac: float = dataclasses.field(default=0.1,
        metadata=fraction("warm-up share of the steps", high_open=True))
    epochs: float = dataclasses.field(default=3.0, metadata=non_negative("epochs"))
    max_steps: int = dataclasses.field(default=0, metadata=non_negative_int(">0 overrides --epochs"))
    batch_size: int = dataclasses.field(default=32, metadata=positive_int("batch size"))
    grad_clip: float = dataclasses.field(default=1.0, metadata=non_negative("gradient-norm clip, 0 = off"))
    seed: int = dataclasses.field(default=0, metadata=seed_domain("seed"))
    # bookkeeping
    eval_every: int = dataclasses.field(default=200, metadata=positive_int("steps between evaluations",
                                                                           flag="--eval-interval"))
    eval_examples: int = dataclasses.field(default=500,
        metadata=positive_int("dev examples scored at each evaluation during training"))
    ckpt_every: int = dataclasses.field(default=200, metadata=positive_int("steps between checkpoints",
                                                                           flag="--ckpt-interval"))
    final_examples: int = dataclasses.field(default=0,
        metadata=non_negative_int(">0: cap on dev/test examples in the final evaluation"))
    # task specifics
    vader_margin: float = dataclasses.field(default=0.5,
        metadata=non_negative("VADER |mean rating| below which items are dropped"))
    squad_window: int = dataclasses.field(default=200, metadata=positive_int("SQuAD context window"))
    max_answer_len: int = dataclasses.field(default=16, metadata=positive_int("longest answer"))
    # metric thresholds (documented defaults; curves are reported as well)
    concentration: float = dataclasses.field(default=0.5, metadata=probability("attention concentration threshold"))
    confidence: float = dataclasses.field(default=0.9, metadata=probability("confidence threshold"))
    # the authors' notebooks (one block, kept last): head width, residual stream, QK parts, embedding rate
    head_dim: int = dataclasses.field(default=0, metadata=non_negative_int("width of each head; 0 = d_model / n_head"))
    residual: bool = dataclasses.field(default=True, metadata=flag("residual stream (off: the authors' SVA block)"))
    qk_params: str = dataclasses.field(default="", metadata=text(
        "comma list of q,k,q_bias,k_bias,tok_emb,pos_emb in the QK group; empty = q,k weights and biases (+tok_emb)"))
    emb_lr_mult: float = dataclasses.field(default=1.0, metadata=positive(
        "!= 1: token embedding in its own group at this multiple of the rate, no weight decay"))
    metrics: str = dataclasses.field(default="eraser", metadata=choice(
        ("eraser", "authors"), "authors: also their attention-mass and DTAP definitions"))
    verb_visible: bool = dataclasses.field(default=False, metadata=flag(
        "brown-sva: the authors' variant, verb in place then <cls>"))
    frozen: str = dataclasses.field(default="", metadata=text(
        "comma list of parts left out of the optimiser, kept at their initial values: mlp, layernorm"))
    dropout: float = dataclasses.field(default=0.0, metadata=fraction(
        "dropout on the embeddings, the attention weights and the MLP (the authors' SQuAD: 0.2)", high_open=True))
    label_smoothing: float = dataclasses.field(default=0.0, metadata=fraction(
        "label smoothing of the cross-entropy (the authors' SQuAD: 0.1)", high_open=True))
    accum_steps: int = dataclasses.field(default=1, metadata=positive_int(
        "batches per optimiser step (gradient accumulation; effective batch = batch size x this)"))
    schedule: str = dataclasses.field(default="cosine", metadata=choice(
        ("cosine", "onecycle"), "learning-rate schedule: warm-up + cosine, or torch's OneCycleLR (the authors' SQuAD)"))
    schedule_span: float = dataclasses.field(default=1.0, metadata=at_least(
        1.0, "schedule length / optimiser steps taken (the authors' SQuAD: 2, half its cycle runs)"))
    tie_embeddings: bool = dataclasses.field(default=False, metadata=flag(
        "question answering: the output layer shares the token embedding's weights (the authors' SQuAD)"))
    init: str = dataclasses.field(default="normal", metadata=choice(
        ("normal", "xavier"), "normal: N(0, 0.02) weights, zero biases; xavier: the authors' SQuAD initialisation"))
    # run control
    target_loss: float = dataclasses.field(default=0.0, metadata=non_negative(
        ">0: stop at the first evaluation whose training loss is at most this (matched training loss)"))
    device: str = dataclasses.field(default="cpu", metadata=device("cpu, cuda, cuda:N or auto (bf16 autocast on CUDA)"))


#: the notebooks' recipes (docs/authors-experiments.md "Transformer-scale recipes" lists every field with
#: its notebook cell, and what still differs with the reason; tests/empirical/circuits/test_circuits_train.py holds the
#: table transcribed from the cells).
_HATEXPLAIN = dict(  # HateXplain_{Same_LR,Faster_QK_LR}_Final_Config.ipynb: model cells 6-22, training cell 60
    task="hatexplain", d_model=64, n_head=4, head_dim=64, n_layer=1, d_mlp=256, max_len=128, vocab_size=30522,
    optimizer="adamw", lr=5e-5, warmup_frac=0.1, epochs=30, batch_size=32, grad_clip=1.0, seed=NOTEBOOK_SEEDS[0])
#: the two HateXplain arms: same (AdamW over every parameter, Same cell 60) and faster (Faster cell 60)
_HATEXPLAIN_SAME = dict(_HATEXPLAIN, weight_decay=1e-4, qk_params="q,k,tok_emb")
_HATEXPLAIN_FASTER = dict(_HATEXPLAIN, weight_decay=1e-3, qk_lr_mult=30, qk_params="q,k,tok_emb")
_SVA = dict(  # {Baseline,Faster}_SVA_Train+heatmap+Eval.ipynb: block cell 12, padding cells 20/33, training cell 49
    task="sva", d_model=64, n_head=4, head_dim=64, n_layer=1, d_mlp=0, residual=False, max_len=128,
    optimizer="sgd", lr=5e-4, momentum=0.99, weight_decay=1e-5, warmup_frac=0.1, epochs=15, batch_size=32,
    grad_clip=0.0, seed=NOTEBOOK_SEEDS[0])
_SQUAD = dict(  # GPT2-Squad-QA_Same.ipynb cell 4 (constants, model, loop, optimiser); _Faster.ipynb cells 4, 5
    task="squad", d_model=300, n_head=6, n_layer=6, d_mlp=1200, layernorm=True, max_len=256, vocab_size=30000,
    max_answer_len=50, squad_window=200, optimizer="adamw", weight_decay=0.05, batch_size=32, accum_steps=2,
    grad_clip=0.5, dropout=0.2, label_smoothing=0.1, schedule="onecycle", schedule_span=2.0, tie_embeddings=True,
    init="xavier", emb_lr_mult=0.1, qk_params="q,k,q_bias,k_bias", seed=NOTEBOOK_SEEDS[0])  # emb: the faster arm's
#: the same SQuAD arm as its notebook runs without GloVe: one group (GPT2-Squad-QA_Same.ipynb cell 4, the
#: ``else`` branch of ``if pretrained_embeddings is not None``)
_SQUAD_SAME = dict(_SQUAD, lr=5e-4, epochs=70, warmup_frac=1000 / (_SQUAD_BATCHES * 70), emb_lr_mult=1.0)

PRESETS: dict[str, dict] = {
    # HateXplain. Same arm: AdamW over every parameter, weight decay 1e-4. Faster arm: weight decay 1e-3,
    # token embedding + W_Q, W_K at 30x, their biases and the positions at 1x, and the MLP left out of the
    # optimiser: it stays at its initialisation (`frozen`, as the 1-layer cell 60 is written).
    # `paper-hatexplain-faster-mlp` is the other reading of that arm: the MLP trained at 1x, as the 4-layer
    # notebook's groups have it (`--frozen mlp` freezes it in the same arm too).
    "paper-hatexplain": dict(_HATEXPLAIN_SAME),
    "paper-hatexplain-faster": dict(_HATEXPLAIN_FASTER, frozen="mlp"),
    "paper-hatexplain-faster-mlp": dict(_HATEXPLAIN_FASTER),
    # HateXplain_{Same_LR-4-Layers,Faster_QK_LR_Final_4-Layers}.ipynb: the 1-layer cells with n_layers=4
    # (cell 60); the faster arm's groups are built per block (W_Q, W_K of every block at 30x, b_Q, b_K at 1x)
    # and include each block's MLP at 1x, so its MLP trains.
    "paper-hatexplain-4layer": dict(_HATEXPLAIN_SAME, n_layer=4),
    "paper-hatexplain-4layer-faster": dict(_HATEXPLAIN_FASTER, n_layer=4),
    # SVA: both arms SGD momentum 0.99 over every parameter used; faster arm: embeddings, positions, Q/K
    # weights and biases at 100x.
    "paper-sva": dict(_SVA, qk_params="q,k,q_bias,k_bias,tok_emb,pos_emb"),
    "paper-sva-faster": dict(_SVA, qk_lr_mult=100, qk_params="q,k,q_bias,k_bias,tok_emb,pos_emb"),
    # SQuAD: OneCycleLR whose cycle counts batches (len(loader) x epochs) while it steps once per two
    # batches (accumulation 2), so half the cycle runs; warm-up WARMUP_STEPS = 1000 of that cycle. Same arm
    # lr 5e-4, 70 epochs, and without GloVe (as here) one AdamW group over every parameter: the token
    # embedding at 1x with weight decay (their runs loaded GloVe, which adds a 0.1x embedding group without
    # decay: `--emb-lr-mult 0.1`). Faster arm lr 5e-5, q/k weights and biases x20, the token embedding at
    # 0.1x without decay whether or not GloVe is loaded, 100 epochs. Against the same arm that is QK x2,
    # every other rate /10 (the embedding /100): mainly "slower everything else".
    "paper-squad": dict(_SQUAD_SAME),
    "paper-squad-faster": dict(_SQUAD, lr=5e-5, epochs=100, warmup_frac=1000 / (_SQUAD_BATCHES * 100), qk_lr_mult=20),
    # qkdyn's arms that separate the two changes of the faster arm, each against paper-squad at its length:
    # QK x20 alone (every other rate as the same arm), and QK x2 with every other rate /10 (the embedding
    # included; the faster arm's rates without its 100 epochs and its embedding group).
    "paper-squad-qk20": dict(_SQUAD_SAME, qk_lr_mult=20),
    "paper-squad-slow-rest": dict(_SQUAD_SAME, lr=5e-5, qk_lr_mult=20),
    # CPU study presets (about one minute per run on one core).
    "cpu-brown-sva": dict(task="brown-sva", d_model=64, n_head=4, n_layer=1, d_mlp=0, max_len=32,
                          vocab_size=8000, optimizer="adamw", lr=1e-3, warmup_frac=0.1, epochs=3,
                          batch_size=64, eval_every=100, ckpt_every=100),
    "cpu-vader": dict(task="vader", d_model=64, n_head=4, n_layer=1, d_mlp=256, max_len=48, vocab_size=8000,
                      optimizer="adamw", lr=1e-3, warmup_frac=0.1, epochs=4, batch_size=32,
                      qk_embedding=True, eval_every=100, ckpt_every=100),
    # The SQuAD-like task with exact answer spans: the paper's GPT-style decoder (pre-LN blocks, final
    # LayerNorm, MLP, output tied to the token embedding, next-token head) at a CPU-feasible size: 2 layers
    # of width 64 instead of 6 of 300 (two layers are what a match-and-copy circuit needs). Base lr 5e-4,
    # not the 2e-3 of the first probe: at 2e-3 the QK x10 and x30 arms (QK peak rate 2e-2, 6e-2) fell onto a
    # training-loss plateau at 3.10 by step 500 with attention at uniform's mass and never reached the
    # target (3 seeds each; docs/authors-experiments.md, "brown-qa"); at 5e-4 the QK x10 arm (5e-3) learns.
    # The QK multiplier ramps linearly from 1 to R over the first 2000 steps (the authors' ramped variant):
    # applied at once, QK x10 stayed on a loss plateau (2.71 at the cap in seed 1) while the ramped arm
    # reached the target at 3000 steps (docs/authors-experiments.md, "brown-qa"). 4 epochs (6220 steps) is
    # the cap of the study's runs (study.MAX_EPOCHS), and the cosine spans it.
    "cpu-brown-qa": dict(task="brown-qa", d_model=64, n_head=4, n_layer=2, d_mlp=128, layernorm=True, max_len=48,
                         vocab_size=2000, optimizer="adamw", lr=5e-4, qk_ramp_steps=2000, warmup_frac=0.1, epochs=4,
                         batch_size=16,
                         tie_embeddings=True, max_answer_len=4, eval_every=250, ckpt_every=250, eval_examples=200,
                         final_examples=1000),
    # Tests: a few steps of a tiny model.
    "tiny": dict(d_model=16, n_head=2, n_layer=1, d_mlp=32, max_len=32, vocab_size=200, min_count=1,
                 max_steps=6, batch_size=4, eval_every=2, ckpt_every=2, eval_examples=8),
}

#: the names of the presets
PRESET_NAMES = tuple(PRESETS)


def default_preset(task: str) -> str:
    """``cpu-<task>`` when it exists, else ``paper-<task>``."""
    return f"cpu-{task}" if f"cpu-{task}" in PRESETS else f"paper-{task}"


def resolve(task: str, preset: str | None, overrides: dict) -> RunConfig:
    """The preset's fields, then ``overrides`` (None values ignored), then ``task``."""
    if task not in TASKS:
        raise InputError(f"unknown task {task!r}; known: {', '.join(TASKS)}")
    name = preset or default_preset(task)
    if name not in PRESETS:
        raise InputError(f"unknown preset {name!r}; known: {', '.join(PRESETS)}")
    fields = {**PRESETS[name], **{k: v for k, v in overrides.items() if v is not None}, "task": task}
    cfg = RunConfig(**fields)
    validate(cfg)
    return cfg


def validate(cfg: RunConfig) -> None:
    """InputError for values no run can use: each field's domain, then the relations between fields."""
    check_config(cfg)
    if cfg.head_dim == 0 and cfg.d_model % cfg.n_head:
        raise InputError("--d-model must be divisible by --n-head (or give --head-dim)")
    if cfg.max_steps <= 0 and not cfg.epochs > 0:
        raise InputError("give --epochs > 0 or --max-steps > 0")
    if cfg.readout != "last" and not (cfg.readout.isdigit() and int(cfg.readout) < cfg.max_len):
        raise InputError("--readout must be 'last' or a position index below --max-len")
    from qkdyn.empirical.circuits.optim import parse_qk_params

    try:
        parse_qk_params(cfg.qk_params)
    except ValueError as exc:
        raise InputError(f"--qk-params: {exc}") from None
    unknown = [p for p in cfg.frozen.split(",") if p.strip() and p.strip() not in FROZEN_PARTS]
    if unknown:
        raise InputError(f"--frozen: unknown parts {unknown}; known: {', '.join(FROZEN_PARTS)}")
    if cfg.schedule == "onecycle" and cfg.qk_ramp_steps > 0:
        raise InputError("--qk-ramp-steps needs --schedule cosine (OneCycleLR sets each group's rate itself)")
    for name in ("eval_every", "ckpt_every"):
        if getattr(cfg, name) % cfg.accum_steps:
            raise InputError(f"--{name.replace('_every', '-interval')} must be a multiple of --accum-steps "
                             "(checkpoints and evaluations fall between optimiser steps)")


def check_sizes(cfg: RunConfig) -> None:
    """Refuse a model that cannot fit: float32 parameters P = V d + L d + n_layer (4 d^2 + 2 d d_mlp)
    with gradients and two Adam moments (16 P bytes), plus activations of one batch, about
    B L n_layer (16 d + 2 d_mlp + 3 heads L) numbers, and (question answering) B L V logits twice."""
    from qkdyn.memory import check_memory

    d, L, B, V = cfg.d_model, cfg.max_len, cfg.batch_size, cfg.vocab_size
    params = V * d + L * d + cfg.n_layer * (4 * d * d + 2 * d * cfg.d_mlp)
    activations = B * L * cfg.n_layer * (16 * d + 2 * cfg.d_mlp + 3 * cfg.n_head * L) + 2 * B * L * V
    check_memory(16 * params + 4 * activations,
                 f"d_model {d}, max_len {L}, batch {B}, vocabulary cap {V}, {cfg.n_layer} layers")
