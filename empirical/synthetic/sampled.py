"""Sampled SGD on a synthetic generator (``clean`` or ``authors``), with measurements at matched loss.

A :class:`Task` bundles one generator's data, model, inits and recipe; :func:`train` runs one
(form, schedule, seed) and :func:`grid` all of them. Every run uses plain SGD with one group per
circuit, learning rates ``base_lr * qk_factor(param, step / horizon)`` (QK) and ``base_lr`` (OV); the
schedule is defined over the whole horizon (a ramp reaches its final factor at the last step).

Stopping rule (correct form of the notebooks' rule): the *running loss* is the mean of the last
``window`` batch losses (``window`` = one of their epochs); a constant schedule stops once it is <=
``target``; a ramp runs the whole horizon, as in the notebooks. When the running loss first falls
below each of ``levels``, the model is measured on a fixed test set (seeded separately from the
training stream); comparisons between schedules use the lowest level every compared run reached
(matched running loss).

Measurements per test sample (the query row of the attention, ``c_x`` = count of token x in context
and query, ``attn_x`` = attention mass on all positions holding x):
    attn_distinct  sum of attn_x over the class's distinct tokens
    attn_query_id  attn_x at x = the query's own id (query position plus any copies in the context:
                   the *shortcut* the authors' id layout opens; = the query position alone in ``clean``)
    separability   max over distinct positions of attn_x / c_x minus min over the other positions
                   (their notebook's metric, per position)
    p_true         softmax probability of the target
"""
from __future__ import annotations

import dataclasses
import math
from collections import deque
from typing import Callable, NamedTuple

import numpy as np
import torch
from torch import nn



class Batch(NamedTuple):
    counts: torch.Tensor  # (B, V) occurrences of each id among the attended positions (context + query)
    query: torch.Tensor  # (B,) id of the query token
    target: torch.Tensor  # (B,) index of the correct logit
    cls: torch.Tensor  # (B,) class
    distinct: torch.Tensor  # (B, V) bool: ids that are distinct tokens of the sample's class


@dataclasses.dataclass(frozen=True)
class Task:
    """One sampled generator and its recipe."""

    name: str
    sample: Callable  # (param, size, generator) -> Batch
    new_model: Callable  # (param, seed, schedule) -> nn.Module with circuit_parameters("QK"/"OV")
    forward: Callable  # (model, Batch) -> (logits (B, C), attention mass per id (B, V))
    base_lr: float
    qk_factor: dict  # schedule -> (param, fraction of horizon) -> QK rate / OV rate
    levels: tuple  # running-loss levels for matched-loss measurements
    window: int  # batches in the running loss
    target: float  # stopping level of constant schedules
    batch: int = 32


@dataclasses.dataclass
class Result:
    param: str
    schedule: str
    seed: int
    steps: int
    loss: float  # running loss at the end
    at_level: dict  # level -> {metric: mean over the test set} when the running loss first fell below it
    final: dict  # metric -> per-sample array on the test set at the end


def measure(task: Task, model: nn.Module, data: Batch) -> dict[str, np.ndarray]:
    """The per-sample metrics of the module docstring."""
    with torch.no_grad():
        logits, attn = task.forward(model, data)
        probs = torch.softmax(logits, dim=1)
        rows = torch.arange(len(data.target))
        present = data.counts > 0
        per_position = torch.where(present, attn / data.counts.clamp(min=1), torch.nan)
        top = torch.where(data.distinct & present, per_position, -math.inf).amax(dim=1)
        bottom = torch.where(~data.distinct & present, per_position, math.inf).amin(dim=1)
        return {"attn_distinct": (attn * data.distinct).sum(dim=1).numpy(),
                "attn_query_id": attn[rows, data.query].numpy(),
                "separability": (top - bottom).numpy(),
                "p_true": probs[rows, data.target].numpy()}


def loss_of(task: Task, model: nn.Module, data: Batch) -> torch.Tensor:
    return nn.functional.cross_entropy(task.forward(model, data)[0], data.target)


def train(task: Task, param: str, schedule: str, seed: int, horizon: int, test_size: int) -> Result:
    """One run (see the module docstring); data and init seeded by ``seed``."""
    generator = torch.Generator().manual_seed(seed)
    test = task.sample(param, test_size, torch.Generator().manual_seed(10_000 + seed))
    model = task.new_model(param, seed, schedule)
    opt = torch.optim.SGD([{"params": model.circuit_parameters("QK"), "lr": task.base_lr},
                           {"params": model.circuit_parameters("OV"), "lr": task.base_lr}], lr=task.base_lr)
    factor = task.qk_factor[schedule]
    recent: deque = deque(maxlen=task.window)
    at_level: dict = {}
    running, step = math.inf, 0
    for step in range(horizon):
        opt.param_groups[0]["lr"] = task.base_lr * factor(param, step / horizon)
        loss = loss_of(task, model, task.sample(param, task.batch, generator))
        if not math.isfinite(loss.item()):
            raise RuntimeError(f"{task.name} {param} {schedule} seed {seed}: SGD diverged at step {step}")
        recent.append(loss.item())
        running = sum(recent) / len(recent) if len(recent) == recent.maxlen else math.inf
        for level in task.levels:
            if running <= level and level not in at_level:
                at_level[level] = {k: float(np.nanmean(v)) for k, v in measure(task, model, test).items()}
        if schedule != "ramp" and running <= task.target:
            break
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    return Result(param, schedule, seed, step + 1, running, at_level, measure(task, model, test))


def grid(task: Task, params, seeds, horizon: int, test_size: int) -> dict:
    """(param, schedule, seed) -> Result for every schedule of the task."""
    return {(p, s, seed): train(task, p, s, seed, horizon, test_size)
            for p in params for s in task.qk_factor for seed in seeds}


def matched_level(results: dict, keys) -> float | None:
    """The lowest level reached by every run in ``keys`` (None if none is shared)."""
    shared = set.intersection(*(set(results[k].at_level) for k in keys))
    return min(shared) if shared else None


def dtap(values: dict) -> np.ndarray:
    """5 x 5 histogram (% of test samples): rows = attention on distinct tokens, cols = p(true)."""
    edges = np.linspace(0, 1, 6)
    hist, _, _ = np.histogram2d(np.clip(values["attn_distinct"], 0, 1), np.clip(values["p_true"], 0, 1),
                                bins=[edges, edges])
    return 100 * hist / len(values["attn_distinct"])
