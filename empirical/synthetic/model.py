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

The last two lines are :func:`attend`, the one forward pass of every engine that trains this model (the
module, the stacked and batched programs of many runs, the spec's model, the authors' layers, the exact
population loss of the stability analysis): each forms its scores and label values its own way, then attends.
"""
from __future__ import annotations

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

    def query_scores(self) -> torch.Tensor:
        """A = s W_QK[q, :] (shape V), without forming the V x V product."""
        row = self.W_Q[self.query] @ self.W_K.T if self.qk_factorized else self.W_QK[self.query]
        return self.scale * row

    def label_values(self) -> torch.Tensor:
        """W_OV[labels, :] (shape K x V), without forming the V x V product."""
        return self.W_O[self.labels] @ self.W_V if self.ov_factorized else self.W_OV[self.labels]

    def forward(self, counts: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Label logits (B, K) and attention masses (B, V) for count vectors ``counts`` (B, V)."""
        return self.forward_log(torch.log(counts))

    def forward_log(self, log_counts: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """:meth:`forward` from log c (a fixed batch, e.g. the population, takes its log once)."""
        return attend(self.query_scores(), log_counts, self.label_values())

    def forward_tokens(self, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The per-position definition: logits (B, K) and attention (B, T) for token ids (B, T)."""
        attn = torch.softmax(self.query_scores()[tokens], dim=-1)
        values = self.label_values().T[tokens]  # (B, T, K): W_OV[labels, x_j]
        return torch.einsum("bt,btk->bk", attn, values), attn


def attend(scores: torch.Tensor, log_counts: torch.Tensor, values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The head on count vectors (module docstring): attention masses attn = softmax_x(A_x + log c_x) over the ids
    and label logits attn W_OV[labels, :]^T, from the scores A (..., V) or (..., B, V), log c (..., B, V) and the
    label values W_OV[labels, :] (..., K, V). Leading dimensions: a stack of runs, each its own head (the product
    is then a batched one), or none. Returns (logits, attn)."""
    attn = torch.softmax(scores + log_counts, dim=-1)
    return attn @ values.mT, attn


def log_counts(counts: torch.Tensor) -> torch.Tensor:
    """log c, entrywise, with log 0 = -inf: torch.log of the same values (equal bits), but the log runs on
    positive numbers only (count vectors are mostly 0, and torch.log of 0 takes 5x as long)."""
    return torch.log(counts.clamp(min=torch.finfo(counts.dtype).tiny)).masked_fill_(counts == 0, -torch.inf)


def cross_entropy(logits: torch.Tensor, labels: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """sum_b weights_b * CE(logits_b, label_b): a weighted mean of the per-context loss."""
    return (weights * nn.functional.cross_entropy(logits, labels, reduction="none")).sum()
