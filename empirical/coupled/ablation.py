"""What a trained model's parts change: the same checkpoint evaluated with a part removed.

At every evaluation of a run, :class:`WithAblations` adds to the row the changes under each
ablation, computed on the row's own evaluator (``ablation``: ``{what: {metric: change}}``), so what
each part does is traced over training. For a finished run, :func:`write_ablations` writes the last of
them, the final model's (the one of the final checkpoint: the loop evaluates at the last step, or
again on resuming there), evaluated on the run's own evaluation set (the whole validation split for
language modelling, the fixed test set for MQAR) as trained and under each ablation of
:data:`qkdyn.empirical.coupled.attention.ABLATIONS` that applies to its variant (every module gets
``ablation``):

* ``attention`` (every variant): each attention output zero, the blocks' MLPs kept; the loss this
  costs says how much the model uses attention at all;
* ``field`` (flow variants): the flow's MLPs zero; for coupled attention f = 0, so the key's update
  dt f(q) is removed and the drift q' = q + dt k kept: what the coupling itself changes;
* ``flow`` (flow variants): dt = 0, no flow at all (standard attention on the trained weights).

``ablation.json`` holds the metrics of each and the changes
``delta[ablation][metric] = metric(ablated) - metric(as trained)`` for ``val_loss`` (nats per token:
the change in log perplexity) and ``mqar_acc``. A model whose f is zero changes nothing under the
``field`` ablation: its delta is exactly 0 (the same arithmetic runs).
"""
from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from qkdyn.empirical.coupled.attention import CausalSelfAttention
from qkdyn.empirical.coupled.configs import FLOW_KINDS

from qkdyn import atomic

if TYPE_CHECKING:
    from qkdyn.empirical.coupled.model import GPT

FILE = "ablation.json"
METRICS = ("val_loss", "mqar_acc")


def applicable(kind: str) -> tuple[str, ...]:
    """The ablations of attention variant ``kind``."""
    return ("attention", "field", "flow") if kind in FLOW_KINDS else ("attention",)


@contextlib.contextmanager
def ablated(model: torch.nn.Module, what: str | None):
    """Within the block, every attention module of ``model`` runs with ``ablation = what``."""
    modules = [m for m in model.modules() if isinstance(m, CausalSelfAttention)]
    for m in modules:
        m.ablation = what
    try:
        yield model
    finally:
        for m in modules:
            m.ablation = None


@torch.no_grad()
def ablation_effects(model: GPT, evaluate, device) -> dict:
    """``{"full": metrics, <ablation>: metrics, ..., "delta": {<ablation>: {metric: change}}}``."""
    model.eval()
    whats = applicable(model.cfg.attention.kind)
    out = {"full": evaluate(model, device)}
    for what in whats:
        with ablated(model, what):
            out[what] = evaluate(model, device)
    out["delta"] = {what: {k: out[what][k] - out["full"][k] for k in METRICS if k in out["full"]} for what in whats}
    return out


class WithAblations:
    """``evaluate(model, device) -> metrics`` plus ``ablation``: the changes ``delta`` of
    :func:`ablation_effects` on the same evaluator (the row's metrics are its ``full`` evaluation); ``last``
    keeps the last call's effects (the final model's, after training: :func:`write_ablations`)."""

    def __init__(self, evaluate):
        self.evaluate, self.last = evaluate, None

    def __call__(self, model, device) -> dict:
        self.last = ablation_effects(model, self.evaluate, device)
        return {**self.last["full"], "ablation": self.last["delta"]}


def write_ablations(out_dir: str | Path, step: int, effects: dict) -> dict:
    """Write ``ablation.json`` (atomic): the final model's ``effects`` (:func:`ablation_effects`, as
    :class:`WithAblations` keeps them) at ``step``, the run's last."""
    record = {"step": step, **effects}
    atomic.write_text(Path(out_dir) / FILE, json.dumps(record, indent=2) + "\n")
    return record
