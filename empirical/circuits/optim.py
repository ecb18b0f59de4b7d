"""Per-circuit optimiser groups and learning-rate schedules.

Group "qk": W_Q, W_K and their biases in every block (plus the token embedding when
``qk_embedding``), or exactly the parts named by ``qk_params`` (comma list of :data:`QK_PARTS`: the
authors' HateXplain group is ``q,k,tok_emb``, their SVA group ``q,k,q_bias,k_bias,tok_emb,pos_emb``).
Group "emb" (only when ``emb_lr_mult`` != 1, the authors' SQuAD faster arm): the token embedding at
``emb_lr_mult`` times the base rate, without weight decay. Group "rest": everything else (W_V, W_O,
MLP, positions, head). Parameters of the parts named by ``frozen`` (:data:`FROZEN`) are in no group:
they keep their initial values (the authors' faster HateXplain arm leaves its MLP out of the optimiser).
The QK learning rate is ``qk_lr_mult`` times the base rate, or ramps linearly from 1x to ``qk_lr_mult``x
over the first ``qk_ramp_steps`` steps (the authors' ramped variant).

Schedules, the same for every group, over a cycle of C = round(``span`` x ``total``) optimiser steps of
which the run takes ``total`` (the authors' SQuAD: span 2, since their cycle counts batches and steps
once per two): ``"cosine"``, linear warm-up over ``warmup`` steps, then cosine decay to 0 at C;
``"onecycle"``, torch's :class:`~torch.optim.lr_scheduler.OneCycleLR` with each group's peak rate and
its default shape (from peak / 25 up to the peak over ``warmup`` steps, then down to peak / 25e4 at C,
cosine both ways, the momentum or Adam beta1 cycled 0.95 -> 0.85 -> 0.95).
"""
from __future__ import annotations

import torch
from qkdyn.empirical.schedule import cosine_with_warmup
from torch import nn

#: the parts a ``qk_params`` list may name, and the parameter-name test of each
QK_PARTS = {
    "q": lambda n: n.endswith(".attn.q.weight"), "k": lambda n: n.endswith(".attn.k.weight"),
    "q_bias": lambda n: n.endswith(".attn.q.bias"), "k_bias": lambda n: n.endswith(".attn.k.bias"),
    "tok_emb": lambda n: n == "tok_emb.weight", "pos_emb": lambda n: n == "pos_emb.weight",
}


#: the parts ``frozen`` may name, and the parameter-name test of each
FROZEN = {"mlp": lambda n: ".mlp." in n, "layernorm": lambda n: ".ln" in n or n.startswith("ln_f.")}


def frozen_names(model: nn.Module, frozen: str) -> set[str]:
    """Names of the parameters left out of the optimiser (``frozen``: comma list of :data:`FROZEN`)."""
    parts = [p.strip() for p in frozen.split(",") if p.strip()]
    return {n for n, _ in model.named_parameters() if any(FROZEN[p](n) for p in parts)}


def parse_qk_params(spec: str) -> tuple[str, ...]:
    """``"q,k,tok_emb"`` -> its parts; "" -> (); an unknown part is a ValueError naming the known ones."""
    parts = tuple(p.strip() for p in spec.split(",") if p.strip())
    unknown = [p for p in parts if p not in QK_PARTS]
    if unknown:
        raise ValueError(f"unknown QK parts {unknown}; known: {', '.join(QK_PARTS)}")
    return parts


def qk_parameter_names(model: nn.Module, qk_embedding: bool, qk_params: str = "") -> list[str]:
    """Names of the parameters in the QK group (module docstring)."""
    parts = parse_qk_params(qk_params) or ("q", "k", "q_bias", "k_bias") + (("tok_emb",) if qk_embedding else ())
    return [n for n, _ in model.named_parameters() if any(QK_PARTS[p](n) for p in parts)]


def qk_multiplier(step: int, mult: float, ramp_steps: int) -> float:
    """QK rate / base rate at ``step``: constant ``mult``, or linear 1 -> ``mult`` over ``ramp_steps``."""
    if ramp_steps <= 0:
        return mult
    return 1.0 + (mult - 1.0) * min(1.0, step / ramp_steps)


def build_optimizer(model: nn.Module, *, optimizer: str, lr: float, weight_decay: float, momentum: float,
                    qk_lr_mult: float, qk_ramp_steps: int, qk_embedding: bool, warmup: int, total: int,
                    qk_params: str = "", emb_lr_mult: float = 1.0, frozen: str = "", schedule: str = "cosine",
                    span: float = 1.0):
    """(optimizer, scheduler) with groups [qk, rest] (and "emb" when ``emb_lr_mult`` != 1), all at
    base ``lr`` before the per-group multipliers of the scheduler; frozen parameters get
    ``requires_grad=False`` and no group."""
    qk_names = set(qk_parameter_names(model, qk_embedding, qk_params))
    emb_names = {"tok_emb.weight"} - qk_names if emb_lr_mult != 1 else set()
    left_out = frozen_names(model, frozen)
    for n, p in model.named_parameters():
        p.requires_grad_(n not in left_out)
    qk = [p for n, p in model.named_parameters() if n in qk_names - left_out]
    rest = [p for n, p in model.named_parameters() if n not in qk_names | emb_names | left_out]
    groups = [{"params": qk, "name": "qk"}, {"params": rest, "name": "rest"}]
    if emb_names:
        groups.append({"params": [p for n, p in model.named_parameters() if n in emb_names], "name": "emb",
                       "weight_decay": 0.0})
    if optimizer == "adamw":
        opt = torch.optim.AdamW(groups, lr=lr, weight_decay=weight_decay)
    elif optimizer == "sgd":
        opt = torch.optim.SGD(groups, lr=lr, momentum=momentum, weight_decay=weight_decay)
    else:
        raise ValueError(f"unknown optimizer {optimizer!r}")
    cycle = max(1, round(span * total))
    if schedule == "onecycle":
        peaks = [lr * qk_lr_mult, lr] + ([lr * emb_lr_mult] if emb_names else [])
        # torch's phases end at pct_start x C - 1: a one-step warm-up would be an empty phase (0 / 0)
        sched = torch.optim.lr_scheduler.OneCycleLR(opt, peaks, total_steps=cycle,
                                                    pct_start=min(1.0, warmup / cycle) if warmup >= 2 else 0.0)
        return opt, sched
    base = lambda s: cosine_with_warmup(s, warmup, cycle)  # noqa: E731
    multipliers = [lambda s: base(s) * qk_multiplier(s, qk_lr_mult, qk_ramp_steps), base]
    if emb_names:
        multipliers.append(lambda s: base(s) * emb_lr_mult)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, multipliers)
    return opt, sched
