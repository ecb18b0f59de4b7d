"""Per-circuit optimiser groups and learning-rate schedules.

Group "qk": W_Q, W_K and their biases in every block (plus the token embedding when
``qk_embedding``), or exactly the parts named by ``qk_params`` (comma list of :data:`QK_PARTS`: the
authors' HateXplain group is ``q,k,tok_emb``, their SVA group ``q,k,q_bias,k_bias,tok_emb,pos_emb``).
Group "emb" (only when ``emb_lr_mult`` != 1, the authors' SQuAD faster arm): the token embedding at
``emb_lr_mult`` times the base rate, without weight decay. Group "rest": everything else (W_V, W_O,
MLP, positions, head). The QK learning rate is ``qk_lr_mult`` times the base rate, or ramps linearly from
1x to ``qk_lr_mult``x over the first ``qk_ramp_steps`` steps (the authors' ramped variant). Both groups
follow the same schedule: linear warm-up over ``warmup`` steps, then cosine decay to 0 at ``total``.
"""
from __future__ import annotations

import torch
from torch import nn

from qkdyn.empirical.schedule import cosine_with_warmup


#: the parts a ``qk_params`` list may name, and the parameter-name test of each
QK_PARTS = {
    "q": lambda n: n.endswith(".attn.q.weight"), "k": lambda n: n.endswith(".attn.k.weight"),
    "q_bias": lambda n: n.endswith(".attn.q.bias"), "k_bias": lambda n: n.endswith(".attn.k.bias"),
    "tok_emb": lambda n: n == "tok_emb.weight", "pos_emb": lambda n: n == "pos_emb.weight",
}


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
                    qk_params: str = "", emb_lr_mult: float = 1.0):
    """(optimizer, LambdaLR scheduler) with groups [qk, rest] (and "emb" when ``emb_lr_mult`` != 1),
    all at base ``lr`` before the per-group multipliers of the scheduler."""
    qk_names = set(qk_parameter_names(model, qk_embedding, qk_params))
    emb_names = {"tok_emb.weight"} - qk_names if emb_lr_mult != 1 else set()
    qk = [p for n, p in model.named_parameters() if n in qk_names]
    rest = [p for n, p in model.named_parameters() if n not in qk_names | emb_names]
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
    base = lambda s: cosine_with_warmup(s, warmup, total)  # noqa: E731
    multipliers = [lambda s: base(s) * qk_multiplier(s, qk_lr_mult, qk_ramp_steps), base]
    if emb_names:
        multipliers.append(lambda s: base(s) * emb_lr_mult)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, multipliers)
    return opt, sched
