"""Run configurations: the fields of one training run, and the named presets.

``paper-<task>`` (the equal-rate arm) and ``paper-<task>-faster`` (the faster-QK arm) follow the
authors' notebooks, whose two arms differ in more than the QK rate (weight decay, base rate, epochs):
each preset's comment lists what remains different (docs/authors-experiments.md collects them); ``cpu-*`` presets are sized so that one run of the CPU study takes about a minute on one
core; ``tiny`` is for tests. Any field can be overridden from the command line.
"""
from __future__ import annotations

import dataclasses

from qkdyn.errors import InputError

TASKS = ("hatexplain", "sva", "squad", "brown-sva", "vader")


@dataclasses.dataclass
class RunConfig:
    task: str = "vader"
    data: str = ""  # path; "" = the registry-fetched copy (brown-sva, vader only)
    # model
    d_model: int = 64
    n_head: int = 4
    n_layer: int = 1
    d_mlp: int = 256  # 0 = attention-only
    layernorm: bool = False
    readout: str = "last"
    max_len: int = 64
    vocab_size: int = 10000  # cap on the word vocabulary (specials included)
    min_count: int = 2
    # optimisation
    optimizer: str = "adamw"  # adamw | sgd
    lr: float = 1e-3
    weight_decay: float = 0.01
    momentum: float = 0.9  # sgd only
    qk_lr_mult: float = 1.0
    qk_ramp_steps: int = 0  # >0: ramp the QK multiplier linearly from 1 over this many steps
    qk_embedding: bool = False  # put the token embedding in the QK group (authors' HateXplain code)
    warmup_frac: float = 0.1
    epochs: float = 3.0
    max_steps: int = 0  # >0 overrides epochs
    batch_size: int = 32
    grad_clip: float = 1.0  # 0 = off
    seed: int = 0
    # bookkeeping
    eval_every: int = 200
    eval_examples: int = 500  # dev examples scored at each evaluation during training
    ckpt_every: int = 200
    final_examples: int = 0  # >0: cap on dev/test examples in the final evaluation
    # task specifics
    vader_margin: float = 0.5
    squad_window: int = 200
    max_answer_len: int = 16
    # metric thresholds (documented defaults; curves are reported as well)
    concentration: float = 0.5
    confidence: float = 0.9
    # the authors' notebooks (one block, kept last): head width, residual stream, QK parts, embedding rate
    head_dim: int = 0  # width of each head; 0 = d_model / n_head
    residual: bool = True  # False: no residual stream (their SVA block)
    qk_params: str = ""  # comma list of q,k,q_bias,k_bias,tok_emb,pos_emb; "" = q,k weights+biases (+tok_emb)
    emb_lr_mult: float = 1.0  # != 1: token embedding in its own group at this multiple, no weight decay
    metrics: str = "eraser"  # "authors": also their attention-mass and DTAP definitions (evaluate.py)
    verb_visible: bool = False  # brown-sva: the authors' variant, verb in place then <cls> (data/brown.py)


PRESETS: dict[str, dict] = {
    # HateXplain, both arms of HateXplain_{Same_LR,Faster_QK_LR}_Final_Config.ipynb: 1 layer, d_model 64,
    # 4 heads of width 64, MLP 256, residual, no LayerNorm, AdamW lr 5e-5, cosine with 10% warm-up,
    # 30 epochs, batch 32; faster arm: token embedding + W_Q, W_K (not their biases) at 30x and weight
    # decay 1e-3; same arm: weight decay 1e-4. Remaining differences: a word vocabulary (30k cap) instead
    # of BERT wordpieces (offline); gradient clipping off as theirs; max_len 128 as their padding.
    "paper-hatexplain": dict(task="hatexplain", d_model=64, n_head=4, head_dim=64, n_layer=1, d_mlp=256,
                             max_len=128, vocab_size=30522, optimizer="adamw", lr=5e-5, weight_decay=1e-4,
                             warmup_frac=0.1, epochs=30, batch_size=32, grad_clip=0.0, qk_params="q,k,tok_emb"),
    "paper-hatexplain-faster": dict(task="hatexplain", d_model=64, n_head=4, head_dim=64, n_layer=1, d_mlp=256,
                                    max_len=128, vocab_size=30522, optimizer="adamw", lr=5e-5, weight_decay=1e-3,
                                    warmup_frac=0.1, epochs=30, batch_size=32, grad_clip=0.0, qk_lr_mult=30,
                                    qk_params="q,k,tok_emb"),
    # SVA, {Baseline,Faster}_SVA_Train+heatmap+Eval.ipynb: attention-only, NO residual, 4 heads of width 64
    # on d_model 64, SGD momentum 0.99, lr 5e-4, weight decay 1e-5, cosine with 10% warm-up, 15 epochs,
    # no clipping; faster arm: embeddings, positions, Q/K weights and biases at 100x. Remaining
    # differences: their 10/90 train/test split (X_train = sample(frac=0.1)) is not applied (the task's
    # own split is used); batch 32 assumed.
    "paper-sva": dict(task="sva", d_model=64, n_head=4, head_dim=64, n_layer=1, d_mlp=0, residual=False,
                      max_len=64, optimizer="sgd", lr=5e-4, momentum=0.99, weight_decay=1e-5, warmup_frac=0.1,
                      epochs=15, batch_size=32, grad_clip=0.0, qk_params="q,k,q_bias,k_bias,tok_emb,pos_emb"),
    "paper-sva-faster": dict(task="sva", d_model=64, n_head=4, head_dim=64, n_layer=1, d_mlp=0, residual=False,
                             max_len=64, optimizer="sgd", lr=5e-4, momentum=0.99, weight_decay=1e-5,
                             warmup_frac=0.1, epochs=15, batch_size=32, grad_clip=0.0, qk_lr_mult=100,
                             qk_params="q,k,q_bias,k_bias,tok_emb,pos_emb"),
    # SQuAD, GPT2-Squad-QA_{Same,Faster}.ipynb: 6 layers, d 300, 6 heads, MLP 1200, pre-LN, max_len 256,
    # AdamW, weight decay 0.05, clipping 0.5, batch 32. Same arm: lr 5e-4, 70 epochs. Faster arm: lr 5e-5,
    # q/k weights and biases x20, token embedding x0.1 without weight decay, 100 epochs. Remaining
    # differences: no GloVe initialisation and a word vocabulary instead of GPT-2 BPE (offline); their
    # OneCycle schedule is approximated by 30% warm-up + cosine.
    "paper-squad": dict(task="squad", d_model=300, n_head=6, n_layer=6, d_mlp=1200, layernorm=True,
                        max_len=256, vocab_size=30000, optimizer="adamw", lr=5e-4, weight_decay=0.05,
                        warmup_frac=0.3, epochs=70, batch_size=32, grad_clip=0.5),
    "paper-squad-faster": dict(task="squad", d_model=300, n_head=6, n_layer=6, d_mlp=1200, layernorm=True,
                               max_len=256, vocab_size=30000, optimizer="adamw", lr=5e-5, weight_decay=0.05,
                               warmup_frac=0.3, epochs=100, batch_size=32, grad_clip=0.5, qk_lr_mult=20,
                               qk_params="q,k,q_bias,k_bias", emb_lr_mult=0.1),
    # CPU study presets (about one minute per run on one core).
    "cpu-brown-sva": dict(task="brown-sva", d_model=64, n_head=4, n_layer=1, d_mlp=0, max_len=32,
                          vocab_size=8000, optimizer="adamw", lr=1e-3, warmup_frac=0.1, epochs=3,
                          batch_size=64, eval_every=100, ckpt_every=100),
    "cpu-vader": dict(task="vader", d_model=64, n_head=4, n_layer=1, d_mlp=256, max_len=48, vocab_size=8000,
                      optimizer="adamw", lr=1e-3, warmup_frac=0.1, epochs=4, batch_size=32,
                      qk_embedding=True, eval_every=100, ckpt_every=100),
    # Tests: a few steps of a tiny model.
    "tiny": dict(d_model=16, n_head=2, n_layer=1, d_mlp=32, max_len=32, vocab_size=200, min_count=1,
                 max_steps=6, batch_size=4, eval_every=2, ckpt_every=2, eval_examples=8),
}


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
    """InputError for values no run can use."""
    positive = ("d_model", "n_head", "n_layer", "max_len", "vocab_size", "batch_size", "eval_every",
                "ckpt_every", "lr", "qk_lr_mult")
    for name in positive:
        if not getattr(cfg, name) > 0:
            raise InputError(f"--{name.replace('_', '-')} must be positive, got {getattr(cfg, name)}")
    if cfg.optimizer not in ("adamw", "sgd"):
        raise InputError(f"--optimizer must be adamw or sgd, got {cfg.optimizer!r}")
    if cfg.max_steps <= 0 and not cfg.epochs > 0:
        raise InputError("give --epochs > 0 or --max-steps > 0")
    if cfg.readout != "last" and not (cfg.readout.isdigit() and int(cfg.readout) < cfg.max_len):
        raise InputError("--readout must be 'last' or a position index below --max-len")
    if not 0 <= cfg.warmup_frac < 1:
        raise InputError("--warmup-frac must be in [0, 1)")
    if cfg.head_dim < 0:
        raise InputError(f"--head-dim must be >= 0 (0 = d_model / n_head), got {cfg.head_dim}")
    if cfg.head_dim == 0 and cfg.d_model % cfg.n_head:
        raise InputError("--d-model must be divisible by --n-head (or give --head-dim)")
    if cfg.metrics not in ("eraser", "authors"):
        raise InputError(f"--metrics must be eraser or authors, got {cfg.metrics!r}")
    if not cfg.emb_lr_mult > 0:
        raise InputError(f"--emb-lr-mult must be positive, got {cfg.emb_lr_mult}")
    from qkdyn.empirical.circuits.optim import parse_qk_params

    try:
        parse_qk_params(cfg.qk_params)
    except ValueError as exc:
        raise InputError(f"--qk-params: {exc}")
