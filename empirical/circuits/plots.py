"""Figures of the same-lr vs faster-QK comparison (matplotlib, Agg backend)."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from qkdyn.empirical.circuits.report import PRIMARY
from qkdyn.figures import save_png
from qkdyn.runs import read_metrics


def _label(mult: float) -> str:
    return "same lr" if mult == 1.0 else f"QK x{mult:g}"


def plot_all(task: str, results: dict[float, list[dict]], summary: dict, run_dirs: dict[float, list[Path]],
             performance_key: str, out_dir: Path) -> list[str]:
    """Bars (performance and attention mass, mean ± std), AC curves, mean DTAP heatmaps, and dev
    curves during training. Returns the written paths."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    mults = sorted(results)
    paths = []

    fig, axes = plt.subplots(1, 2, figsize=(8, 3.2))
    for ax, key, title in ((axes[0], performance_key, f"test {performance_key}"),
                           (axes[1], PRIMARY, "test attention mass on rationale (read-out left out)")):
        ax.bar([_label(m) for m in mults], [summary[m][key]["mean"] for m in mults],
               yerr=[summary[m][key]["std"] for m in mults], capsize=4, color="tab:blue", alpha=0.7)
        for i, m in enumerate(mults):
            ax.scatter([i] * summary[m][key]["n"], summary[m][key]["values"], color="k", s=10, zorder=3)
        ax.set_title(title)
    fig.suptitle(task)
    paths.append(str(save_png(fig, out_dir / f"{task}_bars.png")))

    fig, ax = plt.subplots(figsize=(4.5, 3.2))
    for m in mults:
        curves = np.array([r["test"]["ac_curve"] for r in results[m]])
        th = results[m][0]["test"]["thresholds"]
        ax.plot(th, curves.mean(0), label=_label(m))
        ax.fill_between(th, curves.mean(0) - curves.std(0), curves.mean(0) + curves.std(0), alpha=0.2)
    ax.set_xlabel("concentration threshold tau")
    ax.set_ylabel("AC(tau): share with mass >= tau")
    ax.set_title(f"{task}: attention confidence")
    ax.legend()
    paths.append(str(save_png(fig, out_dir / f"{task}_ac.png")))

    fig, axes = plt.subplots(1, len(mults), figsize=(3.6 * len(mults), 3.6), constrained_layout=True)
    for ax, m in zip(np.atleast_1d(axes), mults):
        heat = np.mean([r["test"]["dtap_percent"] for r in results[m]], axis=0)
        ax.imshow(heat.T, origin="lower", extent=[0, 1, 0, 1], vmin=0, vmax=100, cmap="viridis")
        for i, j in np.ndindex(heat.shape):
            ax.text(0.1 + 0.2 * i, 0.1 + 0.2 * j, f"{heat[i, j]:.0f}", ha="center", va="center", fontsize=8,
                    color="white" if heat[i, j] < 50 else "black")
        ax.set_title(f"{_label(m)} (% of samples)")
        ax.set_xlabel("attention on relevant tokens")
        ax.set_ylabel("p(true label)")
    fig.suptitle(f"{task}: DTAP heatmap (test, mean over seeds)")
    paths.append(str(save_png(fig, out_dir / f"{task}_dtap.png")))

    dev_key = "dev_accuracy" if performance_key == "accuracy" else "dev_loss"
    fig, axes = plt.subplots(1, 2, figsize=(8, 3.2))
    for m in mults:
        logs = [read_metrics(d / "metrics.jsonl") for d in run_dirs[m]]
        shortest = min(map(len, logs))  # runs stop at their target loss: the steps every seed has
        steps = [row["step"] for row in logs[0][:shortest]]
        for ax, key in ((axes[0], dev_key), (axes[1], f"dev_{PRIMARY}")):
            values = np.array([[row[key] for row in log[:shortest]] for log in logs])
            ax.plot(steps, values.mean(0), label=_label(m))
            ax.fill_between(steps, values.mean(0) - values.std(0), values.mean(0) + values.std(0), alpha=0.2)
            ax.set_xlabel("step")
            ax.set_ylabel(key)
    axes[0].legend()
    fig.suptitle(f"{task}: dev metrics during training (mean ± std over seeds)")
    paths.append(str(save_png(fig, out_dir / f"{task}_training.png")))
    return paths
