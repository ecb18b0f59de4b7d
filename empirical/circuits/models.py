"""Decoder-only transformers whose attention maps are returned with the output.

One :class:`Decoder` covers the three models of the experiments:
- Paper A's 1-layer classifier: ``n_layer=1, d_model=64, n_head=4, d_mlp=256``, learned positions,
  no LayerNorm, a linear read-out of the residual stream at one position (``readout``: "last" =
  the last non-padding token, or a fixed index);
- its attention-only variant: ``d_mlp=0``;
- a small GPT-style decoder for extractive QA generation: ``head="lm"``, ``layernorm=True``,
  several layers (pre-LN blocks, final LayerNorm, next-token logits at every position).
The QK circuit is the ``attn.q`` and ``attn.k`` projections (weights and biases) of every block.
Options matching the authors' notebooks: ``head_dim`` (their ``d_head``; 0 = d_model / n_head), so the
heads can be wider than d_model / n_head (their 4 heads of width 64 on d_model 64), and
``residual=False`` (their SVA block returns the attention output alone: no residual stream); and for
their SQuAD model ``dropout`` (embeddings, attention weights, MLP), ``tie_embeddings`` and ``init="xavier"``.
Dropout acts on the attention weights after they are returned, so the maps read are the model's own.
"""
from __future__ import annotations

import dataclasses
import math

import torch
import torch.nn.functional as F
from torch import nn


@dataclasses.dataclass
class ModelConfig:
    vocab_size: int
    n_out: int  # classes for head="classify"; ignored (= vocab_size) for head="lm"
    max_len: int
    d_model: int = 64
    n_head: int = 4
    n_layer: int = 1
    d_mlp: int = 256  # 0: attention-only
    layernorm: bool = False
    head: str = "classify"  # "classify" or "lm"
    readout: str = "last"  # "last" or a fixed position index, as a string ("0")
    head_dim: int = 0  # width of each head; 0 = d_model / n_head
    residual: bool = True  # False: a block outputs attention (+ MLP) without adding its input
    dropout: float = 0.0  # on the embedding sum, the attention weights (after they are returned) and the MLP
    tie_embeddings: bool = False  # head="lm": the output layer's weight is the token embedding
    init: str = "normal"  # "normal": N(0, 0.02) weights, zero biases; "xavier": the authors' SQuAD model


class Attention(nn.Module):
    """Causal multi-head self-attention; returns the output and the (B, H, T, T) attention."""

    def __init__(self, d_model: int, n_head: int, head_dim: int = 0, dropout: float = 0.0):
        super().__init__()
        self.drop = nn.Dropout(dropout)
        assert head_dim > 0 or d_model % n_head == 0, "d_model must be divisible by n_head"
        self.n_head = n_head
        self.head_dim = head_dim or d_model // n_head
        inner = n_head * self.head_dim
        self.q = nn.Linear(d_model, inner)
        self.k = nn.Linear(d_model, inner)
        self.v = nn.Linear(d_model, inner)
        self.o = nn.Linear(inner, d_model)

    def forward(self, x: torch.Tensor, pad: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        B, T, _ = x.shape
        heads = lambda t: t.view(B, T, self.n_head, self.head_dim).transpose(1, 2)  # noqa: E731
        q, k, v = heads(self.q(x)), heads(self.k(x)), heads(self.v(x))
        scores = q @ k.transpose(-1, -2) / math.sqrt(self.head_dim)
        causal = torch.ones(T, T, dtype=torch.bool, device=x.device).triu(1)
        scores = scores.masked_fill(causal | pad[:, None, None, :], float("-inf"))
        att = scores.softmax(dim=-1)
        y = (self.drop(att) @ v).transpose(1, 2).reshape(B, T, self.n_head * self.head_dim)
        return self.o(y), att


class Block(nn.Module):
    """Residual attention (+ optional MLP) block, pre-LayerNorm when ``layernorm``; without ``residual``
    each sub-layer's output replaces its input."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        norm = (lambda: nn.LayerNorm(cfg.d_model)) if cfg.layernorm else nn.Identity
        self.ln1, self.ln2 = norm(), norm()
        self.attn = Attention(cfg.d_model, cfg.n_head, cfg.head_dim, cfg.dropout)
        self.residual = cfg.residual
        self.mlp = (nn.Sequential(nn.Linear(cfg.d_model, cfg.d_mlp), nn.GELU(), nn.Linear(cfg.d_mlp, cfg.d_model))
                    if cfg.d_mlp > 0 else None)
        self.drop = nn.Dropout(cfg.dropout)

    def forward(self, x: torch.Tensor, pad: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y, att = self.attn(self.ln1(x), pad)
        x = x + y if self.residual else y
        if self.mlp is not None:
            fc, gelu, proj = self.mlp  # dropout after the activation and after the projection (theirs)
            m = self.drop(proj(self.drop(gelu(fc(self.ln2(x))))))
            x = x + m if self.residual else m
        return x, att


class Decoder(nn.Module):
    """Token + learned position embeddings, ``n_layer`` blocks, a classification or LM head."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        self.tok_emb = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.pos_emb = nn.Embedding(cfg.max_len, cfg.d_model)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layer))
        self.ln_f = nn.LayerNorm(cfg.d_model) if cfg.layernorm else nn.Identity()
        self.drop = nn.Dropout(cfg.dropout)
        n_out = cfg.vocab_size if cfg.head == "lm" else cfg.n_out
        self.out = nn.Linear(cfg.d_model, n_out)
        if cfg.init == "normal":
            self.apply(self._init)
        else:  # the authors' SQuAD model: xavier-uniform (gain 1/sqrt 2) on every matrix but the token
            for name, p in self.named_parameters():  # embedding (N(0, 1) without GloVe), torch's defaults else
                if name != "tok_emb.weight" and p.dim() > 1:
                    nn.init.xavier_uniform_(p, gain=1 / math.sqrt(2))
        if cfg.tie_embeddings and cfg.head == "lm":
            self.out.weight = self.tok_emb.weight

    @staticmethod
    def _init(module: nn.Module) -> None:
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    def readout_index(self, lengths: torch.Tensor) -> torch.Tensor:
        """The read-out position of each sequence."""
        if self.cfg.readout == "last":
            return lengths - 1
        return torch.full_like(lengths, int(self.cfg.readout))

    def forward(self, ids: torch.Tensor, lengths: torch.Tensor,
                at: torch.Tensor | None = None) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """ids (B, T) right-padded with 0, lengths (B,). Returns (logits, attention maps): logits
        (B, n_out) at the read-out position for "classify", (B, T, vocab) for "lm", or for "lm" with
        ``at`` (a (B, T) boolean mask) (N, vocab) at its N true positions only, in row-major order (the
        head is not computed elsewhere: :func:`answer_positions`); one (B, H, T, T) attention tensor per layer."""
        B, T = ids.shape
        pad = torch.arange(T, device=ids.device)[None, :] >= lengths[:, None]
        x = self.drop(self.tok_emb(ids) + self.pos_emb(torch.arange(T, device=ids.device))[None])
        atts = []
        for block in self.blocks:
            x, att = block(x, pad)
            atts.append(att)
        x = self.ln_f(x)
        if self.cfg.head == "classify":
            x = x[torch.arange(B, device=ids.device), self.readout_index(lengths)]
        elif at is not None:
            x = x[at]
        return self.out(x), atts


def classification_loss(logits: torch.Tensor, labels: torch.Tensor, label_smoothing: float = 0.0) -> torch.Tensor:
    return F.cross_entropy(logits.float(), labels, label_smoothing=label_smoothing)


def answer_positions(targets: torch.Tensor) -> torch.Tensor:
    """(B, T) mask of the positions whose next token is a target (``targets`` != -100 one step later):
    the only logits :func:`lm_loss` reads, so a QA step need not compute the others."""
    at = torch.zeros_like(targets, dtype=torch.bool)
    at[:, :-1] = targets[:, 1:] != -100
    return at


def lm_loss(logits: torch.Tensor, targets: torch.Tensor, label_smoothing: float = 0.0,
            at: torch.Tensor | None = None) -> torch.Tensor:
    """Next-token cross-entropy; ``targets`` (B, T) holds -100 where no loss is taken; with
    ``label_smoothing`` eps the target is (1 - eps) one-hot + eps / V (torch's definition). ``logits``
    are (B, T, V), or (N, V) at the positions of ``at`` = :func:`answer_positions` (``targets``) alone
    (the same loss: the mean over the same targets)."""
    if at is not None:
        return F.cross_entropy(logits.float(), targets[:, 1:][at[:, :-1]], label_smoothing=label_smoothing)
    return F.cross_entropy(logits[:, :-1].reshape(-1, logits.size(-1)).float(), targets[:, 1:].reshape(-1),
                           ignore_index=-100, label_smoothing=label_smoothing)
