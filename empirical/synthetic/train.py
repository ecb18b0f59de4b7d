"""Per-circuit optimiser groups and the training loop.

Gradient descent with step h on the flow of docs/setting.md, d theta/dt = -eta_c grad_theta L, is
theta <- theta - h eta_c grad_theta L for every parameter of circuit c: one optimiser group per
circuit with learning rate h eta_QK or h eta_OV. ``gd`` and ``sgd`` are that update on the
population or on a sampled batch; ``adam`` uses the same per-circuit learning rates in Adam (it
does not discretise this flow: its step is ~ lr sign(grad) whatever the gradient's size).
"""
from __future__ import annotations

import math
from collections.abc import Callable, Iterable

import numpy as np
import torch
from qkdyn.empirical.synthetic import data
from qkdyn.empirical.synthetic.model import AttentionHead, cross_entropy
from tqdm import tqdm

from qkdyn.errors import InputError


class PlainSGD:
    """theta <- theta - lr_g grad_theta for every parameter of group g: ``torch.optim.SGD`` without
    momentum, minus its per-step dispatch (hooks, capturable and foreach checks, a compile guard), which
    costs more than the update of these small matrices. Same ``param_groups`` / ``zero_grad`` / ``step``."""

    def __init__(self, groups: list[dict]):
        self.param_groups = groups

    def zero_grad(self, set_to_none: bool = True) -> None:
        for group in self.param_groups:
            for p in group["params"]:
                p.grad = None

    @torch.no_grad()
    def step(self) -> None:
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    p.add_(p.grad, alpha=-group["lr"])


class PlainAdam(PlainSGD):
    """``torch.optim.Adam`` (betas (0.9, 0.999), eps 1e-8, no weight decay, its single-tensor path, the
    one it takes on the CPU) written out with the same tensor operations in the same order, so every step is
    the same to the last bit (a test). Per parameter theta with gradient g, at step k = 1, 2, ...:

        m <- m + (1 - beta1) (g - m),   v <- beta2 v + (1 - beta2) g^2,
        theta <- theta - (lr_g / (1 - beta1^k)) m / (sqrt(v) / sqrt(1 - beta2^k) + eps)

    Constructing ``torch.optim.Adam`` imports ``torch._dynamo`` (~1.5 CPU-s in every process that does), and
    its ``step`` costs more dispatch than these small updates. Same ``param_groups`` / ``zero_grad`` / ``step``."""

    betas, eps = (0.9, 0.999), 1e-8

    def __init__(self, groups: list[dict]):
        super().__init__(groups)
        self.state: dict = {}  # parameter -> [k, m, v]

    @torch.no_grad()
    def step(self) -> None:
        beta1, beta2 = self.betas
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                if p not in self.state:
                    self.state[p] = [0, torch.zeros_like(p), torch.zeros_like(p)]
                state = self.state[p]
                state[0] += 1
                k, m, v = float(state[0]), state[1], state[2]
                m.lerp_(p.grad, 1 - beta1)
                v.mul_(beta2).addcmul_(p.grad, p.grad, value=1 - beta2)
                denom = (v.sqrt() / (1 - beta2**k) ** 0.5).add_(self.eps)
                p.addcdiv_(m, denom, value=-(group["lr"] / (1 - beta1**k)))


def make_optimizer(model: AttentionHead, kind: str, step: float, eta_qk: float, eta_ov: float):
    """One group per circuit, learning rate step * eta_c."""
    groups = [{"params": model.circuit_parameters("QK"), "lr": step * eta_qk},
              {"params": model.circuit_parameters("OV"), "lr": step * eta_ov}]
    if kind in ("gd", "sgd"):
        return PlainSGD(groups)
    if kind == "adam":
        return PlainAdam(groups)
    raise ValueError(f"unknown optimizer {kind!r}")


def batch_source(setting, batch: int | None, seed: int) -> Callable[[], data.Batch]:
    """``batch=None``: the population (mean counts, exact on the symmetric subspace); else a
    seeded stream of sampled batches of that size."""
    if batch is None:
        population = data.mean_counts(setting)
        return lambda: population
    generator = torch.Generator().manual_seed(seed)
    return lambda: data.sample(setting, batch, generator)


def record_steps(steps: int, points: int, extra: Iterable[int] = ()) -> np.ndarray:
    """Step 0, ``points - 1`` log-spaced steps up to ``steps``, the ``extra`` steps, ascending."""
    grid = np.geomspace(1, max(steps, 1), max(points - 1, 1)).round().astype(int) if steps > 0 else []
    return np.unique(np.concatenate([[0, steps], grid, np.asarray(list(extra), dtype=int)]))


def train(model: AttentionHead, optimizer, next_batch: Callable[[], data.Batch], steps: int,
          record: Iterable[int], observe: Callable[[AttentionHead], dict],
          stop_below: float | None = None, progress: bool = False) -> list[dict]:
    """Run ``steps`` optimiser steps; ``observe(model)`` at every step in ``record`` (the row gets
    its ``step``). With ``stop_below``, stop (and record) once the batch loss falls below it.
    ``progress`` shows a tqdm bar on a terminal. A non-finite loss (divergence) is a InputError."""
    record = set(int(s) for s in record)
    rows = []
    last, log_counts = None, None
    steps_iter = range(steps + 1)
    if progress:
        steps_iter = tqdm(steps_iter, disable=None, unit="step", mininterval=1.0)
    for step in steps_iter:
        counts, labels, weights = next_batch()
        if counts is not last:  # a fixed batch (the population) takes its log once
            last, log_counts = counts, torch.log(counts)
        logits, _ = model.forward_log(log_counts)
        loss = cross_entropy(logits, labels, weights)
        value = loss.item()
        if not math.isfinite(value):
            raise InputError(f"the loss is not finite at step {step}: training diverged, reduce --step")
        done = step == steps or (stop_below is not None and value < stop_below)
        if step in record or done:
            rows.append({"step": step, **observe(model)})
        if done:
            break
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    return rows
