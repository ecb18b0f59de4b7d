"""A GPT-style decoder language model (nanoGPT layout) with a pluggable attention variant.

Token + learned position embeddings, ``n_layer`` pre-LayerNorm blocks (attention, then a 4x GELU
MLP), a final LayerNorm and an output head. No biases anywhere. Two initialisations (``init``):

* ``nanogpt`` (the language models'): every weight N(0, 0.02^2), residual projections
  N(0, (0.02 / sqrt(2 n_layer))^2), the output head tied to the token embedding;
* ``torch`` (the MQAR models'): PyTorch's default initialisation of each layer, embeddings N(0, 1)
  and linear maps U(-1/sqrt(fan_in), 1/sqrt(fan_in)), and an output head of its own. With the
  nanoGPT init the tiny model never learns MQAR recall (it stays at the query order's positional
  prior, docs/coupled.md "MQAR"); with this one it learns it in a few hundred steps.

Presets (sizes quoted for the byte-level vocabulary of 256; a BPE vocabulary adds vocab x d_model; parameters counted by :func:`count_parameters`, standard
attention, tied head counted once):

=======  =======  =======  =======  =========  ==========================================
preset   n_layer  d_model  n_head   block      parameters
=======  =======  =======  =======  =========  ==========================================
tiny     2        64       4        128        ~0.12 M  (CPU; ~0.1M non-embedding)
1M       4        128      4        128        ~0.8M non-embedding (CPU scale trend)
4M       6        256      8        128        ~4.7M non-embedding (CPU scale trend)
60M      12       640      10       1024       ~59.8 M  (d_head 64)
150M     12       1024     16       1024       ~152.3 M (d_head 64)
350M     28       1024     16       1024       ~353.6 M (d_head 64)
=======  =======  =======  =======  =========  ==========================================
"""
from __future__ import annotations

import dataclasses
import math

import torch
from qkdyn.empirical.coupled.attention import (
    AttentionConfig,
    DifferentialAttention,
    build_attention,
    extra_parameters,
)
from qkdyn.empirical.coupled.configs import FLOW_KINDS, PRESET_BLOCK_SIZES
from qkdyn.empirical.coupled.lm_loss import linear_cross_entropy
from torch import nn


@dataclasses.dataclass(frozen=True)
class GPTConfig:
    vocab_size: int = 256
    block_size: int = 128
    n_layer: int = 2
    n_head: int = 4
    d_model: int = 64
    attention: AttentionConfig = AttentionConfig()
    init: str = "nanogpt"  # one of INITS (module docstring)

    def __post_init__(self):
        if self.init not in INITS:
            raise ValueError(f"init must be one of {', '.join(INITS)}, got {self.init!r}")


#: the initialisations of :class:`GPT` (module docstring)
INITS = ("nanogpt", "torch")

PRESETS: dict[str, dict] = {
    "tiny": dict(n_layer=2, d_model=64, n_head=4, block_size=PRESET_BLOCK_SIZES["tiny"]),
    "1M": dict(n_layer=4, d_model=128, n_head=4, block_size=PRESET_BLOCK_SIZES["1M"]),
    "4M": dict(n_layer=6, d_model=256, n_head=8, block_size=PRESET_BLOCK_SIZES["4M"]),
    "60M": dict(n_layer=12, d_model=640, n_head=10, block_size=PRESET_BLOCK_SIZES["60M"]),
    "150M": dict(n_layer=12, d_model=1024, n_head=16, block_size=PRESET_BLOCK_SIZES["150M"]),
    "350M": dict(n_layer=28, d_model=1024, n_head=16, block_size=PRESET_BLOCK_SIZES["350M"]),
}


def preset_config(name: str, **overrides) -> GPTConfig:
    """The :class:`GPTConfig` of preset ``name`` with ``overrides`` applied."""
    return GPTConfig(**{**PRESETS[name], **overrides})


def count_parameters(cfg: GPTConfig) -> int:
    """Parameter count of ``GPT(cfg)`` in closed form (a tied output head counted once, an untied one
    adds vocab x d_model)."""
    d = cfg.d_model
    per_layer = 2 * d + 4 * d * d + 8 * d * d  # two LayerNorm weights, attention, MLP
    per_layer += extra_parameters(cfg.attention, cfg.n_head, d // cfg.n_head)
    head = cfg.vocab_size * d if cfg.init == "torch" else 0
    return cfg.vocab_size * d + cfg.block_size * d + cfg.n_layer * per_layer + d + head


def flops_per_token(cfg: GPTConfig) -> float:
    """Training FLOPs per token (forward + backward = 3 x forward), counting matrix products only.

    Forward per token (Kaplan et al. 2020): 2 x (non-embedding matrix parameters + the output head)
    + 2 n_layer block d_model for the attention scores and their weighted sum (causal: the mean
    context is block / 2); Differential Attention adds its second A.V product, n_layer block d_model
    (two maps, each weighting values of width d_model); the flow variants add, per layer, head and
    step, 2 x 2 d_head hidden per evaluation of a per-head MLP of ``hidden`` units (one for Euler
    and the mlp-only controls (a) and (c), two for kick-drift-kick leapfrog and control (b)) and
    2 d_head per axpy (two; one for control (c), which moves q only); ``hidden`` is d_head for f as
    wide as the head (``field_width`` "head"). Elementwise work (SiLU,
    softmax, norms) is left out alike for every variant.
    """
    d, att = cfg.d_model, cfg.attention
    forward = 2 * (cfg.n_layer * 12 * d * d + cfg.vocab_size * d) + 2 * cfg.n_layer * cfg.block_size * d
    if att.kind == "diff":
        forward += cfg.n_layer * cfg.block_size * d
    if att.kind in FLOW_KINDS:
        d_head = d // cfg.n_head
        evals = 2 if (att.kind == "coupled" and att.integrator == "leapfrog") or att.kind == "mlp-only-shared" else 1
        axpys = 1 if att.kind == "mlp-only-q" else 2
        per_step = evals * 4 * d_head * att.field_hidden(d_head) + axpys * 2 * d_head
        forward += cfg.n_layer * cfg.n_head * att.steps * per_step
    return 3.0 * forward


def non_embedding_parameters(cfg: GPTConfig) -> int:
    """Parameters outside the token and position embeddings (the x axis of scaling laws)."""
    return count_parameters(cfg) - cfg.vocab_size * cfg.d_model - cfg.block_size * cfg.d_model


class Block(nn.Module):
    def __init__(self, cfg: GPTConfig, layer: int):
        super().__init__()
        d = cfg.d_model
        self.ln_1 = nn.LayerNorm(d, bias=False)
        self.attn = build_attention(cfg.attention, d, cfg.n_head, layer)
        self.ln_2 = nn.LayerNorm(d, bias=False)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d, bias=False), nn.GELU(), nn.Linear(4 * d, d, bias=False))

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    """Decoder LM; ``forward(idx)`` returns (logits, None), ``forward(idx, targets)`` (None, the mean
    cross-entropy over targets != -100), the latter without forming the logits
    (:func:`~qkdyn.empirical.coupled.lm_loss.linear_cross_entropy`)."""

    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.cfg = cfg
        # The shared weights (embeddings and every nn.Linear) are drawn from a generator seeded by one
        # draw from torch's RNG, so that all attention variants built after the same torch.manual_seed
        # start from identical shared weights; only their extra parameters differ (a paired design).
        shared_seed = int(torch.randint(0, 2**62, (), device="cpu"))
        self.wte = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.wpe = nn.Embedding(cfg.block_size, cfg.d_model)
        self.blocks = nn.ModuleList(Block(cfg, layer) for layer in range(1, cfg.n_layer + 1))
        self.ln_f = nn.LayerNorm(cfg.d_model, bias=False)
        self.lm_head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        if cfg.init == "nanogpt":
            self.lm_head.weight = self.wte.weight
        if not self.wte.weight.is_meta:
            self._init_shared_weights(torch.Generator().manual_seed(shared_seed))
            for block in self.blocks:  # after the values' init, which sets it (draws nothing)
                if isinstance(block.attn, DifferentialAttention):
                    block.attn.match_standard_scale(cfg.block_size)

    @torch.no_grad()
    def _init_shared_weights(self, generator: torch.Generator) -> None:
        """``nanogpt``: N(0, 0.02^2), residual projections N(0, (0.02 / sqrt(2 n_layer))^2) (the tied head
        is the token embedding); ``torch``: embeddings N(0, 1), linear maps U(-1/sqrt(fan_in),
        1/sqrt(fan_in)) (PyTorch's defaults, drawn from ``generator``), the untied head included."""
        for name, module in self.named_modules():
            tied_head = module is self.lm_head and self.cfg.init == "nanogpt"
            if not isinstance(module, (nn.Linear, nn.Embedding)) or tied_head:
                continue
            if self.cfg.init == "torch":
                if isinstance(module, nn.Embedding):
                    module.weight.normal_(0.0, 1.0, generator=generator)
                else:
                    bound = 1.0 / math.sqrt(module.weight.shape[1])
                    module.weight.uniform_(-bound, bound, generator=generator)
                continue
            residual = name.endswith("c_proj") or name.endswith("mlp.2")
            std = 0.02 / math.sqrt(2 * self.cfg.n_layer) if residual else 0.02
            module.weight.copy_(torch.randn(module.weight.shape, generator=generator) * std)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None):
        T = idx.shape[1]
        if T > self.cfg.block_size:
            raise ValueError(f"sequence length {T} exceeds block size {self.cfg.block_size}")
        x = self.wte(idx) + self.wpe(torch.arange(T, device=idx.device))
        for block in self.blocks:
            x = block(x)
        x = self.ln_f(x)
        if targets is None:
            return self.lm_head(x), None
        return None, linear_cross_entropy(x, self.lm_head.weight, targets)
