"""The figures of claim A6 and of the authors' experiment (matplotlib, Agg; one function each).

Every function takes the measured numbers and a target path, and writes one PNG (and a PDF beside
it) in the qkdyn style (:mod:`qkdyn.figures`).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
from matplotlib.lines import Line2D

from qkdyn.figures import colorbar, plt, save_png


def overlay(curves: dict, path: Path) -> None:
    """curves[param] = {"ode": (t, qk, ov), "gd": (t, qk, ov), "sgd": (t, qk, ov), "h": h, "batch": B}."""
    fig, axes = plt.subplots(1, len(curves), figsize=(4 * len(curves), 3.4), squeeze=False)
    for ax, (param, c) in zip(axes[0], curves.items(), strict=True):
        t, qk, ov = c["ode"]
        ax.plot(t, qk, "C0-", label="qk (ODE)")
        ax.plot(t, ov, "C1-", label="ov (ODE)")
        ax.plot(c["gd"][0], c["gd"][1], "C0o", ms=4, mfc="none", label=f"GD h={c['h']}")
        ax.plot(c["gd"][0], c["gd"][2], "C1o", ms=4, mfc="none")
        ax.plot(c["sgd"][0], c["sgd"][1], "C0x", ms=4, label=f"SGD B={c['batch']}")
        ax.plot(c["sgd"][0], c["sgd"][2], "C1x", ms=4)
        ax.set_title(param)
        ax.set(xlabel="t = step h", ylabel="qk (blue), ov (orange)")
    axes[0][0].legend()
    save_png(fig, path)


def convergence(errors: dict, steps: list, path: Path) -> None:
    """errors[param] = [err(h) for h in steps]: log-log, with a slope-1 reference."""
    fig, ax = plt.subplots(figsize=(4.5, 3.5))
    for param, err in errors.items():
        ax.loglog(steps, err, "o-", label=param)
    h = np.array(steps)
    ref = max(e[0] for e in errors.values()) * h / h[0]
    ax.loglog(h, ref, "k--", lw=0.8, label="slope 1")
    ax.set_xlabel("step h")
    ax.set_ylabel("max rel. error of qk, ov vs ODE")
    ax.legend()
    save_png(fig, path)


def sgd_batch(batches: list, deviations: list, path: Path, param: str) -> None:
    fig, ax = plt.subplots(figsize=(4.5, 3.5))
    ax.loglog(batches, deviations, "o-", label=f"SGD ({param})")
    b = np.array(batches, dtype=float)
    ax.loglog(b, deviations[0] * np.sqrt(b[0] / b), "k--", lw=0.8, label="B^-1/2")
    ax.set_xlabel("batch size B")
    ax.set_ylabel("deviation from the flow")
    ax.legend()
    save_png(fig, path)


def adam(rows: list, path: Path) -> None:
    """rows: dicts with param, rho, attn_adam, attn_ode; recorded_steps, adam_distance, gd_distance, start_distance.
    Left: attn at matched loss against rho; right: distance from the symmetric subspace / the start's, per step."""
    fig, (ax, right) = plt.subplots(1, 2, figsize=(10, 3.5))
    for i, param in enumerate(sorted({r["param"] for r in rows})):
        sel = [r for r in rows if r["param"] == param]
        ax.semilogx([r["rho"] for r in sel], [r["attn_ode"] for r in sel], f"C{i}-", label=f"{param} ODE / GD")
        ax.semilogx([r["rho"] for r in sel], [r["attn_adam"] for r in sel], f"C{i}s--", label=f"{param} Adam")
    ax.set_xlabel("rho = eta_QK / eta_OV")
    ax.set_ylabel("attn at matched loss")
    ax.legend()
    params, rhos = sorted({r["param"] for r in rows}), sorted({r["rho"] for r in rows})
    styles = ("-", "--", "-.", ":")
    for r in rows:
        steps = np.array(r["recorded_steps"]) + 1
        right.loglog(steps, np.array(r["adam_distance"]) / r["start_distance"], f"C{params.index(r['param'])}",
                     ls=styles[rhos.index(r["rho"]) % 4])
        right.loglog(steps, np.array(r["gd_distance"]) / r["start_distance"], color="0.5", lw=0.8)
    right.set_xlabel("step + 1")
    right.set_ylabel("distance from the subspace / at the start")
    # one entry per form (colour, Adam) and per rho (line style), outside the data
    handles = ([Line2D([], [], color=f"C{i}", label=f"{p} Adam") for i, p in enumerate(params)]
               + [Line2D([], [], color="k", ls=styles[j % 4], label=f"rho = {rho:g}") for j, rho in enumerate(rhos)]
               + [Line2D([], [], color="0.5", lw=0.8, label="GD, same start")])
    right.legend(handles=handles, fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0))
    save_png(fig, path)


def symmetric_distance(curves: dict, path: Path) -> None:
    """curves[param] = (t, sym_dist)."""
    fig, ax = plt.subplots(figsize=(4.5, 3.5))
    for param, (t, dist) in curves.items():
        ax.plot(t, dist, label=param)
    ax.set_yscale("log")
    ax.set_xlabel("t = step h")
    ax.set_ylabel("distance from the symmetric subspace")
    ax.legend()
    save_png(fig, path)


def dtap(grid: dict, path: Path) -> None:
    """grid[(schedule, param)] = 5x5 % histogram (rows: attention bins, cols: p(true) bins)."""
    schedules = list(dict.fromkeys(s for s, _ in grid))
    params = list(dict.fromkeys(p for _, p in grid))
    fig, axes = plt.subplots(len(schedules), len(params), figsize=(2.6 * len(params), 2.5 * len(schedules)),
                             squeeze=False)
    for i, s in enumerate(schedules):
        for j, p in enumerate(params):
            ax, hist = axes[i][j], grid[(s, p)]
            image = ax.imshow(hist, origin="lower", extent=(0, 1, 0, 1), vmin=0, vmax=100, cmap="viridis")
            for a in range(5):
                for b in range(5):
                    if hist[a, b] >= 0.5:
                        ax.text(0.1 + 0.2 * b, 0.1 + 0.2 * a, f"{hist[a, b]:.0f}", ha="center", va="center",
                                fontsize=6, color="w")
            ax.set_title(f"{p} {s}")
            ax.set_xlabel("p(true)")
            ax.set_ylabel("attn on distinct")
            ax.grid(False)
    colorbar(fig, image, axes, "% of test sequences")
    save_png(fig, path)


def sampled_attention(rows: list[dict], path: Path, generator: str) -> None:
    """Per form, bars per schedule: attention on distinct tokens and on the query's own id (mean +- sd
    over seeds, at the form's matched running loss)."""
    forms = list(dict.fromkeys(r["form"] for r in rows))
    schedules = list(dict.fromkeys(r["schedule"] for r in rows))
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.4))
    width = 0.8 / len(schedules)
    for ax, metric, title in ((axes[0], "attn_distinct", "attention on distinct tokens"),
                              (axes[1], "attn_query_id", "attention on the query's own id")):
        for i, s in enumerate(schedules):
            sel = [next(r for r in rows if r["form"] == f and r["schedule"] == s) for f in forms]
            ax.bar(np.arange(len(forms)) + i * width, [r[metric] for r in sel], width,
                   yerr=[r[f"{metric}_sd"] for r in sel], label=s, capsize=2)
        ax.set_xticks(np.arange(len(forms)) + width * (len(schedules) - 1) / 2, forms)
        ax.set_ylim(0, 1)
        ax.set(title=f"{generator}: {title}", xlabel="parameterisation", ylabel="attention (mean +- sd over seeds)")
    axes[0].legend()
    save_png(fig, path)


def fixed_attention(runs: dict, theory: dict, path: Path) -> None:
    """Per form: L(alpha) over flow time (sampled: mean over seeds, solid; theory: dashed) and -dL/dalpha at
    fixed weights (sampled: at the trained weights on the evaluation set; theory: at the frozen-QK flow's own
    state on the population; :func:`.fixed_attention.scores` on both sides)."""
    forms = list(dict.fromkeys(f for f, _, _ in runs))
    alphas = list(dict.fromkeys(a for _, a, _ in runs))
    seeds = list(dict.fromkeys(s for _, _, s in runs))
    fig, axes = plt.subplots(2, len(forms), figsize=(4.8 * len(forms), 6.4), squeeze=False)
    colours = plt.cm.viridis(np.linspace(0, 0.9, len(alphas)))
    for j, f in enumerate(forms):
        for colour, a in zip(colours, alphas, strict=True):
            sel = [runs[(f, a, s)] for s in seeds]
            t = sel[0].t
            axes[0][j].plot(t, np.mean([r.loss for r in sel], axis=0), color=colour, label=f"alpha={a:g}")
            axes[1][j].plot(t, np.mean([r.fall for r in sel], axis=0), color=colour)
            th_loss, th_fall = theory[(f, a)]
            axes[0][j].plot(t, th_loss, color=colour, ls="--", lw=0.8)
            axes[1][j].plot(t, th_fall, color=colour, ls="--", lw=0.8)
        axes[0][j].set_yscale("log")
        axes[0][j].set_title(f"{f} OV, attention fixed (dashed: frozen-QK flow)")
        axes[0][j].set(xlabel="flow time t = lr x steps", ylabel="loss")
        axes[1][j].set_ylabel("-dL/dalpha at fixed weights")
        axes[1][j].set_yscale("symlog", linthresh=1e-3)
        axes[1][j].set_xlabel("flow time t = lr x steps")
        axes[0][j].legend()
    save_png(fig, path)
