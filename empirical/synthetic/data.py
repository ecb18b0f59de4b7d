"""Batches of the canonical setting: (counts (B, V), labels (B,), weights (B,)), sum of weights 1.

The loss of a context depends only on its token-count vector (:mod:`qkdyn.empirical.synthetic.model`), so
every data source here is a weighted set of count vectors; the population loss is
sum_b weights_b CE(model(counts_b), label_b) when the weights are the probabilities.

* :func:`sample`         B contexts drawn as in docs/setting.md (class uniform, m distinct and n common
                         tokens uniform with replacement), weights 1/B: SGD.
* :func:`count_support`  every count vector with its exact probability: class k w.p. 1/K,
                         distinct counts ~ Multinomial(m, 1/D), common counts ~ Multinomial(n, 1/N),
                         independent. Exact population loss for *any* matrices. Size
                         K C(m+D-1, m) C(n+N-1, n) count vectors (one forward each, O(V K)), against
                         K C(m+n, m) D^m N^n sequences of length m + n for brute force.
* :func:`mean_counts`    one row per class with the expected counts (m/D on each distinct token of
                         the class, n/N on each common). Exact population loss *and gradient* on the
                         symmetric subspace, at O(K V) cost: there every context of class k has the
                         same normaliser Z = m e^{sa} + n e^{sb} and the same logits, so the
                         per-context gradient is linear in c (e.g. dCE/dW_OV[l, x] =
                         (p_l - y_l) c_x e^{A_x} / Z) and its mean is its value at E[c].
* :func:`all_sequences`  every token sequence with its probability (brute force, tiny settings).
"""
from __future__ import annotations

import itertools
import math

import numpy as np
import torch
from qkdyn.empirical.synthetic.layout import Layout
from qkdyn.empirical.synthetic.model import DTYPE

Batch = tuple[torch.Tensor, torch.Tensor, torch.Tensor]


def _batch(counts, labels, weights) -> Batch:
    return (torch.as_tensor(np.asarray(counts), dtype=DTYPE), torch.as_tensor(np.asarray(labels)),
            torch.as_tensor(np.asarray(weights), dtype=DTYPE))


def sample(setting, batch: int, generator: torch.Generator) -> Batch:
    """``batch`` contexts of the canonical setting as count vectors, weights 1/B."""
    lay = Layout.of(setting)
    K, D, N = setting.classes, setting.distinct, setting.commons
    labels = torch.randint(K, (batch,), generator=generator)
    distinct = labels[:, None] * D + torch.randint(D, (batch, setting.m), generator=generator)
    common = K * D + torch.randint(N, (batch, setting.n), generator=generator)
    tokens = torch.cat([distinct, common], dim=1)
    counts = torch.zeros(batch, lay.vocab, dtype=DTYPE)
    counts.scatter_add_(1, tokens, torch.ones_like(tokens, dtype=counts.dtype))
    return counts, labels, torch.full((batch,), 1.0 / batch, dtype=counts.dtype)


def mean_counts(setting) -> Batch:
    """One row per class with the expected count vector, weights 1/K."""
    lay = Layout.of(setting)
    K = setting.classes
    counts = np.zeros((K, lay.vocab))
    for k in range(K):
        counts[k, lay.distinct_of(k)] = setting.m / setting.distinct
        counts[k, lay.common] = setting.n / setting.commons
    return _batch(counts, np.arange(K), np.full(K, 1.0 / K))


def _compositions(draws: int, bins: int, probs=None) -> tuple[np.ndarray, np.ndarray]:
    """All count vectors of ``draws`` draws into ``bins`` bins, with multinomial probabilities (uniform
    bins, or bin probabilities ``probs``)."""
    log_p = np.full(bins, -math.log(bins)) if probs is None else np.log(np.asarray(probs, dtype=float))
    rows, out = [], []
    for combo in itertools.combinations_with_replacement(range(bins), draws):
        c = np.bincount(combo, minlength=bins)
        rows.append(c)
        out.append(math.exp(math.lgamma(draws + 1) - sum(math.lgamma(x + 1) for x in c) + float(c @ log_p)))
    return np.array(rows), np.array(out)


def support_size(setting) -> int:
    """Number of count vectors of :func:`count_support`."""
    return setting.classes * math.comb(setting.m + setting.distinct - 1, setting.m) * math.comb(
        setting.n + setting.commons - 1, setting.n)


def count_support(setting, token_weights=None) -> Batch:
    """Every count vector of the population with its exact probability (see module docstring); with
    ``token_weights`` (one per distinct token of a class) the m distinct draws of a class-k context
    follow the normalised weights instead of the uniform distribution."""
    lay = Layout.of(setting)
    K = setting.classes
    probs = None if token_weights is None else np.asarray(token_weights, dtype=float) / np.sum(token_weights)
    dist, p_dist = _compositions(setting.m, setting.distinct, probs)
    comm, p_comm = _compositions(setting.n, setting.commons)
    pairs = len(dist) * len(comm)
    counts = np.zeros((K, len(dist), len(comm), lay.vocab))
    for k in range(K):
        counts[k, :, :, lay.distinct_of(k)] = dist.T[:, :, None]
        counts[k, :, :, lay.common] = comm.T[:, None, :]
    weights = np.outer(p_dist, p_comm).ravel() / K
    return _batch(counts.reshape(K * pairs, lay.vocab), np.repeat(np.arange(K), pairs), np.tile(weights, K))


def all_sequences(setting) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Brute force: every (tokens (S, m+n), label, probability) of the population, literally."""
    lay = Layout.of(setting)
    m, n, K = setting.m, setting.n, setting.classes
    positions = list(itertools.combinations(range(m + n), m))
    prob = 1.0 / (K * len(positions) * setting.distinct ** m * setting.commons ** n)
    tokens, labels = [], []
    for k in range(K):
        for where in positions:
            rest = [j for j in range(m + n) if j not in where]
            for d in itertools.product(lay.distinct_of(k), repeat=m):
                for c in itertools.product(lay.common, repeat=n):
                    seq = np.empty(m + n, dtype=np.int64)
                    seq[list(where)], seq[rest] = d, c
                    tokens.append(seq)
                    labels.append(k)
    S = len(tokens)
    return (torch.as_tensor(np.array(tokens)), torch.as_tensor(np.array(labels)),
            torch.full((S,), prob, dtype=DTYPE))
