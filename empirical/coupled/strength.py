"""How strongly the query-key flow acts: the coupling strength of a model on a batch.

For every flow layer (coupled and the mlp-only controls; see
:class:`qkdyn.empirical.coupled.attention.FlowAttention`) one forward pass records

* ``coupling`` = mean over (batch, head, token) of |h f(q)| / |k| on the first integration step,
  h = dt (or dt / n at a fixed horizon): how far the coupling moves the key, relative to the key
  (coupled only). dt is in it: a large field with a small step moves nothing;
* ``field_ratio`` = mean of |f(q)| / |k|: the field's size without the step (coupled only; it was
  the strength figure before dt was included: about 1e-3 means f does not act);
* ``qk_change`` = mean of |(q', k') - (q, k)| / |(q, k)|: how far the whole flow moves q and k.

``measure`` averages them over layers and returns ``{"coupling": ..., "field_ratio": ...,
"qk_change": ...}`` (empty for standard and differential attention; only ``qk_change`` for the
uncoupled controls), with the per-head figures as lists over layers of lists over heads:

* ``dt_per_head``: each head's learnt dt (every flow variant; the step is dt / n at a fixed horizon);
* ``field_ratio_per_head``: each head's mean over (batch, token) of |h f(q)| / |k| (coupled only:
  the per-head form of ``coupling``, whose mean over heads and layers it is).

What the coupling changes in the loss is measured by ablation (:mod:`qkdyn.empirical.coupled.ablation`).
"""
from __future__ import annotations

import torch
from qkdyn.empirical.coupled.attention import FlowAttention

#: the figures reported per layer and head (lists over layers of lists over heads)
PER_HEAD = ("dt_per_head", "field_ratio_per_head")


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
        entries = [e for layer in layers for e in (layer.probe or [])]
    finally:
        for layer in layers:
            layer.probe = None
    return {key: [e[key] for e in entries] if key in PER_HEAD else sum(e[key] for e in entries) / len(entries)
            for key in entries[0]}
