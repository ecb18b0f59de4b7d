"""The full gradient flow of the model on its active entries: the exact population loss with its gradient and
Hessian in closed form (numpy), for every parameterisation, the torch loss as autograd's reference.

Symbols as in :mod:`.stability` (whose linearisation uses the Hessian) and docs/setting.md section 1.
"""
from __future__ import annotations

import functools

import numpy as np
import torch
from qkdyn.empirical.synthetic import data, reduced, symmetry
from qkdyn.empirical.synthetic.layout import Layout
from qkdyn.empirical.synthetic.model import AttentionHead, attend, cross_entropy, log_counts, probabilities
from qkdyn.empirical.synthetic.model import loss as head_loss
from qkdyn.theory.compiled import load
from qkdyn.theory.setting import factorized

#: the row of the query side (W_QK or W_Q) that :meth:`FullFlow.matrices` holds: the query's
QUERY_ROW = 0
#: the rows of the label side (W_OV or W_O) that reach the loss: every one it holds (:data:`.model.Rows` None)
LABEL_ROWS = None


class FullFlow:
    """The full gradient flow of one setting and parameterisation, on the entries that reach the loss.

    ``batch`` (counts, labels, weights) defaults to every count vector (:func:`.data.count_support`);
    the mean-count batch (:func:`.data.mean_counts`) is exact on the symmetric subspace only.

    ``theta`` is the flat vector of the active blocks (``blocks``: matrix name, rows, columns): the
    query row of W_QK (context columns) or of W_Q, the context rows of W_K, the label rows of W_OV
    (context columns) or of W_O, the context columns of W_V. Every other entry has zero gradient for
    ever and stays 0. The loss is the exact population loss (every count vector with its
    probability), the model's own (:mod:`.model`): scores a = s W_QK[q, ctx], values B = W_OV[labels, ctx],
    attention softmax(a + log c), logits B attn, cross-entropy. Its gradient and Hessian are written out in closed
    form from the attention p and the label probabilities q that the model's functions compute.
    """

    def __init__(self, setting, param: str, width: int | None = None, batch=None):
        self.setting, self.param = setting, param
        self.lay = lay = Layout.of(setting)
        self.width = width or lay.vocab
        ctx = lay.context
        self.blocks = symmetry.blocks(param, lay, self.width)
        self.sizes = [len(r) * len(c) for _, r, c in self.blocks]
        self.eta = np.concatenate([np.full(size, setting.eta_qk if name in ("W_QK", "W_Q", "W_K") else setting.eta_ov)
                                   for (name, _, _), size in zip(self.blocks, self.sizes, strict=True)])
        counts, labels, weights = batch if batch is not None else data.count_support(setting)
        counts = counts[:, torch.as_tensor(ctx)]
        # log 0 = -inf: a token absent from a context gets no attention
        self.log_counts, self.labels, self.weights = log_counts(counts), labels, weights
        self._weights = weights.numpy()
        self._onehot = np.eye(lay.classes)[labels.numpy()]
        self.model = AttentionHead(param, lay, setting.scale, self.width)
        self.collapsed = factorized(param) == (False, False)

    def matrices(self, theta: torch.Tensor) -> dict[str, torch.Tensor]:
        """The blocks of ``theta`` as the head's matrices (rows, columns): the query side holds the query's row
        only, the label side the label rows only."""
        parts = dict(zip((b[0] for b in self.blocks), torch.split(theta, self.sizes), strict=True))
        shape = {name: (len(r), len(c)) for name, r, c in self.blocks}
        return {name: v.reshape(shape[name]) for name, v in parts.items()}

    def loss(self, theta: torch.Tensor) -> torch.Tensor:
        """The loss in torch, :func:`.model.loss` of :meth:`matrices` (row 0 of the query side, every row of the
        label side): the reference for autograd; the closed forms below are what runs."""
        return head_loss(self.matrices(theta), self.log_counts, self.labels, self.weights, self.setting.scale,
                         QUERY_ROW, LABEL_ROWS)

    def loss_value(self, theta: np.ndarray) -> float:
        return float(self._forward(*self.function(theta))[0])

    # -- the loss on numpy arrays, with its exact gradient and Hessian (checked against autograd) ----
    def function(self, theta: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(a, B): scores of the context tokens (..., n_ctx) and label values (..., K, n_ctx) of ``theta`` (numpy)."""
        return self._function(self._matrices(theta))

    def _function(self, M: dict) -> tuple[np.ndarray, np.ndarray]:
        """(a, B) from the matrices (numpy arrays; leading dimensions: a batch of states)."""
        a = (M["W_Q"] @ M["W_K"].swapaxes(-1, -2))[..., 0, :] if "W_Q" in M else M["W_QK"][..., 0, :]
        B = M["W_O"] @ M["W_V"] if "W_O" in M else M["W_OV"]
        return self.setting.scale * a, B

    def _matrices(self, theta: np.ndarray) -> dict[str, np.ndarray]:
        """The blocks of ``theta`` (..., len(theta)) as matrices (..., rows, columns)."""
        theta = np.asarray(theta, dtype=float)
        parts = np.split(theta, np.cumsum(self.sizes)[:-1], axis=-1)
        return {name: v.reshape(*theta.shape[:-1], len(r), len(c)) for (name, r, c), v in zip(self.blocks, parts, strict=True)}

    def _forward(self, a: np.ndarray, B: np.ndarray, with_loss: bool = True):
        """(L, p, q, r): the loss (None without ``with_loss``: the flow's field needs none), and per count vector the attention p, the label probabilities q and the residual
        r = q - onehot(label), by the model's own functions (:func:`.model.attend`, :func:`.model.probabilities`,
        :func:`.model.cross_entropy`) on the arrays (shared with torch, not copied); a (..., n_ctx), B (..., K, n_ctx),
        the leading dimensions a batch of states (one state: the plain 2-D products)."""
        logits, p = attend(torch.as_tensor(a)[..., None, :], self.log_counts, torch.as_tensor(B))
        per_state = logits.shape[:-1]
        loss = (cross_entropy(logits, self.labels.expand(per_state), self.weights.expand(per_state)).numpy()[()]
                if with_loss else None)
        q = probabilities(logits).numpy()
        return loss, p.numpy(), q, q - self._onehot

    def function_gradient(self, a: np.ndarray, B: np.ndarray, with_loss: bool = True):
        """(L, dL/da, dL/dB): g = B^T r per count vector, dL/da = sum w p (g - p.g), dL/dB = sum w r p^T
        (leading dimensions of a, B: a batch of states; L None without ``with_loss``)."""
        loss, p, _, r = self._forward(a, B, with_loss)
        wr = self._weights[:, None] * r
        g = wr @ B
        d_a = (p * (g - (p * g).sum(axis=-1, keepdims=True))).sum(axis=-2)
        return loss, d_a, wr.swapaxes(-1, -2) @ p

    def gradient(self, theta: np.ndarray, with_loss: bool = False):
        """grad L(theta), by the chain rule through the factors (a = s W_Q[q] W_K^T, B = W_O W_V);
        with ``with_loss``, (L, grad L)."""
        if self.collapsed:  # the fast path: theta = (W_QK[q, ctx], W_OV[labels, ctx]) as they are
            n_ctx = self.sizes[0]
            loss, d_a, d_B = self.function_gradient(self.setting.scale * theta[:n_ctx], theta[n_ctx:].reshape(-1, n_ctx),
                                                    with_loss)
            out = np.concatenate([self.setting.scale * d_a, d_B.ravel()])
            return (loss, out) if with_loss else out
        M = self._matrices(theta)
        loss, d_a, d_B = self.function_gradient(*self._function(M), with_loss=with_loss)
        d_a = self.setting.scale * d_a
        blocks = []
        for name, _, _ in self.blocks:
            blocks.append({"W_QK": lambda: d_a[None, :], "W_OV": lambda: d_B,
                           "W_Q": lambda: d_a[None, :] @ M["W_K"], "W_K": lambda: np.outer(d_a, M["W_Q"][0]),
                           "W_O": lambda: d_B @ M["W_V"].T, "W_V": lambda: M["W_O"].T @ d_B}[name]().ravel())
        return (loss, np.concatenate(blocks)) if with_loss else np.concatenate(blocks)

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
        _, p, q, r = self._forward(a, B, with_loss=False)
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
        _, d_a, d_B = self.function_gradient(a, B, with_loss=False)
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
        """Orthonormal basis (columns) of Fix(G): normalised orbit indicators (:func:`.symmetry.fix_basis`)."""
        return symmetry.fix_basis(self.param, self.lay, self.width)

    def transverse_basis(self) -> np.ndarray:
        """Orthonormal basis (columns) of T = Fix(G)^perp (:func:`.symmetry.transverse_basis`)."""
        return symmetry.transverse_basis(self.param, self.lay, self.width)

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
