"""Figures of the same-lr vs faster-QK comparison, in the qkdyn style (:mod:`qkdyn.figures`: labelled
axes and colour bars, constrained layout, the colour-blind-safe palette, PNG + PDF)."""
from __future__ import annotations

import textwrap
from pathlib import Path

import numpy as np
from qkdyn.empirical.circuits.report import PRIMARY, ROLLOUT
from qkdyn.empirical.circuits.tasks import SUBSETS

from qkdyn.figures import PALETTE, colorbar, plt, save_png
from qkdyn.runs import read_metrics

#: widest figure, inches: the bar panels wrap onto rows beyond it
MAX_WIDTH = 12.0
#: heatmaps per row of the DTAP figure
DTAP_COLUMNS = 4
#: line styles of the nulls drawn across a bar panel (uniform attention, previous-token head, best offset)
NULL_STYLES = ("--", ":", "-.")
#: what a training-log key means, for the axis labels
READINGS = {"dev_accuracy": "dev accuracy", "dev_loss": "dev loss",
            "dev_attention_mass": "dev attention mass on rationale",
            f"dev_{PRIMARY}": "dev attention mass on rationale\n(read-out position left out)"}


def plot_all(task: str, results: dict[str, list[dict]], summary: dict, run_dirs: dict[str, list[Path]],
             performance_key: str, out_dir: Path) -> list[str]:
    """Every arm (keys: the report's arm labels, e.g. ``same lr``, ``QK x30``, ``all x30``, drawn in the
    given order): bars (performance and attention mass, the rollout mass too for several layers, the mass on
    each of the task's deciding subsets where measured; mean ± std, dots: seeds; lines across: the nulls,
    uniform attention dashed, a previous-token head dotted, the best fixed offset dash-dotted), AC curves, mean
    DTAP heatmaps, and dev curves during training. Returns the written paths."""
    arms = list(results)
    paths = []

    panels = [(performance_key, f"test {performance_key}", {}),
              (PRIMARY, "test attention mass on rationale\n(read-out position left out)",
               {"uniform attention": "uniform_mass_without_readout", "previous-token head": "positional.previous_token",
                "best fixed offset": "positional.best_offset"})]
    if all(ROLLOUT in summary[m] for m in arms):  # several layers: the rollout reading beside the layer average
        panels.append((ROLLOUT, "test attention mass on rationale\n(attention rollout)",
                       {"uniform attention": "uniform_mass_by_method.rollout"}))
    for name in SUBSETS.get(task, {}):  # the items a sharpening claim is decided on, where measured
        if all(f"attention_mass@{name}" in summary[m] for m in arms):
            panels.append((f"attention_mass@{name}", f"test attention mass on rationale\n({name} items)",
                           {"uniform attention": f"uniform@{name}", "previous-token head": f"previous_token@{name}",
                            "best fixed offset": f"best_offset@{name}"}))
    colours = [PALETTE[i % (len(PALETTE) - 1)] for i in range(len(arms))]  # as the curves; the last (black): uniform
    cols = max(1, min(len(panels), int(MAX_WIDTH // (1.1 * len(arms) + 0.8))))  # panels wrap onto rows
    rows = -(-len(panels) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(1.1 * len(arms) * cols + 0.8, 2.8 * rows), squeeze=False)
    for ax in axes.flat[len(panels):]:
        ax.remove()
    for ax, (key, reading, nulls) in zip(axes.flat[:len(panels)], panels, strict=True):
        ax.bar(range(len(arms)), [summary[m][key]["mean"] for m in arms],
               yerr=[summary[m][key]["std"] for m in arms], capsize=4, color=colours, alpha=0.7)
        for i, m in enumerate(arms):
            ax.scatter([i] * summary[m][key]["n"], summary[m][key]["values"], color="k", s=8, zorder=3)
        drawn = [(label, null) for label, null in nulls.items() if all(null in summary[m] for m in arms)]
        for (label, null), style in zip(drawn, NULL_STYLES, strict=False):
            ax.axhline(np.mean([summary[m][null]["mean"] for m in arms]), color=PALETTE[-1], ls=style, label=label)
        if drawn:
            ax.set_ylim(top=(1.1 + 0.12 * len(drawn)) * ax.get_ylim()[1])  # headroom: the legend above the bars
            ax.legend(loc="upper left", fontsize=7)
        ax.set_xticks(range(len(arms)), [textwrap.fill(m, 12) for m in arms])  # long arm names on 2 lines
        ax.tick_params(axis="x", labelsize=8)
        ax.set(xlabel="arm (learning rates)", ylabel=f"{reading}\n(mean ± sd, dots: seeds)")
    fig.suptitle(task)
    paths.append(str(save_png(fig, out_dir / f"{task}_bars.png")))

    fig, ax = plt.subplots(figsize=(3.6, 2.8))
    for m in arms:
        curves = np.array([r["test"]["ac_curve"] for r in results[m]])
        th = results[m][0]["test"]["thresholds"]
        ax.plot(th, curves.mean(0), label=m)
        ax.fill_between(th, curves.mean(0) - curves.std(0), curves.mean(0) + curves.std(0), alpha=0.2)
    ax.set(xlabel="concentration threshold tau", ylabel="AC(tau): share with mass >= tau",
           title=f"{task}: attention confidence")
    ax.legend()
    paths.append(str(save_png(fig, out_dir / f"{task}_ac.png")))

    cols = min(len(arms), DTAP_COLUMNS)  # heatmaps wrap onto rows
    rows = -(-len(arms) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(2.6 * cols + 0.8, 2.8 * rows), squeeze=False)
    for ax in axes.flat[len(arms):]:
        ax.remove()
    for ax, m in zip(axes.flat[:len(arms)], arms, strict=True):
        heat = np.mean([r["test"]["dtap_percent"] for r in results[m]], axis=0)
        image = ax.imshow(heat.T, origin="lower", extent=[0, 1, 0, 1], vmin=0, vmax=100, cmap="viridis")
        step = 1 / heat.shape[0]
        for i, j in np.ndindex(heat.shape):
            ax.text(step * (i + 0.5), step * (j + 0.5), f"{heat[i, j]:.0f}", ha="center", va="center", fontsize=7,
                    color="white" if heat[i, j] < 50 else "black")
        ax.set(title=m, xlabel="attention on relevant tokens", ylabel="p(true label)")
    colorbar(fig, image, list(axes.flat[:len(arms)]), "% of test samples (mean over seeds)")
    fig.suptitle(f"{task}: DTAP heatmap")
    paths.append(str(save_png(fig, out_dir / f"{task}_dtap.png")))

    dev_key = "dev_accuracy" if performance_key == "accuracy" else "dev_loss"
    fig, axes = plt.subplots(1, 2, figsize=(6.4, 2.8))
    for m in arms:
        logs = [read_metrics(d / "metrics.jsonl") for d in run_dirs[m]]
        shortest = min(map(len, logs))  # runs stop at their target loss: the steps every seed has
        steps = [row["step"] for row in logs[0][:shortest]]
        for ax, key in ((axes[0], dev_key), (axes[1], f"dev_{PRIMARY}")):
            values = np.array([[row[key] for row in log[:shortest]] for log in logs])
            ax.plot(steps, values.mean(0), label=m)
            ax.fill_between(steps, values.mean(0) - values.std(0), values.mean(0) + values.std(0), alpha=0.2)
            ax.set(xlabel="training step", ylabel=READINGS[key])
    axes[0].legend()
    fig.suptitle(f"{task}: during training (mean ± sd over seeds)")
    paths.append(str(save_png(fig, out_dir / f"{task}_training.png")))
    return paths
