"""Stability of the symmetric subspace: where the reduced flow describes the full matrix model.

The reduced flow (:mod:`qkdyn.theory.model`) is exact *on* the subspace Fix(G) of parameters left
unchanged by the relabelling group G (permutations of the classes, of the distinct tokens within
a class and of the commons). Fix(G) is invariant under the full gradient flow
d theta/dt = -E grad L(theta) (E = eta_QK on QK parameters, eta_OV on OV parameters) because L is
G-invariant. Whether the full flow *stays near* it is the linearisation in the symmetry-breaking
directions, measured here for every parameterisation (factorized circuits through the chain rule of
:meth:`FullFlow.hessian`, at the inner width of :func:`exact_width`):

At a point theta*(t) of the reduced trajectory (embedded, :func:`.reduced.embed`) let
H = hess L(theta*), L the exact population loss over every count vector (:func:`.data.count_support`;
the mean-count batch that GD uses elsewhere is exact only *on* the subspace and cannot see this).
A perturbation delta obeys delta' = -E H delta. H commutes with the permutation action of G, so it
maps Fix(G) and T = Fix(G)^perp into themselves, and so does E. With y = E^{-1/2} delta,
y' = -S y, S = E^{1/2} H E^{1/2} symmetric, so on T

    d|y|^2/dt = -2 y^T S y <= 2 lambda(t) |y|^2,   lambda(t) = max eig(-S on T)              (1)

lambda(t) is the growth rate of the largest transverse mode, and Lambda(t) = int_0^t lambda is a
bound: |y(t)| <= exp(Lambda(t)) |y(0)|. The *measured* amplification ``gain(t)`` is the norm of the
transverse propagator, the ordered product of exp(-S_k dt_k) (S_k the mean of S at the two ends of
step k of the trajectory's log-spaced time grid).

Decision: a transverse perturbation of relative size ``EPS`` = 1e-8 stays bounded until loss L when
EPS * max_{t <= t_L} gain(t) <= ``TOLERANCE`` = 1e-3. Validated by the nonlinear full-matrix flow
(:func:`perturbed_flow`, any parameterisation) from the canonical init plus EPS along a random
transverse direction, and by gradient descent at a small step (:func:`perturbed_gd`): the time to
loss L against the reduced flow's, and the distance from the symmetric subspace at L
(:func:`.reduced.symmetric_distance`, computed on the function so it is gauge-free for factors).

Everything is float64; the caller sets torch to one thread.
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import math

import numpy as np
import torch
from qkdyn.empirical.synthetic import data, reduced
from qkdyn.empirical.synthetic.layout import Layout
from qkdyn.empirical.synthetic.model import DTYPE, AttentionHead
from qkdyn.simulate.solve import solve
from qkdyn.theory.compiled import load
from qkdyn.theory.setting import factorized
from scipy.integrate import solve_ivp

#: initial transverse perturbation (relative) and the relative size at which it counts as broken
EPS, TOLERANCE = 1e-8, 1e-3
#: points of the reduced trajectory at which the transverse Hessian is evaluated
POINTS = 48


# -- the decisions against TOLERANCE, read at call time (claim SUB's judge makes them from recorded numbers) --
def bounded(eps_gain):
    """Whether EPS x the linearisation's worst gain (:attr:`Transverse.eps_gain`; a number or an array of them)
    stays below TOLERANCE."""
    return np.asarray(eps_gain, dtype=float) <= TOLERANCE


def time_error(t: float, t_reduced: float) -> float:
    """|t / t_reduced - 1|: how far a full run's time to a loss is from the reduced flow's."""
    return abs(t / t_reduced - 1)


def follows(sym_dist: float, time_err: float) -> bool:
    """The reduced flow describes a run: off the subspace by at most TOLERANCE, time within TOLERANCE."""
    return bool(sym_dist <= TOLERANCE and time_err <= TOLERANCE)


def boundary(rhos, inside) -> list[float | None]:
    """Per row of ``inside`` (shapes x ``rhos``: :func:`bounded` of each cell): the largest rho of the grid
    below which every rho is bounded (None: none is)."""
    out = []
    for row in np.asarray(inside, dtype=bool):
        out.append(float(rhos[np.argmin(row) - 1]) if not row.all() and row[0] else
                   (float(rhos[-1]) if row.all() else None))
    return out


class NotReached(RuntimeError):
    """A full run (flow or GD) that did not reach its target loss: nothing was measured."""

#: how a generator g (a permutation of the token indices) acts on (rows, columns) of each matrix;
#: ``inner`` is the class permutation on the inner index of a factorized OV circuit (class i <-> i),
#: the inner index of W_Q, W_K is not permuted
_ACTION = {"W_QK": lambda g, inner, r: (g, g), "W_OV": lambda g, inner, r: (g, g),
           "W_Q": lambda g, inner, r: (g, np.arange(r)), "W_K": lambda g, inner, r: (g, np.arange(r)),
           "W_O": lambda g, inner, r: (g, inner), "W_V": lambda g, inner, r: (inner, g)}


@contextlib.contextmanager
def one_thread():
    """Run torch on one thread inside the block (the matrices are tiny: more threads only contend)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


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


def _blocks(param: str, lay: Layout, width: int) -> list[tuple[str, np.ndarray, np.ndarray]]:
    """The active blocks of :class:`FullFlow` (matrix name, rows, columns), in the order of theta."""
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
    for name, rows, cols in _blocks(param, lay, width):
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


def _fix_basis(param: str, lay: Layout, width: int) -> np.ndarray:
    """Orthonormal basis (columns) of Fix(G): the indicator of each orbit (:func:`_orbits`) over its norm."""
    orbit = _orbits(param, lay, width)
    basis = np.zeros((len(orbit), orbit.max() + 1))
    basis[np.arange(len(orbit)), orbit] = 1.0
    return basis / np.linalg.norm(basis, axis=0)


@functools.lru_cache(maxsize=32)
def _transverse_basis(param: str, lay: Layout, width: int) -> np.ndarray:
    """Orthonormal basis (columns) of T = Fix(G)^perp: the left singular vectors of the projection I - F F^T
    (F = :func:`_fix_basis`) with singular value 1. The SVD is cubic in len(theta) and T depends on (param,
    layout, width) only, not on the rates: built once for every rho of a diagram and shared, read-only."""
    F = _fix_basis(param, lay, width)
    u, sv, _ = np.linalg.svd(np.eye(len(F)) - F @ F.T)
    basis = u[:, sv > 0.5]
    basis.setflags(write=False)
    return basis


class FullFlow:
    """The full gradient flow of one setting and parameterisation, on the entries that reach the loss.

    ``batch`` (counts, labels, weights) defaults to every count vector (:func:`.data.count_support`);
    the mean-count batch (:func:`.data.mean_counts`) is exact on the symmetric subspace only.

    ``theta`` is the flat vector of the active blocks (``blocks``: matrix name, rows, columns): the
    query row of W_QK (context columns) or of W_Q, the context rows of W_K, the label rows of W_OV
    (context columns) or of W_O, the context columns of W_V. Every other entry has zero gradient for
    ever and stays 0. The loss is the exact population loss (every count vector with its
    probability), written out from the model of :mod:`.model`: scores a = s W_QK[q, ctx], values
    B = W_OV[labels, ctx], attention softmax(a + log c), logits B attn, cross-entropy.
    """

    def __init__(self, setting, param: str, width: int | None = None, batch=None):
        self.setting, self.param = setting, param
        self.lay = lay = Layout.of(setting)
        self.width = width or lay.vocab
        ctx = lay.context
        self.blocks = _blocks(param, lay, self.width)
        self.sizes = [len(r) * len(c) for _, r, c in self.blocks]
        self.eta = np.concatenate([np.full(size, setting.eta_qk if name in ("W_QK", "W_Q", "W_K") else setting.eta_ov)
                                   for (name, _, _), size in zip(self.blocks, self.sizes, strict=True)])
        counts, labels, weights = batch if batch is not None else data.count_support(setting)
        counts = counts[:, torch.as_tensor(ctx)]
        self.log_counts, self.labels, self.weights = torch.log(counts), labels, weights
        with np.errstate(divide="ignore"):  # log 0 = -inf: a token absent from a context gets no attention
            self._log_counts = np.log(counts.numpy())
        self._labels, self._weights = labels.numpy(), weights.numpy()
        self._rows = np.arange(len(self._labels))
        self._onehot = np.eye(lay.classes)[self._labels]
        self.model = AttentionHead(param, lay, setting.scale, self.width)
        self.collapsed = factorized(param) == (False, False)

    def split(self, theta: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(a, B): scores of the context tokens (n_ctx,) and label values (K, n_ctx)."""
        parts = dict(zip((b[0] for b in self.blocks), torch.split(theta, self.sizes), strict=True))
        shape = {name: (len(r), len(c)) for name, r, c in self.blocks}
        return self._function({name: v.reshape(shape[name]) for name, v in parts.items()})

    def loss(self, theta: torch.Tensor) -> torch.Tensor:
        """The loss in torch (the reference for autograd; the numpy twin below is what runs)."""
        a, B = self.split(theta)
        attn = torch.softmax(a + self.log_counts, dim=-1)
        logits = attn @ B.T
        ce = torch.logsumexp(logits, dim=-1) - logits.gather(1, self.labels[:, None])[:, 0]
        return (self.weights * ce).sum()

    def loss_value(self, theta: np.ndarray) -> float:
        return float(self._forward(*self.function(theta))[0])

    # -- the same loss in numpy, with its exact gradient and Hessian (checked against autograd) ----
    def function(self, theta: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(a, B) of ``theta`` (numpy; as :meth:`split`)."""
        return self._function(self._matrices(theta))

    def _function(self, M: dict):
        """(a, B) from the matrices (numpy arrays or torch tensors alike; leading dimensions: a batch of states)."""
        a = (M["W_Q"] @ M["W_K"].swapaxes(-1, -2))[..., 0, :] if "W_Q" in M else M["W_QK"][..., 0, :]
        B = M["W_O"] @ M["W_V"] if "W_O" in M else M["W_OV"]
        return self.setting.scale * a, B

    def _matrices(self, theta: np.ndarray) -> dict[str, np.ndarray]:
        """The blocks of ``theta`` (..., len(theta)) as matrices (..., rows, columns)."""
        theta = np.asarray(theta, dtype=float)
        parts = np.split(theta, np.cumsum(self.sizes)[:-1], axis=-1)
        return {name: v.reshape(*theta.shape[:-1], len(r), len(c)) for (name, r, c), v in zip(self.blocks, parts, strict=True)}

    def _forward(self, a: np.ndarray, B: np.ndarray):
        """Per count vector: attention p, label probabilities q, residual r = q - onehot(label); a (..., n_ctx),
        B (..., K, n_ctx), the leading dimensions a batch of states (one state: the plain 2-D products)."""
        u = a[..., None, :] + self._log_counts
        p = np.exp(u - u.max(axis=-1, keepdims=True))
        p /= p.sum(axis=-1, keepdims=True)
        z = p @ B.swapaxes(-1, -2)
        q = np.exp(z - z.max(axis=-1, keepdims=True))
        total = q.sum(axis=-1, keepdims=True)
        q /= total
        r = q - self._onehot
        # CE = logsumexp(z) - z_label = -log q_label
        loss = -(np.log(q[..., self._rows, self._labels]) @ self._weights)
        return loss, p, q, r

    def function_gradient(self, a: np.ndarray, B: np.ndarray) -> tuple[float, np.ndarray, np.ndarray]:
        """(L, dL/da, dL/dB): g = B^T r per count vector, dL/da = sum w p (g - p.g), dL/dB = sum w r p^T
        (leading dimensions of a, B: a batch of states)."""
        loss, p, _, r = self._forward(a, B)
        wr = self._weights[:, None] * r
        g = wr @ B
        d_a = (p * (g - (p * g).sum(axis=-1, keepdims=True))).sum(axis=-2)
        return loss, d_a, wr.swapaxes(-1, -2) @ p

    def gradient(self, theta: np.ndarray, with_loss: bool = False):
        """grad L(theta), by the chain rule through the factors (a = s W_Q[q] W_K^T, B = W_O W_V);
        with ``with_loss``, (L, grad L)."""
        if self.collapsed:  # the fast path: theta = (W_QK[q, ctx], W_OV[labels, ctx]) as they are
            n_ctx = self.sizes[0]
            loss, d_a, d_B = self.function_gradient(self.setting.scale * theta[:n_ctx], theta[n_ctx:].reshape(-1, n_ctx))
            out = np.concatenate([self.setting.scale * d_a, d_B.ravel()])
            return (loss, out) if with_loss else out
        M = self._matrices(theta)
        loss, d_a, d_B = self.function_gradient(*self._function(M))
        d_a = self.setting.scale * d_a
        out = []
        for name, _, _ in self.blocks:
            out.append({"W_QK": lambda: d_a[None, :], "W_OV": lambda: d_B,
                        "W_Q": lambda: d_a[None, :] @ M["W_K"], "W_K": lambda: np.outer(d_a, M["W_Q"][0]),
                        "W_O": lambda: d_B @ M["W_V"].T, "W_V": lambda: M["W_O"].T @ d_B}[name]().ravel())
        return (loss, np.concatenate(out)) if with_loss else np.concatenate(out)

    def field(self, theta: np.ndarray) -> np.ndarray:
        """The flow's right-hand side -E grad L(theta)."""
        return -self.eta * self.gradient(theta)

    def function_hessian(self, a: np.ndarray, B: np.ndarray) -> np.ndarray:
        """hess L in the function coordinates (a, B.ravel()), exactly: with P = diag(p) - p p^T,
        Q = diag(q) - q q^T, g = B^T r, g~ = g - p.g per count vector,

            L_BB[(l,x),(l',x')] = sum w Q_ll' p_x p_x'
            L_Ba[(l,x), y]      = sum w ((Q B P)_ly p_x + r_l P_xy)
            L_aa[x, y]          = sum w (P B^T Q B P + diag(p g~) - p (p g~)^T - (p g~) p^T)_xy

        a (..., n_ctx) and B (..., K, n_ctx): the leading dimensions are a batch of states, each its own Hessian."""
        _, p, q, r = self._forward(a, B)
        w = self._weights
        lead, n_ctx, K = a.shape[:-1], a.shape[-1], B.shape[-2]
        n_cv = len(w)  # count vectors, summed over by the products below (matrix products: BLAS)
        mT = lambda x: x.swapaxes(-1, -2)  # noqa: E731
        P = p[..., :, None] * np.eye(n_ctx) - p[..., :, None] * p[..., None, :]
        Q = q[..., :, None] * np.eye(K) - q[..., :, None] * q[..., None, :]
        BP = B[..., None, :, :] @ P  # (..., i, l, y)
        QBP = Q @ BP
        g = r @ B
        pg = p * (g - (p * g).sum(axis=-1, keepdims=True))
        wp = w[:, None] * p
        outer = (wp[..., :, None] * p[..., None, :]).reshape(*lead, n_cv, n_ctx * n_ctx)  # w p_x p_y
        h_bb = (mT(Q.reshape(*lead, n_cv, K * K)) @ outer).reshape(*lead, K, K, n_ctx, n_ctx)
        h_bb = h_bb.swapaxes(-3, -2).reshape(*lead, K * n_ctx, K * n_ctx)
        h_ba = ((mT(wp) @ QBP.reshape(*lead, n_cv, K * n_ctx)).reshape(*lead, n_ctx, K, n_ctx).swapaxes(-3, -2)
                + (mT(w[:, None] * r) @ P.reshape(*lead, n_cv, n_ctx * n_ctx)).reshape(*lead, K, n_ctx, n_ctx))
        h_ba = h_ba.reshape(*lead, K * n_ctx, n_ctx)
        h_aa = (mT((BP * w[:, None, None]).reshape(*lead, n_cv * K, n_ctx)) @ QBP.reshape(*lead, n_cv * K, n_ctx)
                + (w @ pg)[..., :, None] * np.eye(n_ctx) - mT(wp) @ pg - mT(w[:, None] * pg) @ p)
        return np.concatenate([np.concatenate([h_aa, mT(h_ba)], axis=-1), np.concatenate([h_ba, h_bb], axis=-1)],
                              axis=-2)

    def hessian(self, theta: np.ndarray) -> np.ndarray:
        """hess L(theta) for every parameterisation, exactly, by the chain rule through the function
        f = (a, B) (a = s W_QK[q, ctx] or s W_Q[q] W_K^T, B = W_OV or W_O W_V, both bilinear in the factors):

            hess L = J^T L_ff J + C + C^T,   J = df/dtheta,
            C[W_Q[q,i], W_K[y,j]] = s dL/da_y delta_ij,   C[W_O[l,i], W_V[j,x]] = dL/dB_lx delta_ij

        (the second derivatives of the bilinear maps, weighted by the function gradient; C = 0 for
        collapsed circuits), with L_ff from :meth:`function_hessian`. ``theta`` (..., len(theta)): the
        leading dimensions are a batch of states (the Hessians of a whole trajectory at once)."""
        M = self._matrices(theta)
        a, B = self._function(M)
        _, d_a, d_B = self.function_gradient(a, B)
        h_ff = self.function_hessian(a, B)
        s, n_ctx, K, r = self.setting.scale, a.shape[-1], B.shape[-2], self.width
        lead, size = a.shape[:-1], sum(self.sizes)
        offsets = dict(zip((b[0] for b in self.blocks), np.cumsum([0, *self.sizes[:-1]]), strict=True))
        J = np.zeros((*lead, n_ctx + K * n_ctx, size))
        C = np.zeros((*lead, size, size))
        rows_a, rows_b = slice(0, n_ctx), slice(n_ctx, None)
        eye = lambda k: np.broadcast_to(np.eye(k), (*lead, k, k))  # noqa: E731
        for name, width in zip(offsets, self.sizes, strict=True):  # the blocks of J: df / d(the block's entries), row-major
            cols = slice(offsets[name], offsets[name] + width)
            J[..., {"W_QK": rows_a, "W_Q": rows_a, "W_K": rows_a}.get(name, rows_b), cols] = {
                "W_QK": lambda: s * eye(n_ctx), "W_OV": lambda: eye(K * n_ctx),
                "W_Q": lambda: s * M["W_K"],  # da_y / dW_Q[q, i] = s W_K[y, i]
                "W_K": lambda: s * np.einsum("xy,...i->...xyi", np.eye(n_ctx), M["W_Q"][..., 0, :]).reshape(
                    *lead, n_ctx, n_ctx * r),  # da_x / dW_K[y, i] = s delta_xy W_Q[q, i]
                "W_O": lambda: np.einsum("lm,...ix->...lxmi", np.eye(K), M["W_V"]).reshape(
                    *lead, K * n_ctx, K * r),  # dB_lx / dW_O[m, i] = delta_lm W_V[i, x]
                "W_V": lambda: np.einsum("...li,xy->...lxiy", M["W_O"], np.eye(n_ctx)).reshape(
                    *lead, K * n_ctx, r * n_ctx)}[name]()  # dB_lx / dW_V[i, y] = W_O[l, i] delta_xy
        if "W_Q" in offsets:
            C[..., offsets["W_Q"]:offsets["W_Q"] + r, offsets["W_K"]:offsets["W_K"] + n_ctx * r] = s * np.einsum(
                "...y,ij->...iyj", d_a, np.eye(r)).reshape(*lead, r, n_ctx * r)
        if "W_O" in offsets:
            C[..., offsets["W_O"]:offsets["W_O"] + K * r, offsets["W_V"]:offsets["W_V"] + r * n_ctx] = np.einsum(
                "ij,...lx->...lijx", np.eye(r), d_B).reshape(*lead, K * r, r * n_ctx)
        J_t = torch.as_tensor(J)  # the product in torch (one thread under one_thread(); see linearisation)
        return (J_t.mT @ torch.as_tensor(h_ff) @ J_t).numpy() + C + C.swapaxes(-1, -2)

    @functools.cached_property
    def fix_basis(self) -> np.ndarray:
        """Orthonormal basis (columns) of Fix(G): normalised orbit indicators (:func:`_orbits`)."""
        return _fix_basis(self.param, self.lay, self.width)

    def transverse_basis(self) -> np.ndarray:
        """Orthonormal basis (columns) of T = Fix(G)^perp (:func:`_transverse_basis`)."""
        return _transverse_basis(self.param, self.lay, self.width)

    def embed(self, x: np.ndarray) -> np.ndarray:
        """theta of the reduced state ``x`` (variables of qkdyn.theory.model): the embedding
        :func:`.reduced.embed` is linear, so theta = M x with M's columns the embedded unit vectors."""
        if not hasattr(self, "_embedding"):
            names = load(self.param).variables
            self._embedding = np.stack([self._read(reduced.embed(self.model, dict(zip(names, np.eye(len(names))[i], strict=True))))
                                        for i in range(len(names))], axis=1)
        return self._embedding @ np.asarray(x, dtype=float)

    def _read(self, model: AttentionHead) -> np.ndarray:
        return np.concatenate([getattr(model, name).detach().numpy()[np.ix_(r, c)].ravel()
                               for name, r, c in self.blocks])

    def design_init(self) -> np.ndarray:
        """theta of the canonical init (:func:`.reduced.design_init`)."""
        return self._read(reduced.design_init(self.model, self.setting))

    def to_model(self, theta: np.ndarray) -> AttentionHead:
        with torch.no_grad():
            for p in self.model.parameters():
                p.zero_()
            for (name, r, c), part in zip(self.blocks, np.split(theta, np.cumsum(self.sizes)[:-1]), strict=True):
                getattr(self.model, name)[np.ix_(r, c)] = torch.as_tensor(part.reshape(len(r), len(c)))
        return self.model

    def symmetric_distance(self, theta: np.ndarray) -> float:
        """Relative distance of the computed function from the symmetric one (:func:`.reduced.symmetric_distance`)."""
        return reduced.symmetric_distance(self.to_model(theta))


@dataclasses.dataclass
class Transverse:
    """The linearised transverse flow along one reduced trajectory (module docstring, eq. (1)).

    Sizes are in the weighted norm |y| = |E^{-1/2} theta|; a perturbation starts at EPS |y*(0)|."""

    setting: object
    t: np.ndarray  # trajectory times (log-spaced, t[-1] = time of the target loss)
    loss: np.ndarray
    growth_rate: np.ndarray  # lambda(t): largest eigenvalue of -S on T
    bound: np.ndarray  # Lambda(t) = int_0^t lambda (trapezoid): log of the amplification bound
    log_gain: np.ndarray  # log ||transverse propagator from 0 to t||
    size: np.ndarray  # |y*(t)|, the weighted norm of the reduced trajectory
    propagator: np.ndarray  # the propagator from 0 to t[-1] divided by its norm exp(log_gain[-1])
    basis: np.ndarray  # T (columns), the coordinates of ``propagator``

    @property
    def eps_gain(self) -> np.ndarray:
        """EPS |y*(0)| gain(t) / |y*(t)|: EPS times the linear gain of the relative transverse size at t, the
        relative size the worst perturbation of relative size EPS would have if the flow stayed linear. It is a
        gain, not a size the flow reaches: beyond ~1e-2 the nonlinear flow saturates far below it (claim SUB
        measures both)."""
        return EPS * self.size[0] * np.exp(self.log_gain) / self.size

    @property
    def bounded(self) -> bool:
        """EPS x the worst linear gain stays below TOLERANCE until the target loss."""
        return bool(bounded(self.eps_gain.max()))

    def predicted(self, direction: np.ndarray) -> float:
        """|Phi(t_L) v| / |v| for a transverse direction v (coordinates of ``basis``)."""
        v = direction / np.linalg.norm(direction)
        return float(np.exp(self.log_gain[-1]) * np.linalg.norm(self.propagator @ v))


def exact_width(setting) -> int:
    """The inner width r = K + 1 at which the linearisation of a factorized form is that of every r >= K + 1.

    On the reduced trajectory only the first inner column of W_Q, W_K and the first K of W_O, W_V
    are nonzero (the embedding of :mod:`qkdyn.theory.model`). A perturbation of an unused column j
    changes the function at second order only (J maps it to 0: its partner column is 0), and the
    Hessian couples it with the same column of the other factor only, through the term C of
    :meth:`FullFlow.hessian`, which does not depend on j. So the unused columns are identical,
    decoupled blocks of S on T: one of them (r = K + 1) has the spectrum and the propagator norm of
    all of them (the tests compare r = K + 1 with r = V)."""
    return setting.classes + 1


def linearisation(setting, until_loss: float, points: int = POINTS, param: str = "CACO",
                  width: int | None = None) -> Transverse:
    """lambda(t), Lambda(t) and the propagator gain along the reduced trajectory to ``until_loss``, for
    any parameterisation (factorized forms at inner width ``width``, default :func:`exact_width`).

    The product of exponentials is second order in the grid: on the log-spaced grid of ``points``
    times, the predicted size of a perturbation grown 1e4-fold is within ~30% at 48 points (the tests
    compare it with the perturbed nonlinear flow)."""
    flow = FullFlow(setting, param, width or exact_width(setting))
    T = flow.transverse_basis()
    tr = solve(setting, param, until_loss=until_loss, points=points)
    root = np.sqrt(flow.eta)
    thetas = [flow.embed(tr.state[:, i]) for i in range(len(tr.t))]
    # S_k = A^T H_k A, A = E^{1/2} T, batched; the products and the symmetric eigenproblems in torch: it
    # honours torch.set_num_threads(1) (numpy's BLAS threads only contend; 16x slower on 2 busy cores)
    A = torch.as_tensor(root[:, None] * T)
    S_t = A.T @ torch.as_tensor(flow.hessian(np.array(thetas))) @ A
    rate = torch.linalg.eigvalsh(-S_t).max(dim=1).values.numpy()
    dt = np.diff(tr.t)
    bound = np.concatenate([[0.0], np.cumsum(0.5 * dt * (rate[1:] + rate[:-1]))])
    propagator, log_gain = torch.eye(T.shape[1], dtype=DTYPE), [0.0]
    # exp(-S_k dt_k) of each step from the eigenpairs of the symmetric -(S_k + S_k+1) dt_k / 2, all in one call
    steps_w, steps_U = torch.linalg.eigh(-0.5 * torch.as_tensor(dt)[:, None, None] * (S_t[:-1] + S_t[1:]))
    for w, U in zip(steps_w, steps_U, strict=True):  # the product, renormalised at every step (it may exceed 1e300)
        propagator = (U * torch.exp(w)) @ (U.T @ propagator)
        norm = float(torch.linalg.matrix_norm(propagator, ord=2))
        log_gain.append(log_gain[-1] + math.log(norm))
        propagator /= norm
    size = np.array([np.linalg.norm(th / root) for th in thetas])
    return Transverse(setting, tr.t, tr.loss, rate, bound, np.array(log_gain), size, propagator.numpy(), T)


@dataclasses.dataclass
class Perturbed:
    """A full-matrix run from the canonical init plus a transverse perturbation, to a target loss."""

    param: str
    rho: float
    eps: float
    t: float  # time at which the full model's population loss first reaches the target
    t_reduced: float  # the reduced flow's time to the same loss
    sym_dist: float  # relative distance of the function from the symmetric one there
    transverse: float  # |y_T| / |y| there (weighted norm): the measured relative transverse size
    direction: np.ndarray  # the initial transverse direction (coordinates of FullFlow.transverse_basis)
    seconds: float

    @property
    def time_error(self) -> float:
        return time_error(self.t, self.t_reduced)

    @property
    def follows(self) -> bool:
        """:func:`follows`: the reduced flow describes the run."""
        return follows(self.sym_dist, self.time_error)


def transverse_direction(flow: FullFlow, seed: int) -> np.ndarray:
    """A random unit vector u of T (weighted coordinates y, eq. (1)): u = P w / |P w|, P = I - F F^T the
    projection onto T (F = :attr:`FullFlow.fix_basis`), w a seeded standard normal in the whole space.

    P w does not depend on which orthonormal basis of T one uses (the basis of a repeated singular value
    is not unique, and OpenBLAS's kernels for different CPUs return different ones: drawing u in T's own
    coordinates made the long-horizon run of claim A6 depend on the machine, 7.9e-7 vs 9.5e-7), and it
    needs no basis of T at all (an SVD of the whole space, cubic in its size: 5775 entries for FAFO at width V)."""
    F = flow.fix_basis
    w = np.random.default_rng(seed).standard_normal(F.shape[0])
    u = w - F @ (F.T @ w)
    return u / np.linalg.norm(u)


def _perturbation(flow: FullFlow, theta: np.ndarray, eps: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(delta theta, v): :func:`perturbation` along u = :func:`transverse_direction`, and v = T^T u its
    coordinates in :meth:`FullFlow.transverse_basis` (what :meth:`Transverse.predicted` propagates)."""
    u = transverse_direction(flow, seed)
    return perturbation(flow, theta, eps, u), flow.transverse_basis().T @ u


def perturbation(flow: FullFlow, theta: np.ndarray, eps: float, u: np.ndarray) -> np.ndarray:
    """delta theta = E^{1/2} u eps |y(0)| for a unit u of T: relative size eps in the weighted norm y = E^{-1/2} theta."""
    root = np.sqrt(flow.eta)
    return eps * np.linalg.norm(theta / root) * root * u


def perturbed_model(setting, param: str, eps: float, seed: int = 0) -> AttentionHead:
    """The full model (inner width V, as :func:`.reduced.new_model`) at the canonical init plus
    :func:`perturbation` of relative size ``eps``: a start off the symmetric subspace by a stated, seeded
    amount rather than by round-off, so training from it measures the growth of that perturbation."""
    flow = FullFlow(setting, param, batch=data.mean_counts(setting))  # the batch is never used: only G and E
    theta = flow.design_init()
    return flow.to_model(theta + perturbation(flow, theta, eps, transverse_direction(flow, seed)))


def transverse_size(flow: FullFlow, theta: np.ndarray) -> float:
    """|y_T| / |y| with y = E^{-1/2} theta: the relative size of theta's symmetry-breaking part."""
    y = theta / np.sqrt(flow.eta)
    return float(np.linalg.norm(flow.transverse_basis().T @ y) / np.linalg.norm(y))


def perturbed_flow(setting, param: str, until_loss: float, eps: float = EPS, seed: int = 0,
                   width: int | None = None) -> Perturbed:
    """The nonlinear full gradient flow (exact population loss) in log time tau = log(1 + t), from
    the canonical init plus a transverse perturbation, until the loss reaches ``until_loss``
    (factorized circuits at inner width ``width``, default V)."""
    import time

    start = time.perf_counter()
    flow = FullFlow(setting, param, width)
    theta0 = flow.design_init()
    delta, direction = _perturbation(flow, theta0, eps, seed)
    theta0 = theta0 + delta
    log_level = math.log(until_loss)

    def event(tau, theta):
        return math.log(flow.loss_value(theta)) - log_level

    event.terminal, event.direction = True, -1
    sol = solve_ivp(lambda tau, th: math.exp(tau) * flow.field(th), (0.0, math.log1p(1e12)), theta0,
                    method="DOP853", rtol=1e-10, atol=1e-12, events=event)
    if sol.status != 1:
        raise NotReached(f"{param}: the full flow did not reach loss {until_loss:g}: {sol.message}")
    t = math.expm1(sol.t_events[0][0])
    reduced_t = solve(setting, param, until_loss=until_loss, points=2).event_t
    end = sol.y_events[0][0]
    return Perturbed(param, setting.rho, eps, t, reduced_t, flow.symmetric_distance(end), transverse_size(flow, end),
                     direction, time.perf_counter() - start)


@dataclasses.dataclass
class GDRun:
    """Gradient descent (step h, exact population gradient) from the canonical init plus a perturbation."""

    rho: float
    step: float
    steps: int
    t: float  # steps x h where the loss first reached the target
    t_reduced: float
    transverse: float  # measured |y_T| / |y| at the target loss
    predicted: float  # the linearised flow's prediction for the same initial direction
    eps: float

    @property
    def time_error(self) -> float:
        return time_error(self.t, self.t_reduced)


def perturbed_gd(setting, until_loss: float, step: float, eps: float = EPS, seed: int = 0,
                 max_steps: int = 200_000) -> GDRun:
    """GD on the collapsed model, theta <- theta - h E grad L (every count vector: the exact population
    gradient off the subspace too), from the canonical init plus a transverse perturbation; stops at the
    first step whose loss is below ``until_loss``. The prediction propagates the same direction by the
    linearised flow (:func:`linearisation`) to the reduced flow's time of that loss."""
    flow = FullFlow(setting, "CACO")
    theta = flow.design_init()
    delta, direction = _perturbation(flow, theta, eps, seed)
    theta = theta + delta
    lr = step * flow.eta
    for k in range(max_steps + 1):  # noqa: B007 - k, the steps taken, is read after the loop
        loss, gradient = flow.gradient(theta, with_loss=True)
        if loss < until_loss:
            break
        theta = theta - lr * gradient
    else:
        raise NotReached(f"GD did not reach loss {until_loss:g} in {max_steps} steps")
    lin = linearisation(setting, until_loss)
    predicted = eps * lin.size[0] * lin.predicted(direction) / lin.size[-1]
    return GDRun(setting.rho, step, k, k * step, float(lin.t[-1]), transverse_size(flow, theta), float(predicted), eps)


@dataclasses.dataclass
class Diagram:
    """Where transverse perturbations stay bounded, for one parameterisation ``param``: ``eps_gain[i, j]``
    = max_t EPS x the linear gain of the relative transverse size (:attr:`Transverse.eps_gain`) for shape
    ``shapes[i]`` = (K, D, N) and ``rhos[j]``, until ``level``."""

    param: str
    shapes: list[tuple[int, int, int]]
    rhos: np.ndarray
    level: float
    m: int
    n: int
    eps_gain: np.ndarray
    growth_rate_max: np.ndarray  # max_t lambda(t)
    log_gain: np.ndarray  # log gain at the target loss
    lines: list  # lines[i][j]: the Transverse of that cell

    @property
    def bounded(self) -> np.ndarray:
        return bounded(self.eps_gain)

    def boundary(self) -> list[float | None]:
        """Per shape: :func:`boundary` of this diagram's cells."""
        return boundary(self.rhos, self.bounded)


def diagram(shapes, rhos, level: float, m: int = 2, n: int = 4, points: int = POINTS, param: str = "CACO") -> Diagram:
    """The linearisation (eta_OV = 1, canonical init; factorized forms at :func:`exact_width`) over
    ``shapes`` x ``rhos`` to loss ``level``."""
    lines = [[linearisation(_setting(K, D, N, m, n, rho), level, points, param) for rho in rhos] for K, D, N in shapes]
    field = lambda f: np.array([[f(lin) for lin in row] for row in lines])
    return Diagram(param, [tuple(s) for s in shapes], np.asarray(rhos, dtype=float), level, m, n,
                   field(lambda lin: lin.eps_gain.max()), field(lambda lin: lin.growth_rate.max()),
                   field(lambda lin: lin.log_gain[-1]), lines)


def _setting(K, D, N, m, n, rho):
    from qkdyn.theory.setting import Setting

    return Setting(classes=K, distinct=D, commons=N, m=m, n=n, eta_qk=float(rho), eta_ov=1.0)
