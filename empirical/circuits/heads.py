"""Per-layer, per-head attention measures: how sharp each head is and which role it plays, each beside
uniform attention's value on the same rows (the null).

Pure functions on attention maps. For one sequence of length L, ``maps`` is an (n_layer, H, L, L)
array, row-stochastic and causal (row i = query position i, its weights on keys 0..i), ``ids`` its L
token ids, ``read`` its read-out position and ``rationales`` one position list per annotator. Per layer
and head (:data:`MEASURES`):

- ``entropy``: the mean over query rows i = 1..L-1 of H_i = -sum_j a_ij log a_ij (nats; row 0 has a
  single key, so H_0 = 0 whatever the weights, and it is left out); uniform causal attention has
  H_i = log(i + 1), the largest a row can have;
- ``readout_entropy``: H_read, the entropy of the read-out row;
- ``previous_token``: the mean over rows i = 1..L-1 of a_{i,i-1} (near 1 for a previous-token head);
- ``first_token``: the mean over rows i = 1..L-1 of a_{i,0} (near 1 for a head that parks its attention on
  the first position, an attention sink: sharp, low entropy, and reading nothing of the content);
- ``rationale``: the read-out row's mass on the rationale positions other than the read-out position
  itself, averaged over the annotators that have such a position (high for a subject or answer head);
- ``induction``: the mean, over the rows i whose token occurred before at some j < i - 1, of the row's
  mass on the induction targets {j + 1 : j < i - 1, ids_j = ids_i}, the tokens that followed the earlier
  occurrences (what an induction head attends to; Olsson et al. 2022).

A measure with no row to average (length 1; no rationale position besides the read-out; no repeated
token) is undefined for that sequence: ``None`` in :func:`sequence_measures`, left out of the mean over
sequences, and ``None`` in :func:`summarise` when no sequence defines it. Non-finite attention is not
undefined: it propagates into the mean (a diverged model never reports the sequences that stayed finite).
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

#: the measures of every layer and head, in the order the figures draw them
MEASURES = ("entropy", "readout_entropy", "previous_token", "first_token", "rationale", "induction")
#: the role measures (a head's mass on a kind of position)
ROLES = ("previous_token", "first_token", "rationale", "induction")


def uniform_maps(length: int) -> np.ndarray:
    """(1, 1, L, L) uniform causal attention: row i spreads 1 / (i + 1) over keys 0..i."""
    causal = np.tril(np.ones((length, length)))
    return (causal / causal.sum(axis=1, keepdims=True))[None, None]


def row_entropy(maps: np.ndarray) -> np.ndarray:
    """(..., L, L) -> (..., L): -sum_j a_ij log a_ij of every row (0 log 0 = 0)."""
    return -(maps * np.log(np.where(maps > 0, maps, 1.0))).sum(axis=-1)


def induction_targets(ids: Sequence[int]) -> np.ndarray:
    """(L, L) boolean: [i, t] when t = j + 1 for some j < i - 1 with ids_j = ids_i."""
    tokens = np.asarray(ids)
    length = len(tokens)
    earlier = (tokens[:, None] == tokens[None, :]) & np.tri(length, k=-2, dtype=bool)  # [i, j]: j < i - 1, same token
    targets = np.zeros((length, length), dtype=bool)
    targets[:, 1:] = earlier[:, :-1]
    return targets


def sequence_measures(maps: np.ndarray, ids: Sequence[int], read: int,
                      rationales: Sequence[Sequence[int]]) -> dict[str, np.ndarray | None]:
    """Every measure of :data:`MEASURES` on one sequence, each (n_layer, H), or None where undefined."""
    maps = np.asarray(maps, dtype=float)
    length = maps.shape[-1]
    if maps.ndim != 4 or maps.shape[-2] != length or len(ids) != length or not 0 <= read < length:
        raise ValueError(f"maps {maps.shape}, {len(ids)} ids and read-out {read} do not describe one sequence")
    entropy = row_entropy(maps)
    annotators = [[p for p in r if p != read] for r in rationales]
    annotators = [r for r in annotators if r]
    targets = induction_targets(ids)
    rows = targets.any(axis=1)
    later = np.arange(1, length)
    return {
        "entropy": entropy[..., 1:].mean(axis=-1) if length > 1 else None,
        "readout_entropy": entropy[..., read],
        "previous_token": maps[..., later, later - 1].mean(axis=-1) if length > 1 else None,
        "first_token": maps[..., later, 0].mean(axis=-1) if length > 1 else None,
        "rationale": np.mean([maps[..., read, r].sum(axis=-1) for r in annotators], axis=0) if annotators else None,
        "induction": (maps * targets).sum(axis=-1)[..., rows].mean(axis=-1) if rows.any() else None,
    }


def _mean(values: list) -> np.ndarray | None:
    """Mean over the defined values (None left out); None when there is none."""
    defined = [v for v in values if v is not None]
    return np.mean(defined, axis=0) if defined else None


def summarise(sequences: Iterable[tuple[np.ndarray, Sequence[int], int, Sequence[Sequence[int]]]]) -> dict:
    """Each measure averaged over ``sequences`` ((maps, ids, read, rationales) each): ``{measure:
    n_layer x n_head nested list or None, "uniform": {measure: float or None}, "n": sequences}``, where
    ``uniform`` is the same measure on :func:`uniform_maps` of each sequence, averaged alike."""
    measured, uniform = [], []
    for maps, ids, read, rationales in sequences:
        measured.append(sequence_measures(maps, ids, read, rationales))
        uniform.append(sequence_measures(uniform_maps(len(ids)), ids, read, rationales))
    out: dict = {"n": len(measured), "uniform": {}}
    for key in MEASURES:
        mean = _mean([m[key] for m in measured])
        null = _mean([u[key] for u in uniform])
        out[key] = None if mean is None else mean.tolist()
        out["uniform"][key] = None if null is None else float(null[0, 0])
    return out
