"""Per-circuit optimiser groups and learning-rate schedules.

Group "qk": W_Q, W_K and their biases in every block (plus the token embedding when
``qk_embedding``, as in the authors' HateXplain code). Group "rest": everything else (W_V, W_O, MLP,
positions, head). The QK learning rate is ``qk_lr_mult`` times the base rate, or ramps linearly from
1x to ``qk_lr_mult``x over the first ``qk_ramp_steps`` steps (the authors' ramped variant). Both groups
follow the same schedule: linear warm-up over ``warmup`` steps, then cosine decay to 0 at ``total``.
"""
from __future__ import annotations

import torch
from torch import nn

from qkdyn.empirical.schedule import cosine_with_warmup


def qk_parameter_names(model: nn.Module, qk_embedding: bool) -> list[str]:
    """Names of the parameters in the QK group."""
    names = [n for n, _ in model.named_parameters() if ".attn.q." in n or ".attn.k." in n]
    if qk_embedding:
        names.append("tok_emb.weight")
    return names


def qk_multiplier(step: int, mult: float, ramp_steps: int) -> float:
    """QK rate / base rate at ``step``: constant ``mult``, or linear 1 -> ``mult`` over ``ramp_steps``."""
    if ramp_steps <= 0:
        return mult
    return 1.0 + (mult - 1.0) * min(1.0, step / ramp_steps)


def build_optimizer(model: nn.Module, *, optimizer: str, lr: float, weight_decay: float, momentum: float,
                    qk_lr_mult: float, qk_ramp_steps: int, qk_embedding: bool, warmup: int, total: int):
    """(optimizer, LambdaLR scheduler) with groups [qk, rest], both at base ``lr`` before the
    per-group multipliers of the scheduler."""
    qk_names = set(qk_parameter_names(model, qk_embedding))
    qk = [p for n, p in model.named_parameters() if n in qk_names]
    rest = [p for n, p in model.named_parameters() if n not in qk_names]
    groups = [{"params": qk, "name": "qk"}, {"params": rest, "name": "rest"}]
    if optimizer == "adamw":
        opt = torch.optim.AdamW(groups, lr=lr, weight_decay=weight_decay)
    elif optimizer == "sgd":
        opt = torch.optim.SGD(groups, lr=lr, momentum=momentum, weight_decay=weight_decay)
    else:
        raise ValueError(f"unknown optimizer {optimizer!r}")
    base = lambda s: cosine_with_warmup(s, warmup, total)  # noqa: E731
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, [lambda s: base(s) * qk_multiplier(s, qk_lr_mult, qk_ramp_steps), base])
    return opt, sched
