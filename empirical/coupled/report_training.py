"""The coupled study's evidence over training in its report: the paired-difference curves
(``paired_differences.png``), the ablations at every evaluation (``ablation_curves.png``), and the
tables beside them: every variant against standard attention, the paired difference at quarters of
training, the ablations over training, per-head dt and coupling, and the per-run diagnostics.

Every number is taken from :mod:`qkdyn.empirical.coupled.summaries` and
:mod:`qkdyn.empirical.coupled.curves`; nothing is typed in.
"""
from __future__ import annotations

import math
from pathlib import Path

from qkdyn.empirical.coupled.curves import PER_HEAD

from qkdyn.figures import plt, save_png
from qkdyn.report import markdown_table

#: where along an evaluation curve the tables read it (share of its evaluations)
QUARTERS = {"25%": 0.25, "50%": 0.5, "75%": 0.75, "end": 1.0}


def _band(ax, curve: dict, label: str) -> None:
    line, = ax.plot(curve["tokens"], curve["mean"], label=label, lw=1.5)
    ax.fill_between(curve["tokens"], curve["low"], curve["high"], color=line.get_color(), alpha=0.2, lw=0)


def _panels(name: str, panels: dict[str, dict], ylabel: str, out: Path) -> None:
    fig, axes = plt.subplots(1, len(panels), figsize=(4.4 * len(panels), 3.4), squeeze=False)
    for ax, (title, curves) in zip(axes[0], panels.items(), strict=True):
        for label, curve in curves.items():
            _band(ax, curve, label)
        ax.axhline(0, color="gray", lw=0.8)
        ax.set(xlabel="training tokens", ylabel=ylabel, title=title)
        ax.legend(fontsize=6)
    save_png(fig, out / name)


def write_training_plots(result: dict, out: Path) -> list[str]:
    """``paired_differences.png`` (a panel per corpus or grid: each variant's log ppl minus standard's at
    every evaluation, mean over seeds with its 95% band) and ``ablation_curves.png`` (a panel per
    ablation: the change of validation loss at every evaluation, each flow variant), where measured.
    Returns the written names."""
    written = []
    if result.get("paired_curves"):
        _panels("paired_differences.png", result["paired_curves"],
                "log ppl(variant) - log ppl(standard)\n(mean over seeds, 95% CI)", out)
        written.append("paired_differences.png")
    if result.get("ablation_curves"):
        whats = list(dict.fromkeys(w for curves in result["ablation_curves"].values() for w in curves))
        panels = {w: {v: curves[w] for v, curves in result["ablation_curves"].items() if w in curves} for w in whats}
        _panels("ablation_curves.png", panels, "change of validation loss, nats\n(mean over seeds, 95% CI)", out)
        written.append("ablation_curves.png")
    return written


def _at(curve: dict, share: float) -> str:
    i = round(share * (len(curve["mean"]) - 1))
    lo, hi = curve["low"][i], curve["high"][i]
    band = "" if math.isnan(lo) else f" [{lo:+.3g}, {hi:+.3g}]"
    return f"{curve['mean'][i]:+.4f}{band} ({curve['tokens'][i]:,.0f})"


def _curve_rows(curves: dict[str, dict], first: str) -> list[dict]:
    return [{first: label, "seeds": c["seeds"], **{q: _at(c, s) for q, s in QUARTERS.items()}} for label, c in curves.items()]


def _heads(values: list[list[float]]) -> str:
    return "; ".join(f"layer {i}: " + ", ".join(f"{v:.3g}" for v in layer) for i, layer in enumerate(values))


def training_markdown(result: dict) -> str:
    """The tables of the evidence over training (module docstring), as markdown sections."""
    lines = []
    if result.get("comparisons"):
        lines += ["## Every variant against standard attention (equal tokens, main grid)", "",
                  "The shared rule per variant, beside the default coupled Euler (`coupled-wide`: f as wide as the head; "
                  "`coupled-identity`: f's output layer zero at init). A verdict is `inconclusive` where standard has "
                  "not learnt or the variant does not beat the bigram count model (unmet). No claim rests on these rows "
                  "but B1's (coupled Euler).", "", *markdown_table(result["comparisons"]), ""]
    for panel, curves in result.get("paired_curves", {}).items():
        lines += [f"## Effects over training: `{panel}`", "",
                  "log ppl(variant) - log ppl(standard) paired by seed, mean [95% CI] (training tokens) at a share of "
                  "the evaluations; every evaluation in `report.json` (`coupled.paired_curves`) and "
                  "`paired_differences.png`.", "", *markdown_table(_curve_rows(curves, "variant - standard")), ""]
    for variant, curves in result.get("ablation_curves", {}).items():
        lines += [f"## Ablations over training: `{variant}`", "",
                  "Change of validation loss (nats) when the part is removed, at each evaluation on the same evaluator, "
                  "mean [95% CI] over seeds (training tokens).", "", *markdown_table(_curve_rows(curves, "removed")), ""]
    if result.get("per_head"):
        lines += ["## Per-head dt and coupling |dt f(q)| / |k| (mean over seeds)", "",
                  "| variant | quantity | init: min / median / max | final: min / median / max | final per head |",
                  "|---|---|---|---|---|"]
        for variant, fields in result["per_head"].items():
            for field, when in fields.items():
                init, final = when["init"], when["final"]
                label = PER_HEAD[field].replace("|", "\\|")
                lines.append(f"| {variant} | {label} | {init['min']:.3g} / {init['median']:.3g} "
                             f"/ {init['max']:.3g} | {final['min']:.3g} / {final['median']:.3g} / {final['max']:.3g} | "
                             f"{_heads(final['per_head'])} |")
        lines.append("")
    if result.get("diagnostics"):
        lines += ["## Diagnostics per run", "",
                  "Every run, B7's grid (Differential Attention's: more heads, its learning-rate sweep) labelled "
                  "`B7`. Final value (per-token perplexity, or MQAR recall) and its distance from the median seed of "
                  "its group (same grid, variant, length and learning rate; log ppl, or recall); the largest pre-clip gradient norm, the share of clipped steps and the "
                  "loss spikes of the run (`details.diagnostics`; 'not measured' in records written before them).", "",
                  *markdown_table(result["diagnostics"]), ""]
    return "\n".join(lines) + "\n" if lines else ""
