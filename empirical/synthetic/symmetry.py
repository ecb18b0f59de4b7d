"""The relabelling group G on the full model's active entries (:mod:`.stability`): its generators, the orbit of
every entry of theta, and orthonormal bases of Fix(G) (the symmetric subspace, on which the reduced flow is exact)
and of T = Fix(G)^perp (the symmetry-breaking directions).

G permutes the classes, the distinct tokens within a class and the commons; theta holds the active blocks of
:class:`.fullflow.FullFlow` (:func:`blocks`). Bases depend on (param, layout, width) only and are cached, read-only.
"""
from __future__ import annotations

import functools

import numpy as np
from qkdyn.empirical.synthetic.layout import Layout
from qkdyn.theory.setting import factorized

#: how a generator g (a permutation of the token indices) acts on (rows, columns) of each matrix;
#: ``inner`` is the class permutation on the inner index of a factorized OV circuit (class i <-> i),
#: the inner index of W_Q, W_K is not permuted
_ACTION = {"W_QK": lambda g, inner, r: (g, g), "W_OV": lambda g, inner, r: (g, g),
           "W_Q": lambda g, inner, r: (g, np.arange(r)), "W_K": lambda g, inner, r: (g, np.arange(r)),
           "W_O": lambda g, inner, r: (g, inner), "W_V": lambda g, inner, r: (inner, g)}


def generators(lay: Layout) -> list[np.ndarray]:
    """Permutations of the V token indices generating G: adjacent class swaps (blocks of distinct
    tokens and the labels), adjacent swaps of distinct tokens within each class, of commons."""
    def swap(pairs):
        p = np.arange(lay.vocab)
        for a, b in pairs:
            p[a], p[b] = b, a
        return p

    out = [swap([*zip(lay.distinct_of(k), lay.distinct_of(k + 1), strict=True), (lay.labels[k], lay.labels[k + 1])])
           for k in range(lay.classes - 1)]
    for k in range(lay.classes):
        d = lay.distinct_of(k)
        out += [swap([(d[i], d[i + 1])]) for i in range(lay.distinct - 1)]
    c = lay.common
    return out + [swap([(c[i], c[i + 1])]) for i in range(len(c) - 1)]


def blocks(param: str, lay: Layout, width: int) -> list[tuple[str, np.ndarray, np.ndarray]]:
    """The active blocks of :class:`.fullflow.FullFlow` (matrix name, rows, columns), in the order of theta."""
    ctx, q, lab, inner = lay.context, np.array([lay.query]), lay.labels, np.arange(width)
    qk_f, ov_f = factorized(param)
    return ([("W_Q", q, inner), ("W_K", ctx, inner)] if qk_f else [("W_QK", q, ctx)]) + (
        [("W_O", lab, inner), ("W_V", inner, ctx)] if ov_f else [("W_OV", lab, ctx)])


@functools.lru_cache(maxsize=16)
def _orbits(param: str, lay: Layout, width: int) -> np.ndarray:
    """The orbit number under G of each entry of theta (union-find over the generators; a Python loop
    over every entry and generator, so built once per (param, layout, width) and shared: read-only)."""
    where = {}
    start = 0
    for name, rows, cols in blocks(param, lay, width):
        for i, r in enumerate(rows):
            for j, c in enumerate(cols):
                where[(name, int(r), int(c))] = start + i * len(cols) + j
        start += len(rows) * len(cols)
    parent = np.arange(start)

    def find(i):
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    labels = lay.labels
    for g in generators(lay):
        inner = np.arange(width)
        inner[: lay.classes] = np.searchsorted(labels, g[labels])
        for (name, r, c), index in where.items():
            row_perm, col_perm = _ACTION[name](g, inner, width)
            a, b = find(index), find(where[(name, int(row_perm[r]), int(col_perm[c]))])
            parent[a] = b
    roots = np.array([find(i) for i in range(start)])
    orbit = np.unique(roots, return_inverse=True)[1]
    orbit.setflags(write=False)  # the cache hands this one array to every caller
    return orbit


def fix_basis(param: str, lay: Layout, width: int) -> np.ndarray:
    """Orthonormal basis (columns) of Fix(G): the indicator of each orbit (:func:`_orbits`) over its norm."""
    orbit = _orbits(param, lay, width)
    basis = np.zeros((len(orbit), orbit.max() + 1))
    basis[np.arange(len(orbit)), orbit] = 1.0
    return basis / np.linalg.norm(basis, axis=0)


@functools.lru_cache(maxsize=32)
def transverse_basis(param: str, lay: Layout, width: int) -> np.ndarray:
    """Orthonormal basis (columns) of T = Fix(G)^perp: the left singular vectors of the projection I - F F^T
    (F = :func:`fix_basis`) with singular value 1. The SVD is cubic in len(theta) and T depends on (param,
    layout, width) only, not on the rates: built once for every rho of a diagram and shared, read-only."""
    F = fix_basis(param, lay, width)
    u, sv, _ = np.linalg.svd(np.eye(len(F)) - F @ F.T)
    basis = u[:, sv > 0.5]
    basis.setflags(write=False)
    return basis
