"""How strongly the query-key flow acts: the coupling strength of a model on a batch.

For every flow layer (coupled, mlp-only, mlp-only-shared; see
:class:`qkdyn.empirical.coupled.attention.FlowAttention`) one forward pass records

* ``coupling`` = mean over (batch, head, token) of |dt f(q)| / |dt k| = |f(q)| / |k| on the first
  integration step: the size of the key's update relative to the query's (coupled only). About
  1e-3 means f does not act and the flow is the linear drift q' = q + dt k;
* ``qk_change`` = mean of |(q', k') - (q, k)| / |(q, k)|: how far the whole flow moves q and k.

``measure`` averages both over layers and returns ``{"coupling": ..., "qk_change": ...}`` (empty
for standard and differential attention, and ``coupling`` absent for the uncoupled controls).
"""
from __future__ import annotations

import torch

from qkdyn.empirical.coupled.attention import FlowAttention


@torch.no_grad()
def measure(model: torch.nn.Module, x: torch.Tensor) -> dict:
    """Coupling strength and relative q/k change of ``model`` on input tokens ``x`` (see module doc)."""
    layers = [m for m in model.modules() if isinstance(m, FlowAttention)]
    if not layers:
        return {}
    for layer in layers:
        layer.probe = []
    try:
        model(x)
        entries = [e for layer in layers for e in layer.probe]
    finally:
        for layer in layers:
            layer.probe = None
    return {key: sum(e[key] for e in entries) / len(entries) for key in entries[0]}
