"""One attention head on one-hot tokens (docs/setting.md section 1), in four parameterisations.

Matrices are V x V over the one-hot vocabulary (indices: :mod:`qkdyn.empirical.synthetic.layout`):
W_QK collapsed, or W_QK = W_Q W_K^T with W_Q, W_K of shape V x r; W_OV collapsed, or
W_OV = W_O W_V with W_O of shape V x r and W_V of shape r x V. Only the query row of W_QK and the
K label rows of W_OV reach the loss; every other entry has zero gradient and never moves.

With no positional encoding, positions holding the same token get the same score, so the output
depends on a context only through its count vector c (c_x = occurrences of token x):

    A_x     = s W_QK[q, x]                                    (score of token x)
    attn_x  = c_x e^{A_x} / sum_y c_y e^{A_y}                 (attention mass on token x)
    logits  = W_OV[labels, :] attn                            (K label logits)

which is the per-position definition ``score_j = s W_QK[q, x_j]``, ``attn_j = softmax_j``,
``logits = W_OV sum_j attn_j e_{x_j}`` with equal positions summed. :meth:`forward_tokens`
evaluates the per-position definition literally; the tests prove the two equal.

The forward pass and the loss are written once, here, as pure functions of the matrices (a mapping from
the names W_QK or W_Q, W_K and W_OV or W_O, W_V to tensors): :func:`query_scores` (A), :func:`label_values`
(W_OV[labels, :]), :func:`attend` (the last two lines), :func:`head` (all three) and :func:`loss`
(:func:`cross_entropy` of :func:`head`'s logits); :func:`head_gradients` evaluates the same operations for a stack
of factorized heads with the loss's gradient written out (autograd's to round-off, a test), and :func:`exact_gradients`
for one head on the parts of its matrices that reach the loss, with autograd's own backward formulas (its gradient
to the bit, a test). Each broadcasts over leading dimensions of its tensors: a
stack of R runs, each its own head (matrices (R, rows, cols), counts (R, B, V)), is evaluated by the same
expressions as one run, as the same products batched over the runs; no parameter is shared between the
runs, so the gradient of the summed losses with respect to run r's matrices is that of run r's loss alone.
That is how the programs that train many runs at once (:mod:`.stacked`, :mod:`.batched`,
:mod:`.fixed_attention`) are obtained from this module; the tests prove the stacked evaluation equal to
``torch.func.vmap`` of the one-run function, and every run of each program equal to that run trained alone.
(``vmap`` itself gives the same numbers but costs several times as much per step on these tiny tensors: its
per-operation dispatch outweighs the products; benchmarks/bench_stacked.py measures both.) :class:`AttentionHead` is the module holding one run's matrices; the
spec's model and the authors' layers form their scores and label values their own way, then :func:`attend`.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

import torch
from qkdyn.empirical.synthetic.layout import Layout
from qkdyn.theory.setting import factorized
from torch import nn

PARAMS = ("CACO", "FACO", "CAFO", "FAFO")
#: every tensor of the synthetic model is float64 (round-off ~1e-16 for the exactness tests)
DTYPE = torch.float64


class AttentionHead(nn.Module):
    """The model of docs/setting.md for parameterisation ``param``; inner width r (default V)."""

    def __init__(self, param: str, layout: Layout, scale: float, width: int | None = None,
                 query: int | None = None, dtype: torch.dtype = DTYPE):
        super().__init__()
        if param not in PARAMS:
            raise ValueError(f"unknown parameterisation {param!r}")
        V = layout.vocab
        r = width or V
        self.param, self.layout, self.scale, self.width = param, layout, float(scale), r
        self.query = layout.query if query is None else query
        self.labels = slice(int(layout.labels[0]), int(layout.labels[-1]) + 1)  # contiguous label rows
        zeros = lambda *shape: nn.Parameter(torch.zeros(*shape, dtype=dtype))
        if self.qk_factorized:
            self.W_Q, self.W_K = zeros(V, r), zeros(V, r)
        else:
            self.W_QK = zeros(V, V)
        if self.ov_factorized:
            self.W_O, self.W_V = zeros(V, r), zeros(r, V)
        else:
            self.W_OV = zeros(V, V)

    @property
    def qk_factorized(self) -> bool:
        return factorized(self.param)[0]

    @property
    def ov_factorized(self) -> bool:
        return factorized(self.param)[1]

    def circuit_parameters(self, circuit: str) -> list[nn.Parameter]:
        """The parameters of circuit ``"QK"`` or ``"OV"`` (one optimiser group each)."""
        if circuit == "QK":
            return [self.W_Q, self.W_K] if self.qk_factorized else [self.W_QK]
        if circuit == "OV":
            return [self.W_O, self.W_V] if self.ov_factorized else [self.W_OV]
        raise ValueError(circuit)

    def qk_matrix(self) -> torch.Tensor:
        return self.W_Q @ self.W_K.T if self.qk_factorized else self.W_QK

    def ov_matrix(self) -> torch.Tensor:
        return self.W_O @ self.W_V if self.ov_factorized else self.W_OV

    def matrices(self) -> dict[str, torch.Tensor]:
        """The head's matrices by name (the argument of the pure functions below; the parameters themselves)."""
        return dict(self.named_parameters(recurse=False))

    def query_scores(self) -> torch.Tensor:
        """A = s W_QK[q, :] (shape V), without forming the V x V product (:func:`query_scores`)."""
        return query_scores(self.matrices(), self.query, self.scale)

    def label_values(self) -> torch.Tensor:
        """W_OV[labels, :] (shape K x V), without forming the V x V product (:func:`label_values`)."""
        return label_values(self.matrices(), self.labels)

    def forward(self, counts: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Label logits (B, K) and attention masses (B, V) for count vectors ``counts`` (B, V)."""
        return self.forward_log(torch.log(counts))

    def forward_log(self, log_counts: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """:meth:`forward` from log c (a fixed batch, e.g. the population, takes its log once): :func:`head`."""
        return head(self.matrices(), log_counts, self.scale, self.query, self.labels)

    def forward_tokens(self, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The per-position definition: logits (B, K) and attention (B, T) for token ids (B, T)."""
        attn = torch.softmax(self.query_scores()[tokens], dim=-1)
        values = self.label_values().T[tokens]  # (B, T, K): W_OV[labels, x_j]
        return torch.einsum("bt,btk->bk", attn, values), attn


Matrices = Mapping[str, torch.Tensor]
#: rows of a matrix: one index (the row, its own dimension dropped), indices or a slice (a dimension of rows), or
#: None for every row (a matrix that holds only the rows which reach the loss)
Rows = int | slice | torch.Tensor | None


def query_scores(matrices: Matrices, query: Rows, scale: float) -> torch.Tensor:
    """A = s W_QK[query, :] from W_QK, or from W_Q and W_K as s W_Q[query, :] W_K^T (the V x V product is never
    formed): shape (..., V) for one query id, (..., Q, V) for Q of them; leading dimensions: a stack of runs."""
    if "W_QK" in matrices:
        return scale * _rows(matrices["W_QK"], query)
    rows = _rows(matrices["W_Q"], query)
    if isinstance(query, int) and rows.ndim > 1:  # one id in a stack of runs: a batched one-row product
        return scale * _product(rows[..., None, :], matrices["W_K"].mT)[..., 0, :]
    return scale * _product(rows, matrices["W_K"].mT)


def label_values(matrices: Matrices, labels: Rows) -> torch.Tensor:
    """W_OV[labels, :] from W_OV, or from W_O and W_V as W_O[labels, :] W_V: shape (..., K, V)."""
    if "W_OV" in matrices:
        return _rows(matrices["W_OV"], labels)
    return _product(_rows(matrices["W_O"], labels), matrices["W_V"])


def _rows(matrix: torch.Tensor, rows: Rows) -> torch.Tensor:
    """matrix[..., rows, :] (:data:`Rows`; one matrix indexed directly, the cheaper dispatch)."""
    if rows is None:
        return matrix
    return matrix[rows] if matrix.ndim == 2 else matrix[..., rows, :]


def _product(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """a b, as one batched product for a stack of runs (torch.matmul's broadcasting costs dispatch there)."""
    return torch.bmm(a, b) if a.ndim == b.ndim == 3 else a @ b


def head(matrices: Matrices, log_counts: torch.Tensor, scale: float, query: Rows, labels: Rows,
         slot: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """The forward pass: (logits (..., B, K), attn (..., B, V)) of the head ``matrices`` on log c (..., B, V), from
    :func:`query_scores` at ``query`` and :func:`label_values` at ``labels`` through :func:`attend`. ``query``: one
    id, whose score row every sample shares (None: the query side holds that one row only); one id per sample (a
    tensor (B,), one run); or, with ``slot``
    (..., B), Q query ids, sample b attending with the scores of the id ``query[slot_b]`` (the Q score rows are
    formed once, not once per sample)."""
    scores = query_scores(matrices, query, scale)
    if slot is None:
        if isinstance(query, int) and scores.ndim > 1:  # a stack of runs: each run's row, shared by its batch
            scores = scores[..., None, :]
    else:
        scores = scores.gather(-2, slot[..., None].expand(*slot.shape, scores.shape[-1]))
    return attend(scores, log_counts, label_values(matrices, labels))


def loss(matrices: Matrices, log_counts: torch.Tensor, targets: torch.Tensor, weights: torch.Tensor | None,
         scale: float, query: Rows, labels: Rows, slot: torch.Tensor | None = None) -> torch.Tensor:
    """The loss of the head: :func:`cross_entropy` of :func:`head`'s logits against ``targets`` (..., B), one value
    per leading index (per run of a stack)."""
    return cross_entropy(head(matrices, log_counts, scale, query, labels, slot)[0], targets, weights)


class HeadGradients(NamedTuple):
    """The losses of a stack of factorized heads (R,) and their gradients, one per factor (:func:`head_gradients`)."""

    loss: torch.Tensor
    W_Q: torch.Tensor
    W_K: torch.Tensor
    W_O: torch.Tensor
    W_V: torch.Tensor


def head_gradients(W_Q: torch.Tensor, W_K: torch.Tensor, W_O: torch.Tensor, W_V: torch.Tensor, log_counts: torch.Tensor,
                   targets: torch.Tensor, weights: torch.Tensor | None, scale: float,
                   select: torch.Tensor | None = None) -> HeadGradients:
    """The loss of a stack of R factorized heads (:func:`loss`) and its gradient with respect to each factor, written
    out: what autograd of :func:`loss` gives, to round-off (tests), without its graph. The programs that train many
    small runs at once (:mod:`.batched`, :mod:`.stacked`) spent a third of each step in autograd's engine and in the
    zero-filled buffers of its gather and index backward passes.

    Shapes: the query rows W_Q (R, Q, r), W_K (R, V, r), W_O (R, C, r2), W_V (R, r2, V), log c (R, B, V), targets
    (R, B), weights (R, B) or None (the mean over the batch), ``select`` (R, B, Q) one-hot (sample b scores with query
    row select_b) or None (Q = 1: every sample scores with the one row). The forward pass is :func:`head`'s:

        S = s W_Q W_K^T (R, Q, V),  A = select S,  attn = softmax(A + log c),  values = W_O W_V,
        logits = attn values^T,     L = sum_b w_b CE(logits_b, y_b)              (w_b = 1/B for the mean)

    (A = select S is S's row select_b exactly: products with 1 and 0, sums with zeros), and with
    g_b = w_b (softmax(logits_b) - e_{y_b}), the gradient of L with respect to logits_b, the backward pass is

        dvalues = g^T attn,  dW_O = dvalues W_V^T,  dW_V = W_O^T dvalues,  dattn = g values,
        dA = attn * (dattn - <dattn, attn>),  dS = select^T dA (sum_b dA for one row),
        dW_Q = s dS W_K,  dW_K = s dS^T W_Q."""
    S = scale * torch.bmm(W_Q, W_K.mT)
    scores = S if select is None else torch.bmm(select, S)
    attn = torch.softmax(scores + log_counts, dim=-1)
    values = torch.bmm(W_O, W_V)
    log_p = torch.log_softmax(torch.bmm(attn, values.mT), dim=-1)
    picked = targets[..., None]
    per_sample = -log_p.gather(-1, picked)[..., 0]
    if weights is None:
        loss_value, w = per_sample.mean(dim=-1), 1.0 / targets.shape[-1]
    else:
        loss_value, w = (weights * per_sample).sum(dim=-1), weights[..., None]
    g = log_p.exp_().scatter_add_(-1, picked, torch.full_like(picked, -1.0, dtype=log_p.dtype)).mul_(w)
    d_values = torch.bmm(g.mT, attn)
    d_attn = torch.bmm(g, values)
    d_scores = attn * (d_attn - (d_attn * attn).sum(dim=-1, keepdim=True))
    d_S = d_scores.sum(dim=-2, keepdim=True) if select is None else torch.bmm(select.mT, d_scores)
    d_S.mul_(scale)
    return HeadGradients(loss_value, torch.bmm(d_S, W_K), torch.bmm(d_S.mT, W_Q), torch.bmm(d_values, W_V.mT),
                         torch.bmm(W_O.mT, d_values))


@torch.no_grad()
def exact_gradients(parts: Mapping[str, torch.Tensor], log_counts: torch.Tensor, scale: float, labels: torch.Tensor,
                    weights: torch.Tensor) -> tuple[torch.Tensor, tuple[torch.Tensor, ...]]:
    """(L, the gradient of L with respect to each of ``parts`` in its order) of one head: what
    ``cross_entropy(head(parts, log_counts, scale, None, None)[0], labels, weights)`` and ``torch.autograd.grad`` of it
    give, to the bit, without autograd. ``parts``: :func:`.train.loss_parts` (the query row of W_QK or W_Q, the label
    rows of W_OV or W_O, W_K and W_V whole); log c (B, V), labels and weights (B,).

    The training loop (:func:`.train.train`) takes this gradient at every step. Taped, recording the graph and running
    autograd's engine over it cost as much as the arithmetic on these small tensors; here the forward pass runs without
    a graph, then the formulas of autograd's backward nodes (PyTorch's ``derivatives.yaml`` and ``FunctionsManual.cpp``)
    in its engine's order: the same ATen operations on the same operands in the same memory layouts, hence the same
    numbers (tests compare each part with ``torch.autograd.grad`` for every form and inner width, and training with
    torch's optimisers on the whole matrices). Unlike :func:`head_gradients` (autograd's gradient to round-off),
    nothing is rearranged. Forward, then backward node by node (g_X = dL/dX):

        A = s W_QK[q]  or  s (W_Q[q] W_K^T),         values = W_OV[labels]  or  W_O[labels] W_V   (K, V)
        attn = softmax(A + log c),   logits = attn values^T,   log p = log_softmax(logits),
        L = sum_b w_b (-log p_b[y_b]);

        g_log p = -w_b at (b, y_b), else 0,          g_logits = log_softmax_backward(g_log p),
        g_attn = g_logits values,                    g_values = g_logits^T attn,
        g_A = s sum_b softmax_backward(g_attn)_b,    then through the products forming A and values
    (mm's backward forms the transposed product where the operand it differentiates is column-major, as autograd's
    does: :func:`_grad_first`, :func:`_grad_second`)."""
    # W_Q[q] @ W_K^T as matmul forms a vector-matrix product: (1, r) mm (r, V), squeezed
    query, key_t = (parts["W_Q"].unsqueeze(0), parts["W_K"].mT) if "W_Q" in parts else (None, None)
    scores = scale * (parts["W_QK"] if query is None else query.mm(key_t).squeeze_(0))
    values = parts["W_OV"] if "W_OV" in parts else parts["W_O"].mm(parts["W_V"])
    values_t = values.mT
    attn = torch.softmax(scores + log_counts, dim=-1)
    logits = attn.mm(values_t)
    log_p = torch.log_softmax(logits, dim=1)
    loss = (weights * nn.functional.nll_loss(log_p, labels, reduction="none")).sum()

    # the sum's and the product's backward give 1 x w = w exactly; nll_loss's: -w_b at each label, 0 elsewhere
    g_log_p = torch.zeros_like(log_p).scatter_(1, labels[:, None], weights.neg()[:, None])
    g_logits = torch._log_softmax_backward_data(g_log_p, log_p, 1, log_p.dtype)
    g_attn = _grad_first(g_logits, values_t, attn)
    g_values = _grad_second(g_logits, attn, values_t).mT
    g_sum = torch._softmax_backward_data(g_attn, attn, -1, attn.dtype).sum([0], keepdim=True).view(scores.shape)
    g_scores = g_sum * scale
    grads = {}
    if query is None:
        grads["W_QK"] = g_scores
    else:
        g_row = g_scores.unsqueeze(0)
        grads["W_Q"] = _grad_first(g_row, key_t, query).squeeze(0)
        grads["W_K"] = _grad_second(g_row, query, key_t).mT
    if "W_OV" in parts:
        grads["W_OV"] = g_values
    else:
        grads["W_O"] = _grad_first(g_values, parts["W_V"], parts["W_O"])
        grads["W_V"] = _grad_second(g_values, parts["W_O"], parts["W_V"])
    return loss, tuple(grads[name] for name in parts)


def _column_major(matrix: torch.Tensor) -> bool:
    """Whether a matrix is laid out column by column (autograd's test in mm's backward)."""
    return matrix.stride(0) == 1 and matrix.stride(1) == matrix.size(0)


def _grad_first(grad: torch.Tensor, second: torch.Tensor, first: torch.Tensor) -> torch.Tensor:
    """d/d first of first @ second, given grad = d/d (first @ second): autograd's ``mm_mat1_backward``."""
    return second.mm(grad.t()).t() if _column_major(first) else grad.mm(second.t())


def _grad_second(grad: torch.Tensor, first: torch.Tensor, second: torch.Tensor) -> torch.Tensor:
    """d/d second of first @ second, given grad = d/d (first @ second): autograd's ``mm_mat2_backward``."""
    return grad.t().mm(first).t() if _column_major(second) else first.t().mm(grad)


def attend(scores: torch.Tensor, log_counts: torch.Tensor, values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The head on count vectors (module docstring): attention masses attn = softmax_x(A_x + log c_x) over the ids
    and label logits attn W_OV[labels, :]^T (:func:`readout`), from the scores A (..., V) or (..., B, V), log c
    (..., B, V) and the label values W_OV[labels, :] (..., K, V). Leading dimensions: a stack of runs, each its
    own head (the product is then a batched one), or none. Returns (logits, attn)."""
    attn = torch.softmax(scores + log_counts, dim=-1)
    return readout(attn, values), attn


def readout(attn: torch.Tensor, values: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """The OV circuit on attention masses: logits attn values^T (+ bias), attn (..., B, V), values (..., C, V),
    bias (..., C)."""
    logits = _product(attn, values.mT)
    return logits if bias is None else logits + bias[..., None, :]


def probabilities(logits: torch.Tensor) -> torch.Tensor:
    """The predicted distribution softmax(logits) over the last dimension."""
    return torch.softmax(logits, dim=-1)


def log_counts(counts: torch.Tensor) -> torch.Tensor:
    """log c, entrywise, with log 0 = -inf: torch.log of the same values (equal bits), but the log runs on
    positive numbers only (count vectors are mostly 0, and torch.log of 0 takes 5x as long)."""
    return torch.log(counts.clamp(min=torch.finfo(counts.dtype).tiny)).masked_fill_(counts == 0, -torch.inf)


def cross_entropy(logits: torch.Tensor, labels: torch.Tensor, weights: torch.Tensor | None = None) -> torch.Tensor:
    """sum_b weights_b CE(logits_b, label_b), a weighted mean of the per-context loss (``weights`` None: the plain
    mean over b), for logits (..., B, C), labels and weights (..., B): one value per leading index."""
    if logits.ndim == 2:  # one run (the cheaper dispatch)
        per = nn.functional.cross_entropy(logits, labels, reduction="none")
        return per.mean() if weights is None else (weights * per).sum()
    per = nn.functional.cross_entropy(logits.flatten(0, -2), labels.flatten(), reduction="none").view(labels.shape)
    return per.mean(dim=-1) if weights is None else (weights * per).sum(dim=-1)
