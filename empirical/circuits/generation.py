"""The SQuAD attention metric as the authors compute it: averaged over every step of the greedy answer.

Their evaluation (``Squad-Dataset/Squad_{baseline,Faster_QK}_heatmaps.ipynb``: ``generate_faithful``
cell 7, ``rollout_single_step`` and ``attention_mass`` cell 10, called with alpha = 0.5 in cell 20)
decodes greedily, one token per step, from the prompt ``... <a>`` until ``<eos>``, the answer-length cap
or the context length, and at every step s (the one that produces ``<eos>`` included) reads the row of
the sequence's *last* position (step 0: ``<a>``; step s: the s-th generated token) from each layer's
head-mean map A_l. On the answer span's positions in the prompt it measures

- ``layer_average``: the mass of that row of the mean of the A_l over layers;
- ``rollout``: the mass of that row of R = A'_L ... A'_1 with A'_l = alpha A_l + (1 - alpha) I
  (rows renormalised; they already sum to 1), alpha = :data:`ROLLOUT_ALPHA` (:func:`rollout_row`; at
  0.5 this is :func:`qkdyn.empirical.circuits.metrics.rollout`, the reading of qkdyn's ``<a>`` row);
- ``layer_maxpool``: the mass of that row of the element-wise maximum of the A_l over layers;
- ``per_layer``: the mass of that row of each A_l;

averages each over the steps (one value per example) and then over the examples. The first step alone
is qkdyn's ``<a>``-row metric (``first_step``, kept beside the average), and the same numbers on uniform
causal attention of the same lengths are the null (``uniform``, ``uniform_first_step``).

Pure functions (:func:`last_rows`, :func:`rollout_row`, :func:`example_masses`, :func:`uniform_example`,
:func:`summarise`) and the decoding that feeds them (:func:`greedy_with_attention`,
:func:`evaluate_generation`). The decoding stops, as theirs, before a step whose input would reach the
model's ``max_len`` (qkdyn's answer-quality decoding, :func:`qkdyn.empirical.circuits.evaluate.greedy_answers`,
slides its window instead; the two agree until an answer runs into ``max_len``).
"""
from __future__ import annotations

import functools
from collections.abc import Sequence

import numpy as np
import torch
from qkdyn.empirical.circuits import metrics
from qkdyn.empirical.circuits.encode import QASequence, pad
from qkdyn.empirical.circuits.models import Decoder

#: the rollout's weight on attention against the identity (their cell 20: ``attention_mass(..., alpha=0.5)``)
ROLLOUT_ALPHA = 0.5
#: the combinations over layers read at every step
METHODS = ("layer_average", "rollout", "layer_maxpool")
#: prompts decoded together
GENERATION_BATCH = 256


def rollout_row(maps: Sequence[np.ndarray], row: int, alpha: float = ROLLOUT_ALPHA) -> np.ndarray:
    """Row ``row`` of the rollout R = A'_L ... A'_1 of the (T, T) maps A_1..A_L (module docstring),
    as the row vector e_row^T A'_L ... A'_1: L vector-matrix products instead of L - 1 matrix products."""
    vector = np.zeros(maps[0].shape[-1])
    vector[row] = 1.0
    for a in reversed(maps):
        mixed = alpha * a + (1 - alpha) * np.eye(a.shape[-1])
        vector = vector @ (mixed / mixed.sum(axis=-1, keepdims=True))
    return vector


def last_rows(maps: Sequence[np.ndarray], alpha: float = ROLLOUT_ALPHA) -> dict[str, np.ndarray]:
    """One step: the last position's row of the layers' head-mean maps ``maps`` (each (T, T)) by every
    method of :data:`METHODS`, and ``per_layer``, the (n_layer, T) rows of each map."""
    stacked = np.stack(maps)
    return {"layer_average": stacked.mean(axis=0)[-1], "rollout": rollout_row(maps, len(stacked[0]) - 1, alpha),
            "layer_maxpool": stacked.max(axis=0)[-1], "per_layer": stacked[:, -1]}


def example_masses(steps: Sequence[dict[str, np.ndarray]], span: Sequence[int]) -> dict:
    """One example: each method's mass on ``span`` averaged over the steps' :func:`last_rows`, the
    ``per_layer`` masses likewise, the first step's masses (``first_step``) and the number of ``steps``.
    NaN masses where the span is empty (their code counts such an example as 0; qkdyn's examples always
    have a span)."""
    if not steps:
        raise ValueError("an answer has at least one decoding step (the one at <a>)")
    masses = [{m: metrics.rationale_mass(rows[m], (span,)) for m in METHODS} for rows in steps]
    per_layer = [[metrics.rationale_mass(row, (span,)) for row in rows["per_layer"]] for rows in steps]
    return {**{m: float(np.mean([s[m] for s in masses])) for m in METHODS},
            "per_layer": np.mean(per_layer, axis=0).tolist(), "first_step": masses[0], "steps": len(steps)}


@functools.lru_cache(maxsize=4096)
def _uniform_rows(length: int, n_layer: int, alpha: float) -> dict[str, np.ndarray]:
    causal = np.tril(np.ones((length, length)))
    return last_rows([causal / causal.sum(axis=1, keepdims=True)] * n_layer, alpha)


def uniform_example(prompt_length: int, steps: int, n_layer: int, span: Sequence[int],
                    alpha: float = ROLLOUT_ALPHA) -> dict:
    """:func:`example_masses` of uniform causal attention in every layer over the same ``steps``
    (step s reads a sequence of ``prompt_length`` + s positions)."""
    return example_masses([_uniform_rows(prompt_length + s, n_layer, alpha) for s in range(steps)], span)


def summarise(measured: Sequence[dict], uniform: Sequence[dict], alpha: float = ROLLOUT_ALPHA) -> dict:
    """The examples' :func:`example_masses` averaged over examples: ``mass`` and ``first_step`` by method,
    ``mass_per_layer``, the same two for uniform attention (``uniform``, ``uniform_first_step``), the mean
    number of steps, ``n`` and ``alpha``. Means of no example are NaN."""
    def mean(values: list) -> float:
        return float(np.mean(values)) if values else float("nan")

    return {"alpha": alpha, "n": len(measured), "mean_steps": mean([e["steps"] for e in measured]),
            "mass": {m: mean([e[m] for e in measured]) for m in METHODS},
            "first_step": {m: mean([e["first_step"][m] for e in measured]) for m in METHODS},
            "mass_per_layer": np.mean([e["per_layer"] for e in measured], axis=0).tolist() if measured else [],
            "uniform": {m: mean([e[m] for e in uniform]) for m in METHODS},
            "uniform_first_step": {m: mean([e["first_step"][m] for e in uniform]) for m in METHODS}}


@torch.no_grad()
def greedy_with_attention(model: Decoder, prompts: Sequence[Sequence[int]], eos: int, max_answer_len: int,
                          alpha: float = ROLLOUT_ALPHA) -> tuple[list[list[int]], list[list[dict]]]:
    """Greedy decoding after each prompt (in batches, right-padded) for at most ``max_answer_len`` steps,
    a prompt's decoding ending at ``<eos>`` (``eos``) or before its input would reach ``model.cfg.max_len``.
    Returns each prompt's generated ids (``<eos>`` left out) and its steps' :func:`last_rows` (the step that
    produced ``<eos>`` included), read from the float32 attention of the model in eval mode."""
    model.eval()
    device = next(model.parameters()).device
    answers: list[list[int]] = []
    steps: list[list[dict]] = []
    for start in range(0, len(prompts), GENERATION_BATCH):
        seqs = [list(p) for p in prompts[start: start + GENERATION_BATCH]]
        out: list[list[int]] = [[] for _ in seqs]
        rows: list[list[dict]] = [[] for _ in seqs]
        live = [i for i, s in enumerate(seqs) if len(s) < model.cfg.max_len]
        for _ in range(max_answer_len):
            if not live:
                break
            ids, lengths = pad([seqs[i] for i in live])
            logits, atts = model(ids.to(device), lengths.to(device))
            heads = [a.float().mean(dim=1).cpu().numpy() for a in atts]  # per layer (B, T, T), head mean
            nxt = logits[torch.arange(len(live), device=device), lengths.to(device) - 1].argmax(-1).tolist()
            for b, (i, token) in enumerate(zip(live, nxt, strict=True)):
                n = int(lengths[b])
                rows[i].append(last_rows([h[b, :n, :n] for h in heads], alpha))
                seqs[i].append(token)
                if token != eos:
                    out[i].append(token)
            live = [i for i, t in zip(live, nxt, strict=True) if t != eos and len(seqs[i]) < model.cfg.max_len]
        answers += out
        steps += rows
    return answers, steps


def evaluate_generation(model: Decoder, seqs: Sequence[QASequence], eos: int, max_answer_len: int,
                        alpha: float = ROLLOUT_ALPHA) -> dict:
    """:func:`summarise` of the greedy answers of ``seqs``' prompts, each measured on its answer span,
    beside uniform attention over the same steps. Prompts the decoding cannot extend (already
    ``max_len`` long) have no step and are left out of both (``n`` counts the rest)."""
    _, steps = greedy_with_attention(model, [s.prompt for s in seqs], eos, max_answer_len, alpha)
    kept = [(s, st) for s, st in zip(seqs, steps, strict=True) if st]
    measured = [example_masses(st, s.span_positions) for s, st in kept]
    uniform = [uniform_example(len(s.prompt), len(st), model.cfg.n_layer, s.span_positions, alpha) for s, st in kept]
    return summarise(measured, uniform, alpha)
