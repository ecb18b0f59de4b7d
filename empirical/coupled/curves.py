"""Evidence over training (no verdicts): what the evaluation rows of the runs say at every evaluation.

* :func:`paired_curve`: a comparison traced over training: at every evaluation step all its seeds
  share, the per-seed difference d_i = log ppl(treatment_i) - log ppl(control_i) of validation
  perplexity, its mean and the shared rule's 95% interval over seeds (:func:`qkdyn.stats.compare`);
* :func:`ablation_curves`: the change of validation loss when attention, f or the whole flow is
  removed, measured at every evaluation (the eval row's ``ablation``: ablated - full on the same
  evaluator), mean and 95% interval over seeds;
* :func:`per_head`: per-head step dt and coupling |dt f(q)| / |k| (the eval rows' ``dt_per_head``,
  ``field_ratio_per_head``: layers x heads), mean over seeds at initialisation and at the end;
* :func:`diagnostics`: one row per run, B7's grid included and labelled: its final value beside its
  instability diagnostics (largest pre-clip gradient norm, share of clipped steps, loss spikes) and
  how far it ends from the median seed of its group, so that a stalled seed is seen for what it is.

Records written before these fields were measured give empty curves and "not measured" cells.
"""
from __future__ import annotations

import math

import numpy as np
from qkdyn.empirical.coupled.selection import ABLATION_NAMES, Runs

from qkdyn.stats import compare

NOT_MEASURED = "not measured"
#: the eval rows' per-head fields and what they hold
PER_HEAD = {"dt_per_head": "dt", "field_ratio_per_head": "|dt f(q)| / |k|"}


def _at_steps(run: dict, field: str) -> dict[int, dict]:
    return {e["step"]: e for e in run["evals"] if field in e}


def _band(steps: list[int], tokens: list[float], samples: list[list[float]], seeds: int, claimed: str) -> dict:
    """Mean and 95% interval over seeds at each step (``samples[i]``: the per-seed values at ``steps[i]``)."""
    comps = [compare(s, [0.0] * len(s), claimed) for s in samples]
    return {"steps": steps, "tokens": tokens, "mean": [c.effect for c in comps],
            "low": [c.interval[0] for c in comps], "high": [c.interval[1] for c in comps], "seeds": seeds}


def paired_curve(treatment: dict[int, dict], control: dict[int, dict]) -> dict | None:
    """log ppl(treatment) - log ppl(control) at every evaluation step of the seeds both have (module
    docstring); None without a shared seed or step."""
    seeds = sorted(set(treatment) & set(control))
    rows = [(_at_steps(treatment[s], "val_ppl"), _at_steps(control[s], "val_ppl")) for s in seeds]
    steps = sorted(set.intersection(*(set(t) & set(c) for t, c in rows))) if rows else []
    if not steps:
        return None
    samples = [[math.log(t[step]["val_ppl"]) - math.log(c[step]["val_ppl"]) for t, c in rows] for step in steps]
    return _band(steps, [float(rows[0][1][step]["tokens"]) for step in steps], samples, len(seeds), "decrease")


def paired_curves(pairs: dict[str, tuple[dict[int, dict], dict[int, dict]]]) -> dict:
    """:func:`paired_curve` of each labelled (treatment, control) pair that has one."""
    curves = {label: paired_curve(t, c) for label, (t, c) in pairs.items()}
    return {label: c for label, c in curves.items() if c is not None}


def ablation_curves(groups: dict[str, dict[int, dict]], metric: str = "val_loss") -> dict:
    """Per group and ablation: the change of ``metric`` at every evaluation step where every seed measured it."""
    out = {}
    for label, group in groups.items():
        runs = [group[s] for s in sorted(group)]
        whats = sorted({w for r in runs for e in r["evals"] for w, change in e.get("ablation", {}).items()
                        if metric in change})
        curves = {}
        for what in whats:
            rows = [{e["step"]: e for e in r["evals"] if metric in e.get("ablation", {}).get(what, {})} for r in runs]
            steps = sorted(set.intersection(*(set(row) for row in rows)))
            if steps:
                samples = [[row[step]["ablation"][what][metric] for row in rows] for step in steps]
                curves[ABLATION_NAMES.get(what, what)] = _band(
                    steps, [float(rows[0][step]["tokens"]) for step in steps], samples, len(runs), "increase")
        if curves:
            out[label] = curves
    return out


def per_head(groups: dict[str, dict[int, dict]]) -> dict:
    """Per group and per-head field: the layers x heads values at the first and the last evaluation,
    mean over seeds, and their smallest, median and largest head."""
    out = {}
    for label, group in groups.items():
        fields: dict[str, dict] = {}
        for field in PER_HEAD:
            curves = [[e[field] for e in r["evals"] if field in e] for r in group.values()]
            if not curves or not all(curves):
                continue
            fields[field] = {}
            for when, index in (("init", 0), ("final", -1)):
                mean = np.mean([np.asarray(c[index], dtype=float) for c in curves], axis=0)
                fields[field][when] = {"per_head": mean.tolist(), "min": float(mean.min()),
                                       "median": float(np.median(mean)), "max": float(mean.max())}
        if fields:
            out[label] = fields
    return out


def _group_key(run: dict) -> tuple:
    return (run["task"], run["data"] if run["task"] == "lm" else run["mqar"], run["variant"], run["n"],
            run.get("horizon"), run["max_steps"], run.get("shape"), run.get("lr"))


def _final_value(run: dict) -> float:
    """Log perplexity (language models) or recall (MQAR) at the end of the run."""
    if run["task"] == "lm":
        return math.log(run["final"]["val_ppl"])
    return float(run["final"].get("mqar_acc", math.nan))


def diagnostics(runs: list[dict]) -> list[dict]:
    """One row per run (module docstring): its grid ("main", or "B7" for a language model off the main
    grid's shape and learning rate: :class:`qkdyn.empirical.coupled.selection.Runs`), final value, its
    distance from its group's median seed (same task, data, variant, coupling steps, horizon, length,
    shape and learning rate), and the run's gradient-norm maximum, clipped share and loss spikes
    (``details.diagnostics``)."""
    in_main = Runs(runs).in_main
    groups: dict[tuple, list[float]] = {}
    for r in runs:
        groups.setdefault(_group_key(r), []).append(_final_value(r))
    rows = []
    for r in sorted(runs, key=lambda r: tuple(map(str, _group_key(r))) + (r["seed"],)):
        d = r.get("diagnostics") or {}
        lm = r["task"] == "lm"
        rows.append({"grid": "B7" if lm and not in_main(r) else "main", "task": r["task"],
                     "data": r["data"] if lm else r["mqar"], "variant": r["variant"], "n": r["n"],
                     "steps": r["max_steps"], "lr": r.get("lr") if r.get("lr") is not None else NOT_MEASURED,
                     "seed": r["seed"], "final": r["final"]["val_ppl"] if lm else _final_value(r),
                     "vs median seed": _final_value(r) - float(np.median(groups[_group_key(r)])),
                     "max grad norm": d.get("max_grad_norm", NOT_MEASURED),
                     "clipped fraction": d.get("clipped_fraction", NOT_MEASURED),
                     "loss spikes": d.get("loss_spikes", NOT_MEASURED)})
    return rows
