"""What a trained model's parts change: the same checkpoint evaluated with a part removed.

At every evaluation of a run, :func:`with_ablations` adds to the row the changes under each
ablation, computed on the row's own evaluator (``ablation``: ``{what: {metric: change}}``), so what
each part does is traced over training. For a finished run, :func:`write_ablations` loads the final checkpoint (``checkpoint.pt``) and evaluates
it on the run's own evaluation set (the whole validation split for language modelling, the fixed
test set for MQAR) as trained and under each ablation of
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


def with_ablations(evaluate):
    """``evaluate(model, device) -> metrics`` plus ``ablation``: the changes ``delta`` of
    :func:`ablation_effects` on the same evaluator (the row's metrics are its ``full`` evaluation)."""

    def run(model, device) -> dict:
        effects = ablation_effects(model, evaluate, device)
        return {**effects["full"], "ablation": effects["delta"]}

    return run


def write_ablations(out_dir: str | Path, model_cfg, evaluate, device: str = "cpu") -> dict:
    """Evaluate the run's final checkpoint as trained and ablated; write ``ablation.json`` (atomic)."""
    from qkdyn.empirical.coupled.model import GPT

    from qkdyn.runs import CHECKPOINT, load_state

    out = Path(out_dir)
    state = load_state(out / CHECKPOINT)
    dev = torch.device("cuda" if device == "auto" and torch.cuda.is_available() else "cpu" if device == "auto" else device)
    model = GPT(model_cfg).to(dev)
    model.load_state_dict(state["model"])
    effects = {"step": state["step"], **ablation_effects(model, evaluate, dev)}
    atomic.write_text(out / FILE, json.dumps(effects, indent=2) + "\n")
    return effects
