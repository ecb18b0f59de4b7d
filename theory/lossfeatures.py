"""Which linear combinations of the collapsed entries a loss actually sees (its translation symmetries).

A loss L(E) of the collapsed entries E = (E_1, ..., E_n) of one circuit is often invariant along
constant directions c: L(E + eps c) = L(E) for every E, i.e. sum_e c_e dL/dE_e == 0. Softmax gives
them (adding a constant to every score leaves the attention unchanged: c = (1, 1, 1) on (a, b, a_q));
the cross-entropy over labels gives more (own and cross logits moving together, the common value z).
L then depends on E only through the *features* f = F E with F c = 0 for every symmetry c, and a
polynomial I(x) is conserved for this loss iff sum_i (1/w_i) (dI/dx_i)(d f_k/dx_i) == 0 for every
feature f_k (:func:`qkdyn.theory.invariants.conserved_polynomials`): the mean modes of the exact forms
(KD k_d + N k_c, u + (K-1) w, z) come from these symmetries.

:func:`symmetries` finds them without being told: the gradient dL/dE at random points (entries and
parameters) spans the orthogonal complement of the symmetries, so its numerical null space, rounded
to small rationals, gives candidates; each candidate is kept only if sum_e c_e dL/dE_e vanishes (to
1e-11 relative) at fresh random points of both entries and parameters. A symmetry whose direction
depends on the parameters is therefore not found (the search is conservative: fewer symmetries means
fewer features are merged and fewer conserved quantities are claimed, never a wrong one).
"""
from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction

import numpy as np
import sympy as sp
from qkdyn.theory.model import PARAMS

_SAMPLE_PARAMS = {"K": (2.5, 6.0), "D": (1.5, 5.0), "N": (1.5, 5.0), "m": (1.5, 5.0), "n": (1.5, 5.0),
                  "s": (0.4, 1.6), "eta_QK": (0.5, 2.0), "eta_OV": (0.5, 2.0), "b": (1.0, 2.0)}


def _gradient_function(loss: sp.Expr, entries: list[sp.Symbol], others: list[sp.Symbol]):
    """(E, p) -> dL/dE, the other free symbols (the other circuit's entries) drawn at random too."""
    from qkdyn.theory.specnumeric import lambdify

    raw = lambdify([entries + others, list(PARAMS)], [sp.diff(loss, e) for e in entries])
    return lambda values, p: raw(values, p)


def _points(rng, count: int, dim: int):
    for _ in range(count):
        p = np.array([rng.uniform(*_SAMPLE_PARAMS[str(x)]) for x in PARAMS])
        yield rng.uniform(-1.0, 1.0, dim), p


def _rational_rows(basis: np.ndarray) -> list[list[Fraction]]:
    """Reduced row echelon form of the rows of ``basis`` (numerically), entries rounded to rationals."""
    rows = basis.copy()
    r = 0
    for col in range(rows.shape[1]):
        if r == rows.shape[0]:
            break
        pivot = r + int(np.argmax(np.abs(rows[r:, col])))
        if abs(rows[pivot, col]) < 1e-8:
            continue
        rows[[r, pivot]] = rows[[pivot, r]]
        rows[r] /= rows[r, col]
        for other in range(rows.shape[0]):
            if other != r:
                rows[other] -= rows[other, col] * rows[r]
        r += 1
    return [[Fraction(float(v)).limit_denominator(64) for v in row] for row in rows[:r]]


def symmetries(loss: sp.Expr, entries: list[sp.Symbol], others: Sequence[sp.Symbol] = (), seed: int = 0
               ) -> list[list[Fraction]]:
    """Constant directions c with sum_e c_e dL/dE_e == 0 (module docstring), as rational vectors;
    ``others``: the loss's other free symbols besides the parameters, sampled at random as well."""
    if not entries:
        return []
    others = list(others)
    gradient = _gradient_function(loss, list(entries), others)
    dim = len(entries) + len(others)
    rng = np.random.default_rng(seed)
    rows = np.array([gradient(e, p) for e, p in _points(rng, 3 * len(entries) + 4, dim)])
    _, sv, vt = np.linalg.svd(rows / np.maximum(np.abs(rows).max(axis=1, keepdims=True), 1e-300))
    rank = int(np.sum(sv > 1e-9 * sv[0])) if sv.size and sv[0] > 0 else 0
    candidates = _rational_rows(vt[rank:]) if rank < len(entries) else []
    fresh = [gradient(e, p) for e, p in _points(rng, 8, dim)]
    kept = []
    for c in candidates:
        vector = np.array([float(x) for x in c])
        if all(abs(float(vector @ g)) <= 1e-11 * max(float(np.abs(g).max()), 1e-300) * len(entries) for g in fresh):
            kept.append(c)
    return kept


def features(loss: sp.Expr, entries: list[sp.Symbol], others: Sequence[sp.Symbol] = ()) -> list[sp.Expr]:
    """A basis of the linear combinations of ``entries`` the loss sees: F E with F c = 0 for every symmetry."""
    found = symmetries(loss, entries, others)
    if not found:
        return list(entries)
    C = sp.Matrix([[sp.Rational(x.numerator, x.denominator) for x in c] for c in found])
    return [sum(v[j] * entries[j] for j in range(len(entries))) for v in C.nullspace()]
