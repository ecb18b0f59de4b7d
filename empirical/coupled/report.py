"""The coupled-QK study's part of the report that :func:`qkdyn.verify.drive` writes through the
project's one writer (``qkdyn.report.write_claims_report``): the plots, the tables and the
introduction as sections, and ``README-section.md`` (every claim's verdict, effect, spread, p-value
and power in one line); the evidence over training through
:mod:`qkdyn.empirical.coupled.report_training`.

Every number is taken from :mod:`qkdyn.empirical.coupled.analysis`; nothing is typed in.
"""
from __future__ import annotations

import math
from pathlib import Path

from qkdyn.empirical.coupled.report_training import training_markdown, write_training_plots

from qkdyn import atomic
from qkdyn.figures import PALETTE, plt, save_png

VARIANT_ORDER = ("standard", "coupled-euler", "coupled-wide", "coupled-identity", "coupled-leapfrog", "mlp-only",
                 "mlp-only-shared", "mlp-only-q", "diff")


ABLATION_COLUMNS = ("attention removed", "f removed (dt f = 0)", "flow removed (dt = 0)")


def _fmt(stat: dict, digits: int = 3) -> str:
    if math.isnan(stat["mean"]):
        return "n/a"
    std = "" if math.isnan(stat["std"]) else f" ± {stat['std']:.{digits}f}"
    return f"{stat['mean']:.{digits}f}{std}"


def _variants(table: dict) -> list[str]:
    return [v for v in VARIANT_ORDER if v in table]


def write_plots(result: dict, out: Path) -> list[str]:
    """The study's figures in the qkdyn style (:mod:`qkdyn.figures`: every axis labelled, PNG + PDF):
    perplexity by variant, evaluation curves, coupling strength, the coupling-steps sweep, MQAR accuracy.
    Returns the written names."""
    tables, written = result["tables"], []

    def save(fig, name):
        save_png(fig, out / name)
        written.append(name)

    if tables["perplexity"]:
        corpora = list(tables["perplexity"])
        fig, axes = plt.subplots(1, len(corpora), figsize=(3.4 * len(corpora), 3.2), squeeze=False)
        for ax, corpus in zip(axes[0], corpora, strict=True):
            table = tables["perplexity"][corpus]
            names = _variants(table)
            stats = [table[v]["val_ppl"] for v in names]
            ax.bar(names, [s["mean"] for s in stats], yerr=[0 if math.isnan(s["std"]) else s["std"] for s in stats],
                   capsize=4, color=PALETTE[0], alpha=0.7)
            for i, s in enumerate(stats):
                ax.plot([i] * s["n"], s["values"], "k.", ms=4)
            lo = min(min(s["values"]) for s in stats)
            hi = max(max(s["values"]) for s in stats)
            ax.set_ylim(lo - 0.3 * (hi - lo + 1e-9), hi + 0.3 * (hi - lo + 1e-9))
            ax.set(title=f"{corpus}: final validation", xlabel="variant",
                   ylabel="per-token perplexity\n(mean ± sd, dots: seeds)")
            ax.tick_params(axis="x", rotation=30)
            for label in ax.get_xticklabels():
                label.set_horizontalalignment("right")
        save(fig, "perplexity_by_variant.png")

    if result["curves"]:
        fig, ax = plt.subplots(figsize=(4.2, 3.2))
        for label, c in sorted(result["curves"].items()):
            ax.plot(c["tokens"][1:], c["val_ppl"][1:], label=label, lw=2 if "(" not in label else 1,
                    ls="-" if "(" not in label else "--")
        ax.set_xlabel("training tokens")
        ax.set_ylabel("validation perplexity (mean over seeds)")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_title(f"{result['coherent']}: evaluation curves\n(each run its own schedule)")
        ax.legend()
        save(fig, "sample_efficiency.png")

    strength_rows = [(c, v, s["strength"]["coupling"]) for c, t in tables["perplexity"].items() for v, s in t.items()
                     if "coupling" in s["strength"]]
    if strength_rows:
        fig, ax = plt.subplots(figsize=(max(3.6, 1.1 * len(strength_rows)), 3.2))
        labels = [f"{v}\n{c}" for c, v, _ in strength_rows]
        x = range(len(strength_rows))
        ax.bar([i - 0.2 for i in x], [s["init"] for _, _, s in strength_rows], 0.4, label="at init")
        ax.bar([i + 0.2 for i in x], [s["final"] for _, _, s in strength_rows], 0.4, label="after training")
        ax.set_xticks(list(x), labels, fontsize=7)
        ax.set(xlabel="variant, corpus", ylabel="|dt f(q)| / |k|", title="coupling strength")
        ax.legend()
        save(fig, "coupling_strength.png")

    if tables["steps"]:
        fig, ax = plt.subplots(figsize=(3.6, 3.0))
        for horizon, sweep in tables["steps"].items():
            ns = sorted(sweep)
            ax.errorbar(ns, [sweep[n]["mean"] for n in ns],
                        yerr=[0 if math.isnan(sweep[n]["std"]) else sweep[n]["std"] for n in ns],
                        fmt="o-", capsize=4, label=horizon)
        ax.set_xticks(sorted({n for sweep in tables["steps"].values() for n in sweep}))  # n is a whole number
        ax.legend()
        ax.set_xlabel("coupling steps n (Euler)")
        ax.set_ylabel("final validation perplexity\n(mean ± sd)")
        ax.set_title(f"{result['coherent']}: coupling steps")
        save(fig, "coupling_steps.png")

    if tables["mqar"]:
        tasks = sorted(tables["mqar"])
        fig, axes = plt.subplots(1, len(tasks), figsize=(3.4 * len(tasks), 3.0), squeeze=False)
        for ax, task in zip(axes[0], tasks, strict=True):
            table = tables["mqar"][task]
            names = _variants(table)
            settings = [k for k in table[names[0]] if k.startswith("acc_T")]
            width = 0.8 / len(names)
            for i, v in enumerate(names):
                ax.bar([j + i * width for j in range(len(settings))], [table[v][k]["mean"] for k in settings],
                       width, yerr=[0 if math.isnan(table[v][k]["std"]) else table[v][k]["std"] for k in settings],
                       label=v, capsize=3)
            ax.set_xticks([j + 0.4 - width / 2 for j in range(len(settings))], settings)
            ax.set_ylim(0, 1.05)
            ax.set(xlabel="evaluation setting", ylabel="accuracy (mean ± sd over seeds)", title=f"MQAR {task}")
        axes[0][0].legend()
        save(fig, "mqar_accuracy.png")
    return written


def tables_markdown(result: dict, context: dict) -> str:
    t, lines = result["tables"], []
    for corpus, table in t["perplexity"].items():
        lines += [f"## Perplexity, `{corpus}` (mean ± sd over seeds; {context['tokenizer']} tokens)", "",
                  "| variant | seeds | ppl per token | ppl per byte | coupling \\|dt f\\|/\\|k\\| init → final "
                  "| q/k change final | Δ loss, attention removed | Δ loss, f removed | Δ loss, flow removed | tokens/s |",
                  "|---|---|---|---|---|---|---|---|---|---|"]
        for v in _variants(table):
            row = table[v]
            st = row["strength"]
            coupling = f"{st['coupling']['init']:.4f} → {st['coupling']['final']:.4f}" if "coupling" in st else "-"
            change = f"{st['qk_change']['final']:.3f}" if "qk_change" in st else "-"
            abl = [_fmt(row["ablation"][name], 4) if name in row["ablation"] else "-" for name in ABLATION_COLUMNS]
            lines.append(f"| {v} | {row['val_ppl']['n']} | {_fmt(row['val_ppl'])} | {_fmt(row['val_ppl_byte'])} | "
                         f"{coupling} | {change} | {' | '.join(abl)} | {_fmt(row['tokens_per_s'], 0)} |")
        lines += ["", "Δ loss: change of validation loss (nats per token = change of log perplexity) when the part is "
                  "removed from the same final checkpoint, whole validation split, mean ± sd over seeds."]
        std = table.get("standard")
        if std:
            over = ", ".join(f"{v} x{std['tokens_per_s']['mean'] / table[v]['tokens_per_s']['mean']:.2f}"
                             for v in _variants(table) if v != "standard")
            lines += ["", f"Training tokens/s vs standard (one measurement per run on a shared machine: noisy, "
                      f"not used to choose step counts; repeated alternating timing: `python -m benchmarks coupled`): "
                      f"{over}.", "", _cpu_line(table)]
        lines.append("")
    if t["steps"]:
        lines += [f"## Coupling steps (Euler, `{result['coherent']}`)", "", "| horizon | n | seeds | val ppl |",
                  "|---|---|---|---|"]
        lines += [f"| {h} | {n} | {sweep[n]['n']} | {_fmt(sweep[n])} |" for h, sweep in t["steps"].items() for n in sorted(sweep)]
        lines.append("")
    if result.get("count_models"):
        lines += ["## Count models (the floor a model must clear; same training split, every validation target)", "",
                  "| corpus, tokens | unigram ppl | bigram ppl | discount D | training tokens | validation targets |",
                  "|---|---|---|---|---|---|"]
        lines += [f"| {k} | {e['unigram_ppl']:.2f} | {e['bigram_ppl']:.2f} | {e['discount']:.3f} | {e['train_tokens']:,} | "
                  f"{e['val_targets']:,} |" for k, e in sorted(result["count_models"].items())]
        lines.append("")
    for task, table in sorted(t["mqar"].items()):
        names = _variants(table)
        keys = list(dict.fromkeys(k for v in names for k in table[v]))
        lines += [f"## MQAR `{task}` (accuracy, mean ± sd over seeds; Δ acc: change when the part is removed from "
                  "the same checkpoint)", "", "| variant | " + " | ".join(keys) + " |", "|---|" + "---|" * len(keys)]
        lines += [f"| {v} | " + " | ".join(_fmt(table[v][k]) if k in table[v] else "-" for k in keys) + " |"
                  for v in names]
        lines.append("")
    lines += ["## Parameter and FLOP overhead of coupled Euler (n = 1, hidden 4)", "",
              "| preset | standard params | coupled params | overhead | FLOPs/token ratio |", "|---|---|---|---|---|"]
    lines += [f"| {p} | {a:,} | {b:,} | {100 * (b / a - 1):.3f}% | {f:.5f} |" for p, a, b, f in context["overhead"]]
    return "\n".join(lines) + "\n"


def _cpu_line(table: dict) -> str:
    """Each variant's measured training CPU seconds per token against standard attention's (means over
    seeds), or why it is not there."""
    std = table["standard"].get("cpu_s_per_token", {"mean": math.nan})["mean"]
    ratios = {v: table[v].get("cpu_s_per_token", {"mean": math.nan})["mean"] / std for v in _variants(table) if v != "standard"}
    measured = {v: r for v, r in ratios.items() if not math.isnan(r)}
    if not measured:
        return "Training CPU time per token: not measured (the records carry no `cpu_time_s`)."
    return ("Training CPU time per token vs standard (process CPU seconds of the training steps, `cpu_time_s`; the "
            "equal-CPU part of B1 uses it): " + ", ".join(f"{v} x{r:.3g}" for v, r in measured.items()) + ".")


def run_context(runs: list[dict], study, budget: str) -> dict:
    """What the report's introduction says about the runs of ``study`` (a StudyConfig) at ``budget``:
    model sizes, tokens per base run, seeds, the parameter and FLOP overhead of coupling per preset."""
    from qkdyn.empirical.coupled.attention import AttentionConfig
    from qkdyn.empirical.coupled.model import count_parameters, flops_per_token, preset_config

    lm = [r for r in runs if r["task"] == "lm"]
    vocab = study.vocab_size if study.tokenizer == "bpe" else 256
    overhead = []
    for p in ("tiny", "1M", "4M", "60M", "150M", "350M"):
        std, cpl = (preset_config(p, vocab_size=vocab, attention=AttentionConfig(kind=k)) for k in ("standard", "coupled"))
        overhead.append((p, count_parameters(std), count_parameters(cpl), flops_per_token(cpl) / flops_per_token(std)))
    params = sorted({r["parameters"] for r in lm if r["variant"] == "standard"})
    return {"budget": budget, "preset": study.preset, "n_runs": len(runs),
            "tokenizer": f"BPE {study.vocab_size}" if study.tokenizer == "bpe" else "byte",
            "parameters": ", ".join(f"{p:,} parameters" for p in params) or "n/a",
            "lm_tokens": max((r["tokens"] for r in lm if r["max_steps"] == study.lm_steps), default=0),
            "seeds": sorted({r["seed"] for r in runs}), "overhead": overhead}


def _intro(result: dict, context: dict) -> str:
    return (f"Budget `{context['budget']}`: preset `{context['preset']}` ({context['parameters']}), {context['tokenizer']} "
            f"tokens, {context['lm_tokens']:,} training tokens per base LM run ({result['lm_steps']} steps), seeds "
            f"{context['seeds']}; coherent corpus `{result['coherent']}`, heterogeneous `{result['heterogeneous'] or 'none'}`; "
            f"{context['n_runs']} training runs. Perplexity is per token on the whole validation "
            "split (per byte alongside). Validity before verdict: each claim's preconditions (the baseline below "
            "the unigram and bigram count models and using attention; every compared variant below the bigram model; "
            "removing f changing the trained coupled model by more than the effect the claim is about; Differential "
            "Attention, at its best learning rate, reaching standard attention's perplexity for B7; MQAR recall halfway "
            "from guessing to full) are measured in the same runs and printed first; any unmet "
            "makes the claim inconclusive. Then the project's rule (`qkdyn.stats`): paired over seeds, "
            "holds/fails need p < 0.05 in the claimed/opposite direction, or fails when the interval excludes the "
            "paper's smallest reported effect; each comparison prints the smallest effect it detects with 80% power "
            "and the seeds the paper's effect needs. Rules per claim: `empirical/coupled/analysis.py`, "
            "`docs/coupled.md`. A verdict speaks for the scale tested only.")


def _readme_section(claims, result: dict, context: dict) -> str:
    counts = {v: sum(c.verdict == v for c in claims) for v in ("holds", "fails", "inconclusive", "partial")}
    lines = ["## Results: coupled query-key dynamics (paper B)", "", _intro(result, context), "",
             f"Of {len(claims)} claims, {counts['holds']} hold, {counts['fails']} fail, {counts['inconclusive']} are "
             f"inconclusive and {counts['partial']} partial at this scale:", ""]
    from qkdyn.claims import unmet

    for c in claims:
        missing = unmet(c.preconditions)
        lead = f"(precondition not met: {'; '.join(missing)}) " if missing else ""
        head = "; ".join(f"{k}: effect {v['effect']:+.4f} (sd {v['spread']:.3g}, p = {v['p_value']:.3g}, "
                         f"{_detects(v)}) {v['verdict']}" + _short_of_paper(v)
                         for k, v in (c.stats or {}).items())
        lines.append(f"- **{c.verdict}** - {c.id} {c.statement} {lead}{head}.")
    lines += ["", "Full tables and plots: `report.md` beside this file.", ""]
    return "\n".join(lines)


def _detects(comparison: dict) -> str:
    mde = comparison.get("mde", math.nan)
    return "censored: no detectable effect from bounds" if math.isnan(mde) else f"detects >= {mde:.3g}"


def _short_of_paper(comparison: dict) -> str:
    """Why a comparison without p < 0.05 fails: its interval lies short of the paper's smallest effect."""
    if comparison["verdict"] == "fails" and comparison.get("smallest_effect") is not None and not comparison["p_value"] < 0.05:
        return f" (95% interval short of the paper's smallest effect {comparison['smallest_effect']:.3g})"
    return ""


def render(result: dict, claims, context: dict, out: Path) -> dict:
    """The study's part of the report written by :func:`qkdyn.verify.drive`: plots written into
    ``out`` (each claim keeps the ones drawn), ``README-section.md`` and the markdown sections
    (introduction, tables). Returns ``{"plots": further plots, "sections": [...]}``."""
    out.mkdir(parents=True, exist_ok=True)
    if "rows" in result:
        return _render_trend(result, claims, context, out)
    plots = write_plots(result, out) + write_training_plots(result, out)
    for claim in claims:
        claim.plots = [p for p in claim.plots if p in plots]
    used = {p for c in claims for p in c.plots}
    atomic.write_text(out / "README-section.md", _readme_section(claims, result, context))
    evidence = {k: result[k] for k in ("tables", "curves", "comparisons", "paired_curves", "ablation_curves", "per_head",
                                        "diagnostics") if k in result}
    return {"plots": [p for p in plots if p not in used], "json": evidence,
            "sections": ["## About these runs\n\n" + _intro(result, context) + "\n", tables_markdown(result, context)]
            + [s for s in (training_markdown(result),) if s]}


def _render_trend(result: dict, claims, context: dict, out: Path) -> dict:
    """The scale trend: ``scale_trend.png`` (gap with its 95% interval against non-embedding
    parameters) and its table, one claim per size."""
    from qkdyn.report import markdown_table

    rows, plots = result["rows"], []
    if rows:
        fig, ax = plt.subplots(figsize=(4.2, 3.2))
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
    for claim in claims:
        claim.plots = [p for p in claim.plots if p in plots]
    intro = (f"Scale trend: standard vs coupled Euler on `{result['coherent']}` ({context['tokenizer']} tokens), seeds "
             f"{context['seeds']} per size; the gap is paired by seed. The paper's trend: -6.6% at 60M, -6.7% at "
             "150M, -1.0% at 350M.")
    table = "\n".join(["## Scale trend", "", intro, ""] + (markdown_table(rows) if rows else ["no runs"]))
    return {"plots": [], "sections": [table], "json": {"trend": rows}}
