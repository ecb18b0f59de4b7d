"""The study's runs selected and summarised: by task, corpus, variant, coupling steps, horizon, length,
model shape and learning rate, each selection keyed by seed (the pairing unit of every comparison).

A run here is the flat dict of :func:`qkdyn.empirical.coupled.analysis.as_run`. The study's *main
grid* is the model shape (preset, layers, heads, width) and learning rate most of its language-model
runs share, Differential Attention's left out: B7's grid (more heads, Diff's own learning-rate sweep)
is another shape or rate, and never mixes into the main claims' selections.
"""
from __future__ import annotations

import math
from collections import Counter
from typing import Any

import numpy as np

from qkdyn.stats import sample_summary

#: "the main grid's" shape or learning rate in :meth:`Runs.get` (None: any)
MAIN = "main"
ABLATION_NAMES = {"attention": "attention removed", "field": "f removed (dt f = 0)", "flow": "flow removed (dt = 0)"}
MLP_READINGS = {"mlp-only": "reading (a): separate g(q), h(k)", "mlp-only-shared": "reading (b): one f on q and on k",
                "mlp-only-q": "reading (c): an MLP update on q only"}
HORIZON_READINGS = {"step": "n steps of dt", "fixed": "n steps of dt/n"}
#: the flow variants (those with an f to remove), coupled Euler's default first
FLOW_VARIANTS = ("coupled-euler", "coupled-wide", "coupled-identity", "coupled-leapfrog", *MLP_READINGS)


def log_ppl(run: dict) -> float:
    """The run's final validation log perplexity (nats per token)."""
    return math.log(run["final"]["val_ppl"])


def _most_common(values) -> Any:
    counts = Counter(values)
    return counts.most_common(1)[0][0] if counts else None


class Runs:
    """Selects runs; every selection is ``{seed: run}``."""

    def __init__(self, runs: list[dict]):
        self.runs = runs
        lm = [r for r in runs if r["task"] == "lm"]
        self.lm_steps = _most_common(r["max_steps"] for r in lm if r["variant"] != "standard")
        controls = [r for r in lm if r["variant"] != "diff"] or lm
        self.main_shape = _most_common(r.get("shape") for r in controls)
        self.main_lr = _most_common(r.get("lr") for r in controls)

    def in_main(self, run: dict) -> bool:
        """Whether a language-model run belongs to the main grid (its shape and learning rate)."""
        return run.get("shape") == self.main_shape and run.get("lr") == self.main_lr

    def get(self, data: str, variant: str, n: int = 1, steps: int | None = None, task: str = "lm",
            preset: str | None = None, horizon: str = "step", shape=MAIN, lr=MAIN) -> dict[int, dict]:
        """The runs of ``variant`` on ``data`` (corpus, or MQAR task) with ``n`` coupling steps under
        ``horizon``, trained ``steps`` steps (default: the study's LM length), of ``preset``, model
        ``shape`` and learning rate ``lr`` (default: the main grid's, for language models; None: any)."""
        steps = steps or (self.lm_steps if task == "lm" else None)
        shape = self.main_shape if shape == MAIN and task == "lm" else None if shape == MAIN else shape
        lr = self.main_lr if lr == MAIN and task == "lm" else None if lr == MAIN else lr
        return {r["seed"]: r for r in self.runs
                if r["task"] == task and (r["data"] if task == "lm" else r["mqar"]) == data and r["variant"] == variant
                and r["n"] == n and (n == 1 or r["horizon"] == horizon)
                and (steps is None or r["max_steps"] == steps) and (preset is None or r["preset"] == preset)
                and (shape is None or r.get("shape") == shape) and (lr is None or r.get("lr") == lr)}


def worst(values, largest: bool = True) -> float:
    """The largest (``largest``) or smallest of ``values``, NaN when any is NaN or there are none (Python's
    max and min skip a NaN that is not first, so an unmeasured seed would pass a precondition on the others)."""
    a = np.asarray(list(values), dtype=float)
    return float(a.max() if largest else a.min()) if a.size else math.nan


def paired(a: dict[int, dict], b: dict[int, dict], value=log_ppl) -> tuple[list[float], list[float]]:
    """Values of the seeds both selections have, in seed order."""
    seeds = sorted(set(a) & set(b))
    return [value(a[s]) for s in seeds], [value(b[s]) for s in seeds]


def strength(runs: dict[int, dict]) -> dict:
    """Mean coupling strength (dt included), field ratio and q/k change at initialisation (first
    evaluation) and at the end."""
    out = {}
    for key in ("coupling", "field_ratio", "qk_change"):
        init = [r["evals"][0][key] for r in runs.values() if r["evals"] and key in r["evals"][0]]
        final = [r["final"][key] for r in runs.values() if key in r["final"]]
        if final:
            out[key] = {"init": float(np.mean(init)) if init else math.nan, "final": float(np.mean(final))}
    return out


def ablation_change(run: dict, what: str, metric: str = "val_loss") -> float:
    """The change of ``metric`` when ``what`` is removed from the run's final checkpoint (NaN if not measured)."""
    return float(run.get("ablation", {}).get(what, {}).get(metric, math.nan))


def ablations(groups: dict[str, dict[int, dict]], metric: str = "val_loss") -> dict:
    """Per group and ablation: the change of ``metric`` over seeds (n, mean, sd, values)."""
    out = {}
    for name, g in groups.items():
        whats = sorted({w for r in g.values() for w in r.get("ablation", {})})
        if whats:
            out[name] = {ABLATION_NAMES.get(w, w): sample_summary([ablation_change(r, w, metric) for r in g.values()])
                         for w in whats}
    return out


def diff_grid(R: Runs, corpus: str) -> dict | None:
    """B7's grid on ``corpus``: the model shape of the Differential Attention runs (at the study's
    length) with the most heads, another than the main grid's where there is one. Returns its
    ``shape``; Diff's learning-rate ``sweep`` there (rate -> runs); the ``seeds`` every rate has; each
    rate's ``means`` (mean log ppl over those seeds); the ``best`` rate (the lowest finite mean) and its
    runs (``chosen``, empty when no mean is finite); and ``standard`` and ``coupled`` (Euler) of that
    shape (at the main learning rate where they have it, else at theirs). None without Diff runs."""
    diffs = [r for r in R.runs if r["task"] == "lm" and r["data"] == corpus and r["variant"] == "diff"
             and r["n"] == 1 and r["max_steps"] == R.lm_steps]
    if not diffs:
        return None
    shape = max({r.get("shape") for r in diffs}, key=lambda s: (s != R.main_shape, (s or (0,) * 3)[2] or 0))
    rates = sorted({r.get("lr") for r in diffs if r.get("shape") == shape}, key=lambda lr: -1.0 if lr is None else lr)
    sweep = {lr: R.get(corpus, "diff", shape=shape, lr=lr) for lr in rates}
    common = sorted(set.intersection(*(set(g) for g in sweep.values())))
    means = {lr: float(np.mean([log_ppl(g[s]) for s in common])) if common else math.nan for lr, g in sweep.items()}
    finite = {lr: m for lr, m in means.items() if math.isfinite(m)}
    best = min(finite, key=finite.__getitem__) if finite else None
    same_size = {v: R.get(corpus, v, shape=shape) or R.get(corpus, v, shape=shape, lr=None)
                 for v in ("standard", "coupled-euler")}
    return {"shape": shape, "sweep": sweep, "seeds": common, "means": means, "best": best,
            "chosen": sweep[best] if finite else {}, "standard": same_size["standard"],
            "coupled": same_size["coupled-euler"]}
