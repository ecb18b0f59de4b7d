"""Many GD / SGD runs of the full matrix model (:mod:`.model`) trained as one tensor program.

:func:`run` takes arms (parameterisation, step h, steps, batch, seed, recorded points) and returns, for
each, the rows :func:`.experiment.run` returns for it alone (``optimizer`` "gd" or "sgd"). Only the
parts of the matrices that reach the loss move (docs/setting.md section 1), and every form is held in
one shape, stacked along a leading run dimension R:

    u (R, 1, r)  the query row of W_Q          (collapsed QK: e_0, frozen; W_K's column 0 = W_QK[q, :])
    W (R, V, r)  W_K
    o (R, K, r)  the label rows of W_O         (collapsed OV: [I_K 0], frozen; W_V's first K rows = W_OV[labels])
    v (R, r, V)  W_V

that is, every form as the factorized head (W_Q, W_K, W_O, W_V) = (u, W, o, v) restricted to the rows that
reach the loss: its score row s u W^T = s W_QK[q, :] and label values o v = W_OV[labels, :] are the model's
own products (a product with e_0 or I_K is exact). One step evaluates, for every run on its own batch
(counts c (B, V), labels, weights w: the population, or the run's own seeded stream of sampled batches,
drawn as :func:`.train.batch_source` draws them), the model's forward pass, loss and gradient on the stack
(:func:`.model.head_gradients` with (u, W, o, v) as (W_Q, W_K, W_O, W_V): u holds only the query's row and o only
the labels', so every row of both is read; every run's batch at once)

    attn   = softmax(A + log c),   logits = attn (o v)^T,   L_r = sum_b w_b CE(logits_b, label_b)

and theta_r <- theta_r - h eta_c grad_{theta_r} sum_r' L_r' per circuit c. No parameter is shared between
runs, so each run follows its own trajectory: its rows equal those of the run alone to round-off (a
test). A run is observed (:func:`.observe.observer`, on its own :class:`.model.AttentionHead` holding the
current matrices) at the steps :func:`.train.record_steps` names, and leaves the stack after its last step.
Runs of one batch size share a program (the batch dimension is common); each batch size is one program.
"""
from __future__ import annotations

import math
from typing import NamedTuple

import torch
from qkdyn.empirical.synthetic import observe, reduced, train
from qkdyn.empirical.synthetic.model import AttentionHead, head_gradients
from qkdyn.empirical.synthetic.model import log_counts as log_counts_of
from qkdyn.empirical.synthetic.threads import one_thread

from qkdyn.errors import InputError


class Arm(NamedTuple):
    """One run: as ``experiment.run(param, setting, step, steps, optimizer="sgd" if batch else "gd",
    batch=batch, seed=seed, points=points)``."""

    param: str
    step: float
    steps: int
    batch: int | None = None  # None: the population (GD)
    seed: int = 0
    points: int = 50


def run(setting, arms: list[Arm]) -> dict[Arm, list[dict]]:
    """Arm -> its recorded rows (``step``, ``t`` = step h, and the observer's columns), every arm of one
    batch size trained together on one torch thread (module docstring)."""
    out: dict[Arm, list[dict]] = {}
    with one_thread():
        for batch in dict.fromkeys(arm.batch for arm in arms):
            out.update(_program(setting, [arm for arm in arms if arm.batch == batch]))
    return {arm: out[arm] for arm in arms}


def _pieces(model: AttentionHead) -> tuple[torch.Tensor, ...]:
    """(u, W, o, v) of ``model`` (module docstring), copies."""
    q, labels, K = model.query, model.labels, model.layout.classes
    with torch.no_grad():
        if model.qk_factorized:
            u, W = model.W_Q[q][None].clone(), model.W_K.clone()
        else:
            u = torch.zeros(1, model.layout.vocab, dtype=model.W_QK.dtype)
            u[0, 0] = 1.0
            W = torch.zeros_like(model.W_QK)
            W[:, 0] = model.W_QK[q]
        if model.ov_factorized:
            o, v = model.W_O[labels].clone(), model.W_V.clone()
        else:
            o = torch.eye(K, model.layout.vocab, dtype=model.W_OV.dtype)
            v = torch.zeros_like(model.W_OV)
            v[:K] = model.W_OV[labels]
    return u, W, o, v


@torch.no_grad()
def _load(model: AttentionHead, u, W, o, v) -> AttentionHead:
    """Write the moving parts (u, W, o, v) of one run back into its ``model`` (the inverse of :func:`_pieces`)."""
    q, labels, K = model.query, model.labels, model.layout.classes
    if model.qk_factorized:
        model.W_Q[q] = u[0]
        model.W_K.copy_(W)
    else:
        model.W_QK[q] = W[:, 0]
    if model.ov_factorized:
        model.W_O[labels] = o
        model.W_V.copy_(v)
    else:
        model.W_OV[labels] = v[:K]
    return model


def _program(setting, arms: list[Arm]) -> dict[Arm, list[dict]]:
    models = [reduced.new_model(arm.param, setting) for arm in arms]
    shapes = {tuple(p.shape for p in _pieces(m)) for m in models}
    if len(shapes) > 1:
        raise ValueError(f"the arms' models differ in shape ({len(shapes)} shapes): give them one inner width")
    params = [torch.stack(piece) for piece in zip(*(_pieces(m) for m in models), strict=True)]
    scale = models[0].scale
    sources = [train.batch_source(setting, arm.batch, arm.seed) for arm in arms]
    observers = {param: observe.observer(param, setting) for param in dict.fromkeys(arm.param for arm in arms)}
    records = [set(int(s) for s in train.record_steps(arm.steps, arm.points)) for arm in arms]
    qk = torch.as_tensor([arm.step * setting.eta_qk for arm in arms], dtype=params[0].dtype)
    ov = torch.as_tensor([arm.step * setting.eta_ov for arm in arms], dtype=params[0].dtype)
    trains_u = torch.as_tensor([m.qk_factorized for m in models], dtype=qk.dtype)
    trains_o = torch.as_tensor([m.ov_factorized for m in models], dtype=qk.dtype)
    rates = [qk * trains_u, qk, ov * trains_o, ov]
    alive = list(range(len(arms)))  # arm index of each stacked row
    alive_rates = [r[:, None, None] for r in rates]
    rows: list[list[dict]] = [[] for _ in arms]
    population = None
    for step in range(max(arm.steps for arm in arms) + 1):
        batches = [sources[i]() for i in alive]
        if arms[0].batch is None:  # the population: one fixed batch, its log taken once
            if population is None:
                counts, labels, weights = batches[0]
                population = (torch.log(counts), labels, weights)
            log_counts, labels, weights = (f.expand(len(alive), *f.shape) for f in population)
        else:
            counts, labels, weights = (torch.stack(f) for f in zip(*batches, strict=True))
            log_counts = log_counts_of(counts)
        losses, *gradients = head_gradients(*params, log_counts, labels, weights, scale)
        if not math.isfinite(losses.sum().item()):  # the sum of the runs' losses: finite iff every one is
            raise InputError(f"the loss is not finite at step {step}: training diverged, reduce --step")
        done = [arms[i].steps == step for i in alive]
        for row, i in enumerate(alive):
            if step in records[i] or done[row]:
                model = _load(models[i], *(p[row].detach() for p in params))
                rows[i].append({"step": step, **observers[arms[i].param](model), "t": step * arms[i].step})
        if all(done):
            break
        for p, rate, gradient in zip(params, alive_rates, gradients, strict=True):
            p.sub_(rate * gradient)
        if any(done):
            keep = torch.as_tensor([not d for d in done])
            alive = [i for i, d in zip(alive, done, strict=True) if not d]
            alive_rates = [r[keep] for r in alive_rates]
            params = [p[keep] for p in params]
    return {arm: rows[i] for i, arm in enumerate(arms)}
