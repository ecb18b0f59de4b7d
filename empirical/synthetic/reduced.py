"""The reduced state of :mod:`qkdyn.theory.model` and the full matrices, both ways; the canonical init.

Orbits. Each reduced variable of ``qkdyn.theory.model.derive(P).variables`` is the common value of one
orbit of matrix entries (the embedding stated in ``theory/model.py``): factorized QK uses inner
column 0, factorized OV uses inner index i = class i. :func:`orbits` lists the entries of every
orbit; :func:`embed` writes a reduced state into the matrices (all other entries 0).

Reading a state back (:func:`read`) averages each orbit, after fixing the gauge of the factors
(W_Q, W_K) -> (W_Q R, W_K R), (W_O, W_V) -> (W_O R, R^T W_V), R orthogonal, which leaves the
products unchanged: the *polar gauge* rotates the inner space so that the query row of W_Q is
|W_Q[q]| e_0, and so that the label block of W_O is the symmetric positive semi-definite factor P of
its polar decomposition W_O[labels] = P Q (then W_V becomes Q W_V). On the embedded subspace with
q_query >= 0 and a positive semi-definite label block (o_own - o_cross >= 0,
o_own + (K-1) o_cross >= 0; true along every trajectory from the canonical init) the polar gauge is the embedding's
own, so read(embed(x)) = x. It makes the reading independent of which balanced SVD factorization
the init chose (equal singular values leave the SVD basis free).

Distance from the symmetric subspace (:func:`symmetric_distance`): with E_QK = W_QK[q, context],
E_OV = W_OV[labels, context] and Pi the average over the orbits of the collapsed variables,
max_c ||E_c - Pi E_c|| / ||E_c||: zero exactly when the model computes a symmetric function.
"""
from __future__ import annotations

import functools

import numpy as np
import torch
from qkdyn.empirical.synthetic.layout import Layout
from qkdyn.empirical.synthetic.model import AttentionHead
from qkdyn.theory.setting import factorized

Orbit = tuple[str, np.ndarray, np.ndarray]  # parameter name, row indices, column indices


def _pairs(rows, cols) -> tuple[np.ndarray, np.ndarray]:
    r, c = np.meshgrid(np.asarray(rows), np.asarray(cols), indexing="ij")
    return r.ravel(), c.ravel()


def _concat(blocks) -> tuple[np.ndarray, np.ndarray]:
    return np.concatenate([b[0] for b in blocks]), np.concatenate([b[1] for b in blocks])


@functools.cache
def orbits(param: str, lay: Layout) -> dict[str, Orbit]:
    """Reduced variable name -> the matrix entries sharing its value (names as in qkdyn.theory.model);
    built once per (param, layout): callers must not modify the arrays."""
    K, q, lab = lay.classes, lay.query, lay.labels
    out: dict[str, Orbit] = {}
    qk_factorized, ov_factorized = factorized(param)
    if not qk_factorized:
        out["qk_distinct"] = ("W_QK", *_pairs([q], np.concatenate([lay.distinct_of(k) for k in range(K)])))
        out["qk_common"] = ("W_QK", *_pairs([q], lay.common))
    else:
        out["q_query"] = ("W_Q", np.array([q]), np.array([0]))
        out["k_distinct"] = ("W_K", np.concatenate([lay.distinct_of(k) for k in range(K)]), np.zeros(K * lay.distinct, int))
        out["k_common"] = ("W_K", lay.common, np.zeros(lay.commons, int))
    own = [(i, k) for i in range(K) for k in range(K) if i == k]
    cross = [(i, k) for i in range(K) for k in range(K) if i != k]
    if not ov_factorized:
        block = lambda pairs: _concat([_pairs([lab[i]], lay.distinct_of(k)) for i, k in pairs])
        out["ov_own"] = ("W_OV", *block(own))
        out["ov_cross"] = ("W_OV", *block(cross))
        out["ov_common"] = ("W_OV", *_pairs(lab, lay.common))
    else:
        out["o_own"] = ("W_O", lab[np.arange(K)], np.arange(K))
        out["o_cross"] = ("W_O", np.array([lab[j] for j, i in cross]), np.array([i for j, i in cross]))
        block = lambda pairs: _concat([_pairs([i], lay.distinct_of(k)) for i, k in pairs])
        out["v_own"] = ("W_V", *block(own))
        out["v_cross"] = ("W_V", *block(cross))
        out["v_common"] = ("W_V", *_pairs(np.arange(K), lay.common))
    return out


@torch.no_grad()
def embed(model: AttentionHead, values: dict[str, float]) -> AttentionHead:
    """Set the matrices to the symmetric state with reduced variables ``values`` (others 0)."""
    for p in model.parameters():
        p.zero_()
    for name, (pname, rows, cols) in orbits(model.param, model.layout).items():
        getattr(model, pname)[rows, cols] = float(values[name])
    return model


@functools.cache
def _orbit_table(param: str, lay: Layout) -> tuple[tuple[str, ...], tuple, torch.Tensor, torch.Tensor]:
    """The orbits as index tensors, built once per (param, layout): (orbit names, per parameter
    (name, rows, cols), the orbit number of every gathered entry, the orbit sizes)."""
    table = orbits(param, lay)
    names = tuple(table)
    by_param: dict[str, list] = {}
    for i, (pname, rows, cols) in enumerate(table.values()):
        by_param.setdefault(pname, []).append((rows, cols, np.full(len(rows), i)))
    gathers, ids = [], []
    for pname, parts in by_param.items():
        gathers.append((pname, torch.as_tensor(np.concatenate([r for r, _, _ in parts])),
                        torch.as_tensor(np.concatenate([c for _, c, _ in parts]))))
        ids.append(np.concatenate([i for _, _, i in parts]))
    orbit_of = torch.as_tensor(np.concatenate(ids))
    return names, tuple(gathers), orbit_of, torch.bincount(orbit_of)


def orbit_values(param: str, lay: Layout, tensors: dict[str, torch.Tensor]) -> dict[str, float]:
    """Mean of each orbit's entries in ``tensors`` (parameter name -> matrix, e.g. gradients): one
    gather per matrix and one segment sum over the cached orbit table."""
    names, gathers, orbit_of, sizes = _orbit_table(param, lay)
    entries = torch.cat([tensors[pname][rows, cols] for pname, rows, cols in gathers])
    sums = torch.zeros(len(names), dtype=entries.dtype).index_add_(0, orbit_of, entries)
    return dict(zip(names, (sums / sizes).tolist(), strict=True))


def polar_gauge(model: AttentionHead) -> dict[str, torch.Tensor]:
    """The parameters in the polar gauge (module docstring); collapsed matrices unchanged."""
    params = {name: p.detach() for name, p in model.named_parameters()}
    if model.qk_factorized:
        u = params["W_Q"][model.query]
        R = _complete(u / u.norm()) if u.norm() > 0 else torch.eye(model.width, dtype=u.dtype)
        params["W_Q"], params["W_K"] = params["W_Q"] @ R, params["W_K"] @ R
    if model.ov_factorized:
        U, S, Vh = torch.linalg.svd(params["W_O"][model.labels], full_matrices=False)
        Q = U @ Vh  # (K, r), orthonormal rows; W_O[labels] = (U S U^T) Q
        R = _complete_rows(Q)
        params["W_O"], params["W_V"] = params["W_O"] @ R, R.T @ params["W_V"]
    return params


def _complete(u: torch.Tensor) -> torch.Tensor:
    """An orthogonal R whose first column is the unit vector u (so that u^T R = e_0^T)."""
    return _complete_rows(u[None, :])


def _complete_rows(Q: torch.Tensor) -> torch.Tensor:
    """An orthogonal r x r matrix R with R[:, :k] = Q^T for orthonormal rows Q (k x r)."""
    k, r = Q.shape
    rest = torch.linalg.svd(torch.eye(r, dtype=Q.dtype) - Q.T @ Q)[0][:, : r - k]
    return torch.cat([Q.T, rest], dim=1)


def read(model: AttentionHead) -> np.ndarray:
    """The reduced state (order of qkdyn.theory.model.derive(P).variables): orbit means, polar gauge.

    The orbits read only the first columns of the gauge-fixed factors, so the r x r completions of
    :func:`polar_gauge` are never formed: with u = W_Q[q], W_Q R e_0 = W_Q u / |u| (and W_K likewise);
    with Q = U V^T from the SVD of W_O[labels] (K x r), (W_O R)[:, :K] = W_O Q^T and (R^T W_V)[:K] = Q W_V."""
    params = {name: p.detach() for name, p in model.named_parameters()}
    with torch.no_grad():
        if model.qk_factorized:
            u = params["W_Q"][model.query]
            e0 = u / u.norm() if u.norm() > 0 else torch.eye(model.width, dtype=u.dtype)[0]
            params["W_Q"], params["W_K"] = (params["W_Q"] @ e0)[:, None], (params["W_K"] @ e0)[:, None]
        if model.ov_factorized:
            U, _, Vh = torch.linalg.svd(params["W_O"][model.labels], full_matrices=False)
            Q = U @ Vh
            params["W_O"], params["W_V"] = params["W_O"] @ Q.T, Q @ params["W_V"]
    values = orbit_values(model.param, model.layout, params)
    return np.array(list(values.values()))


@torch.no_grad()
def symmetric_distance(model: AttentionHead, scores: torch.Tensor | None = None,
                       values: torch.Tensor | None = None) -> float:
    """max over circuits of ||E - Pi E|| / ||E|| on the entries that reach the loss (docstring); ``scores`` and
    ``values``: the model's query scores and label values where the caller holds them already."""
    ctx, qk_orbit, ov_orbit = _symmetric_orbits(model.layout)
    qk = (model.query_scores() if scores is None else scores)[ctx]
    ov = (model.label_values() if values is None else values)[:, ctx]
    qk_norm, qk_residual, ov_norm, ov_residual = torch.cat(
        [_orbit_residual(qk, *qk_orbit), _orbit_residual(ov, *ov_orbit)]).tolist()
    return max(qk_residual / qk_norm if qk_norm > 0 else 0.0, ov_residual / ov_norm if ov_norm > 0 else 0.0)


@functools.cache
def _symmetric_orbits(lay: Layout) -> tuple[torch.Tensor, tuple, tuple]:
    """The context indices and, per circuit, (orbit number of each entry, flattened; orbit sizes) of the
    collapsed variables: QK distinct / common, OV own / cross / common. Built once per layout."""
    ctx = torch.as_tensor(lay.context)
    owner = torch.as_tensor(lay.token_class())
    qk_orbit = (owner < 0).long()  # 0: distinct, 1: common
    k = torch.arange(lay.classes)[:, None]
    ov_orbit = torch.where(owner[None, :] < 0, 2, (owner[None, :] != k).long()).ravel()  # own, cross, common
    return ctx, (qk_orbit, torch.bincount(qk_orbit)), (ov_orbit, torch.bincount(ov_orbit))


def _orbit_residual(values: torch.Tensor, orbit: torch.Tensor, sizes: torch.Tensor) -> torch.Tensor:
    """(||v||, ||v - Pi v||) of the entries ``values``, Pi the mean over each orbit."""
    v = values.ravel()
    means = torch.zeros(len(sizes), dtype=v.dtype).index_add_(0, orbit, v) / sizes
    return torch.stack([v.norm(), (v - means[orbit]).norm()])


def balanced_factors(W: torch.Tensor, width: int) -> tuple[torch.Tensor, torch.Tensor]:
    """W = U S V^T -> (U sqrt(S), V sqrt(S)) padded (or cut) to ``width`` columns: A B^T = W and
    A^T A = B^T B (balanced). Cutting requires rank(W) <= width."""
    U, S, Vh = torch.linalg.svd(W, full_matrices=False)
    A, B = U * S.sqrt(), Vh.T * S.sqrt()
    k = min(width, len(S))
    if len(S) > width and float(S[width:].max()) > 0:
        raise ValueError(f"rank of W exceeds the inner width {width}")
    pad = lambda X: torch.cat([X[:, :k], X.new_zeros(X.shape[0], width - k)], dim=1)
    return pad(A), pad(B)


@torch.no_grad()
def design_init(model: AttentionHead, setting) -> AttentionHead:
    """docs/setting.md init: W_QK[q, d] = qk0 / s, W_OV[label_k, d in class k] = ov0, zeros elsewhere;
    factorized circuits get balanced factors from the SVD of that product, rotated into the polar
    gauge. The K equal singular values of W_OV leave the SVD's inner basis free; the polar gauge
    fixes it to the embedding of theory/model.py, so the init is embed(theory init) up to round-off;
    entries at round-off level (<= 64 eps max|W|), exactly zero in the exact factors, are set to 0.
    Gradient descent sees neither the rotation nor the round-off; Adam does (it is not
    rotation-equivariant, and it scales a 1e-17 gradient up to a full step), and only with both
    does it stay on the symmetric subspace."""
    lay, V = model.layout, model.layout.vocab
    dtype = next(model.parameters()).dtype
    W_QK = torch.zeros(V, V, dtype=dtype)
    W_OV = torch.zeros(V, V, dtype=dtype)
    for k in range(lay.classes):
        W_QK[lay.query, lay.distinct_of(k)] = setting.qk0 / setting.scale
        W_OV[lay.labels[k], lay.distinct_of(k)] = setting.ov0
    if model.qk_factorized:
        model.W_Q.copy_(balanced_factors(W_QK, model.width)[0])
        model.W_K.copy_(balanced_factors(W_QK, model.width)[1])
    else:
        model.W_QK.copy_(W_QK)
    if model.ov_factorized:
        A, B = balanced_factors(W_OV, model.width)
        model.W_O.copy_(A)
        model.W_V.copy_(B.T)
    else:
        model.W_OV.copy_(W_OV)
    for name, value in polar_gauge(model).items():
        tiny = value.abs() <= 64 * torch.finfo(value.dtype).eps * value.abs().max()
        getattr(model, name).copy_(value.masked_fill(tiny, 0.0))  # exact zeros of the exact factors
    return model


def balance_error(model: AttentionHead) -> dict[str, float]:
    """||A^T A - B^T B|| / max(||A^T A||, ||B^T B||) per factorized circuit (the authors' metric)."""
    out = {}
    with torch.no_grad():
        if model.qk_factorized:
            out["QK"] = _balance(model.W_Q.T @ model.W_Q, model.W_K.T @ model.W_K)
        if model.ov_factorized:
            out["OV"] = _balance(model.W_O.T @ model.W_O, model.W_V @ model.W_V.T)
    return out


def _balance(G1: torch.Tensor, G2: torch.Tensor) -> float:
    scale = max(float(G1.norm()), float(G2.norm()))
    return float((G1 - G2).norm()) / scale if scale > 0 else 0.0


def new_model(param: str, setting, width: int | None = None) -> AttentionHead:
    """The full model of ``setting`` in the canonical init."""
    return design_init(AttentionHead(param, Layout.of(setting), setting.scale, width), setting)
