"""Figures of the per-head measures (:mod:`qkdyn.empirical.circuits.heads`) of every arm, in the qkdyn
style (:mod:`qkdyn.figures`).

A head's index means nothing across runs (seeds and arms permute heads freely), so heads are ranked
within each run and layer before averaging over seeds: by the entropy at the last evaluation every seed
logged (entropy over training), and by the role's own value (roles), so "head 1" is each run's sharpest
head, or its strongest head in that role.
"""
from __future__ import annotations

import textwrap
from pathlib import Path

import numpy as np
from qkdyn.empirical.circuits.heads import ROLES

from qkdyn.figures import PALETTE, colorbar, plt, save_png
from qkdyn.runs import read_metrics

#: widest figure, inches
MAX_WIDTH = 12.0
#: panels per row of the entropy figure
COLUMNS = 4
#: heads per layer above which the role heatmaps carry no numbers (they would not fit)
ANNOTATED_HEADS = 12
#: what each role measures, for the panel titles
ROLE_READINGS = {"previous_token": "mass on the previous token", "first_token": "mass on the first position (a sink)",
                 "rationale": "read-out row: mass on the rationale", "induction": "mass on induction targets"}


def entropy_over_training(logs: list[list[dict]]) -> tuple[list[int], np.ndarray, np.ndarray]:
    """The steps every run logged, (runs, steps, n_layer, H) mean attention entropies with each run's heads
    ranked per layer by their entropy at the last of those steps (sharpest first), and (runs, steps)
    uniform attention's entropy on the same examples."""
    shortest = min(map(len, logs))
    steps = [row["step"] for row in logs[0][:shortest]]
    curves = np.array([[row["dev_heads"]["entropy"] for row in log[:shortest]] for log in logs], dtype=float)
    order = np.argsort(curves[:, -1], axis=-1)  # (runs, n_layer, H): ranks at the last common step
    ranked = np.take_along_axis(curves, order[:, None], axis=-1)
    uniform = np.array([[row["dev_heads"]["uniform"]["entropy"] for row in log[:shortest]] for log in logs], dtype=float)
    return steps, ranked, uniform


def ranked_roles(runs: list[dict], role: str) -> np.ndarray:
    """(runs, n_layer, H) the role's values of each run's heads, ranked per layer from the strongest."""
    values = np.array([r[role] if r.get(role) is not None else np.nan for r in runs], dtype=float)
    return -np.sort(-values, axis=-1)


def _logs(run_dirs: dict[str, list[Path]]) -> dict[str, list[list[dict]]] | None:
    """Each arm's training logs; None when a run logged no entropies (made before they were recorded, or
    on examples of one token)."""
    logs = {arm: [read_metrics(Path(d) / "metrics.jsonl") for d in dirs] for arm, dirs in run_dirs.items()}
    if any(not log or any(row.get("dev_heads", {}).get("entropy") is None for row in log)
           for runs in logs.values() for log in runs):
        return None
    return logs


def plot_entropy(task: str, logs: dict[str, list[list[dict]]], out_dir: Path) -> str:
    """Mean attention entropy over training, a panel per layer and arm, a line per head rank (mean ± sd
    over seeds), uniform attention's entropy dashed."""
    arms = list(logs)
    curves = {arm: entropy_over_training(runs) for arm, runs in logs.items()}
    n_layer, n_head = curves[arms[0]][1].shape[2:]
    cols = min(len(arms), COLUMNS)
    per_layer = -(-len(arms) // cols)
    fig, axes = plt.subplots(n_layer * per_layer, cols, figsize=(2.6 * cols + 0.8, 2.3 * n_layer * per_layer),
                             squeeze=False, sharey=True)
    for ax in axes.flat:
        ax.set_visible(False)
    for layer in range(n_layer):
        for index, arm in enumerate(arms):
            ax = axes[layer * per_layer + index // cols, index % cols]
            ax.set_visible(True)
            steps, ranked, uniform = curves[arm]
            for rank in range(n_head):
                values = ranked[:, :, layer, rank]
                ax.plot(steps, values.mean(0), color=PALETTE[rank % (len(PALETTE) - 1)], label=f"head {rank + 1}")
                ax.fill_between(steps, values.mean(0) - values.std(0), values.mean(0) + values.std(0),
                                color=PALETTE[rank % (len(PALETTE) - 1)], alpha=0.2)
            ax.plot(steps, uniform.mean(0), color=PALETTE[-1], ls="--", label="uniform")
            ax.set(title=f"{arm}, layer {layer + 1}" if n_layer > 1 else arm, xlabel="training step",
                   ylabel="attention entropy (nats)")
    axes[0, 0].legend(fontsize=7)
    fig.suptitle(f"{task}: attention entropy per head during training (heads ranked by final entropy; "
                 "mean ± sd over seeds)")
    return str(save_png(fig, out_dir / f"{task}_head_entropy.png"))


def plot_roles(task: str, results: dict[str, list[dict]], split: str, out_dir: Path) -> str:
    """A heatmap per role: arms by heads (each run's heads ranked per layer by that role, mean over seeds),
    uniform attention's value in the title."""
    arms = list(results)
    runs = {arm: [r[split]["heads"] for r in results[arm]] for arm in arms}
    n_layer, n_head = np.array(runs[arms[0]][0]["readout_entropy"]).shape
    width = min(MAX_WIDTH, max(6.5, 0.55 * n_layer * n_head + 2.6))
    fig, axes = plt.subplots(len(ROLES), 1, figsize=(width, (0.35 * len(arms) + 1.1) * len(ROLES)), squeeze=False)
    image = None
    for ax, role in zip(axes[:, 0], ROLES, strict=True):
        grid = np.array([ranked_roles(runs[arm], role).mean(0).reshape(-1) for arm in arms])
        image = ax.imshow(grid, vmin=0, vmax=1, cmap="viridis", aspect="auto")
        ax.grid(False)
        if n_head <= ANNOTATED_HEADS:
            for (i, j), value in np.ndenumerate(grid):
                if np.isfinite(value):
                    ax.text(j, i, f"{value:.2f}", ha="center", va="center", fontsize=6,
                            color="white" if value < 0.5 else "black")
        ax.set_yticks(range(len(arms)), [textwrap.shorten(a, 20) for a in arms], fontsize=7)
        ax.set_xticks(range(n_layer * n_head), [f"L{l + 1} h{k + 1}" if n_layer > 1 else f"h{k + 1}"
                                                for l in range(n_layer) for k in range(n_head)], fontsize=6)
        uniform = [r["uniform"][role] for arm in arms for r in runs[arm] if r["uniform"].get(role) is not None]
        null = f"uniform attention {np.mean(uniform):.3f}" if uniform else "undefined on these examples"
        ax.set(title=textwrap.fill(f"{ROLE_READINGS[role]} ({null})", 70), xlabel="head, ranked by this role within each run",
               ylabel="arm")
    colorbar(fig, image, list(axes[:, 0]), f"{split} mass (mean over seeds)")
    fig.suptitle(f"{task}: roles per head, {split} split")
    return str(save_png(fig, out_dir / f"{task}_head_roles.png"))


def plot_heads(task: str, results: dict[str, list[dict]], run_dirs: dict[str, list[Path]], out_dir: Path,
               split: str = "test") -> list[str]:
    """The per-head figures of the arms of ``results`` (the report's arm labels, each a list of flat run
    results in seed order, as :func:`qkdyn.empirical.circuits.plots.plot_all` takes them) and their run
    directories ``run_dirs`` (same keys; each holds ``metrics.jsonl``): ``TASK_head_entropy.png``
    (entropy per layer and head over training) and ``TASK_head_roles.png`` (each head's roles on
    ``split``). A figure whose measures some run lacks (a run made before they were recorded) is left
    out. Returns the written paths."""
    out_dir = Path(out_dir)
    paths = []
    logs = _logs(run_dirs)
    if logs is not None:
        paths.append(plot_entropy(task, logs, out_dir))
    if all(r.get(split, {}).get("heads", {}).get("n") for runs in results.values() for r in runs):
        paths.append(plot_roles(task, results, split, out_dir))
    return paths
