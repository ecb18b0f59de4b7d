"""Claims of paper B judged from the study's run records (summary, evaluation curve, ablations).

Every claim is a :class:`qkdyn.claims.Claim` whose verdict comes from the project's one rule,
:func:`qkdyn.stats.compare` (paired by seed; holds / fails / inconclusive with the p-value),
:func:`qkdyn.stats.compare_variance` for the seed-variance claim, :func:`qkdyn.stats.compare_censored`
for tokens-to-target and for the CPU-matched comparison, and
`qkdyn.stats.compare_censored_times` for MQAR's steps to 99% recall. Every
comparison carries its power (the smallest effect detected with 80% power at the measured spread, the
seeds the paper's effect needs). Perplexities are compared on the log scale (per seed, log
ppl(treatment) - log ppl(control)); the paper's effects they are judged against are in
:mod:`qkdyn.empirical.coupled.paper_effects`.

"Same results" claims (Euler vs leapfrog, 1-7 steps) are equivalence tests (TOST) with the margin
``SAME_MARGIN`` (half the paper's headline gain). MQAR (B9) is judged in
:mod:`qkdyn.empirical.coupled.claim_mqar`; every claim is assembled by
:func:`qkdyn.empirical.coupled.claim_builder.claim`.

Compute matching, as a reader would: B1 compares at equal tokens, at equal counted FLOPs (a standard
run of that length, where it differs from the base) and at equal measured CPU time (``cpu_time_s``):
per seed, standard attention's CPU per token (its runs of that seed pooled) gives the tokens it could
train in the coupled run's CPU time, and its loss there is interpolated in log tokens between the
final losses of its runs trained to the bracketing lengths (beyond the longest: that run's loss, and
the difference is a lower bound, judged by the sign test of :func:`qkdyn.stats.compare_censored`).

B7 compares coupled attention with Differential Attention in B7's grid (the model shape of the Diff
runs with the most heads) at Diff's best learning rate: of its sweep, the rate with the lowest mean
validation log ppl over the seeds every rate has. Choosing on the same seeds favours Diff, which
only makes "coupled beats Diff" harder to show.

Validity before verdict: :mod:`qkdyn.empirical.coupled.preconditions`. Every claim shows the
ablations of the runs it compares beside its verdict; the evidence over training (paired differences
per evaluation, ablations per evaluation, per-head dt and coupling, per-run diagnostics) is in
:mod:`qkdyn.empirical.coupled.curves`.
"""
from __future__ import annotations

import itertools
import math

import numpy as np
from qkdyn.empirical.coupled.claim_builder import claim, ppl_evidence
from qkdyn.empirical.coupled.claim_mqar import mqar_claim
from qkdyn.empirical.coupled.compute_match import cpu_matched, ladders
from qkdyn.empirical.coupled.context import Context
from qkdyn.empirical.coupled.paper_effects import HEADLINE, SAME_MARGIN, SMALLEST
from qkdyn.empirical.coupled.preconditions import (
    diff_premise,
    lm_preconditions,
    mechanism_precondition,
)
from qkdyn.empirical.coupled.selection import (
    HORIZON_READINGS,
    MLP_READINGS,
    Runs,
    ablations,
    diff_grid,
    log_ppl,
    paired,
    strength,
)
from qkdyn.empirical.coupled.study import variant_label
from qkdyn.empirical.coupled.summaries import comparison_rows, mean_curves, over_training, tables

from qkdyn.claims import Claim
from qkdyn.stats import (
    compare,
    compare_censored,
    compare_variance,
    sample_summary,
    seeds_needed,
)


def as_run(result: dict) -> dict:
    """A run's record (:func:`qkdyn.empirical.coupled.study.result_of`, read as a
    :class:`qkdyn.runs.RunRecord`: its configuration, ``final`` evaluation and ``details`` with
    ``evals`` and ``ablation``) as the flat run the selections use, with variant, n, horizon, seed,
    max_steps, learning rate and model shape (preset, layers, heads, width)."""
    from qkdyn.runs import RunRecord

    record = RunRecord.from_dict(result)
    attention = record.config["model"]["attention"]
    model, train = record.config["model"], record.config["train"]
    return {**record.config, **record.details, "parameters": record.parameters, "steps": record.steps,
            "final": record.final, "ablation": record.details.get("ablation", {}), "variant": variant_label(attention),
            "n": attention["steps"], "horizon": attention.get("horizon", "step"), "seed": train["seed"],
            "max_steps": train["max_steps"], "lr": train.get("lr"),
            "shape": (record.config.get("preset"), model.get("n_layer"), model.get("n_head"), model.get("d_model"))}


def tokens_to_target(evals: list[dict], target: float) -> float | None:
    """Tokens at which an evaluation curve first reaches ``target`` perplexity (interpolated)."""
    prev = None
    for e in evals:
        if e["val_ppl"] <= target:
            if prev is None:
                return float(e["tokens"])
            frac = (prev["val_ppl"] - target) / (prev["val_ppl"] - e["val_ppl"])
            return float(prev["tokens"] + frac * (e["tokens"] - prev["tokens"]))
        prev = e
    return None


def tokens_to_match(standard_by_length: list[dict], target_loss: float) -> tuple[float, str]:
    """Tokens standard attention needs to reach ``target_loss`` (log ppl), from runs *trained to*
    each length (each with its own schedule): interpolated linearly in log tokens between the two
    lengths whose final losses bracket the target. Returns (tokens, how): "bracketed"; "curve" when
    even the shortest run beats the target (read off that run's evaluation curve); "censored" when
    the longest run does not reach it (its tokens, a lower bound)."""
    ordered = sorted(standard_by_length, key=lambda r: r["tokens"])
    if log_ppl(ordered[0]) <= target_loss:
        found = tokens_to_target(ordered[0]["evals"], math.exp(target_loss))
        return (found if found is not None else float(ordered[0]["tokens"])), "curve"
    for short, long in itertools.pairwise(ordered):
        a, b = log_ppl(short), log_ppl(long)
        if b <= target_loss < a:
            frac = (a - target_loss) / (a - b)
            return float(math.exp(math.log(short["tokens"]) + frac * math.log(long["tokens"] / short["tokens"]))), "bracketed"
    return float(ordered[-1]["tokens"]), "censored"


def analyse(runs: list[dict], coherent: str, heterogeneous: str, matched: dict[str, int] | None = None,
            count_models: dict | None = None) -> dict:
    """Claims (B1-B9), tables, curves and the evidence over training of the study (rules: module
    docstring). ``matched``: the compute-matched standard step counts the study ran
    (:func:`qkdyn.empirical.coupled.study.matched_steps`); ``count_models``: the count models of each
    corpus (:mod:`qkdyn.empirical.coupled.count_models`)."""
    ctx = Context(runs, coherent, heterogeneous, count_models or {})
    builders = (_b1, _b2_b3, _b4, _b5, _b6, _b7, _b8)
    claims = [c for build in builders for c in build(ctx, matched or {})]
    mqar = mqar_claim(ctx.R, runs)
    if mqar:
        claims.append(mqar)
    return {"claims": claims, "tables": tables(ctx.R, runs, coherent, heterogeneous), "coherent": coherent,
            "heterogeneous": heterogeneous, "curves": mean_curves(ctx.R, coherent), "lm_steps": ctx.R.lm_steps,
            "count_models": ctx.count_models, **over_training(ctx), "comparisons": comparison_rows(ctx)}


def _b1(ctx: Context, matched: dict[str, int]) -> list[Claim]:
    R, coherent, std, cpl = ctx.R, ctx.coherent, ctx.std, ctx.cpl
    if not (std and cpl and ctx.design):
        return []
    comps = {"equal tokens": ctx.design}
    flops = {k: v for k, v in matched.items() if k == "flops"}
    for label, steps in flops.items():
        if steps != R.lm_steps and R.get(coherent, "standard", steps=steps):
            comps[f"equal {label}"] = compare(*paired(cpl, R.get(coherent, "standard", steps=steps)), "decrease",
                                              smallest_effect=SMALLEST["standard"])
    cpu, cpu_rows = cpu_matched(cpl, ladders(R, coherent))
    if cpu is not None:
        comps["equal CPU time"] = cpu
        ratio = float(np.mean([r["CPU per token vs standard"] for r in cpu_rows]))
        cpu_text = (f" Equal CPU time: coupled used x{ratio:.3g} standard's measured CPU per token (mean over seeds); "
                    "standard's loss at the tokens its CPU rate buys in the coupled run's CPU time, interpolated in log "
                    "tokens between its runs trained to the bracketing lengths (table; 'censored': beyond the longest, "
                    "a lower bound judged by the sign test).")
    else:
        cpu_text = " Equal CPU time: not measured (the records carry no cpu_time_s): not judged."
    design = ctx.design
    headline_seeds = seeds_needed("two-sided", HEADLINE, design.spread)
    power = (f" Design: {design.n} seeds, paired sd {design.spread:.3g} of log ppl -> detects >= {design.mde:.3g} in log "
             f"ppl ({100 * math.expm1(design.mde):.2g}%) with 80% power; the paper's headline {HEADLINE:.3g} needs "
             f"{headline_seeds or 'more than 10000'} seeds, its smallest ({SMALLEST['standard']:.3g}, 1%) "
             f"{design.seeds_needed or 'more than 10000'}.")
    return [claim(
        "B1", f"Coupled QK dynamics lower perplexity compared with standard attention ({coherent}; paper: -6.6% "
        "at 60M, -6.7% at 150M, -1.0% at 350M), also when standard attention gets the same FLOPs or CPU time.",
        comps, {**ppl_evidence(coupled=cpl, standard=std), "matched_steps": flops, "base_steps": R.lm_steps,
                "mde_log_ppl": design.mde},
        "Effect: log ppl(coupled) - log ppl(standard) per seed (negative = coupled better). Equal FLOPs: standard "
        f"attention's step count matched to coupled Euler's counted FLOPs: {flops or 'none run'} (base {R.lm_steps}; a "
        "match that rounds to the base is the base run: the flow's FLOPs are below half a step).",
        ["perplexity_by_variant.png", "paired_differences.png"],
        preconditions=ctx.learnt + [ctx.works(cpl, "coupled Euler")],
        ablation=ablations({"coupled": cpl, "standard": std}), scope=ctx.scope, table=cpu_rows,
        notes=cpu_text + power)]


def _b2_b3(ctx: Context, matched) -> list[Claim]:
    coherent, cpl = ctx.coherent, ctx.cpl
    mlp = {v: ctx.R.get(coherent, v) for v in MLP_READINGS if ctx.R.get(coherent, v)}
    if not (cpl and mlp):
        return []
    groups = {"coupled": cpl, **mlp}
    works = [ctx.works(cpl, "coupled Euler")] + [ctx.works(g, v) for v, g in mlp.items()]
    preconditions = ctx.learnt + works + ctx.acts
    comps = {MLP_READINGS[v]: compare(*paired(cpl, g), "decrease", smallest_effect=SMALLEST["mlp-only"])
             for v, g in mlp.items()}
    b2 = claim(
        "B2", f"The coupling, not the extra MLP, gives the gain: coupled beats the uncoupled MLP-only control of "
        f"equal parameter count ({coherent}; paper 60M: 22.55-22.62 vs 23.81).", comps,
        ppl_evidence(**groups), "Effect: log ppl(coupled) - log ppl(MLP-only) per seed.",
        preconditions=preconditions, ablation=ablations(groups), scope=ctx.scope)
    comps = {MLP_READINGS[v]: compare_variance(*paired(cpl, g), "decrease", paper_effect=SMALLEST["variance"])
             for v, g in mlp.items()}
    b3 = claim(
        "B3", f"Coupling steadies training: the seed-to-seed spread of perplexity is smaller for coupled than "
        f"for MLP-only ({coherent}; paper: std 0.04 vs 0.31, 8x).", comps,
        {name: {"std_log_ppl": sample_summary(paired(g, g)[0])["std"]} for name, g in groups.items()},
        "Effect: log(var coupled / var MLP-only) of log ppl over seeds (negative = coupled steadier).",
        preconditions=preconditions, ablation=ablations(groups), scope=ctx.scope)
    return [b2, b3]


def _b4(ctx: Context, matched) -> list[Claim]:
    leap = ctx.R.get(ctx.coherent, "coupled-leapfrog")
    if not (ctx.cpl and leap):
        return []
    return [claim(
        "B4", f"Hamiltonian (leapfrog) and Euler integration give the same results ({ctx.coherent}).",
        {"leapfrog vs Euler": compare(*paired(leap, ctx.cpl), "same", margin=SAME_MARGIN)},
        ppl_evidence(euler=ctx.cpl, leapfrog=leap),
        f"Equivalence within +-{SAME_MARGIN:.3g} in log ppl (half the paper's 60M gain of coupling).",
        preconditions=ctx.learnt + [ctx.works(ctx.cpl, "coupled Euler"), ctx.works(leap, "coupled leapfrog")] + ctx.acts,
        ablation=ablations({"euler": ctx.cpl, "leapfrog": leap}), scope=ctx.scope)]


def _b5(ctx: Context, matched) -> list[Claim]:
    R, cpl = ctx.R, ctx.cpl
    ns = sorted({r["n"] for r in R.runs if r["variant"] == "coupled-euler"} - {1})
    sweep = {(h, n): R.get(ctx.coherent, "coupled-euler", n=n, horizon=h) for h in HORIZON_READINGS for n in ns}
    sweep = {k: g for k, g in sweep.items() if g}
    if not (cpl and sweep):
        return []
    labels = {(h, n): f"n={n}, {HORIZON_READINGS[h]}" for h, n in sweep}
    groups = {"n=1": cpl, **{labels[k]: g for k, g in sweep.items()}}
    return [claim(
        "B5", f"1 to 7 integration steps make no difference ({ctx.coherent}).",
        {f"n={n} vs n=1 ({HORIZON_READINGS[h]})": compare(*paired(g, cpl), "same", margin=SAME_MARGIN)
         for (h, n), g in sweep.items()},
        ppl_evidence(**groups),
        f"Equivalence within +-{SAME_MARGIN:.3g} in log ppl, each n against n = 1, paired by seed, under each "
        "reading of the horizon: n steps of dt (time n dt) or n steps of dt/n (time dt).",
        preconditions=ctx.learnt + [ctx.works(g, f"coupled Euler {label}") for label, g in groups.items()] + ctx.acts,
        ablation=ablations(groups), scope=ctx.scope)]


def _b6(ctx: Context, matched) -> list[Claim]:
    """Sample efficiency: every seed with a coupled run and at least one standard run of the ladder is
    read; one whose longest standard run never reaches coupled's perplexity is a lower bound (censored)."""
    R, coherent, cpl = ctx.R, ctx.coherent, ctx.cpl
    lengths = sorted({r["max_steps"] for r in R.runs if r["task"] == "lm" and r["data"] == coherent
                      and r["variant"] == "standard" and r["n"] == 1 and R.in_main(r)})
    if not cpl or len(lengths) < 2:
        return []
    by_seed = ladders(R, coherent)
    ratios, rows = {}, []
    for seed, run in sorted(cpl.items()):
        ladder = by_seed.get(seed, [])
        if not ladder:
            continue
        if all(math.isfinite(log_ppl(r)) for r in (run, *ladder)):
            tokens, how = tokens_to_match(ladder, log_ppl(run))
        else:  # a diverged run is not measured: never "standard did not reach it", a lower bound in coupled's favour
            tokens, how = math.nan, "not measured (a perplexity is not finite)"
        ratios[seed] = tokens / run["tokens"]
        rows.append({"seed": seed, "coupled ppl": run["final"]["val_ppl"], "coupled tokens": run["tokens"],
                     "standard lengths": len(ladder),
                     "standard tokens to match": round(tokens) if math.isfinite(tokens) else tokens,
                     "ratio": ratios[seed], "read": how if how != "censored" else "censored (ratio is a lower bound)"})
    if not ratios:
        return []
    logs = [math.log(ratios[s]) for s in sorted(ratios)]
    censored = [r["read"].startswith("censored") for r in rows]
    comp = compare_censored(logs, censored, "increase", smallest_effect=SMALLEST["efficiency"])
    bound = (f" {sum(censored)} of {len(rows)} seeds censored at their longest length (standard never reached coupled's "
             f"perplexity: ratio >= {min(r['ratio'] for r, c in zip(rows, censored, strict=True) if c):.3g}); censored "
             "seeds are kept as lower bounds and judged by the sign test." if any(censored) else " No seed censored.")
    return [claim(
        "B6", f"Sample efficiency: standard attention needs more tokens (paper: 2.4x) to reach coupled attention's "
        f"perplexity ({coherent}).", {"log token ratio": comp},
        {"standard_lengths_steps": lengths, "ratios": ratios, "censored": int(sum(censored))},
        "Standard attention trained to each length (own schedule); tokens to reach the coupled run's final "
        "perplexity interpolated in log tokens between bracketing lengths; effect = log(standard tokens / coupled "
        f"tokens) per seed.{bound}", ["sample_efficiency.png"],
        preconditions=ctx.learnt + [ctx.works(cpl, "coupled Euler")], ablation=ablations({"coupled": cpl}),
        scope=ctx.scope, table=rows)]


def _b7(ctx: Context, matched) -> list[Claim]:
    R, coherent = ctx.R, ctx.coherent
    grid = diff_grid(R, coherent)
    if grid is None:
        return []
    shape, std, cpl = grid["shape"], grid["standard"], grid["coupled"]
    best, diff = grid["best"], grid["chosen"]
    if not cpl:
        return []
    heads = f"{shape[2]} heads, d_model {shape[3]}" if shape else "shape not recorded"
    if not diff:
        lr_text = "Diff's learning rate: none with a finite perplexity"
    elif len(grid["sweep"]) == 1:
        lr_text = f"Diff's learning rate: {'not recorded' if best is None else best}, the only one run (no sweep)"
    else:
        lr_text = (f"Diff's learning rate: {best}, the lowest mean log ppl of its sweep of {len(grid['sweep'])} rates "
                   f"over the {len(grid['seeds'])} seeds they share")
    rows = [{"lr": "not recorded" if lr is None else lr, "seeds": len(g),
             "mean val ppl": sample_summary([r["final"]["val_ppl"] for r in g.values()])["mean"],
             "mean log ppl (shared seeds)": grid["means"][lr], "chosen": "yes" if diff and lr == best else ""}
            for lr, g in grid["sweep"].items()]
    learnt = lm_preconditions(std, coherent, ctx.count_models)
    works = [ctx.works(cpl, "coupled Euler", standard=std), ctx.works(diff, "Differential Attention", standard=std)]
    return [claim(
        "B7", f"Coupled QK beats Differential Attention at small scale ({coherent}; paper 150M: 20.12 vs 21.11; "
        "Differential Attention wins at 350M).",
        {"coupled vs diff": compare(*paired(cpl, diff), "decrease", smallest_effect=SMALLEST["diff"])},
        {**ppl_evidence(coupled=cpl, diff=diff, standard=std), "diff_lr": best, "grid": heads},
        f"B7's grid: {heads} (standard, coupled Euler and Diff at the same size). {lr_text}. Judged only when Diff, "
        "so tuned, reaches standard attention's perplexity (premise above). Effect: log ppl(coupled) - log ppl(diff) "
        "per seed.", ["paired_differences.png"], preconditions=learnt + works + [diff_premise(diff, std, lr_text)],
        ablation=ablations({"coupled": cpl, "diff": diff}), scope=ctx.scope, table=rows)]


def _b8(ctx: Context, matched) -> list[Claim]:
    R, coherent, heterogeneous, std, cpl = ctx.R, ctx.coherent, ctx.heterogeneous, ctx.std, ctx.cpl
    std_h, cpl_h = R.get(heterogeneous, "standard"), R.get(heterogeneous, "coupled-euler")
    if not (std and cpl and std_h and cpl_h):
        return []
    gap_c = dict(zip(*_seeds_and(cpl, std), strict=True))
    gap_h = dict(zip(*_seeds_and(cpl_h, std_h), strict=True))
    seeds = sorted(set(gap_c) & set(gap_h))
    return [claim(
        "B8", f"Coupling helps on domain-coherent text more than on heterogeneous text ({coherent} vs "
        f"{heterogeneous}; paper: WikiText-103 -6.6%, PubMed -4.5%, OpenWebText +10.3%).",
        {"gap coherent - gap heterogeneous": compare([gap_c[s] for s in seeds], [gap_h[s] for s in seeds], "decrease",
                                                     smallest_effect=SMALLEST["corpus"])},
        {"gap_coherent": sample_summary(list(gap_c.values())), "gap_heterogeneous": sample_summary(list(gap_h.values()))},
        "Per seed, gap = log ppl(coupled) - log ppl(standard) on each corpus; effect = coherent gap - "
        "heterogeneous gap (negative = coupling helps more on coherent text).",
        preconditions=ctx.learnt + lm_preconditions(std_h, heterogeneous, ctx.count_models)
        + [ctx.works(cpl, "coupled Euler"), ctx.works(cpl_h, "coupled Euler", heterogeneous)] + ctx.acts
        + [mechanism_precondition(cpl_h, f"coupled Euler on {heterogeneous}", *ctx.reference)],
        ablation=ablations({f"coupled ({coherent})": cpl, f"coupled ({heterogeneous})": cpl_h}), scope=ctx.scope)]


def _seeds_and(a: dict[int, dict], b: dict[int, dict]) -> tuple[list[int], list[float]]:
    seeds = sorted(set(a) & set(b))
    return seeds, [log_ppl(a[s]) - log_ppl(b[s]) for s in seeds]


def trend(runs: list[dict], coherent: str, count_models: dict | None = None) -> dict:
    """The scale trend: per preset, the coupled-minus-standard gap in log ppl (paired by seed) with its
    95% interval, against non-embedding parameters; one claim per preset, with that preset's
    language-modelling preconditions."""
    from qkdyn.empirical.coupled.attention import AttentionConfig
    from qkdyn.empirical.coupled.model import GPTConfig, non_embedding_parameters

    R = Runs(runs)
    rows, claims = [], []
    presets = sorted({r["preset"] for r in runs if r["task"] == "lm"},
                     key=lambda p: next(r["parameters"] for r in runs if r["preset"] == p))
    for preset in presets:
        std = R.get(coherent, "standard", preset=preset, steps=None, shape=None, lr=None)
        cpl = R.get(coherent, "coupled-euler", preset=preset, steps=None, shape=None, lr=None)
        if not std or not cpl:
            continue
        model = {k: v for k, v in next(iter(std.values()))["model"].items() if k != "attention"}
        params = non_embedding_parameters(GPTConfig(**model, attention=AttentionConfig()))
        comp = compare(*paired(cpl, std), "decrease", smallest_effect=SMALLEST["standard"])
        rows.append({"preset": preset, "non-embedding parameters": params,
                     "standard ppl": sample_summary([r["final"]["val_ppl"] for r in std.values()])["mean"],
                     "coupled ppl": sample_summary([r["final"]["val_ppl"] for r in cpl.values()])["mean"],
                     "gap (log ppl)": comp.effect, "ci low": comp.interval[0], "ci high": comp.interval[1],
                     "p": comp.p_value, "seeds": comp.n, "coupling (final)": strength(cpl).get("coupling", {}).get("final", math.nan),
                     "verdict": comp.verdict})
        claims.append(claim(f"T-{preset}", f"Coupled QK lowers perplexity vs standard attention at {params:,} "
                             f"non-embedding parameters ({coherent}).", {"coupled vs standard": comp},
                             ppl_evidence(coupled=cpl, standard=std),
                             "Effect: log ppl(coupled) - log ppl(standard) per seed.", ["scale_trend.png"],
                             preconditions=lm_preconditions(std, coherent, count_models or {}),
                             ablation=ablations({"coupled": cpl, "standard": std})))
    return {"rows": rows, "claims": claims, "coherent": coherent}
