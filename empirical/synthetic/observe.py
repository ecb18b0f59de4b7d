"""One output row of docs/setting.md section 2 from the current matrices.

``qk``, ``ov``, ``attn`` and ``loss`` are those of the reduced state read from the matrices
(:func:`qkdyn.empirical.synthetic.reduced.read`, orbit means in the polar gauge), through the compiled
theory functions: on the symmetric subspace this *is* the population loss, exactly; off it
(``sym_dist`` > 0: SGD noise, Adam, a random init) it is the population loss of the symmetrised
model. ``acc`` is the accuracy on a fixed sampled test batch.
"""
from __future__ import annotations

from collections.abc import Callable

import torch
from qkdyn.empirical.synthetic import data, reduced
from qkdyn.empirical.synthetic.model import AttentionHead, attend, label_values, log_counts, query_scores
from qkdyn.theory.compiled import load


def observer(param: str, setting, test_size: int = 2048, seed: int = 12345) -> Callable[[AttentionHead], dict]:
    """A function model -> row dict (columns: qk, ov, attn, loss, reduced variables, acc, sym_dist). The model's
    query scores and label values are formed once per row, for ``acc`` (the forward pass on the test batch) and
    ``sym_dist`` alike."""
    compiled, p = load(param), setting.numeric()
    counts, labels, _ = data.sample(setting, test_size, torch.Generator().manual_seed(seed))
    log_c = log_counts(counts)  # the fixed test batch takes its log once

    @torch.no_grad()
    def observe(model: AttentionHead) -> dict:
        x = reduced.read(model)
        qk, ov = (float(v) for v in compiled.features(x, p))
        row = {"qk": qk, "ov": ov, "attn": float(compiled.attention(qk, p)), "loss": float(compiled.loss(qk, ov, p))}
        row.update(zip(compiled.variables, map(float, x), strict=True))
        matrices = model.matrices()
        scores, values = query_scores(matrices, model.query, model.scale), label_values(matrices, model.labels)
        row["acc"] = int((attend(scores, log_c, values)[0].argmax(dim=1) == labels).sum()) / len(labels)
        row["sym_dist"] = reduced.symmetric_distance(model, scores, values)
        return row

    return observe
