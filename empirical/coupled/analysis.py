"""Claims of paper B judged from the study's runs (``result.json`` + ``metrics.jsonl``).

Every claim is a :class:`qkdyn.claims.Claim` whose verdict comes from the project's one rule,
:func:`qkdyn.stats.compare` (paired by seed; holds / fails / inconclusive with the p-value), or
:func:`qkdyn.stats.compare_variance` for the seed-variance claim. Perplexities are compared on the
log scale: the per-seed effect is log ppl(treatment) - log ppl(control) = the difference in
validation loss (nats per token), about the relative change (-0.066 = -6.6%). "The paper's
smallest reported effect" enters each directional claim as ``smallest_effect`` where the paper
gives one (an interval wholly short of it fails the claim):

* lower perplexity than standard: 1.0% (350M: 19.35 vs 19.55) -> log(19.55 / 19.35);
* coupled vs MLP-only: 60M 22.62 (worst coupled) vs 23.81 -> log(23.81 / 22.62);
* coupled vs Differential Attention: 150M 20.12 vs 21.11 -> log(21.11 / 20.12);
* corpus dependence: PubMed -4.5% vs OpenWebText +10.3% -> log(1.103) - log(0.955);
* sample efficiency: standard needs 2.4x the tokens -> log(2.4) on the log token ratio.

"Same results" claims (Euler vs leapfrog, 1-7 steps) are equivalence tests with a margin of 0.01
in log perplexity (1%, the paper's smallest reported gain: a difference below it is "the same").
MQAR (per task, over seeds): coupled accuracy above standard's ("increase"), and coupled at 100%
("no-worse" than 1.0 within 0.01).
"""
from __future__ import annotations

import math
from collections import Counter
from pathlib import Path

import numpy as np

from qkdyn.claims import Claim, combine
from qkdyn.empirical.coupled.study import variant_label
from qkdyn.runs import read_json, read_metrics
from qkdyn.stats import compare, compare_variance, sample_summary

SAME_MARGIN = 0.01
SMALLEST = {
    "standard": math.log(19.55 / 19.35),
    "mlp-only": math.log(23.81 / 22.62),
    "diff": math.log(21.11 / 20.12),
    "corpus": math.log(1.103) - math.log(0.955),
    "efficiency": math.log(2.4),
}
MLP_READINGS = {"mlp-only": "reading (a): separate g(q), h(k)", "mlp-only-shared": "reading (b): one f on q and on k"}


def load_runs(runs_dir: str | Path, preset: str | None = None) -> list[dict]:
    """Every finished run under ``runs_dir``: its result plus ``evals`` (the evaluation curve)."""
    runs = []
    for result in sorted(Path(runs_dir).glob("*/result.json")):
        run = read_json(result)
        if preset and run.get("preset") != preset:
            continue
        run["evals"] = [e for e in read_metrics(result.parent / "metrics.jsonl") if e.get("kind") == "eval"]
        run["variant"] = variant_label(run["model"]["attention"])
        run["n"] = run["model"]["attention"]["steps"]
        run["seed"] = run["train"]["seed"]
        run["max_steps"] = run["train"]["max_steps"]
        runs.append(run)
    return runs


def log_ppl(run: dict) -> float:
    return math.log(run["final"]["val_ppl"])


class Runs:
    """Selects runs by task, data, variant, coupling steps and length; each selection keyed by seed."""

    def __init__(self, runs: list[dict]):
        self.runs = runs
        lengths = Counter(r["max_steps"] for r in runs if r["task"] == "lm" and r["variant"] != "standard")
        self.lm_steps = lengths.most_common(1)[0][0] if lengths else None

    def get(self, data: str, variant: str, n: int = 1, steps: int | None = None, task: str = "lm",
            preset: str | None = None) -> dict[int, dict]:
        steps = steps or (self.lm_steps if task == "lm" else None)
        return {r["seed"]: r for r in self.runs
                if r["task"] == task and (r["data"] if task == "lm" else r["mqar"]) == data and r["variant"] == variant
                and r["n"] == n and (steps is None or r["max_steps"] == steps)
                and (preset is None or r["preset"] == preset)}


def paired(a: dict[int, dict], b: dict[int, dict], value=log_ppl) -> tuple[list[float], list[float]]:
    """Values of the seeds both selections have, in seed order."""
    seeds = sorted(set(a) & set(b))
    return [value(a[s]) for s in seeds], [value(b[s]) for s in seeds]


def strength(runs: dict[int, dict]) -> dict:
    """Mean coupling strength and q/k change at initialisation (first evaluation) and at the end."""
    out = {}
    for key in ("coupling", "qk_change"):
        init = [r["evals"][0][key] for r in runs.values() if r["evals"] and key in r["evals"][0]]
        final = [r["final"][key] for r in runs.values() if key in r["final"]]
        if final:
            out[key] = {"init": float(np.mean(init)) if init else math.nan, "final": float(np.mean(final))}
    return out


def why(c) -> str:
    """Why a directional comparison fails although p >= alpha: its interval is short of the paper's effect."""
    opposite = (c.effect > 0) == (c.claimed == "decrease") and c.p_value < 0.05
    if c.verdict == "fails" and c.smallest_effect is not None and not opposite:
        return f" (95% interval short of the paper's smallest effect {c.smallest_effect:.4g})"
    return ""


def _claim(cid: str, statement: str, comparisons: dict, evidence: dict, summary: str, plots=()) -> Claim:
    """A claim from named comparisons: one -> its verdict; several -> parts combined."""
    parts = {label: c.verdict for label, c in comparisons.items()}
    verdict = next(iter(parts.values())) if len(parts) == 1 else combine(parts)
    lines = "; ".join(f"{label}: {c.describe()} -> {c.verdict}{why(c)}" for label, c in comparisons.items())
    return Claim(cid, statement, verdict, evidence, f"{summary} {lines}.", list(plots),
                 parts=parts if len(parts) > 1 else {}, stats={k: c.as_dict() for k, c in comparisons.items()})


def _ppl_evidence(**groups: dict[int, dict]) -> dict:
    return {name: {"val_ppl": sample_summary([r["final"]["val_ppl"] for r in g.values()]), "strength": strength(g)}
            for name, g in groups.items() if g}


def tokens_to_target(evals: list[dict], target: float) -> float | None:
    """Tokens at which an evaluation curve first reaches ``target`` perplexity (interpolated)."""
    prev = None
    for e in evals:
        if e["val_ppl"] <= target:
            if prev is None:
                return float(e["tokens"])
            frac = (prev["val_ppl"] - target) / (prev["val_ppl"] - e["val_ppl"])
            return float(prev["tokens"] + frac * (e["tokens"] - prev["tokens"]))
        prev = e
    return None


def tokens_to_match(standard_by_length: list[dict], target_loss: float) -> tuple[float, str]:
    """Tokens standard attention needs to reach ``target_loss`` (log ppl), from runs *trained to*
    each length (each with its own schedule): interpolated linearly in log tokens between the two
    lengths whose final losses bracket the target. Returns (tokens, how): "bracketed"; "curve" when
    even the shortest run beats the target (read off that run's evaluation curve); "censored" when
    the longest run does not reach it (its tokens, a lower bound)."""
    ordered = sorted(standard_by_length, key=lambda r: r["tokens"])
    if log_ppl(ordered[0]) <= target_loss:
        found = tokens_to_target(ordered[0]["evals"], math.exp(target_loss))
        return (found if found is not None else float(ordered[0]["tokens"])), "curve"
    for short, long in zip(ordered, ordered[1:]):
        a, b = log_ppl(short), log_ppl(long)
        if b <= target_loss < a:
            frac = (a - target_loss) / (a - b)
            return float(math.exp(math.log(short["tokens"]) + frac * math.log(long["tokens"] / short["tokens"]))), "bracketed"
    return float(ordered[-1]["tokens"]), "censored"


def analyse(runs: list[dict], coherent: str, heterogeneous: str, matched: dict[str, int] | None = None) -> dict:
    """Claims (B1-B9), tables and curves of the study (rules: module docstring). ``matched``: the
    compute-matched standard step counts the study ran (:func:`qkdyn.empirical.coupled.study.matched_steps`,
    stored as ``matched.json`` in the runs directory)."""
    R = Runs(runs)
    std, cpl = R.get(coherent, "standard"), R.get(coherent, "coupled-euler")
    claims = []
    if std and cpl:
        comps = {"equal tokens": compare(*paired(cpl, std), "decrease", smallest_effect=SMALLEST["standard"])}
        matched = {k: v for k, v in (matched or {}).items() if k in ("flops", "wall-clock")}
        for label, steps in matched.items():
            if steps != R.lm_steps and R.get(coherent, "standard", steps=steps):
                comps[f"equal {label}"] = compare(*paired(cpl, R.get(coherent, "standard", steps=steps)), "decrease",
                                       smallest_effect=SMALLEST["standard"])
        claims.append(_claim(
            "B1", f"Coupled QK dynamics lower perplexity compared with standard attention ({coherent}; paper: -6.6% "
            "at 60M, -6.7% at 150M, -1.0% at 350M), also when standard attention gets the same FLOPs or wall-clock.",
            comps, {**_ppl_evidence(coupled=cpl, standard=std), "matched_steps": matched, "base_steps": R.lm_steps},
            "Effect: log ppl(coupled) - log ppl(standard) per seed (negative = coupled better). Standard attention's "
            f"step counts matched to coupled Euler: {matched or 'none run'} (base {R.lm_steps}; a match equal to the "
            "base is the base run).",
            ["perplexity_by_variant.png"]))
    mlp = {v: R.get(coherent, v) for v in MLP_READINGS if R.get(coherent, v)}
    if cpl and mlp:
        comps = {MLP_READINGS[v]: compare(*paired(cpl, g), "decrease", smallest_effect=SMALLEST["mlp-only"])
                 for v, g in mlp.items()}
        claims.append(_claim(
            "B2", f"The coupling, not the extra MLP, gives the gain: coupled beats the uncoupled MLP-only control of "
            f"equal parameter count ({coherent}; paper 60M: 22.55-22.62 vs 23.81).", comps,
            _ppl_evidence(coupled=cpl, **mlp), "Effect: log ppl(coupled) - log ppl(MLP-only) per seed."))
        comps = {MLP_READINGS[v]: compare_variance(*paired(cpl, g), "decrease") for v, g in mlp.items()}
        claims.append(_claim(
            "B3", f"Coupling steadies training: the seed-to-seed spread of perplexity is smaller for coupled than "
            f"for MLP-only ({coherent}; paper: std 0.04 vs 0.31, 8x).", comps,
            {name: {"std_log_ppl": sample_summary(paired(g, g)[0])["std"]} for name, g in {"coupled": cpl, **mlp}.items()},
            "Effect: log(var coupled / var MLP-only) of log ppl over seeds (negative = coupled steadier)."))
    leap = R.get(coherent, "coupled-leapfrog")
    if cpl and leap:
        claims.append(_claim(
            "B4", f"Hamiltonian (leapfrog) and Euler integration give the same results ({coherent}).",
            {"leapfrog vs Euler": compare(*paired(leap, cpl), "same", margin=SAME_MARGIN)},
            _ppl_evidence(euler=cpl, leapfrog=leap),
            f"Equivalence within +-{SAME_MARGIN} in log ppl; the mechanism acts (coupling strength in evidence)."))
    sweep = {n: R.get(coherent, "coupled-euler", n=n) for n in sorted({r["n"] for r in runs if r["variant"] == "coupled-euler"})}
    sweep = {n: g for n, g in sweep.items() if g and n != 1}
    if cpl and sweep:
        claims.append(_claim(
            "B5", f"1 to 7 integration steps make no difference ({coherent}).",
            {f"n={n} vs n=1": compare(*paired(g, cpl), "same", margin=SAME_MARGIN) for n, g in sweep.items()},
            _ppl_evidence(**{f"n={n}": g for n, g in {1: cpl, **sweep}.items()}),
            f"Equivalence within +-{SAME_MARGIN} in log ppl, each n against n = 1, paired by seed."))
    efficiency = _efficiency(R, coherent, cpl)
    if efficiency:
        claims.append(efficiency)
    diff = R.get(coherent, "diff")
    if cpl and diff:
        claims.append(_claim(
            "B7", f"Coupled QK beats Differential Attention at small scale ({coherent}; paper 150M: 20.12 vs 21.11; "
            "Differential Attention wins at 350M).",
            {"coupled vs diff": compare(*paired(cpl, diff), "decrease", smallest_effect=SMALLEST["diff"])},
            _ppl_evidence(coupled=cpl, diff=diff), "Effect: log ppl(coupled) - log ppl(diff) per seed."))
    std_h, cpl_h = R.get(heterogeneous, "standard"), R.get(heterogeneous, "coupled-euler")
    if std and cpl and std_h and cpl_h:
        gap_c = dict(zip(*_seeds_and(cpl, std)))
        gap_h = dict(zip(*_seeds_and(cpl_h, std_h)))
        seeds = sorted(set(gap_c) & set(gap_h))
        claims.append(_claim(
            "B8", f"Coupling helps on domain-coherent text more than on heterogeneous text ({coherent} vs "
            f"{heterogeneous}; paper: WikiText-103 -6.6%, PubMed -4.5%, OpenWebText +10.3%).",
            {"gap coherent - gap heterogeneous": compare([gap_c[s] for s in seeds], [gap_h[s] for s in seeds], "decrease",
                                                         smallest_effect=SMALLEST["corpus"])},
            {"gap_coherent": sample_summary(list(gap_c.values())), "gap_heterogeneous": sample_summary(list(gap_h.values()))},
            "Per seed, gap = log ppl(coupled) - log ppl(standard) on each corpus; effect = coherent gap - "
            "heterogeneous gap (negative = coupling helps more on coherent text)."))
    mqar = _mqar(R, runs)
    if mqar:
        claims.append(mqar)
    return {"claims": claims, "tables": tables(R, runs, coherent, heterogeneous), "coherent": coherent,
            "heterogeneous": heterogeneous, "curves": _curves(R, coherent), "lm_steps": R.lm_steps}


def _seeds_and(a: dict[int, dict], b: dict[int, dict]) -> tuple[list[int], list[float]]:
    seeds = sorted(set(a) & set(b))
    return seeds, [log_ppl(a[s]) - log_ppl(b[s]) for s in seeds]


def _efficiency(R: Runs, coherent: str, cpl: dict[int, dict]) -> Claim | None:
    lengths = sorted({r["max_steps"] for r in R.runs if r["task"] == "lm" and r["data"] == coherent
                      and r["variant"] == "standard" and r["n"] == 1})
    if not cpl or len(lengths) < 2:
        return None
    ratios, rows = {}, []
    for seed, run in sorted(cpl.items()):
        ladder = [R.get(coherent, "standard", steps=n).get(seed) for n in lengths]
        ladder = [r for r in ladder if r is not None]
        if len(ladder) < 2:
            continue
        tokens, how = tokens_to_match(ladder, log_ppl(run))
        ratios[seed] = tokens / run["tokens"]
        rows.append({"seed": seed, "coupled ppl": run["final"]["val_ppl"], "coupled tokens": run["tokens"],
                     "standard tokens to match": round(tokens), "ratio": ratios[seed], "read": how})
    if not ratios:
        return None
    logs = [math.log(ratios[s]) for s in sorted(ratios)]
    comp = compare(logs, [0.0] * len(logs), "increase", smallest_effect=SMALLEST["efficiency"])
    censored = sum(r["read"] == "censored" for r in rows)
    return Claim(
        "B6", f"Sample efficiency: standard attention needs more tokens (paper: 2.4x) to reach coupled attention's "
        f"perplexity ({coherent}).", comp.verdict,
        {"standard_lengths_steps": lengths, "ratios": ratios, "censored": censored},
        "Standard attention trained to each length (own schedule); tokens to reach the coupled run's final "
        "perplexity interpolated in log tokens between bracketing lengths; effect = log(standard tokens / coupled "
        f"tokens) per seed ({censored} censored at the longest length, a lower bound). log token ratio: "
        f"{comp.describe()} -> {comp.verdict}{why(comp)}.", ["sample_efficiency.png"], table=rows,
        stats={"log token ratio": comp.as_dict()})


def _mqar(R: Runs, runs: list[dict]) -> Claim | None:
    tasks = sorted({r["mqar"] for r in runs if r["task"] == "mqar"})
    comps, evidence = {}, {}
    acc = lambda r: r["final"]["mqar_acc"]  # noqa: E731
    for task in tasks:
        c, s = R.get(task, "coupled-euler", task="mqar"), R.get(task, "standard", task="mqar")
        if not c or not s:
            continue
        comps[f"{task}: above standard"] = compare(*paired(c, s, acc), "increase")
        cs = [acc(c[k]) for k in sorted(c)]
        comps[f"{task}: 100%"] = compare(cs, [1.0] * len(cs), "no-worse", margin=0.01)
        evidence[task] = {"coupled": sample_summary(cs), "standard": sample_summary([acc(s[k]) for k in sorted(s)]),
                          "strength": strength(c)}
    if not comps:
        return None
    return _claim("B9", "MQAR associative recall: coupled QK reaches 100% on the easy and medium settings, above "
                  "standard attention.", comps, evidence,
                  "Accuracy over seeds; '100%' is non-inferiority to 1.0 within 0.01.", ["mqar_accuracy.png"])


def tables(R: Runs, runs: list[dict], coherent: str, heterogeneous: str) -> dict:
    """Per corpus and variant (base length, n = 1): perplexity per token and per byte, the runs' own
    95% intervals, coupling strength and throughput; the steps sweep; MQAR accuracies."""
    out = {"perplexity": {}, "steps": {}, "mqar": {}}
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
                "tokens_per_s": sample_summary([r["tokens_per_s"] for r in rs]), "strength": strength(g)}
    for n in sorted({r["n"] for r in runs if r["variant"] == "coupled-euler" and r["task"] == "lm"}):
        g = R.get(coherent, "coupled-euler", n=n)
        if g:
            out["steps"][n] = sample_summary([r["final"]["val_ppl"] for r in g.values()])
    for task in sorted({r["mqar"] for r in runs if r["task"] == "mqar"}):
        for v in ("standard", "coupled-euler"):
            g = R.get(task, v, task="mqar")
            if g:
                keys = list(next(iter(g.values()))["final"])
                out["mqar"].setdefault(task, {})[v] = {k: sample_summary([r["final"][k] for r in g.values()]) for k in keys
                                                       if isinstance(next(iter(g.values()))["final"][k], (int, float))}
    return out


def _curves(R: Runs, coherent: str) -> dict:
    """Mean validation-perplexity curve (tokens, ppl) of each variant and standard length on the coherent corpus."""
    curves = {}
    for r in R.runs:
        if r["task"] == "lm" and r["data"] == coherent and r["n"] == 1:
            label = r["variant"] if r["max_steps"] == R.lm_steps else f"{r['variant']} ({r['max_steps']} steps)"
            curves.setdefault(label, []).append(r["evals"])
    out = {}
    for label, curve_list in curves.items():
        length = min(len(c) for c in curve_list)
        out[label] = {"tokens": [e["tokens"] for e in curve_list[0][:length]],
                      "val_ppl": [float(np.mean([c[i]["val_ppl"] for c in curve_list])) for i in range(length)]}
    return out


def trend(runs: list[dict], coherent: str) -> dict:
    """The scale trend: per preset, the coupled-minus-standard gap in log ppl (paired by seed) with its
    95% interval, against non-embedding parameters; one claim per preset."""
    from qkdyn.empirical.coupled.attention import AttentionConfig
    from qkdyn.empirical.coupled.model import GPTConfig, non_embedding_parameters

    R = Runs(runs)
    rows, claims = [], []
    presets = sorted({r["preset"] for r in runs if r["task"] == "lm"},
                     key=lambda p: next(r["parameters"] for r in runs if r["preset"] == p))
    for preset in presets:
        std = {s: r for s, r in R.get(coherent, "standard", preset=preset, steps=None).items()}
        cpl = R.get(coherent, "coupled-euler", preset=preset, steps=None)
        if not std or not cpl:
            continue
        model = {k: v for k, v in next(iter(std.values()))["model"].items() if k != "attention"}
        params = non_embedding_parameters(GPTConfig(**model, attention=AttentionConfig()))
        comp = compare(*paired(cpl, std), "decrease", smallest_effect=SMALLEST["standard"])
        rows.append({"preset": preset, "non-embedding parameters": params,
                     "standard ppl": sample_summary([r["final"]["val_ppl"] for r in std.values()])["mean"],
                     "coupled ppl": sample_summary([r["final"]["val_ppl"] for r in cpl.values()])["mean"],
                     "gap (log ppl)": comp.effect, "ci low": comp.interval[0], "ci high": comp.interval[1],
                     "p": comp.p_value, "seeds": comp.n, "coupling (final)": strength(cpl).get("coupling", {}).get("final", math.nan),
                     "verdict": comp.verdict})
        claims.append(_claim(f"T-{preset}", f"Coupled QK lowers perplexity vs standard attention at {params:,} "
                             f"non-embedding parameters ({coherent}).", {"coupled vs standard": comp},
                             _ppl_evidence(coupled=cpl, standard=std),
                             "Effect: log ppl(coupled) - log ppl(standard) per seed.", ["scale_trend.png"]))
    return {"rows": rows, "claims": claims, "coherent": coherent}
