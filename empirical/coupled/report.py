"""Write the coupled-QK study's report through the project's one writer (``qkdyn.report.write_claims_report``):
``report.md`` / ``report.json`` with every claim's verdict, effect, spread over seeds and p-value, the
study's tables and plots, and ``README-section.md``.

Every number is taken from :mod:`qkdyn.empirical.coupled.analysis`; nothing is typed in.
"""
from __future__ import annotations

import math
from pathlib import Path

from qkdyn import atomic
from qkdyn.figures import save_png
from qkdyn.report import write_claims_report

VARIANT_ORDER = ("standard", "coupled-euler", "coupled-leapfrog", "mlp-only", "mlp-only-shared", "diff")


def _fmt(stat: dict, digits: int = 3) -> str:
    if math.isnan(stat["mean"]):
        return "n/a"
    std = "" if math.isnan(stat["std"]) else f" ± {stat['std']:.{digits}f}"
    return f"{stat['mean']:.{digits}f}{std}"


def _variants(table: dict) -> list[str]:
    return [v for v in VARIANT_ORDER if v in table]


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def write_plots(result: dict, out: Path) -> list[str]:
    plt, tables, written = _plt(), result["tables"], []

    def save(fig, name):
        save_png(fig, out / name)
        written.append(name)

    if tables["perplexity"]:
        corpora = list(tables["perplexity"])
        fig, axes = plt.subplots(1, len(corpora), figsize=(5.5 * len(corpora), 4), squeeze=False)
        for ax, corpus in zip(axes[0], corpora):
            table = tables["perplexity"][corpus]
            names = _variants(table)
            stats = [table[v]["val_ppl"] for v in names]
            ax.bar(names, [s["mean"] for s in stats], yerr=[0 if math.isnan(s["std"]) else s["std"] for s in stats],
                   capsize=4, color="#4477aa")
            for i, s in enumerate(stats):
                ax.plot([i] * s["n"], s["values"], "k.", ms=4)
            lo = min(min(s["values"]) for s in stats)
            hi = max(max(s["values"]) for s in stats)
            ax.set_ylim(lo - 0.3 * (hi - lo + 1e-9), hi + 0.3 * (hi - lo + 1e-9))
            ax.set_title(f"{corpus}: final validation perplexity")
            ax.set_ylabel("per-token perplexity (mean ± sd, dots: seeds)")
            ax.tick_params(axis="x", rotation=30)
        save(fig, "perplexity_by_variant.png")

    if result["curves"]:
        fig, ax = plt.subplots(figsize=(6.5, 4.5))
        for label, c in sorted(result["curves"].items()):
            ax.plot(c["tokens"][1:], c["val_ppl"][1:], label=label, lw=2 if "(" not in label else 1,
                    ls="-" if "(" not in label else "--")
        ax.set_xlabel("training tokens")
        ax.set_ylabel("validation perplexity (mean over seeds)")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_title(f"{result['coherent']}: evaluation curves (each run its own schedule)")
        ax.legend(fontsize=7)
        save(fig, "sample_efficiency.png")

    strength_rows = [(c, v, s["strength"]["coupling"]) for c, t in tables["perplexity"].items() for v, s in t.items()
                     if "coupling" in s["strength"]]
    if strength_rows:
        fig, ax = plt.subplots(figsize=(6, 4))
        labels = [f"{v}\n{c}" for c, v, _ in strength_rows]
        x = range(len(strength_rows))
        ax.bar([i - 0.2 for i in x], [s["init"] for _, _, s in strength_rows], 0.4, label="at init")
        ax.bar([i + 0.2 for i in x], [s["final"] for _, _, s in strength_rows], 0.4, label="after training")
        ax.set_xticks(list(x), labels, fontsize=7)
        ax.set_ylabel("|dt f(q)| / |dt k|")
        ax.set_title("coupling strength")
        ax.legend()
        save(fig, "coupling_strength.png")

    if len(tables["steps"]) > 1:
        fig, ax = plt.subplots(figsize=(5, 4))
        ns = sorted(tables["steps"])
        ax.errorbar(ns, [tables["steps"][n]["mean"] for n in ns],
                    yerr=[0 if math.isnan(tables["steps"][n]["std"]) else tables["steps"][n]["std"] for n in ns],
                    fmt="o-", capsize=4)
        ax.set_xlabel("coupling steps n (Euler)")
        ax.set_ylabel("final validation perplexity (mean ± sd)")
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
                       width, yerr=[0 if math.isnan(table[v][k]["std"]) else table[v][k]["std"] for k in settings],
                       label=v, capsize=3)
            ax.set_xticks([j + 0.4 - width / 2 for j in range(len(settings))], settings)
            ax.set_ylim(0, 1.05)
            ax.set_ylabel("accuracy (mean ± sd over seeds)")
            ax.set_title(f"MQAR {task}")
            ax.legend()
        save(fig, "mqar_accuracy.png")
    return written


def tables_markdown(result: dict, context: dict) -> str:
    t, lines = result["tables"], []
    for corpus, table in t["perplexity"].items():
        lines += [f"## Perplexity, `{corpus}` (mean ± sd over seeds; {context['tokenizer']} tokens)", "",
                  "| variant | seeds | ppl per token | ppl per byte | per-run 95% interval (per token) | coupling init → final "
                  "| q/k change final | tokens/s |", "|---|---|---|---|---|---|---|---|"]
        for v in _variants(table):
            row = table[v]
            runs = ", ".join(f"[{lo:.3f}, {hi:.3f}]" for lo, hi in row["run_interval"])
            st = row["strength"]
            coupling = f"{st['coupling']['init']:.3f} → {st['coupling']['final']:.3f}" if "coupling" in st else "-"
            change = f"{st['qk_change']['final']:.3f}" if "qk_change" in st else "-"
            lines.append(f"| {v} | {row['val_ppl']['n']} | {_fmt(row['val_ppl'])} | {_fmt(row['val_ppl_byte'])} | "
                         f"{runs} | {coupling} | {change} | {_fmt(row['tokens_per_s'], 0)} |")
        std = table.get("standard")
        if std:
            over = ", ".join(f"{v} x{std['tokens_per_s']['mean'] / table[v]['tokens_per_s']['mean']:.2f}"
                             for v in _variants(table) if v != "standard")
            lines += ["", f"Wall-clock slowdown vs standard (training tokens/s, shared CPU, noisy): {over}."]
        lines.append("")
    if t["steps"]:
        lines += [f"## Coupling steps (Euler, `{result['coherent']}`)", "", "| n | seeds | val ppl |", "|---|---|---|"]
        lines += [f"| {n} | {t['steps'][n]['n']} | {_fmt(t['steps'][n])} |" for n in sorted(t["steps"])]
        lines.append("")
    for task, table in sorted(t["mqar"].items()):
        names = _variants(table)
        keys = list(table[names[0]])
        lines += [f"## MQAR `{task}` (accuracy, mean ± sd over seeds)", "", "| variant | " + " | ".join(keys) + " |",
                  "|---|" + "---|" * len(keys)]
        lines += [f"| {v} | " + " | ".join(_fmt(table[v][k]) for k in keys) + " |" for v in names]
        lines.append("")
    lines += ["## Parameter and FLOP overhead of coupled Euler (n = 1, hidden 4)", "",
              "| preset | standard params | coupled params | overhead | FLOPs/token ratio |", "|---|---|---|---|---|"]
    lines += [f"| {p} | {a:,} | {b:,} | {100 * (b / a - 1):.3f}% | {f:.5f} |" for p, a, b, f in context["overhead"]]
    return "\n".join(lines) + "\n"


def _intro(result: dict, context: dict) -> str:
    return (f"`qkdyn compare-coupled`: preset `{context['preset']}` ({context['parameters']}), {context['tokenizer']} "
            f"tokens, {context['lm_tokens']:,} training tokens per base LM run ({result['lm_steps']} steps), seeds "
            f"{context['seeds']}; coherent corpus `{result['coherent']}`, heterogeneous `{result['heterogeneous'] or 'none'}`; "
            f"{context['n_runs']} runs in `{context['runs_dir']}`. Perplexity is per token on the whole validation "
            "split (per byte alongside). Every verdict is the project's rule (`qkdyn.stats`): paired over seeds, "
            "holds/fails need p < 0.05 in the claimed/opposite direction, or fails when the interval excludes the "
            "paper's smallest reported effect; the rules per claim are in `empirical/coupled/analysis.py` and "
            "`docs/coupled.md`. A verdict speaks for the scale tested only.")


def _readme_section(claims, result: dict, context: dict, out: Path) -> str:
    counts = {v: sum(c.verdict == v for c in claims) for v in ("holds", "fails", "inconclusive", "partial")}
    lines = ["## Results: coupled query-key dynamics (paper B)", "", _intro(result, context), "",
             f"Of {len(claims)} claims, {counts['holds']} hold, {counts['fails']} fail, {counts['inconclusive']} are "
             f"inconclusive and {counts['partial']} partial at this scale:", ""]
    for c in claims:
        head = "; ".join(f"{k}: effect {v['effect']:+.4f} (sd {v['spread']:.3g}, p = {v['p_value']:.3g}) {v['verdict']}"
                         + _short_of_paper(v) for k, v in (c.stats or {}).items())
        lines.append(f"- **{c.verdict}** - {c.id} {c.statement} {head}.")
    lines += ["", f"Full tables and plots: `{out / 'report.md'}`.", ""]
    return "\n".join(lines)


def _short_of_paper(comparison: dict) -> str:
    """Why a comparison without p < 0.05 fails: its interval lies short of the paper's smallest effect."""
    if comparison["verdict"] == "fails" and comparison.get("smallest_effect") is not None and not comparison["p_value"] < 0.05:
        return f" (95% interval short of the paper's smallest effect {comparison['smallest_effect']:.3g})"
    return ""


def write_report(result: dict, context: dict, out_dir: str | Path) -> list[str]:
    """Write report.md, report.json, README-section.md and the plots into ``out_dir``."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    plots = write_plots(result, out)
    claims = result["claims"]
    used = {p for c in claims for p in c.plots}
    claims = [_keep_plots(c, plots) for c in claims]
    written = write_claims_report(out, claims, title="Coupled query-key dynamics (paper B): study report",
                                  intro=_intro(result, context), context=context,
                                  sections=[tables_markdown(result, context)],
                                  plots=[p for p in plots if p not in used],
                                  extra_json={"tables": result["tables"], "curves": result["curves"]})
    atomic.write_text(out / "README-section.md", _readme_section(claims, result, context, out))
    return [*written, "README-section.md", *plots]


def _keep_plots(claim, plots):
    claim.plots = [p for p in claim.plots if p in plots]
    return claim


def write_trend_report(result: dict, context: dict, out_dir: str | Path) -> list[str]:
    """The scale trend: ``scale_trend.png`` (gap with its 95% interval against non-embedding
    parameters), ``report.md`` / ``report.json`` with one claim per size."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    rows, plots = result["rows"], []
    if rows:
        plt = _plt()
        fig, ax = plt.subplots(figsize=(6, 4))
        x = [r["non-embedding parameters"] for r in rows]
        y = [r["gap (log ppl)"] for r in rows]
        err = [[r["gap (log ppl)"] - r["ci low"] for r in rows], [r["ci high"] - r["gap (log ppl)"] for r in rows]]
        ax.errorbar(x, y, yerr=err, fmt="o-", capsize=5)
        ax.axhline(0, color="gray", lw=1)
        ax.set_xscale("log")
        ax.set_xlabel("non-embedding parameters")
        ax.set_ylabel("log ppl(coupled) - log ppl(standard)\n(mean over seeds, 95% CI)")
        ax.set_title(f"scale trend, {result['coherent']} ({context['tokenizer']})")
        save_png(fig, out / "scale_trend.png")
        plots.append("scale_trend.png")
    from qkdyn.report import markdown_table

    table = "\n".join(["## Scale trend", ""] + (markdown_table(rows) if rows else ["no runs"]))
    claims = [_keep_plots(c, plots) for c in result["claims"]]
    written = write_claims_report(out, claims, title="Coupled query-key dynamics (paper B): scale trend",
                                  intro=(f"`qkdyn compare-coupled --trend`: standard vs coupled Euler on "
                                         f"`{result['coherent']}` ({context['tokenizer']} tokens), {context['seeds']} "
                                         "seeds per size; the gap is paired by seed. The paper's trend: -6.6% at 60M, "
                                         "-6.7% at 150M, -1.0% at 350M."),
                                  context=context, sections=[table], extra_json={"trend": rows})
    return [*written, *plots]
