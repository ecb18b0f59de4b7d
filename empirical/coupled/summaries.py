"""What the report shows beside paper B's claims, computed from the runs (no verdicts of claims):
the tables per corpus, variant and task; the mean evaluation curves; every variant against standard
attention as a comparison row (coupled Euler's widened and identity-started variants beside the
default); and the evidence over training (:mod:`qkdyn.empirical.coupled.curves`)."""
from __future__ import annotations

import math

import numpy as np
from qkdyn.empirical.coupled.context import Context
from qkdyn.empirical.coupled.curves import ablation_curves, diagnostics, paired_curves, per_head
from qkdyn.empirical.coupled.paper_effects import SMALLEST
from qkdyn.empirical.coupled.selection import (
    FLOW_VARIANTS,
    HORIZON_READINGS,
    Runs,
    ablation_change,
    ablations,
    diff_grid,
    paired,
    strength,
)

from qkdyn.stats import compare, sample_summary


def comparison_rows(ctx: Context) -> list[dict]:
    """Every language-model variant of the main grid against standard attention at equal tokens on the
    coherent corpus, flow variants first (coupled Euler, then its "coupled-wide" and "coupled-identity"
    variants): the shared rule's effect, interval, p, power and verdict (``inconclusive`` when standard
    has not learnt or the variant does not beat the bigram model, with the unmet preconditions named),
    and the f-ablation's change of loss with its 95% interval over seeds."""
    rows = []
    variants = sorted({r["variant"] for r in ctx.R.runs if r["task"] == "lm"} - {"standard"},
                      key=lambda v: (FLOW_VARIANTS.index(v) if v in FLOW_VARIANTS else len(FLOW_VARIANTS), v))
    for v in variants:
        group = ctx.R.get(ctx.coherent, v)
        if not (group and ctx.std):
            continue
        c = compare(*paired(group, ctx.std), "decrease", smallest_effect=SMALLEST["standard"])
        unmet = [p.name for p in [*ctx.learnt, ctx.works(group, v)] if not p.met]
        changes = [ablation_change(r, "field") for r in group.values()]
        field = compare(changes, [0.0] * len(changes), "increase") if v in FLOW_VARIANTS else None
        rows.append({"variant": v, "seeds": c.n, "effect (log ppl)": c.effect, "ci low": c.interval[0],
                     "ci high": c.interval[1], "p": c.p_value, "detects >=": c.mde,
                     "verdict": "inconclusive" if unmet else c.verdict, "unmet": "; ".join(unmet) or "-",
                     "f removed (Δ loss)": "-" if field is None else
                     f"{field.effect:+.4g} [{field.interval[0]:+.3g}, {field.interval[1]:+.3g}]"})
    return rows


def over_training(ctx: Context) -> dict:
    """The evidence over training: per panel, every variant's paired difference against standard
    attention at each evaluation (the main grid on each corpus; B7's grid, where it is another, with
    Diff at its best learning rate); the ablations and per-head dt and coupling of every flow variant
    of the main grid at each evaluation; the per-run diagnostics."""
    R, panels = ctx.R, {}
    variants = [v for v in dict.fromkeys(r["variant"] for r in R.runs if r["task"] == "lm") if v != "standard"]
    for corpus in dict.fromkeys(c for c in (ctx.coherent, ctx.heterogeneous) if c):
        std = R.get(corpus, "standard")
        panels[corpus] = paired_curves({v: (R.get(corpus, v), std) for v in variants})
    grid = diff_grid(R, ctx.coherent)
    if grid is not None and grid["shape"] != R.main_shape:
        panels[f"B7 grid ({grid['shape'][2]} heads)"] = paired_curves(
            {f"diff (lr {grid['best']})": (grid["chosen"], grid["standard"]),
             "coupled-euler": (grid["coupled"], grid["standard"])})
    flows = {v: R.get(ctx.coherent, v) for v in FLOW_VARIANTS if R.get(ctx.coherent, v)}
    return {"paired_curves": {k: v for k, v in panels.items() if v}, "ablation_curves": ablation_curves(flows),
            "per_head": per_head(flows), "diagnostics": diagnostics(R.runs)}


def tables(R: Runs, runs: list[dict], coherent: str, heterogeneous: str) -> dict:
    """Per corpus and variant (main grid, base length, n = 1): perplexity per token and per byte, the
    runs' own 95% intervals, coupling strength, ablations, throughput and measured CPU seconds per
    token (NaN where not measured); the steps sweep per horizon (n = 1 in each); MQAR accuracies and
    ablations."""
    out: dict[str, dict] = {"perplexity": {}, "steps": {}, "mqar": {}}
    variants = list(dict.fromkeys(r["variant"] for r in runs))
    for data in (coherent, heterogeneous):
        for v in variants:
            g = R.get(data, v)
            if not g:
                continue
            rs = list(g.values())
            out["perplexity"].setdefault(data, {})[v] = {
                "val_ppl": sample_summary([r["final"]["val_ppl"] for r in rs]),
                "val_ppl_byte": sample_summary([r["final"].get("val_ppl_byte", math.nan) for r in rs]),
                "run_interval": [(r["final"].get("val_ppl_lo", math.nan), r["final"].get("val_ppl_hi", math.nan)) for r in rs],
                "tokens_per_s": sample_summary([r["tokens_per_s"] for r in rs]),
                "cpu_s_per_token": sample_summary([r["cpu_time_s"] / r["tokens"] if r.get("cpu_time_s") is not None
                                                   else math.nan for r in rs]),
                "strength": strength(g), "ablation": ablations({v: g}).get(v, {})}
    for horizon in HORIZON_READINGS:
        for n in sorted({r["n"] for r in runs if r["variant"] == "coupled-euler" and r["task"] == "lm"}):
            g = R.get(coherent, "coupled-euler", n=n, horizon=horizon)
            if g:
                out["steps"].setdefault(HORIZON_READINGS[horizon], {})[n] = sample_summary(
                    [r["final"]["val_ppl"] for r in g.values()])
    out["steps"] = {h: t for h, t in out["steps"].items() if len(t) > 1}
    for task in sorted({r["mqar"] for r in runs if r["task"] == "mqar"}):
        for v in ("standard", "coupled-euler"):
            g = R.get(task, v, task="mqar")
            if g:
                keys = [k for k in next(iter(g.values()))["final"] if k.startswith("acc_") or k == "mqar_acc"]
                out["mqar"].setdefault(task, {})[v] = {k: sample_summary([r["final"][k] for r in g.values()]) for k in keys}
                out["mqar"][task][v].update({f"Δ acc, {what}": s for what, s in
                                             ablations({v: g}, "mqar_acc").get(v, {}).items()})
    return out


def mean_curves(R: Runs, coherent: str) -> dict:
    """Mean validation-perplexity curve (tokens, ppl) of each variant and standard length on the coherent
    corpus (main grid, n = 1)."""
    curves: dict[str, list] = {}
    for r in R.runs:
        if r["task"] == "lm" and r["data"] == coherent and r["n"] == 1 and R.in_main(r):
            label = r["variant"] if r["max_steps"] == R.lm_steps else f"{r['variant']} ({r['max_steps']} steps)"
            curves.setdefault(label, []).append(r["evals"])
    out = {}
    for label, curve_list in curves.items():
        length = min(len(c) for c in curve_list)
        out[label] = {"tokens": [e["tokens"] for e in curve_list[0][:length]],
                      "val_ppl": [float(np.mean([c[i]["val_ppl"] for c in curve_list])) for i in range(length)]}
    return out
