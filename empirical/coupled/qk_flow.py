"""The query-key flow of paper B: a per-head vector field and the integrators that step it.

The flow treats the query as position and the key as momentum:

    dq/dt = k,    dk/dt = f(q),

with f a two-layer SiLU MLP without bias, one per head (d_head -> hidden -> d_head).

* Euler (explicit, simultaneous):   q' = q + dt k ;  k' = k + dt f(q).
* Leapfrog, kick-drift-kick (Stormer-Verlet; symplectic and time-reversible):
      k_half = k + dt/2 f(q) ;  q' = q + dt k_half ;  k' = k_half + dt/2 f(q').
  Stepping (q', k') with -dt returns (q, k) exactly in exact arithmetic.

Tensors have shape (batch, heads, time, d_head); ``dt`` has shape (heads,) and is broadcast.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class PerHeadMLP(nn.Module):
    """f(x) = silu(x W1[h]) W2[h] for each head h, no biases.

    Initialisation (fan-in scaled, so that f keeps the scale of its input): W1[h] ~ N(0, 1/d_head),
    W2[h] ~ N(0, gain^2 / hidden). With ``gain`` = 1 and x of RMS sigma per coordinate, x W1 has RMS
    sigma and |f(x)| / |x| is of order rms(silu(z)) / sigma for z ~ N(0, sigma^2), about 1/2 for
    small sigma (silu(z) ~ z/2 near 0). nanoGPT's N(0, 0.02^2) init instead gives |f(x)| / |x| of
    order 0.02^2 sqrt(d_head hidden) / 2 ~ 1e-3 (a field that does not act); ``init_std`` keeps
    that reading available: when given, both matrices are N(0, init_std^2) and ``gain`` is unused.
    """

    def __init__(self, n_head: int, d_head: int, hidden: int, gain: float = 1.0, init_std: float | None = None):
        super().__init__()
        std1 = init_std if init_std is not None else d_head ** -0.5
        std2 = init_std if init_std is not None else gain * hidden ** -0.5
        self.w1 = nn.Parameter(torch.randn(n_head, d_head, hidden) * std1)
        self.w2 = nn.Parameter(torch.randn(n_head, hidden, d_head) * std2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # (B, H, T, d) @ (H, d, e) broadcasts over the batch dimension
        return F.silu(x @ self.w1) @ self.w2


def _dt(dt: torch.Tensor) -> torch.Tensor:
    return dt.view(-1, 1, 1)


def euler_step(q, k, field, dt):
    """One explicit Euler step of dq/dt = k, dk/dt = field(q)."""
    return q + _dt(dt) * k, k + _dt(dt) * field(q)


def leapfrog_step(q, k, field, dt):
    """One kick-drift-kick leapfrog step of dq/dt = k, dk/dt = field(q)."""
    h = _dt(dt)
    k_half = k + 0.5 * h * field(q)
    q_new = q + h * k_half
    return q_new, k_half + 0.5 * h * field(q_new)


INTEGRATORS = {"euler": euler_step, "leapfrog": leapfrog_step}


def integrate(q, k, field, dt, integrator: str, steps: int):
    """Apply ``steps`` steps of ``integrator`` ("euler" or "leapfrog") to (q, k)."""
    step = INTEGRATORS[integrator]
    for _ in range(steps):
        q, k = step(q, k, field, dt)
    return q, k
