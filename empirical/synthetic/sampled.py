"""Sampled SGD on a synthetic generator (``clean`` or ``authors``), with measurements at matched loss.

A :class:`Task` bundles one generator's data, model, inits and recipe (with each arm's horizon);
:mod:`.batched` trains one (form, schedule, seed) or all of them as one tensor program. Every run uses
plain SGD with one group per circuit, learning rates ``base_lr * qk_factor(param, step / horizon)``
(QK) and ``base_lr`` (OV); the schedule is defined over the arm's whole horizon (a ramp reaches its
final factor at the last step).

Data: a run's training batches come from :func:`chunks` of its seeded stream: ``CHUNK`` batches drawn
at once and used in order (one draw per ``CHUNK`` steps instead of one per step; the batches are
i.i.d. either way). Runs with one seed and one :attr:`Task.stream_key` (the sample's shape) read the
same stream.

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
from collections.abc import Callable, Iterator
from typing import NamedTuple

import numpy as np
import torch
from qkdyn.empirical.synthetic.model import cross_entropy, probabilities
from torch import nn

#: batches drawn at once from a run's stream
CHUNK = 100


class Batch(NamedTuple):
    counts: torch.Tensor  # (B, V) occurrences of each id among the attended positions (context + query)
    query: torch.Tensor  # (B,) id of the query token
    target: torch.Tensor  # (B,) index of the correct logit
    cls: torch.Tensor  # (B,) class
    distinct: torch.Tensor  # (B, V) bool: ids that are distinct tokens of the sample's class


class Factors(NamedTuple):
    """A head as products the batched program evaluates: score_x = s (A[q] B)[x], logits = attn (O V_v)^T.
    A collapsed circuit has the identity as its first factor (A or V_v), frozen."""

    A: torch.Tensor  # (V, r) query-side factor (rows indexed by the query id)
    B: torch.Tensor  # (r, V) key-side factor
    O: torch.Tensor  # (C, r2) output factor (C logits)
    V: torch.Tensor  # (r2, V) value factor
    train_A: bool  # factorized QK: A trains
    train_V: bool  # factorized OV: V_v trains


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
    horizon: Callable  # (param, schedule) -> SGD steps of that arm
    factors: Callable  # model -> Factors (the batched program's view of the model)
    scale: float  # score scale s
    queries: tuple  # every query id the sampler uses
    stream_key: Callable = lambda param: None  # param -> what of the form the sample depends on
    batch: int = 32


@dataclasses.dataclass
class Result:
    param: str
    schedule: str
    seed: int
    horizon: int  # the arm's SGD steps (a constant schedule may stop before)
    steps: int
    loss: float  # running loss at the end
    at_level: dict  # level -> {metric: mean over the test set} when the running loss first fell below it
    final: dict  # metric -> per-sample array on the test set at the end


def metrics(logits: torch.Tensor, attn: torch.Tensor, data: Batch) -> dict[str, torch.Tensor]:
    """The per-sample metrics of the module docstring from logits (..., C) and attention (..., V);
    leading dimensions broadcast (a batch of runs)."""
    probs = probabilities(logits)
    present = data.counts > 0
    per_position = torch.where(present, attn / data.counts.clamp(min=1), torch.nan)
    top = torch.where(data.distinct & present, per_position, -math.inf).amax(dim=-1)
    bottom = torch.where(~data.distinct & present, per_position, math.inf).amin(dim=-1)
    return {"attn_distinct": (attn * data.distinct).sum(dim=-1),
            "attn_query_id": attn.gather(-1, data.query[..., None].expand(*attn.shape[:-1], 1))[..., 0],
            "separability": top - bottom,
            "p_true": probs.gather(-1, data.target[..., None].expand(*probs.shape[:-1], 1))[..., 0]}


def measure(task: Task, model: nn.Module, data: Batch) -> dict[str, np.ndarray]:
    """The per-sample metrics of one model on ``data``."""
    with torch.no_grad():
        return {k: v.numpy() for k, v in metrics(*task.forward(model, data), data).items()}


def loss_of(task: Task, model: nn.Module, data: Batch) -> torch.Tensor:
    """The mean cross-entropy of one model on ``data`` (:func:`.model.cross_entropy`)."""
    return cross_entropy(task.forward(model, data)[0], data.target)


def draw_chunks(sample: Callable, batch: int, seed: int) -> Iterator[Batch]:
    """A seeded stream of ``sample(size, generator)`` batches, ``CHUNK`` at a time: fields (CHUNK, batch, ...)."""
    generator = torch.Generator().manual_seed(seed)
    while True:
        big = sample(CHUNK * batch, generator)
        yield Batch(*(f.reshape(CHUNK, batch, *f.shape[1:]) for f in big))


def chunks(task: Task, param: str, seed: int) -> Iterator[Batch]:
    """A run's training stream (:func:`draw_chunks` of the task's sampler for ``param``)."""
    return draw_chunks(lambda size, generator: task.sample(param, size, generator), task.batch, seed)


def test_set(task: Task, param: str, seed: int, size: int) -> Batch:
    """The fixed test set of a run (seeded apart from its training stream)."""
    return task.sample(param, size, torch.Generator().manual_seed(10_000 + seed))


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
