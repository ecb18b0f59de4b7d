"""Attention-interpretability and accuracy metrics of Paper A, on plain numpy arrays.

Nothing here knows about models or corpora, so the synthetic experiments reuse it. Conventions:
an attention *map* is a (T, T) row-stochastic array (row = query position); a *row* is the
attention of the read-out position, shape (T,); a *rationale* is a sequence of positions.
"""
from __future__ import annotations

import math
import re
import string
from collections import Counter
from collections.abc import Callable, Sequence

import numpy as np

#: ERASER's AOPC fractions and the authors' single fraction
AOPC_FRACTIONS = (0.01, 0.05, 0.10, 0.20, 0.50)
AUTHORS_FRACTION = 0.05


# --- combining heads and layers ---------------------------------------------------------------
def head_mean(att: np.ndarray) -> np.ndarray:
    """(H, T, T) -> (T, T): the mean over heads (the one-layer convention)."""
    return att.mean(axis=0)


def layer_average(maps: Sequence[np.ndarray]) -> np.ndarray:
    """Mean of the per-layer (head-mean) maps."""
    return np.mean(np.stack(maps), axis=0)


def layer_maxpool(maps: Sequence[np.ndarray]) -> np.ndarray:
    """Element-wise maximum over layers (rows no longer sum to one)."""
    return np.max(np.stack(maps), axis=0)


def rollout(maps: Sequence[np.ndarray]) -> np.ndarray:
    """Attention rollout (Abnar & Zuidema 2020): each layer's map mixed half-half with the identity
    for the residual stream, rows renormalised, then multiplied from the first layer up:
    R = A'_L ... A'_1."""
    T = maps[0].shape[-1]
    result = np.eye(T)
    for a in maps:
        mixed = 0.5 * a + 0.5 * np.eye(T)
        result = (mixed / mixed.sum(axis=-1, keepdims=True)) @ result
    return result


# --- attention on rationales -----------------------------------------------------------------
def rationale_mass(row: np.ndarray, rationales: Sequence[Sequence[int]]) -> float:
    """Attention mass on each annotator's rationale positions, averaged over annotators;
    NaN when there is no rationale."""
    masses = [float(row[list(r)].sum()) for r in rationales if len(r)]
    return float(np.mean(masses)) if masses else math.nan


def ac_curve(mass: np.ndarray, thresholds: np.ndarray) -> np.ndarray:
    """Attention confidence AC(tau): share of instances whose rationale mass is >= tau.
    Instances with NaN mass (no rationale) are left out."""
    m = mass[~np.isnan(mass)]
    return np.array([(m >= t).mean() if m.size else math.nan for t in thresholds])


def acmc_curve(mass: np.ndarray, confidence: np.ndarray, mass_thresholds: np.ndarray,
               confidence_threshold: float) -> np.ndarray:
    """ACMC(tau; kappa): share of instances with rationale mass >= tau AND predicted-class
    probability >= kappa (NaN-mass instances left out)."""
    keep = ~np.isnan(mass)
    m, c = mass[keep], confidence[keep]
    return np.array([((m >= t) & (c >= confidence_threshold)).mean() if m.size else math.nan
                     for t in mass_thresholds])


def curve_area(thresholds: np.ndarray, values: np.ndarray) -> float:
    """Trapezoidal area under a curve over thresholds (for AC over [0, 1] this is the mean mass)."""
    return float(np.sum((values[1:] + values[:-1]) * np.diff(thresholds)) / 2)


def dtap_histogram(mass: np.ndarray, p_true: np.ndarray, bins: int = 5) -> np.ndarray:
    """DTAP heatmap: % of instances per (attention-on-relevant, probability-of-true-label) cell,
    ``bins`` x ``bins`` cells of width 1/bins on [0, 1]^2 (last cell closed). Rows index attention.
    NaN-mass instances are left out."""
    keep = ~np.isnan(mass)
    counts, _, _ = np.histogram2d(mass[keep], p_true[keep], bins=bins, range=[[0, 1], [0, 1]])
    return 100.0 * counts / max(1, keep.sum())


# --- content-free attention: the positional nulls beside every attention metric ---------------
def rationale_weights(rationales: Sequence[Sequence[Sequence[int]]], width: int) -> np.ndarray:
    """(items, width): W[i, j] = the mass a read-out row one-hot at position j puts on item i's rationale,
    i.e. :func:`rationale_mass` of that row: the share of item i's annotators (those with a non-empty
    rationale) whose rationale holds j; a row of NaN where the item has no rationale."""
    weights = np.zeros((len(rationales), width))
    for i, rat in enumerate(rationales):
        marked = [r for r in rat if len(r)]
        if not marked:
            weights[i] = math.nan
        for r in marked:
            weights[i, list(r)] += 1.0 / len(marked)
    return weights


def positional_masses(reads: Sequence[int], rationales: Sequence[Sequence[Sequence[int]]]) -> dict[str, float]:
    """The mean rationale mass, over the items that have a rationale, of read-out rows that read no content
    (item i read out at position r_i, its causal row over positions 0..r_i; ``rationales`` as for
    :func:`rationale_mass`, e.g. with the read-out position left out):

    - ``uniform``: 1 / (r + 1) on every position;
    - ``previous_token``: one-hot at r - 1 (a previous-token head; at r itself when r = 0);
    - ``best_offset``: the best fixed relative offset, one-hot at max(r - k, 0) (as far back as the row
      reaches), k >= 1 the offset with the largest mean mass over these items (``best_offset_k``);
    - ``best_absolute``: the best fixed absolute position, one-hot at p where p <= r, else at r (the read-out
      itself, the one key a causal row always has), p >= 0 the position with the largest mean mass
      (``best_absolute_p``).

    Ties go to the smaller k or p. The best offset and position are chosen on the very items they are scored
    on, so they are the most a head of that kind can reach there (an upper bound for a positional head).
    ``n``: the items with a rationale; every mass NaN (and k, p -1) when there is none."""
    reads_ = np.asarray(reads, dtype=int)
    width = 1 + max([int(reads_.max(initial=0))] + [p for rat in rationales for r in rat for p in r])
    weights = rationale_weights(rationales, width)
    has = ~np.isnan(weights[:, 0]) if len(reads_) else np.zeros(0, dtype=bool)
    weights, reads_ = weights[has], reads_[has]
    if not len(reads_):
        return {"n": 0, "uniform": math.nan, "previous_token": math.nan, "best_offset": math.nan,
                "best_offset_k": -1, "best_absolute": math.nan, "best_absolute_p": -1}
    rows = np.arange(len(reads_))
    causal = np.arange(width)[None, :] <= reads_[:, None]
    uniform = float(np.mean((weights * causal).sum(axis=1) / (reads_ + 1)))
    span = max(1, int(reads_.max()))
    offsets = np.array([weights[rows, np.maximum(reads_ - k, 0)].mean() for k in range(1, span + 1)])
    absolute = np.array([weights[rows, np.where(p <= reads_, p, reads_)].mean() for p in range(span + 1)])
    k, p = int(np.argmax(offsets)), int(np.argmax(absolute))
    return {"n": int(len(reads_)), "uniform": uniform, "previous_token": float(offsets[0]),
            "best_offset": float(offsets[k]), "best_offset_k": k + 1,
            "best_absolute": float(absolute[p]), "best_absolute_p": p}


# --- the authors' definitions (``--metrics authors``) ------------------------------------------
#: their DTAP bin edges (the ``hist2d`` calls of the heatmap notebooks): 3 x 3 cells, last edge 1.1
AUTHORS_DTAP_EDGES = {"hatexplain": (0.0, 0.33, 0.66, 1.1), "sva": (0.0, 0.1, 0.5, 1.1)}
#: annotator slots their HateXplain tensors always hold (empty slots are rows of zeros)
AUTHORS_ANNOTATOR_SLOTS = 3


def authors_rationale_mass(row: np.ndarray, rationales: Sequence[Sequence[int]],
                           slots: int = AUTHORS_ANNOTATOR_SLOTS) -> float:
    """Their mass: the sum over annotator slots of the row's mass on that annotator's positions,
    divided by the number of *slots* (empty or missing annotators count as 0, so a post with one
    annotation of mass 1 scores 1/3, and a post with no rationale scores 0 instead of being left out)."""
    return float(sum(row[list(r)].sum() for r in rationales if len(r)) / slots)


def authors_dtap(mass: np.ndarray, p_true: np.ndarray, edges: Sequence[float]) -> np.ndarray:
    """Their DTAP heatmap: % of all instances per cell of ``edges`` x ``edges`` (rows: attention)."""
    counts, _, _ = np.histogram2d(mass, p_true, bins=[np.asarray(edges), np.asarray(edges)])
    return 100.0 * counts / max(1.0, counts.sum())


# --- ERASER faithfulness ---------------------------------------------------------------------
def top_positions(importance: np.ndarray, candidates: Sequence[int], fraction: float) -> list[int]:
    """The ceil(fraction * len(candidates)) candidate positions of highest importance (at least
    one; ties broken by lower position)."""
    k = max(1, math.ceil(fraction * len(candidates)))
    ranked = sorted(candidates, key=lambda p: (-importance[p], p))
    return sorted(ranked[:k])


def eraser(predict_proba: Callable[[list[list[int]]], np.ndarray], inputs: Sequence[Sequence[int]],
           importances: Sequence[np.ndarray], keep: Sequence[Sequence[int]],
           fractions: Sequence[float] = AOPC_FRACTIONS) -> dict:
    """ERASER comprehensiveness and sufficiency (DeYoung et al. 2020) for y^ = the predicted class
    on the full input:
        comprehensiveness_k = p(y^|x) - p(y^|x without the top-k positions)
        sufficiency_k       = p(y^|x) - p(y^|only the top-k positions)
    Positions in ``keep[i]`` (e.g. the read-out token) are never removed nor ranked; the rest keep
    their order. Returns per-fraction means (keys "comprehensiveness@f", "sufficiency@f") and the
    AOPC, their mean over ``fractions``."""
    full = predict_proba([list(x) for x in inputs])
    yhat = full.argmax(axis=1)
    p_full = full[np.arange(len(inputs)), yhat]
    result: dict[str, float] = {}
    for f in fractions:
        removed, only = [], []
        for x, imp, fixed in zip(inputs, importances, keep, strict=True):
            fixed = set(fixed)
            top = set(top_positions(imp, [p for p in range(len(x)) if p not in fixed], f))
            removed.append([t for p, t in enumerate(x) if p not in top])
            only.append([t for p, t in enumerate(x) if p in top or p in fixed])
        idx = np.arange(len(inputs))
        result[f"comprehensiveness@{f:g}"] = float(np.mean(p_full - predict_proba(removed)[idx, yhat]))
        result[f"sufficiency@{f:g}"] = float(np.mean(p_full - predict_proba(only)[idx, yhat]))
    result["comprehensiveness_aopc"] = float(np.mean([result[f"comprehensiveness@{f:g}"] for f in fractions]))
    result["sufficiency_aopc"] = float(np.mean([result[f"sufficiency@{f:g}"] for f in fractions]))
    return result


# --- predictive performance ------------------------------------------------------------------
def accuracy(y_true: np.ndarray, y_pred: np.ndarray) -> float:
    return float(np.mean(np.asarray(y_true) == np.asarray(y_pred)))


def macro_f1(y_true: np.ndarray, y_pred: np.ndarray) -> float:
    """Unweighted mean over the labels present in y_true or y_pred of the per-label F1 (0 when a
    label has no true positives)."""
    y_true, y_pred = np.asarray(y_true), np.asarray(y_pred)
    scores = []
    for c in np.union1d(y_true, y_pred):
        tp = np.sum((y_pred == c) & (y_true == c))
        fp, fn = np.sum((y_pred == c) & (y_true != c)), np.sum((y_pred != c) & (y_true == c))
        scores.append(2 * tp / (2 * tp + fp + fn) if tp else 0.0)
    return float(np.mean(scores))


def normalize_answer(text: str) -> str:
    """The SQuAD evaluation normalisation: lower-case, drop punctuation, drop the articles
    a/an/the, collapse whitespace."""
    text = "".join(ch for ch in text.lower() if ch not in set(string.punctuation))
    text = re.sub(r"\b(a|an|the)\b", " ", text)
    return " ".join(text.split())


def squad_em(prediction: str, golds: Sequence[str]) -> float:
    """1.0 if the normalised prediction equals any normalised gold answer."""
    return float(any(normalize_answer(prediction) == normalize_answer(g) for g in golds))


def squad_f1(prediction: str, golds: Sequence[str]) -> float:
    """Best token-overlap F1 between the normalised prediction and any gold answer."""
    def f1(pred: str, gold: str) -> float:
        p, g = normalize_answer(pred).split(), normalize_answer(gold).split()
        if not p or not g:
            return float(p == g)
        common = sum((Counter(p) & Counter(g)).values())
        if common == 0:
            return 0.0
        precision, recall = common / len(p), common / len(g)
        return 2 * precision * recall / (precision + recall)
    return max(f1(prediction, g) for g in golds)
