"""Numbers and verdicts of the coupled-QK study, computed from the runs' ``result.json`` files.

Significance: two-sided t-tests over seeds, alpha = 0.05. Runs with the same seed share their
initial shared weights and their data order (paired design), so when both sides have the same
seeds the test is paired (on the per-seed differences); otherwise Welch's test is used.

Verdict rules:

* "lowers perplexity" claims: holds if the mean is lower and p < alpha; fails if the mean is not
  lower; inconclusive if lower but not significant.
* seed variance (MLP-only std / coupled std, paper 8x): one-sided F-test; holds if the ratio > 1
  with p < alpha, fails if the ratio <= 1, inconclusive otherwise.
* "same results" claims (Euler vs leapfrog; 1-7 steps): holds if the relative difference (for
  steps: the spread over n relative to the mean) is under 1%; fails if it is larger and
  significant (p < alpha; for steps: the spread exceeds 3 seed standard deviations of n = 1);
  inconclusive otherwise.
* a comparison with fewer than two seeds on a side is inconclusive unless it plainly fails.
* sample efficiency (paper: standard needs 2.4x the tokens): the target is the standard model's
  mean final perplexity; coupled's tokens to reach it are read off its evaluation curve (linear
  interpolation). Holds if standard / coupled tokens >= 2.4, fails if coupled never reaches the
  target or the ratio <= 1, inconclusive in between.
* corpus dependence: holds if coupled is significantly better on the coherent corpus and its
  relative change on the heterogeneous corpus is worse than on the coherent one; fails if the
  change on the heterogeneous corpus is at least as good; inconclusive otherwise.
* MQAR: holds if coupled reaches >= 99% on every task and is at least as accurate as standard;
  fails if coupled is less accurate than standard on a task that standard solves (>= 99%) or
  trails it by more than 5 points; inconclusive otherwise (e.g. neither model solved the task
  within the budget).
"""
from __future__ import annotations

import json
import math
from collections import defaultdict
from pathlib import Path

import numpy as np
from scipy import stats

from qkdyn.empirical.coupled.study import variant_label

ALPHA = 0.05


def load_runs(runs_dir: str | Path, preset: str | None = None) -> list[dict]:
    """Every finished run under ``runs_dir``: its result plus ``evals`` (the evaluation curve)."""
    runs = []
    for result in sorted(Path(runs_dir).glob("*/result.json")):
        run = json.loads(result.read_text())
        if preset and run.get("preset") != preset:
            continue
        lines = (result.parent / "metrics.jsonl").read_text().splitlines()
        run["evals"] = [e for e in map(json.loads, lines) if e["kind"] == "eval"]
        run["variant"] = variant_label(run["model"]["attention"])
        run["n"] = run["model"]["attention"]["steps"]
        run["seed"] = run["train"]["seed"]
        runs.append(run)
    return runs


def group(runs: list[dict]) -> dict[tuple, list[dict]]:
    """Runs keyed by (task, data, variant, coupling steps), each list sorted by seed."""
    groups = defaultdict(list)
    for run in runs:
        data = run["data"] if run["task"] == "lm" else run["mqar"]
        n = run["n"] if run["variant"] in ("coupled-euler", "coupled-leapfrog", "mlp-only") else 1
        groups[(run["task"], data, run["variant"], n)].append(run)
    return {k: sorted(v, key=lambda r: r["seed"]) for k, v in groups.items()}


def summary_stats(values: list[float]) -> dict:
    arr = np.asarray(values, dtype=float)
    std = float(arr.std(ddof=1)) if len(arr) > 1 else float("nan")
    return {"n": len(arr), "mean": float(arr.mean()), "std": std, "values": [float(v) for v in arr]}


def significance(a_runs: list[dict], b_runs: list[dict]) -> tuple[float, str]:
    """Two-sided p-value that the final perplexities differ, and the test used (see module doc)."""
    a, b = ppl(a_runs), ppl(b_runs)
    if len(a) < 2 or len(b) < 2:
        return float("nan"), "no test"
    if [r["seed"] for r in a_runs] == [r["seed"] for r in b_runs]:
        return float(stats.ttest_rel(a, b).pvalue), "paired t-test"
    return float(stats.ttest_ind(a, b, equal_var=False).pvalue), "Welch t-test"


def ppl(runs: list[dict]) -> list[float]:
    return [r["final"]["val_ppl"] for r in runs]


def tokens_to_target(evals: list[dict], target: float) -> float | None:
    """Tokens at which the evaluation curve first reaches ``target`` perplexity (interpolated)."""
    prev = None
    for e in evals:
        if e["val_ppl"] <= target:
            if prev is None:
                return float(e["tokens"])
            frac = (prev["val_ppl"] - target) / (prev["val_ppl"] - e["val_ppl"])
            return float(prev["tokens"] + frac * (e["tokens"] - prev["tokens"]))
        prev = e
    return None


def _lower_is_better(name: str, paper: str, ours: list[dict], ref: list[dict], ours_label: str, ref_label: str) -> dict:
    a, b = summary_stats(ppl(ours)), summary_stats(ppl(ref))
    rel, (p, test) = a["mean"] / b["mean"] - 1, significance(ours, ref)
    verdict = "fails" if rel >= 0 else ("holds" if p < ALPHA else "inconclusive")
    return {"claim": name, "paper": paper, "verdict": verdict, "relative_change": rel, "p_value": p,
            "measured": f"{ours_label} {a['mean']:.4f} ± {a['std']:.4f} vs {ref_label} {b['mean']:.4f} ± {b['std']:.4f} "
                        f"({100 * rel:+.2f}%, {test} p = {p:.3g}, {a['n']} vs {b['n']} seeds)"}


def _same(name: str, paper: str, a_runs: list[dict], b_runs: list[dict], a_label: str, b_label: str) -> dict:
    a, b = summary_stats(ppl(a_runs)), summary_stats(ppl(b_runs))
    rel, (p, test) = a["mean"] / b["mean"] - 1, significance(a_runs, b_runs)
    if abs(rel) < 0.01:
        verdict = "holds"
    else:
        verdict = "fails" if p < ALPHA else "inconclusive"
    return {"claim": name, "paper": paper, "verdict": verdict, "relative_change": rel, "p_value": p,
            "measured": f"{a_label} {a['mean']:.4f} ± {a['std']:.4f} vs {b_label} {b['mean']:.4f} ± {b['std']:.4f} "
                        f"({100 * rel:+.2f}%, {test} p = {p:.3g})"}


def analyse(runs: list[dict], coherent: str, heterogeneous: str) -> dict:
    """Tables and verdicts of the study (see the module docstring for the rules)."""
    groups = group(runs)
    get = lambda data, variant, n=1: groups.get(("lm", data, variant, n), [])  # noqa: E731
    tables = {"perplexity": {}, "throughput": {}, "steps": {}, "mqar": {}}
    for (task, data, variant, n), rs in groups.items():
        if task == "lm" and n == 1:
            tables["perplexity"].setdefault(data, {})[variant] = summary_stats(ppl(rs))
            tables["throughput"].setdefault(data, {})[variant] = summary_stats([r["tokens_per_s"] for r in rs])
        if task == "lm" and data == coherent and variant == "coupled-euler":
            tables["steps"][n] = summary_stats(ppl(rs[:1]))  # the sweep uses the first seed only
        if task == "mqar":
            tables["mqar"].setdefault(data, {})[variant] = {
                k: summary_stats([r["final"][k] for r in rs]) for k in rs[0]["final"]}

    claims = []
    std_c, cpl_c = get(coherent, "standard"), get(coherent, "coupled-euler")
    if std_c and cpl_c:
        claims.append(_lower_is_better(
            f"coupled QK lowers perplexity vs standard attention ({coherent})",
            "WikiText-103: -6.6% at 60M, -6.7% at 150M, -1.0% at 350M", cpl_c, std_c, "coupled", "standard"))
    mlp_c = get(coherent, "mlp-only")
    if mlp_c and cpl_c:
        claims.append(_lower_is_better(
            f"coupling, not the extra MLP, gives the gain: coupled beats MLP-only ({coherent})",
            "60M: 22.55-22.62 coupled vs 23.81 MLP-only", cpl_c, mlp_c, "coupled", "MLP-only"))
        claims.append(_variance_claim(ppl(mlp_c), ppl(cpl_c)))
    leap_c = get(coherent, "coupled-leapfrog")
    if leap_c and cpl_c:
        claims.append(_same(f"Hamiltonian (leapfrog) and Euler integration give the same results ({coherent})",
                            "same results", leap_c, cpl_c, "leapfrog", "Euler"))
    if len(tables["steps"]) > 1 and len(cpl_c) > 1:
        claims.append(_steps_claim(tables["steps"], summary_stats(ppl(cpl_c))["std"]))
    if std_c and cpl_c:
        claims.append(_efficiency_claim(std_c, cpl_c))
    diff_c = get(coherent, "diff")
    if diff_c and cpl_c:
        claims.append(_lower_is_better(
            f"coupled QK beats Differential Attention at small scale ({coherent})",
            "150M: 20.12 coupled vs 21.11 Diff (Diff wins at 350M: 18.93 vs 19.35)", cpl_c, diff_c, "coupled", "Diff"))
    std_h, cpl_h = get(heterogeneous, "standard"), get(heterogeneous, "coupled-euler")
    if std_c and cpl_c and std_h and cpl_h:
        claims.append(_corpus_claim(coherent, heterogeneous, cpl_c, std_c, cpl_h, std_h))
    if tables["mqar"]:
        claims.append(_mqar_claim(tables["mqar"]))
    return {"tables": tables, "claims": claims, "coherent": coherent, "heterogeneous": heterogeneous,
            "curves": _curves(groups, coherent)}


def _variance_claim(mlp: list[float], coupled: list[float]) -> dict:
    s_m, s_c = summary_stats(mlp)["std"], summary_stats(coupled)["std"]
    ratio = s_m / s_c if s_c > 0 else float("inf")
    p = float(stats.f.sf(ratio ** 2, len(mlp) - 1, len(coupled) - 1)) if math.isfinite(ratio) else 0.0
    if not (len(mlp) > 1 and len(coupled) > 1):
        verdict = "inconclusive"
    else:
        verdict = "fails" if ratio <= 1 else ("holds" if p < ALPHA else "inconclusive")
    return {"claim": "coupling steadies training: seed std of MLP-only >> coupled", "paper": "0.31 vs 0.04 (8x) at 60M",
            "verdict": verdict, "ratio": ratio, "p_value": p,
            "measured": f"std MLP-only {s_m:.4f} / coupled {s_c:.4f} = {ratio:.2f}x (one-sided F-test p = {p:.3g}, "
                        f"{len(mlp)} and {len(coupled)} seeds)"}


def _steps_claim(steps: dict, seed_std: float) -> dict:
    means = {n: s["mean"] for n, s in sorted(steps.items())}
    spread = max(means.values()) - min(means.values())
    rel = spread / float(np.mean(list(means.values())))
    verdict = "holds" if rel < 0.01 else ("fails" if spread > 3 * seed_std else "inconclusive")
    listing = ", ".join(f"n={n}: {v:.3f}" for n, v in means.items())
    return {"claim": "1-7 integration steps make no difference", "paper": "no difference", "verdict": verdict,
            "spread": spread, "relative_spread": rel,
            "measured": f"{listing}; spread {spread:.4f} ({100 * rel:.2f}%) vs 3 x seed std {3 * seed_std:.4f}"}


def _efficiency_claim(standard: list[dict], coupled: list[dict]) -> dict:
    target = float(np.mean(ppl(standard)))
    std_tokens = float(np.mean([r["tokens"] for r in standard]))
    reached = [tokens_to_target(r["evals"], target) for r in coupled]
    hits = [t for t in reached if t is not None]
    ratio = std_tokens / float(np.mean(hits)) if len(hits) == len(reached) else None
    if ratio is None:
        verdict = "fails"
        measured = f"coupled reached standard's final ppl {target:.4f} in {len(hits)} of {len(reached)} seeds"
    else:
        verdict = "holds" if ratio >= 2.4 else ("fails" if ratio <= 1 else "inconclusive")
        measured = (f"target ppl {target:.4f} (standard, {std_tokens:.0f} tokens); coupled reaches it after "
                    f"{np.mean(hits):.0f} tokens: standard needs {ratio:.2f}x the tokens")
    return {"claim": "sample efficiency: standard attention needs 2.4x the tokens", "paper": "2.4x",
            "verdict": verdict, "ratio": ratio, "target_ppl": target, "coupled_tokens": reached, "measured": measured}


def _corpus_claim(coherent, heterogeneous, cpl_c, std_c, cpl_h, std_h) -> dict:
    rel_c = float(np.mean(ppl(cpl_c)) / np.mean(ppl(std_c)) - 1)
    rel_h = float(np.mean(ppl(cpl_h)) / np.mean(ppl(std_h)) - 1)
    (p_c, _), (p_h, test) = significance(cpl_c, std_c), significance(cpl_h, std_h)
    if rel_h <= rel_c:
        verdict = "fails"
    elif rel_c < 0 and p_c < ALPHA:
        verdict = "holds"
    else:
        verdict = "inconclusive"
    return {"claim": "helps on domain-coherent text, not on heterogeneous text",
            "paper": "WikiText-103 -6.6%, PubMed -4.5%, OpenWebText +10.3%", "verdict": verdict,
            "relative_change_coherent": rel_c, "relative_change_heterogeneous": rel_h,
            "measured": f"coupled vs standard: {coherent} {100 * rel_c:+.2f}% (p = {p_c:.3g}), "
                        f"{heterogeneous} {100 * rel_h:+.2f}% (p = {p_h:.3g}; {test})"}


def _mqar_claim(mqar: dict) -> dict:
    parts, verdicts = [], []
    for task, variants in sorted(mqar.items()):
        if "coupled-euler" not in variants or "standard" not in variants:
            continue
        c, s = variants["coupled-euler"]["mqar_acc"]["mean"], variants["standard"]["mqar_acc"]["mean"]
        parts.append(f"{task}: coupled {100 * c:.1f}% vs standard {100 * s:.1f}%")
        if c >= 0.99 and c >= s:
            verdicts.append("holds")
        elif (s >= 0.99 and c < s) or c < s - 0.05:
            verdicts.append("fails")
        else:
            verdicts.append("inconclusive")
    verdict = "fails" if "fails" in verdicts else ("holds" if verdicts and set(verdicts) == {"holds"} else "inconclusive")
    return {"claim": "MQAR: coupled QK reaches 100% on easy and medium, above standard",
            "paper": "100% on easy and medium", "verdict": verdict, "measured": "; ".join(parts)}


def _curves(groups: dict, coherent: str) -> dict:
    """Mean validation-perplexity curve (tokens, ppl) per variant on the coherent corpus."""
    curves = {}
    for (task, data, variant, n), rs in groups.items():
        if task == "lm" and data == coherent and n == 1:
            tokens = [e["tokens"] for e in rs[0]["evals"]]
            values = np.mean([[e["val_ppl"] for e in r["evals"]] for r in rs], axis=0)
            curves[variant] = {"tokens": tokens, "val_ppl": [float(v) for v in values]}
    return curves
