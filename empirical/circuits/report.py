"""Aggregate same-lr vs faster-QK runs over seeds: mean/std table, verdicts, markdown.

Verdict for the claim "sharper attention, same accuracy" (Paper A), per faster multiplier R
against R = 1, on the test split, from the per-seed means and standard deviations:
- sharper: the mean attention mass on rationales rises and Welch's t = diff / sqrt(s1^2/n1 +
  s2^2/n2) is >= ``t_min`` (default 2); a rise with smaller t is "inconclusive";
- no accuracy loss: the mean accuracy (F1 for QA) drops by at most ``acc_tolerance`` (default 0.01
  absolute; the paper says "stable or slightly better", so a rise also counts);
- the claim holds when both do.
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np

#: (key in the evaluation dict, label) rows of the table; missing keys are skipped
ROWS = (
    ("accuracy", "accuracy"), ("macro_f1", "macro-F1"), ("exact_match", "SQuAD EM"), ("f1", "SQuAD F1"),
    ("attention_mass", "attention mass on rationale"),
    ("attention_mass_without_readout", "attention mass on rationale, read-out position excluded"), ("ac_area", "AC area"), ("ac_at_default", "AC @ tau"),
    ("acmc_area", "ACMC area (kappa)"), ("acmc_at_default", "ACMC @ tau, kappa"),
    ("comprehensiveness", "comprehensiveness @5%"), ("sufficiency", "sufficiency @5% (lower = better)"),
    ("eraser.comprehensiveness_aopc", "comprehensiveness AOPC"), ("eraser.sufficiency_aopc", "sufficiency AOPC"),
)


def lookup(result: dict, key: str):
    for part in key.split("."):
        if not isinstance(result, dict) or part not in result:
            return None
        result = result[part]
    return result


def mean_std(values: list[float]) -> dict:
    a = np.asarray(values, dtype=float)
    return {"mean": float(a.mean()), "std": float(a.std(ddof=1)) if a.size > 1 else 0.0, "n": int(a.size),
            "values": a.tolist()}


def summarize(results: dict[float, list[dict]], split: str = "test") -> dict:
    """{multiplier: {metric key: mean/std over seeds}} for the table's metrics."""
    out = {}
    for mult, runs in sorted(results.items()):
        out[mult] = {}
        for key, _ in ROWS:
            values = [lookup(r[split], key) for r in runs]
            if all(v is not None for v in values):
                out[mult][key] = mean_std(values)
    return out


def welch_t(a: dict, b: dict) -> float:
    """(mean_b - mean_a) / standard error of the difference; inf if both spreads are 0."""
    se = math.sqrt(a["std"] ** 2 / a["n"] + b["std"] ** 2 / b["n"])
    diff = b["mean"] - a["mean"]
    return diff / se if se > 0 else math.copysign(math.inf, diff) if diff else 0.0


def verdicts(summary: dict, performance_key: str, acc_tolerance: float, t_min: float) -> list[dict]:
    """One verdict per faster multiplier against multiplier 1."""
    base = summary[1.0]
    out = []
    for mult, s in summary.items():
        if mult == 1.0:
            continue
        t_mass = welch_t(base["attention_mass"], s["attention_mass"])
        d_mass = s["attention_mass"]["mean"] - base["attention_mass"]["mean"]
        d_perf = s[performance_key]["mean"] - base[performance_key]["mean"]
        sharper = "holds" if d_mass > 0 and t_mass >= t_min else "inconclusive" if d_mass > 0 else "does not hold"
        same = "holds" if d_perf >= -acc_tolerance else "does not hold"
        direction = "higher" if d_perf > acc_tolerance else "lower" if d_perf < -acc_tolerance else "within tolerance"
        claim = "holds" if sharper == same == "holds" else "inconclusive" if sharper == "inconclusive" and same == "holds" else "does not hold"
        out.append({"qk_lr_mult": mult, "attention_mass_diff": d_mass, "attention_mass_welch_t": t_mass,
                    "sharper": sharper, f"{performance_key}_diff": d_perf,
                    f"{performance_key}_welch_t": welch_t(base[performance_key], s[performance_key]),
                    "same_performance": same, "performance_change": direction, "claim": claim})
    return out


def fmt(ms: dict) -> str:
    return f"{ms['mean']:.3f} ± {ms['std']:.3f}"


def markdown(task: str, summary: dict, verdict_rows: list[dict], notes: list[str], performance_key: str,
             acc_tolerance: float, t_min: float, plots: list[str]) -> str:
    """The task's section of figures/circuits/report.md."""
    mults = list(summary)
    n = summary[mults[0]]["attention_mass"]["n"]
    lines = [f"## {task}", "", f"Test split, mean ± standard deviation over {n} seeds.", ""]
    lines.append("| metric | " + " | ".join("same lr" if m == 1.0 else f"QK x{m:g}" for m in mults) + " |")
    lines.append("|---" * (len(mults) + 1) + "|")
    for key, label in ROWS:
        if key in summary[mults[0]]:
            lines.append(f"| {label} | " + " | ".join(fmt(summary[m][key]) for m in mults) + " |")
    lines += ["", f"Verdicts (sharper: mass rises with Welch t >= {t_min:g}; no {performance_key} loss: "
              f"drop <= {acc_tolerance:g}, as the paper's \"stable or slightly better\"):", ""]
    for v in verdict_rows:
        lines.append(f"- QK x{v['qk_lr_mult']:g}: attention mass {v['attention_mass_diff']:+.3f} "
                     f"(t = {v['attention_mass_welch_t']:.1f}) -> sharper **{v['sharper']}**; "
                     f"{performance_key} {v[f'{performance_key}_diff']:+.3f} "
                     f"(t = {v[f'{performance_key}_welch_t']:.1f}, {v['performance_change']}) -> no {performance_key} "
                     f"loss **{v['same_performance']}**; claim \"sharper attention, same accuracy\": **{v['claim']}**.")
    lines += [""] + [f"- {note}" for note in notes] + [""]
    lines += [f"![{Path(p).stem}]({Path(p).name})" for p in plots] + [""]
    return "\n".join(lines)


def readme_section(payloads: list[dict]) -> str:
    """A short results section for the project README, from the per-task summaries."""
    lines = ["### Faster QK learning on real data (Paper A), CPU scale", "",
             "`qkdyn compare-circuits` trains Paper A's one-layer decoder classifier with the same learning rate for all "
             "parameters and with the QK circuit (W_Q, W_K) R times faster, over several seeds, and tests the claim "
             "\"sharper attention, same accuracy\" (details, plots, every metric: `figures/circuits/report.md`).", ""]
    for p in payloads:
        base = p["summary"]["1"]
        key = "f1" if "f1" in base else "accuracy"
        lines.append(f"- **{p['task']}** ({len(p['seeds'])} seeds; same lr: {key} {fmt(base[key])}, attention mass "
                     f"on rationale {fmt(base['attention_mass'])}):")
        for v in p["verdicts"]:
            s = p["summary"][f"{v['qk_lr_mult']:g}"]
            lines.append(f"  QK x{v['qk_lr_mult']:g}: {key} {fmt(s[key])}, mass {fmt(s['attention_mass'])}; "
                         f"sharper {v['sharper']}, no {key} loss {v['same_performance']} ({key} {v['performance_change']}) "
                         f"-> claim **{v['claim']}**.")
        other = "attention_mass_without_readout"
        if other in base and any(abs(p["summary"][m][other]["mean"] - p["summary"][m]["attention_mass"]["mean"]) > 1e-9
                                 for m in p["summary"]):
            lines.append("  Mass with the read-out position left out of the rationale: " + ", ".join(
                f"{'same lr' if m == '1' else 'QK x' + m} {fmt(p['summary'][m][other])}" for m in p["summary"]) + ".")
        lines += [f"  {note}" for note in p["notes"]]
    lines += ["", "These are small CPU-scale tests, not the paper's scale; the "
              "paper-scale recipes exist as presets (`paper-hatexplain`, `paper-sva`, `paper-squad`) but need the "
              "corpora, which cannot be downloaded here.", ""]
    return "\n".join(lines)
