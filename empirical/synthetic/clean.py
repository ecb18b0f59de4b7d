"""The ``clean`` sampled generator: a cleaned-up variant of the authors' synthetic task (papers.md, Paper A).

This is NOT the authors' experiment as their notebooks run it (that is :mod:`.authors`); it keeps the
canonical model and changes only what the weighted sampler needs. The differences from the notebooks
are listed in docs/authors-experiments.md (separate query/label ids outside the context range, K-label
loss, 1e-6 identity init for every form, one learning-rate base, context 62). Where it differs from
docs/setting.md section 1 (everything else is the canonical model, reused):
* tokens are drawn i.i.d. per position from the class's weighted distribution: its D = 10 distinct
  tokens with weights 0.1, 0.2, ..., 1.0 and the N = 10 commons with weight 1 each, normalised
  together (so the number of distinct tokens in a context is random, mean 62 * 5.5 / 15.5 = 22);
* context length 62 (the authors use 62-126; we fix the shortest), K = 4 classes;
* the query attends to itself: the softmax runs over the context *and* the query position (the
  count vector gets c_q = 1), and the query's value W_OV[labels, q] enters the logits;
* scores scaled by s = 1/sqrt(50) (50 context tokens);
* every trainable matrix starts at 1e-6 * identity (factors 1e-6 I, balanced; so a factorized
  product starts at 1e-12 I); plain SGD, batch 32; learning rates per circuit: equal, QK 20x, or
  QK ramped linearly 1x -> 40x over the horizon (:func:`task`, trained by :mod:`.batched`).
Our vocabulary keeps the canonical layout (V = 55: 40 distinct, 10 commons, query, 4 labels);
with one-hot tokens the index order carries no meaning.
"""
from __future__ import annotations

import math

import numpy as np
import torch
from qkdyn.empirical.synthetic.layout import Layout
from qkdyn.empirical.synthetic.model import DTYPE, AttentionHead
from qkdyn.empirical.synthetic.sampled import Batch, Factors, Task

LAYOUT = Layout(classes=4, distinct=10, commons=10)
CONTEXT = 62
SCALE = 1 / math.sqrt(50)
INIT = 1e-6


def token_probabilities() -> np.ndarray:
    """(K, V): class k's distribution over tokens (distinct weights 0.1..1.0, commons 1)."""
    probs = np.zeros((LAYOUT.classes, LAYOUT.vocab))
    for k in range(LAYOUT.classes):
        probs[k, LAYOUT.distinct_of(k)] = np.arange(1, LAYOUT.distinct + 1) / 10
        probs[k, LAYOUT.common] = 1.0
    return probs / probs.sum(axis=1, keepdims=True)


def sample(batch: int, generator: torch.Generator):
    """(counts (B, V) with the query counted once, labels, weights 1/B)."""
    labels = torch.randint(LAYOUT.classes, (batch,), generator=generator)
    probs = torch.as_tensor(token_probabilities(), dtype=DTYPE)[labels]
    tokens = torch.multinomial(probs, CONTEXT, replacement=True, generator=generator)
    counts = torch.zeros(batch, LAYOUT.vocab, dtype=DTYPE)
    counts.scatter_add_(1, tokens, torch.ones_like(tokens, dtype=DTYPE))
    counts[:, LAYOUT.query] = 1.0
    return counts, labels, torch.full((batch,), 1.0 / batch, dtype=DTYPE)


def new_model(param: str) -> AttentionHead:
    """Every trainable matrix (collapsed or factor) = 1e-6 I: balanced factors, near-zero products."""
    model = AttentionHead(param, LAYOUT, SCALE)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(INIT * torch.eye(*p.shape, dtype=DTYPE))
    return model


def batch(size: int, generator: torch.Generator) -> Batch:
    """A :class:`~.sampled.Batch`: the query row is the one query token, targets the K label logits."""
    counts, labels, _ = sample(size, generator)
    owner = torch.as_tensor(LAYOUT.token_class())
    distinct = torch.zeros(size, LAYOUT.vocab, dtype=torch.bool)
    distinct[:, : len(owner)] = owner[None, :] == labels[:, None]
    return Batch(counts, torch.full((size,), LAYOUT.query), labels, labels, distinct)


def _forward(model: AttentionHead, data: Batch):
    return model(data.counts)


def factors(model: AttentionHead) -> Factors:
    """The head as (A, B, O, V_v) of :class:`~.sampled.Factors` (only the K label rows of the OV circuit
    reach the loss): A = W_Q (collapsed: I), B = W_K^T (collapsed: W_QK), O = W_O or W_OV at the label
    rows, V_v = W_V (collapsed: I)."""
    eye = torch.eye(LAYOUT.vocab, dtype=DTYPE)
    qk, ov = model.qk_factorized, model.ov_factorized
    return Factors(model.W_Q if qk else eye, model.W_K.T if qk else model.W_QK,
                   (model.W_O if ov else model.W_OV)[model.labels], model.W_V if ov else eye, qk, ov)


def task(steps: int) -> Task:
    """The recipe of the module docstring with every arm ``steps`` SGD steps long."""
    return Task(
        name="clean", sample=lambda param, size, generator: batch(size, generator),
        new_model=lambda param, seed, schedule: new_model(param), forward=_forward,
        base_lr=1.0, qk_factor={"equal": lambda p, f: 1.0, "qkfast": lambda p, f: 20.0,
                                "ramp": lambda p, f: 1.0 + 39.0 * f},
        levels=(0.3, 0.1, 0.03, 0.01, 3e-3, 1e-3), window=50, target=1e-3,
        horizon=lambda param, schedule: steps, factors=factors, scale=SCALE, queries=(LAYOUT.query,),
    )
