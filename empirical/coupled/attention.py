"""Causal self-attention variants behind one interface: ``module(x: (B, T, C)) -> (B, T, C)``.

* ``standard``  - multi-head attention, scored by ``F.scaled_dot_product_attention``.
* ``coupled``   - paper B: after the Q/K projections, (q, k) follow ``steps`` steps of the flow
  dq/dt = k, dk/dt = f(q) (:mod:`qkdyn.empirical.coupled.qk_flow`, Euler or kick-drift-kick leapfrog),
  then standard attention scores (q', k'). f is a per-head two-layer SiLU MLP without bias
  (``hidden`` units, or d_head with ``field_width`` "head"; ``field_gain`` 0 starts its output layer
  at zero, so the flow starts as the drift q' = q + dt k). dt is one learnable scalar per head, used
  as is (no positivity constraint: dt = 0 is the identity and negative dt integrates backwards),
  initialised to ``dt_init``.
* ``mlp-only``  - the uncoupled control, reading (a): q and k are each updated from themselves only,
  q <- q + dt g(q), k <- k + dt h(k) for ``steps`` steps, with two per-head MLPs of ``hidden // 2``
  units each, so the parameter count equals the coupled variant's.
* ``mlp-only-shared`` - the uncoupled control, reading (b): the coupled variant's own field f (same
  shape, ``hidden`` units) applied to each of q and k separately, q <- q + dt f(q), k <- k + dt f(k);
  again exactly the coupled variant's parameters, without the exchange between q and k.
* ``mlp-only-q`` - the uncoupled control, reading (c), "an MLP update on Q only": q <- q + dt g(q)
  with g of the coupled f's shape (``hidden`` units), k unchanged; the coupled variant's parameters.

Integration horizon of the flow variants (``horizon``): "step" - each of the n steps advances time
dt (n steps integrate to n dt); "fixed" - n steps of dt / n (the horizon dt whatever n).

Ablations of a trained model (``module.ablation``, :mod:`qkdyn.empirical.coupled.ablation`): None (the
model as trained); "attention" - the attention output is zero (the block keeps its MLP); "field" -
the MLPs of the flow are zero (coupled: f = 0, so dt f(q) = 0 and the drift q' = q + dt k is kept;
MLP-only: no update); "flow" - dt = 0 (q' = q, k' = k: standard attention on the same weights).
* ``diff``      - Differential Attention (Ye et al. 2024): half as many heads, each the difference
  of two softmax maps, softmax(q1 k1^T) - lambda softmax(q2 k2^T), applied to values of twice the
  head width; lambda = exp(lq1.lk1) - exp(lq2.lk2) + lambda_init with
  lambda_init = 0.8 - 0.6 exp(-0.3 (layer - 1)); each head's output is RMS-normalised and scaled
  by (1 - lambda_init). Same projection shapes as standard attention. The RMSNorm's gain starts at
  the size of a standard head's output at initialisation (:meth:`DifferentialAttention.match_standard_scale`,
  called by the model after its init) instead of the reference's 1: under the language models'
  N(0, 0.02^2) init a gain of 1 made the attention output 12-18x standard attention's (measured at
  ``tiny`` on ``pydocs`` bytes), i.e. Differential Attention started with a far larger residual
  branch than the model it is compared with.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from qkdyn.empirical.coupled.configs import FLOW_KINDS, AttentionConfig  # noqa: F401 (re-exported: attention.AttentionConfig)
from qkdyn.empirical.coupled.qk_flow import PerHeadMLP, integrate
from torch import nn


def extra_parameters(cfg: AttentionConfig, n_head: int, d_head: int) -> int:
    """Parameters one layer of ``cfg`` has beyond standard attention."""
    if cfg.kind in FLOW_KINDS:
        return n_head * (2 * d_head * cfg.field_hidden(d_head) + 1)  # MLP weights + dt, equal for every flow
    if cfg.kind == "diff":
        return 4 * d_head + 2 * d_head  # lambda_{q1,k1,q2,k2} + RMSNorm weight
    return 0


ABLATIONS = ("attention", "field", "flow")


def _zero_field(x: torch.Tensor) -> torch.Tensor:
    return torch.zeros_like(x)


class CausalSelfAttention(nn.Module):
    """Standard multi-head causal self-attention; subclasses transform (q, k) before scoring.
    ``ablation`` (module docstring): None, or "attention" to output zeros."""

    ablation: str | None = None

    def __init__(self, d_model: int, n_head: int):
        super().__init__()
        if d_model % n_head:
            raise ValueError("d_model must be divisible by n_head")
        self.n_head, self.d_head = n_head, d_model // n_head
        self.c_attn = nn.Linear(d_model, 3 * d_model, bias=False)
        self.c_proj = nn.Linear(d_model, d_model, bias=False)

    def split_heads(self, x: torch.Tensor, n_head: int) -> torch.Tensor:
        B, T, C = x.shape
        return x.view(B, T, n_head, C // n_head).transpose(1, 2)

    def transform_qk(self, q: torch.Tensor, k: torch.Tensor):
        return q, k

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.ablation == "attention":
            return torch.zeros_like(x)
        B, T, C = x.shape
        q, k, v = (self.split_heads(t, self.n_head) for t in self.c_attn(x).split(C, dim=2))
        q, k = self.transform_qk(q, k)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.c_proj(y.transpose(1, 2).reshape(B, T, C))


class FlowAttention(CausalSelfAttention):
    """Attention whose (q, k) are moved by a per-head flow before scoring.

    When ``probe`` is a list, each forward appends the flow's size on that batch (see
    :mod:`qkdyn.empirical.coupled.strength`): ``qk_change`` = mean over (batch, head, token) of
    |(q', k') - (q, k)| / |(q, k)| over the whole flow, ``dt_per_head`` = the learnt dt of each
    head, and what :meth:`probe_extra` adds.
    """

    probe: list | None = None

    def __init__(self, d_model: int, n_head: int, cfg: AttentionConfig):
        super().__init__(d_model, n_head)
        self.steps = cfg.steps
        self.fixed_horizon = cfg.horizon == "fixed"
        self.dt = nn.Parameter(torch.full((n_head,), float(cfg.dt_init)))
        self.hidden = cfg.field_hidden(self.d_head)

    def step_size(self) -> torch.Tensor:
        """The time step of one integration step: dt, or dt / n at a fixed horizon."""
        return self.dt / self.steps if self.fixed_horizon else self.dt

    def fields(self) -> tuple:
        """The flow's MLPs as used now (zero fields under the "field" ablation)."""
        own = self.own_fields()
        return tuple(_zero_field for _ in own) if self.ablation == "field" else own

    def own_fields(self) -> tuple:
        raise NotImplementedError

    def flow(self, q, k):
        raise NotImplementedError

    def transform_qk(self, q, k):
        if self.ablation == "flow":
            return q, k
        q1, k1 = self.flow(q, k)
        if self.probe is not None:
            with torch.no_grad():
                before = torch.cat([q, k], -1).float().norm(dim=-1)
                moved = torch.cat([q1 - q, k1 - k], -1).float().norm(dim=-1)
                entry = {"qk_change": float((moved / before.clamp_min(1e-12)).mean()),
                         "dt_per_head": self.dt.detach().float().cpu().tolist()}
                self.probe.append({**entry, **self.probe_extra(q, k)})
        return q1, k1

    def probe_extra(self, q, k) -> dict:
        """Further sizes a flow reports on the probe batch (none here; see CoupledQKAttention)."""
        return {}


class CoupledQKAttention(FlowAttention):
    """Paper B's coupled query-key attention (see the module docstring)."""

    def __init__(self, d_model: int, n_head: int, cfg: AttentionConfig):
        super().__init__(d_model, n_head, cfg)
        self.integrator = cfg.integrator
        self.field = PerHeadMLP(n_head, self.d_head, self.hidden, cfg.field_gain)

    def own_fields(self) -> tuple:
        return (self.field,)

    def flow(self, q, k):
        return integrate(q, k, self.fields()[0], self.step_size(), self.integrator, self.steps)

    def probe_extra(self, q, k) -> dict:
        """On the probe batch, means over (batch, head, token): ``coupling`` = |h| |f(q)| / |k| and
        ``field_ratio`` = |f(q)| / |k|; ``field_ratio_per_head`` = the mean of |h f(q)| / |k| over
        (batch, token) for each head (the per-head coupling: their mean is ``coupling``)."""
        ratio = self.fields()[0](q).float().norm(dim=-1) / k.float().norm(dim=-1).clamp_min(1e-12)
        h = self.step_size().abs().float().view(1, -1, 1)  # (batch, head, token)
        per_head = (h * ratio).mean(dim=(0, 2))
        return {"coupling": float(per_head.mean()), "field_ratio": float(ratio.mean()),
                "field_ratio_per_head": per_head.cpu().tolist()}


class MLPOnlyAttention(FlowAttention):
    """Uncoupled control, reading (a): q and k each evolve under their own per-head MLP."""

    def __init__(self, d_model: int, n_head: int, cfg: AttentionConfig):
        super().__init__(d_model, n_head, cfg)
        if self.hidden % 2:
            raise ValueError(f"mlp-only splits f's hidden width between q and k: it must be even, got {self.hidden}")
        self.field_q = PerHeadMLP(n_head, self.d_head, self.hidden // 2, cfg.field_gain)
        self.field_k = PerHeadMLP(n_head, self.d_head, self.hidden // 2, cfg.field_gain)

    def own_fields(self) -> tuple:
        return self.field_q, self.field_k

    def flow(self, q, k):
        g, h = self.fields()
        dt = self.step_size().view(-1, 1, 1)
        for _ in range(self.steps):
            q, k = q + dt * g(q), k + dt * h(k)
        return q, k


class SharedMLPOnlyAttention(FlowAttention):
    """Uncoupled control, reading (b): one per-head MLP f moves q and k, each from itself."""

    def __init__(self, d_model: int, n_head: int, cfg: AttentionConfig):
        super().__init__(d_model, n_head, cfg)
        self.field = PerHeadMLP(n_head, self.d_head, self.hidden, cfg.field_gain)

    def own_fields(self) -> tuple:
        return (self.field,)

    def flow(self, q, k):
        (f,) = self.fields()
        dt = self.step_size().view(-1, 1, 1)
        for _ in range(self.steps):
            q, k = q + dt * f(q), k + dt * f(k)
        return q, k


class QueryMLPOnlyAttention(SharedMLPOnlyAttention):
    """Uncoupled control, reading (c): an MLP update on Q only, q <- q + dt g(q); k unchanged."""

    def flow(self, q, k):
        (g,) = self.fields()
        dt = self.step_size().view(-1, 1, 1)
        for _ in range(self.steps):
            q = q + dt * g(q)
        return q, k


def lambda_init_for(layer: int) -> float:
    """Differential Attention's depth-dependent lambda_init, ``layer`` counted from 1."""
    return 0.8 - 0.6 * math.exp(-0.3 * (layer - 1))


class DifferentialAttention(CausalSelfAttention):
    """Differential Attention with the reference implementation's formulas (see module docstring)."""

    def __init__(self, d_model: int, n_head: int, layer: int):
        super().__init__(d_model, n_head)
        if n_head % 2:
            raise ValueError("differential attention uses half the heads: n_head must be even")
        self.n_diff = n_head // 2
        self.lambda_init = lambda_init_for(layer)
        self.lambda_q1, self.lambda_k1, self.lambda_q2, self.lambda_k2 = (
            nn.Parameter(torch.randn(self.d_head) * 0.1) for _ in range(4))
        self.subln = nn.RMSNorm(2 * self.d_head, eps=1e-5)

    @torch.no_grad()
    def match_standard_scale(self, block_size: int) -> None:
        """Set the RMSNorm gain so that the attention output starts at the RMS of a standard head's
        output at initialisation.

        At init the queries and keys are small, so every softmax map is close to uniform over the
        causal context: a standard head's output at position t is the mean of t + 1 values. For block
        inputs of unit RMS per coordinate (the pre-attention LayerNorm's output) a value coordinate has
        RMS s_v = ||W_V||_F / sqrt(d_model) (W_V this layer's value projection), and the mean of t + 1
        independent ones RMS s_v / sqrt(t + 1); averaged over the positions t < T of a block, the
        standard output's RMS is s = s_v sqrt(H_T / T) (H_T the T-th harmonic number). Here
        (a1 - lambda a2) is RMS-normalised, so the output's RMS is gain x (1 - lambda_init): the gain is
        s / (1 - lambda_init). (Tokens that repeat make real values correlated and the standard output a
        little larger: measured within 1.7x of this at ``tiny``.) The shared weights are unchanged."""
        w_v = self.c_attn.weight[2 * self.c_proj.in_features:]
        harmonic = sum(1.0 / t for t in range(1, block_size + 1))
        standard_rms = float(w_v.norm()) / math.sqrt(w_v.shape[0]) * math.sqrt(harmonic / block_size)
        self.subln.weight.fill_(standard_rms / (1 - self.lambda_init))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.ablation == "attention":
            return torch.zeros_like(x)
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k = self.split_heads(q, self.n_head), self.split_heads(k, self.n_head)  # 2 maps per head
        v = self.split_heads(v, self.n_diff)  # (B, H/2, T, 2 d_head)
        lam = (torch.exp(torch.dot(self.lambda_q1, self.lambda_k1))
               - torch.exp(torch.dot(self.lambda_q2, self.lambda_k2)) + self.lambda_init)
        a1 = F.scaled_dot_product_attention(q[:, 0::2], k[:, 0::2], v, is_causal=True)
        a2 = F.scaled_dot_product_attention(q[:, 1::2], k[:, 1::2], v, is_causal=True)
        y = self.subln(a1 - lam * a2) * (1 - self.lambda_init)
        return self.c_proj(y.transpose(1, 2).reshape(B, T, C))


def build_attention(cfg: AttentionConfig, d_model: int, n_head: int, layer: int) -> CausalSelfAttention:
    """The attention module of layer ``layer`` (counted from 1) for configuration ``cfg``."""
    if cfg.kind == "coupled":
        return CoupledQKAttention(d_model, n_head, cfg)
    if cfg.kind == "mlp-only":
        return MLPOnlyAttention(d_model, n_head, cfg)
    if cfg.kind == "mlp-only-shared":
        return SharedMLPOnlyAttention(d_model, n_head, cfg)
    if cfg.kind == "mlp-only-q":
        return QueryMLPOnlyAttention(d_model, n_head, cfg)
    if cfg.kind == "diff":
        return DifferentialAttention(d_model, n_head, layer)
    return CausalSelfAttention(d_model, n_head)
