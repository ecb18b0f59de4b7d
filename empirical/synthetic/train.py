"""Per-circuit optimiser groups and the training loop.

Gradient descent with step h on the flow of docs/setting.md, d theta/dt = -eta_c grad_theta L, is
theta <- theta - h eta_c grad_theta L for every parameter of circuit c: one optimiser group per
circuit with learning rate h eta_QK or h eta_OV. ``gd`` and ``sgd`` are that update on the
population or on a sampled batch; ``adam`` uses the same per-circuit learning rates in Adam (it
does not discretise this flow: its step is ~ lr sign(grad) whatever the gradient's size).
"""
from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence

import numpy as np
import torch
from qkdyn.empirical.adam import adam_update, zero_grad
from qkdyn.empirical.synthetic import data
from qkdyn.empirical.synthetic.model import AttentionHead, exact_gradients, log_counts
from tqdm import tqdm

from qkdyn.errors import InputError


class PlainSGD:
    """theta <- theta - lr_g grad_theta for every parameter of group g: ``torch.optim.SGD`` without
    momentum, minus its per-step dispatch (hooks, capturable and foreach checks, a compile guard), which
    costs more than the update of these small matrices. Same ``param_groups`` / ``zero_grad`` / ``step``;
    :meth:`update` takes gradients of any part of a parameter (as :func:`torch.autograd.grad` returns them)."""

    def __init__(self, groups: list[dict]):
        self.param_groups = groups
        self.rates = {p: group["lr"] for group in groups for p in group["params"]}  # parameter -> its group's lr

    def zero_grad(self, set_to_none: bool = True) -> None:
        zero_grad(self.param_groups, set_to_none)

    def step(self) -> None:
        """The update from the gradients held in ``p.grad`` (a parameter without one is left alone)."""
        params = [p for group in self.param_groups for p in group["params"] if p.grad is not None]
        self.update(params, [p.grad for p in params], params)

    @torch.no_grad()
    def update(self, tensors: list[torch.Tensor], grads: Sequence[torch.Tensor], owners: list[torch.Tensor]) -> None:
        """tensor <- tensor - lr grad, in place, for each tensor (a parameter or a view of one: only the rows that
        can have a gradient), ``owners`` the parameters they belong to (whose group sets lr)."""
        for tensor, grad, owner in zip(tensors, grads, owners, strict=True):
            tensor.add_(grad, alpha=-self.rates[owner])


class PlainAdam(PlainSGD):
    """``torch.optim.Adam`` (betas (0.9, 0.999), eps 1e-8, no weight decay) as it steps on the CPU, to the last bit
    (:func:`qkdyn.empirical.adam.adam_update`; :mod:`qkdyn.empirical.adam` says why not ``torch.optim``). Same
    ``param_groups`` / ``zero_grad`` / ``step`` / ``update`` (its state is per updated tensor: pass the same tensors at
    every step)."""

    betas, eps = (0.9, 0.999), 1e-8

    def __init__(self, groups: list[dict]):
        super().__init__(groups)
        self.state: dict = {}  # updated tensor -> [k, m, v]

    @torch.no_grad()
    def update(self, tensors: list[torch.Tensor], grads: Sequence[torch.Tensor], owners: list[torch.Tensor]) -> None:
        for tensor, grad, owner in zip(tensors, grads, owners, strict=True):
            if tensor not in self.state:
                self.state[tensor] = [0, torch.zeros_like(tensor), torch.zeros_like(tensor)]
            state = self.state[tensor]
            state[0] += 1
            adam_update(tensor, grad, state[1], state[2], float(state[0]), self.rates[owner], *self.betas, self.eps)


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
    grid = np.geomspace(1, max(steps, 1), max(points - 1, 1)).round().astype(int) if steps > 0 else np.zeros(0, int)
    return np.unique(np.concatenate([[0, steps], grid, np.asarray(list(extra), dtype=int)]))


def loss_parts(model: AttentionHead) -> dict[str, torch.Tensor]:
    """Matrix name -> the part of it that reaches the loss (module docstring of :mod:`.model`), as a view: the
    query row of W_QK or W_Q, the label rows of W_OV or W_O, W_K and W_V whole. :func:`.model.head` of them with
    query and labels None is the model's forward pass, the same operations on the same numbers; their gradient is
    the parameters' without its rows of zeros (which an update would leave as they are)."""
    rows: dict[str, int | slice] = {"W_QK": model.query, "W_Q": model.query, "W_OV": model.labels, "W_O": model.labels}
    return {name: p[rows[name]] if name in rows else p for name, p in model.matrices().items()}


def train(model: AttentionHead, optimizer, next_batch: Callable[[], data.Batch], steps: int,
          record: Iterable[int], observe: Callable[[AttentionHead], dict],
          stop_below: float | None = None, progress: bool = False) -> list[dict]:
    """Run ``steps`` optimiser steps; ``observe(model)`` at every step in ``record`` (the row gets
    its ``step``). With ``stop_below``, stop (and record) once the batch loss falls below it.
    ``progress`` shows a tqdm bar on a terminal. A non-finite loss (divergence) is a InputError.

    Each step takes the loss's gradient with respect to :func:`loss_parts` written out
    (:func:`.model.exact_gradients`: ``torch.autograd.grad``'s to the bit, without its graph; no ``.grad`` kept)
    and ``optimizer.update`` moves those parts in place: the step of the whole parameters, bit for bit, without forming
    and adding their rows of zero gradient. A sampled batch takes its log by :func:`.model.log_counts` (the same
    bits as ``torch.log``, faster on the zero counts)."""
    record = set(int(s) for s in record)
    parts = loss_parts(model)
    tensors = list(parts.values())
    owners = [getattr(model, name) for name in parts]
    rows = []
    last, log_c = None, torch.empty(0)
    steps_iter = range(steps + 1)
    if progress:
        steps_iter = tqdm(steps_iter, disable=None, unit="step", mininterval=1.0)
    for step in steps_iter:
        counts, labels, weights = next_batch()
        if counts is not last:  # a fixed batch (the population) takes its log once
            last, log_c = counts, log_counts(counts)
        loss, gradients = exact_gradients(parts, log_c, model.scale, labels, weights)
        value = loss.item()
        if not math.isfinite(value):
            raise InputError(f"the loss is not finite at step {step}: training diverged, reduce --step")
        done = step == steps or (stop_below is not None and value < stop_below)
        if step in record or done:
            rows.append({"step": step, **observe(model)})
        if done:
            break
        optimizer.update(tensors, gradients, owners)
    return rows
