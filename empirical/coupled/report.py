"""Write the coupled-QK study's report: ``report.md``, ``summary.json``, plots, and a README section.

Every number is taken from :func:`qkdyn.empirical.coupled.analysis.analyse`; nothing is typed in.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

from qkdyn import atomic
from qkdyn.figures import save_png

VARIANT_ORDER = ("standard", "coupled-euler", "coupled-leapfrog", "mlp-only", "diff")


def _fmt(stat: dict, digits: int = 3) -> str:
    std = "" if math.isnan(stat["std"]) else f" ± {stat['std']:.{digits}f}"
    return f"{stat['mean']:.{digits}f}{std}"


def _variants(table: dict) -> list[str]:
    return [v for v in VARIANT_ORDER if v in table]


def _plot_bars(ax, table: dict, title: str, ylabel: str) -> None:
    names = _variants(table)
    stats = [table[v] for v in names]
    ax.bar(names, [s["mean"] for s in stats], yerr=[0 if math.isnan(s["std"]) else s["std"] for s in stats],
           capsize=4, color="#4477aa")
    for i, s in enumerate(stats):
        ax.plot([i] * s["n"], s["values"], "k.", ms=4)
    ax.set_title(title)
    ax.set_ylabel(ylabel)
    ax.tick_params(axis="x", rotation=30)


def write_plots(result: dict, out: Path) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tables, written = result["tables"], []

    def save(fig, name):
        save_png(fig, out / name)
        written.append(name)

    if tables["perplexity"]:
        corpora = [c for c in (result["coherent"], result["heterogeneous"]) if c in tables["perplexity"]]
        fig, axes = plt.subplots(1, len(corpora), figsize=(5 * len(corpora), 4), squeeze=False)
        for ax, corpus in zip(axes[0], corpora):
            table = tables["perplexity"][corpus]
            _plot_bars(ax, table, f"{corpus}: final validation perplexity", "per-byte perplexity")
            lo = min(min(s["values"]) for s in table.values())
            hi = max(max(s["values"]) for s in table.values())
            ax.set_ylim(lo - 0.2 * (hi - lo + 1e-9), hi + 0.2 * (hi - lo + 1e-9))
        save(fig, "perplexity_by_variant.png")

        fig, ax = plt.subplots(figsize=(6, 4))
        for corpus in corpora:
            table = tables["throughput"][corpus]
            names = _variants(table)
            ax.plot(names, [table[v]["mean"] for v in names], "o-", label=corpus)
        ax.set_ylabel("training tokens/s (1 thread, shared CPU)")
        ax.set_title("wall-clock throughput")
        ax.tick_params(axis="x", rotation=30)
        ax.legend()
        save(fig, "throughput.png")

    if result["curves"]:
        fig, ax = plt.subplots(figsize=(6, 4))
        for variant in _variants(result["curves"]):
            c = result["curves"][variant]
            ax.plot(c["tokens"], c["val_ppl"], label=variant)
        eff = [c for c in result["claims"] if c["claim"].startswith("sample efficiency")]
        if eff:
            ax.axhline(eff[0]["target_ppl"], color="gray", ls="--", lw=1, label="standard final (target)")
        ax.set_xlabel("training tokens")
        ax.set_ylabel("validation perplexity (mean over seeds)")
        ax.set_yscale("log")
        ax.set_title(f"{result['coherent']}: sample efficiency")
        ax.legend()
        save(fig, "sample_efficiency.png")

    if len(tables["steps"]) > 1:
        fig, ax = plt.subplots(figsize=(5, 4))
        ns = sorted(tables["steps"])
        ax.plot(ns, [tables["steps"][n]["mean"] for n in ns], "o-")
        ax.set_xlabel("coupling steps n (Euler)")
        ax.set_ylabel("final validation perplexity (seed 0)")
        ax.set_title(f"{result['coherent']}: coupling steps")
        save(fig, "coupling_steps.png")

    if tables["mqar"]:
        tasks = sorted(tables["mqar"])
        fig, axes = plt.subplots(1, len(tasks), figsize=(5 * len(tasks), 4), squeeze=False)
        for ax, task in zip(axes[0], tasks):
            table = tables["mqar"][task]
            names = _variants(table)
            settings = [k for k in table[names[0]] if k.startswith("acc_")]
            width = 0.8 / len(names)
            for i, v in enumerate(names):
                ax.bar([j + i * width for j in range(len(settings))], [table[v][k]["mean"] for k in settings],
                       width, label=v)
            ax.set_xticks([j + 0.4 - width / 2 for j in range(len(settings))], settings)
            ax.set_ylim(0, 1)
            ax.set_ylabel("accuracy")
            ax.set_title(f"MQAR {task}")
            ax.legend()
        save(fig, "mqar_accuracy.png")
    return written


def _markdown(result: dict, context: dict, plots: list[str]) -> str:
    t = result["tables"]
    lines = ["# Coupled query-key dynamics (paper B): study report", "",
             f"Scale tested: preset `{context['preset']}` ({context['parameters']}), byte-level tokens, "
             f"{context['lm_tokens']} training tokens per LM run, seeds {context['seeds']}; "
             f"coherent corpus `{result['coherent']}`, heterogeneous corpus `{result['heterogeneous'] or 'none'}`. "
             f"Perplexity is per byte on held-out text. Runs: {context['n_runs']} (`{context['runs_dir']}`).", "",
             "## Verdicts", "", "| claim | paper | measured here | verdict |", "|---|---|---|---|"]
    lines += [f"| {c['claim']} | {c['paper']} | {c['measured']} | **{c['verdict']}** |" for c in result["claims"]]
    lines += ["", "Verdict rules: see `empirical/coupled/analysis.py` (t-tests over seeds, paired when the seeds match, alpha 0.05). "
              "A verdict speaks for the scale tested only.", ""]
    for corpus, table in t["perplexity"].items():
        lines += [f"## Perplexity, `{corpus}` (mean ± std over seeds)", "", "| variant | seeds | val ppl | tokens/s |",
                  "|---|---|---|---|"]
        for v in _variants(table):
            lines.append(f"| {v} | {table[v]['n']} | {_fmt(table[v])} | {_fmt(t['throughput'][corpus][v], 0)} |")
        std = t["throughput"][corpus].get("standard")
        if std:
            over = ", ".join(f"{v} x{std['mean'] / t['throughput'][corpus][v]['mean']:.2f}"
                             for v in _variants(table) if v != "standard")
            lines += ["", f"Wall-clock slowdown vs standard (training tokens/s, shared CPU): {over}."]
        lines.append("")
    if t["steps"]:
        lines += [f"## Coupling steps (Euler, `{result['coherent']}`, seed 0)", "", "| n | val ppl |", "|---|---|"]
        lines += [f"| {n} | {t['steps'][n]['mean']:.3f} |" for n in sorted(t["steps"])]
        lines.append("")
    for task, table in sorted(t["mqar"].items()):
        names = _variants(table)
        keys = [k for k in table[names[0]]]
        lines += [f"## MQAR `{task}` (accuracy)", "", "| variant | " + " | ".join(keys) + " |",
                  "|---|" + "---|" * len(keys)]
        lines += [f"| {v} | " + " | ".join(f"{table[v][k]['mean']:.3f}" for k in keys) + " |" for v in names]
        lines.append("")
    lines += ["## Parameter overhead", "",
              "| preset | standard | coupled (hidden 4) | overhead |", "|---|---|---|---|"]
    lines += [f"| {p} | {a:,} | {b:,} | {100 * (b / a - 1):.3f}% |" for p, a, b in context["overhead"]]
    lines += ["", "## Plots", ""] + [f"![{p}]({p})" for p in plots] + [""]
    return "\n".join(lines)


def _readme_section(result: dict, context: dict, out: Path) -> str:
    counts = {v: sum(c["verdict"] == v for c in result["claims"]) for v in ("holds", "fails", "inconclusive")}
    het = f"`{result['heterogeneous']}`" if result["heterogeneous"] else "none"
    lines = ["## Results: coupled query-key dynamics (paper B), CPU scale", "",
             f"`qkdyn compare-coupled --train` on the `{context['preset']}` preset ({context['parameters']}; "
             f"{context['lm_tokens']} byte tokens per run, seeds {context['seeds']}; `{result['coherent']}` as the "
             f"domain-coherent and {het} as the heterogeneous corpus; MQAR "
             f"{', '.join(sorted(result['tables']['mqar'])) or 'not run'}). Of {len(result['claims'])} claims, "
             f"{counts['holds']} hold, {counts['fails']} fail and {counts['inconclusive']} are inconclusive at this "
             "scale:", ""]
    lines += [f"- **{c['verdict']}** - {c['claim']}: {c['measured']} (paper: {c['paper']})." for c in result["claims"]]
    lines += ["", f"Full tables and plots: `{out / 'report.md'}`. The paper's numbers are for 60M-350M models on "
              "WikiText-103 with sub-word tokens; the `60M`, `150M` and `350M` presets run the same study on GPUs "
              "(see `empirical/coupled/README.md`).", ""]
    return "\n".join(lines)


def write_report(result: dict, context: dict, out_dir: str | Path) -> list[str]:
    """Write report.md, summary.json, README-section.md and the plots into ``out_dir``."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    plots = write_plots(result, out)
    atomic.write_text(out / "summary.json", json.dumps({**result, "context": context}, indent=2, default=str) + "\n")
    atomic.write_text(out / "report.md", _markdown(result, context, plots))
    atomic.write_text(out / "README-section.md", _readme_section(result, context, out))
    return ["report.md", "summary.json", "README-section.md", *plots]
