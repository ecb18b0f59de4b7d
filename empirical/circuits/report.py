"""Aggregate same-lr vs faster-QK runs over seeds: mean/std table and the claims, per task.

Claim (Paper A, real data): raising the QK learning rate R-fold sharpens attention on rationales
without hurting accuracy (F1 for QA). Per faster multiplier R against R = 1 it has two parts, each
judged by the project's one rule (:func:`qkdyn.stats.compare`, paired by seed on the test split):

- sharper attention: the attention mass on rationales rises (``"increase"``); where the task is one
  of the paper's own (``PAPER_MASS_GAIN``), an interval below the paper's gain counts as ``fails``;
- no accuracy loss: accuracy is not lower by more than ``acc_tolerance`` (``"no-worse"``; the
  paper says "stable or slightly better", so a rise counts).

The claim's verdict combines the parts (``partial`` when they differ).
"""
from __future__ import annotations

from pathlib import Path

from qkdyn.claims import Claim, combine
from qkdyn.stats import compare, sample_summary

#: the paper's attention-mass gain (faster minus same) on its own tasks: the smallest effect it reports there
PAPER_MASS_GAIN = {"sva": 0.186 - 0.099, "hatexplain": 0.31 - 0.027, "squad": 0.194 - 0.118}

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


def summarize(results: dict[float, list[dict]], split: str = "test") -> dict:
    """{multiplier: {metric key: mean/std over seeds}} for the table's metrics."""
    out = {}
    for mult, runs in sorted(results.items()):
        out[mult] = {}
        for key, _ in ROWS:
            values = [lookup(r[split], key) for r in runs]
            if all(v is not None for v in values):
                out[mult][key] = sample_summary(values)
    return out


def claims(task: str, summary: dict, performance_key: str, acc_tolerance: float) -> list[Claim]:
    """One claim per faster multiplier against multiplier 1 (see the module docstring)."""
    base = summary[1.0]
    out = []
    for mult, s in summary.items():
        if mult == 1.0:
            continue
        mass = compare(s["attention_mass"]["values"], base["attention_mass"]["values"], "increase",
                       smallest_effect=PAPER_MASS_GAIN.get(task))
        perf = compare(s[performance_key]["values"], base[performance_key]["values"], "no-worse", margin=acc_tolerance)
        parts = {"sharper attention": mass.verdict, f"no {performance_key} loss": perf.verdict}
        out.append(Claim(
            f"{task} QK x{mult:g}", f"Raising the QK learning rate {mult:g}x sharpens attention on rationales "
            f"without lowering {performance_key} by more than {acc_tolerance:g} ({task}).", combine(parts),
            {"qk_lr_mult": mult, "attention_mass": {"same lr": fmt(base["attention_mass"]), "faster": fmt(s["attention_mass"])},
             performance_key: {"same lr": fmt(base[performance_key]), "faster": fmt(s[performance_key])}},
            f"Attention mass on rationales: {mass.describe()}; {performance_key}: {perf.describe()}.",
            parts=parts, stats={"attention mass": mass.as_dict(), performance_key: perf.as_dict()}))
    return out


def fmt(ms: dict) -> str:
    return f"{ms['mean']:.3f} ± {ms['std']:.3f}"


def markdown(task: str, summary: dict, notes: list[str], plots: list[str]) -> str:
    """The task's table section of figures/circuits/report.md (the claims are rendered by qkdyn.report)."""
    mults = list(summary)
    n = summary[mults[0]]["attention_mass"]["n"]
    lines = [f"## {task}: all metrics", "", f"Test split, mean ± standard deviation over {n} seeds.", ""]
    lines.append("| metric | " + " | ".join("same lr" if m == 1.0 else f"QK x{m:g}" for m in mults) + " |")
    lines.append("|---" * (len(mults) + 1) + "|")
    for key, label in ROWS:
        if key in summary[mults[0]]:
            lines.append(f"| {label} | " + " | ".join(fmt(summary[m][key]) for m in mults) + " |")
    lines += [""] + [f"- {note}" for note in notes] + [""]
    lines += [f"![{Path(p).stem}]({Path(p).name})" for p in plots] + [""]
    return "\n".join(lines)


def readme_section(payloads: list[dict], task_claims: dict[str, list[Claim]]) -> str:
    """A short results section for the project README, from the per-task summaries and claims."""
    lines = ["### Faster QK learning on real data (Paper A), CPU scale", "",
             "`qkdyn compare-circuits` trains Paper A's one-layer decoder classifier with the same learning rate for all "
             "parameters and with the QK circuit (W_Q, W_K) R times faster, over several seeds, and tests the claim "
             "\"sharper attention, same accuracy\" with the shared rule (paired over seeds; details, plots, every metric: "
             "`figures/circuits/report.md`).", ""]
    for p in payloads:
        base = p["summary"]["1"]
        key = "f1" if "f1" in base else "accuracy"
        lines.append(f"- **{p['task']}** ({len(p['seeds'])} seeds; same lr: {key} {fmt(base[key])}, attention mass "
                     f"on rationale {fmt(base['attention_mass'])}):")
        for claim in task_claims[p["task"]]:
            mult = claim.evidence["qk_lr_mult"]
            s = p["summary"][f"{mult:g}"]
            mass, perf = claim.stats["attention mass"], claim.stats[key]
            lines.append(f"  QK x{mult:g}: {key} {fmt(s[key])}, mass {fmt(s['attention_mass'])}; sharper "
                         f"{claim.parts['sharper attention']} (mass {mass['effect']:+.3f}, p = {mass['p_value']:.2g}), "
                         f"no {key} loss {claim.parts[f'no {key} loss']} ({key} {perf['effect']:+.3f}, "
                         f"p = {perf['p_value']:.2g}) -> claim **{claim.verdict}**.")
        other = "attention_mass_without_readout"
        if other in base and any(abs(p["summary"][m][other]["mean"] - p["summary"][m]["attention_mass"]["mean"]) > 1e-9
                                 for m in p["summary"]):
            lines.append("  Mass with the read-out position left out of the rationale: " + ", ".join(
                f"{'same lr' if m == '1' else 'QK x' + m} {fmt(p['summary'][m][other])}" for m in p["summary"]) + ".")
        lines += [f"  {note}" for note in p["notes"]]
    lines += ["", "These are small CPU-scale tests, not the paper's scale. The notebooks' recipes exist as presets, "
              "`paper-<task>` (equal rates) and `paper-<task>-faster` (the faster-QK arm) for hatexplain, sva and squad, "
              "with the differences that remain listed in docs/authors-experiments.md; they need the corpora, which "
              "cannot be downloaded here. `--metrics authors` adds the notebooks' attention-mass and DTAP definitions.", ""]
    return "\n".join(lines)
