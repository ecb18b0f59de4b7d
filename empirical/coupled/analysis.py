"""Claims of paper B judged from the study's run records (summary, evaluation curve, ablations).

Every claim is a :class:`qkdyn.claims.Claim` whose verdict comes from the project's one rule,
:func:`qkdyn.stats.compare` (paired by seed; holds / fails / inconclusive with the p-value),
:func:`qkdyn.stats.compare_variance` for the seed-variance claim and
:func:`qkdyn.stats.compare_censored` for tokens-to-target. Every comparison carries its power
(the smallest effect detected with 80% power at the measured spread, the seeds the paper's effect
needs). Perplexities are compared on the log scale: the per-seed effect is log ppl(treatment) -
log ppl(control) = the difference in validation loss (nats per token), about the relative change
(-0.066 = -6.6%). "The paper's smallest reported effect" enters each directional claim as
``smallest_effect`` where the paper gives one (an interval wholly short of it fails the claim):

* lower perplexity than standard: 1.0% (350M: 19.35 vs 19.55) -> log(19.55 / 19.35);
* coupled vs MLP-only: 60M 22.62 (worst coupled) vs 23.81 -> log(23.81 / 22.62);
* coupled vs Differential Attention: 150M 20.12 vs 21.11 -> log(21.11 / 20.12);
* corpus dependence: PubMed -4.5% vs OpenWebText +10.3% -> log(1.103) - log(0.955);
* sample efficiency: standard needs 2.4x the tokens -> log(2.4) on the log token ratio;
* seed spread (power plan only): std 0.04 vs 0.31 -> log variance ratio 2 log(0.31 / 0.04).

"Same results" claims (Euler vs leapfrog, 1-7 steps) are equivalence tests (TOST) with the margin
:data:`SAME_MARGIN` = half the paper's headline gain of coupling (60M: -6.6%, 0.068 in log ppl): a
difference smaller than half of what coupling is claimed to do cannot change the paper's
conclusions, and with the power line the report says how many seeds that margin needs at the
measured spread. MQAR (per task, over seeds): coupled accuracy above standard's ("increase"), and
coupled at 100% ("no-worse" than 1.0 within 0.01).

Validity before verdict (:class:`qkdyn.claims.Precondition`, measured in the same runs; any unmet
makes the claim ``inconclusive``, printed first):

* every language-modelling claim: standard attention's validation perplexity, worst seed, below
  the unigram and the bigram count models of the same training split
  (:mod:`qkdyn.empirical.coupled.count_models`), and removing its attention (same checkpoint,
  ablation) raises its validation loss by more than :data:`ATTENTION_FLOOR` nats, worst seed;
* MQAR: standard attention's recall, worst seed, clearly above the in-context guessing rate g (one
  of the sequence's kv values at random, mean over the task's settings of 1 / kv pairs): above
  :func:`recall_floor` = g + 1/2 (1 - g), halfway to full recall;
* claims about what the coupling does (B2, B3, B4, B5, B8): removing f from the trained coupled
  model (:mod:`qkdyn.empirical.coupled.ablation`) raises its validation loss, mean over seeds, by
  more than the seed noise (the sd over seeds of its log perplexity).

Every claim shows the ablations of the runs it compares (change of validation loss or MQAR
accuracy when attention, f or the whole flow is removed) beside its verdict.
"""
from __future__ import annotations

import itertools
import math
from collections import Counter

import numpy as np
from qkdyn.empirical.coupled.count_models import key as count_key
from qkdyn.empirical.coupled.study import variant_label

from qkdyn.claims import Claim, Precondition, combine, gate
from qkdyn.stats import compare, compare_censored, compare_variance, sample_summary

HEADLINE = math.log(1 / (1 - 0.066))  # the paper's 60M gain of coupled over standard, in log ppl
SAME_MARGIN = HEADLINE / 2
SMALLEST = {
    "standard": math.log(19.55 / 19.35),
    "mlp-only": math.log(23.81 / 22.62),
    "diff": math.log(21.11 / 20.12),
    "corpus": math.log(1.103) - math.log(0.955),
    "efficiency": math.log(2.4),
    "variance": 2 * math.log(0.31 / 0.04),
}
#: the smallest loss cost of removing attention (nats per token) for a language-modelling claim:
#: ten times the paper's smallest effect, so an attention variant has room to change the loss by it
ATTENTION_FLOOR = 10 * SMALLEST["standard"]
MLP_READINGS = {"mlp-only": "reading (a): separate g(q), h(k)", "mlp-only-shared": "reading (b): one f on q and on k",
                "mlp-only-q": "reading (c): an MLP update on q only"}
HORIZON_READINGS = {"step": "n steps of dt", "fixed": "n steps of dt/n"}
ABLATION_NAMES = {"attention": "attention removed", "field": "f removed (dt f = 0)", "flow": "flow removed (dt = 0)"}


def as_run(result: dict) -> dict:
    """A run's record (:func:`qkdyn.empirical.coupled.study.result_of`, read as a
    :class:`qkdyn.runs.RunRecord`: its configuration, ``final`` evaluation and ``details`` with
    ``evals`` and ``ablation``) as the flat run the selections use, with variant, n, horizon, seed,
    max_steps."""
    from qkdyn.runs import RunRecord

    record = RunRecord.from_dict(result)
    attention = record.config["model"]["attention"]
    return {**record.config, **record.details, "parameters": record.parameters, "steps": record.steps,
            "final": record.final, "ablation": record.details.get("ablation", {}), "variant": variant_label(attention),
            "n": attention["steps"], "horizon": attention.get("horizon", "step"), "seed": record.config["train"]["seed"],
            "max_steps": record.config["train"]["max_steps"]}


def log_ppl(run: dict) -> float:
    return math.log(run["final"]["val_ppl"])


class Runs:
    """Selects runs by task, data, variant, coupling steps, horizon and length; each selection keyed by seed."""

    def __init__(self, runs: list[dict]):
        self.runs = runs
        lengths = Counter(r["max_steps"] for r in runs if r["task"] == "lm" and r["variant"] != "standard")
        self.lm_steps = lengths.most_common(1)[0][0] if lengths else None

    def get(self, data: str, variant: str, n: int = 1, steps: int | None = None, task: str = "lm",
            preset: str | None = None, horizon: str = "step") -> dict[int, dict]:
        steps = steps or (self.lm_steps if task == "lm" else None)
        return {r["seed"]: r for r in self.runs
                if r["task"] == task and (r["data"] if task == "lm" else r["mqar"]) == data and r["variant"] == variant
                and r["n"] == n and (n == 1 or r["horizon"] == horizon)
                and (steps is None or r["max_steps"] == steps) and (preset is None or r["preset"] == preset)}


def _worst(values, largest: bool = True) -> float:
    """The largest (``largest``) or smallest of ``values``, NaN when any is NaN or there are none (Python's
    max and min skip a NaN that is not first, so an unmeasured seed would pass a precondition on the others)."""
    a = np.asarray(list(values), dtype=float)
    return float(a.max() if largest else a.min()) if a.size else math.nan


def paired(a: dict[int, dict], b: dict[int, dict], value=log_ppl) -> tuple[list[float], list[float]]:
    """Values of the seeds both selections have, in seed order."""
    seeds = sorted(set(a) & set(b))
    return [value(a[s]) for s in seeds], [value(b[s]) for s in seeds]


def strength(runs: dict[int, dict]) -> dict:
    """Mean coupling strength (dt included), field ratio and q/k change at initialisation (first
    evaluation) and at the end."""
    out = {}
    for key in ("coupling", "field_ratio", "qk_change"):
        init = [r["evals"][0][key] for r in runs.values() if r["evals"] and key in r["evals"][0]]
        final = [r["final"][key] for r in runs.values() if key in r["final"]]
        if final:
            out[key] = {"init": float(np.mean(init)) if init else math.nan, "final": float(np.mean(final))}
    return out


def ablation_change(run: dict, what: str, metric: str = "val_loss") -> float:
    """The change of ``metric`` when ``what`` is removed from the run's final checkpoint (NaN if not measured)."""
    return float(run.get("ablation", {}).get(what, {}).get(metric, math.nan))


def ablations(groups: dict[str, dict[int, dict]], metric: str = "val_loss") -> dict:
    """Per group and ablation: the change of ``metric`` over seeds (n, mean, sd, values)."""
    out = {}
    for name, g in groups.items():
        whats = sorted({w for r in g.values() for w in r.get("ablation", {})})
        if whats:
            out[name] = {ABLATION_NAMES.get(w, w): sample_summary([ablation_change(r, w, metric) for r in g.values()])
                         for w in whats}
    return out


def _ablation_text(table: dict, unit: str) -> str:
    if not table:
        return " Ablations: not measured."
    parts = [f"{name}: {what} {s['mean']:+.4g}" + ("" if math.isnan(s["std"]) else f" (sd {s['std']:.2g})")
             for name, row in table.items() for what, s in row.items()]
    return f" Ablations (same checkpoint, change in {unit}): " + "; ".join(parts) + "."


def why(c) -> str:
    """Why a directional comparison fails although p >= alpha: its interval is short of the paper's effect."""
    opposite = (c.effect > 0) == (c.claimed == "decrease") and c.p_value < 0.05
    if c.verdict == "fails" and c.smallest_effect is not None and not opposite:
        return f" (95% interval short of the paper's smallest effect {c.smallest_effect:.4g})"
    return ""


def _claim(cid: str, statement: str, comparisons: dict, evidence: dict, summary: str, plots=(), *,
           preconditions=(), ablation: dict | None = None, unit: str = "val loss, nats/token", scope: str = "",
           table=()) -> Claim:
    """A claim from named comparisons: one -> its verdict; several -> parts combined; every verdict
    ``inconclusive`` when a precondition is unmet; the ablations shown beside it."""
    preconditions = list(preconditions)
    parts = gate({label: c.verdict for label, c in comparisons.items()}, preconditions)
    verdict = next(iter(parts.values())) if len(parts) == 1 else combine(parts)
    lines = "; ".join(f"{label}: {c.describe()} -> {c.verdict}{why(c)}" for label, c in comparisons.items())
    unmet = [p.name for p in preconditions if not p.met]
    lead = (f"Inconclusive before any effect is read: not met: {'; '.join(unmet)} (numbers above). The test alone "
            "would say: " if unmet else "")
    text = f"{lead}{summary} {lines}.{_ablation_text(ablation or {}, unit)} {scope}".rstrip()
    return Claim(cid, statement, verdict, {**evidence, "ablation": ablation or {}}, text, list(plots),
                 table=list(table), parts=parts if len(parts) > 1 else {},
                 stats={k: c.as_dict() for k, c in comparisons.items()}, preconditions=preconditions)


def _ppl_evidence(**groups: dict[int, dict]) -> dict:
    return {name: {"val_ppl": sample_summary([r["final"]["val_ppl"] for r in g.values()]), "strength": strength(g)}
            for name, g in groups.items() if g}


def lm_preconditions(R: Runs, corpus: str, count_models: dict, preset: str | None = None) -> list[Precondition]:
    """Standard attention (of ``preset``, at the study's length) has learnt on ``corpus``: below both
    count models, and it uses attention."""
    std = R.get(corpus, "standard", preset=preset)
    highest = _worst(r["final"]["val_ppl"] for r in std.values())
    entry = next((v for k, v in count_models.items() if k.startswith(f"{corpus}|")), None)
    if std:
        run = next(iter(std.values()))
        entry = count_models.get(count_key(corpus, run.get("tokenizer", "bpe"), run["model"]["vocab_size"]), entry)
    fitted = "count model of the same training split" if entry else "count model not computed"
    cost = _worst((ablation_change(r, "attention") for r in std.values()), largest=False)
    return [
        Precondition(f"{corpus}: standard ppl below the unigram model", highest, "<",
                     entry["unigram_ppl"] if entry else math.nan, f"worst seed; add-one {fitted}"),
        Precondition(f"{corpus}: standard ppl below the bigram model", highest, "<",
                     entry["bigram_ppl"] if entry else math.nan, f"worst seed; interpolated absolute-discount {fitted}"),
        Precondition(f"{corpus}: removing attention costs standard > {ATTENTION_FLOOR:.3g} nats", cost, ">",
                     ATTENTION_FLOOR, "worst seed, same checkpoint, whole validation split"),
    ]


def mechanism_precondition(group: dict[int, dict], label: str, metric: str = "val_loss") -> Precondition:
    """Removing f changes the trained model by more than the seed noise (module docstring)."""
    changes = [ablation_change(r, "field", metric) for r in group.values()]
    change = float(np.mean(changes)) if changes else math.nan
    if metric == "mqar_acc":
        change = -change  # removing f lowers accuracy
    values = [log_ppl(r) for r in group.values()] if metric == "val_loss" else [r["final"][metric] for r in group.values()]
    noise = float(np.std(values, ddof=1)) if len(values) > 1 else math.nan
    return Precondition(f"{label}: removing f changes the model by more than the seed noise", change, ">", noise,
                        f"mean over {len(changes)} seeds of the {metric} change vs sd over seeds of "
                        f"{'log ppl' if metric == 'val_loss' else metric}")


#: the share of the queries guessing misses that standard attention must recall before MQAR is judged
RECALL_SHARE = 0.5


def recall_floor(guessing: float) -> float:
    """The MQAR precondition's floor: g + RECALL_SHARE (1 - g), halfway from guessing to full recall
    (a model just above guessing, e.g. 0.28 against 0.25, has not learnt recall)."""
    return guessing + RECALL_SHARE * (1 - guessing)


def guessing_rate(run: dict) -> float:
    """Recall of guessing one in-context value: mean over the task's settings of 1 / kv pairs."""
    rates = [1 / int(k.split("_kv")[1]) for k in run["final"] if k.startswith("acc_T") and "_kv" in k]
    return float(np.mean(rates)) if rates else math.nan


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


def scope_of(runs: list[dict]) -> str:
    """What the verdicts can speak for: the models and tokens of these runs, not the paper's scale."""
    lm = [r for r in runs if r["task"] == "lm"]
    if not lm:
        return ""
    params = sorted({r["parameters"] for r in lm})
    tokens = Counter(r["tokens"] for r in lm).most_common(1)[0][0]
    return (f"Scope: `{lm[0]['preset']}` models ({params[0]:,}-{params[-1]:,} parameters) trained on {tokens:,} tokens "
            "per run; this speaks for that scale only, not for the paper's 60M-350M models trained to convergence.")


def mqar_scope(task: str, runs: list[dict], standard: list[float]) -> str:
    """What B9 can speak for on MQAR task ``task``: its settings, vocabulary, model and training, and
    whether standard attention's recall (``standard``, per seed) leaves room for "above standard"."""
    r = runs[0]
    pairs = [int(k.split("_kv")[1]) for k in r["final"] if k.startswith("acc_T")]
    settings = ", ".join(f"T {k.split('_kv')[0][5:]} with {k.split('_kv')[1]} pairs"
                         for k in r["final"] if k.startswith("acc_T"))
    model, train = r["model"], r["train"]
    text = (f"Scope ({task}): {settings}, vocabulary {model['vocab_size']}, `{r['preset']}` models "
            f"({r['parameters']:,} parameters, init {model.get('init', 'nanogpt')}) trained on "
            f"{train['max_steps'] * train['batch_size']:,} sequences, each seed scored on {r['n_test'] * sum(pairs):,} "
            "test queries; this speaks for recall at that size, not for the paper's settings and models.")
    if min(standard) >= 1 - 0.01:
        text += (f" Standard attention is at the ceiling here (worst seed {min(standard):.4g}), so 'above standard' "
                 "has no room to show: only '100%' can be decided.")
    return text


def analyse(runs: list[dict], coherent: str, heterogeneous: str, matched: dict[str, int] | None = None,
            count_models: dict | None = None) -> dict:
    """Claims (B1-B9), tables and curves of the study (rules: module docstring). ``matched``: the
    compute-matched standard step counts the study ran (:func:`qkdyn.empirical.coupled.study.matched_steps`,
    stored as ``matched.json`` in the runs directory); ``count_models``: the study's
    ``count_models.json`` (:mod:`qkdyn.empirical.coupled.count_models`)."""
    R = Runs(runs)
    count_models = count_models or {}
    scope = scope_of(runs)
    std, cpl = R.get(coherent, "standard"), R.get(coherent, "coupled-euler")
    learnt = lm_preconditions(R, coherent, count_models)
    acts = [mechanism_precondition(cpl, "coupled Euler")] if cpl else []
    claims = []
    if std and cpl:
        comps = {"equal tokens": compare(*paired(cpl, std), "decrease", smallest_effect=SMALLEST["standard"])}
        matched = {k: v for k, v in (matched or {}).items() if k == "flops"}
        for label, steps in matched.items():
            if steps != R.lm_steps and R.get(coherent, "standard", steps=steps):
                comps[f"equal {label}"] = compare(*paired(cpl, R.get(coherent, "standard", steps=steps)), "decrease",
                                                  smallest_effect=SMALLEST["standard"])
        claims.append(_claim(
            "B1", f"Coupled QK dynamics lower perplexity compared with standard attention ({coherent}; paper: -6.6% "
            "at 60M, -6.7% at 150M, -1.0% at 350M), also when standard attention gets the same FLOPs.",
            comps, {**_ppl_evidence(coupled=cpl, standard=std), "matched_steps": matched, "base_steps": R.lm_steps},
            "Effect: log ppl(coupled) - log ppl(standard) per seed (negative = coupled better). Standard attention's "
            f"step count matched to coupled Euler's counted FLOPs: {matched or 'none run'} (base {R.lm_steps}; a "
            "match that rounds to the base is the base run: the flow's FLOPs are below half a step).",
            ["perplexity_by_variant.png"], preconditions=learnt, ablation=ablations({"coupled": cpl, "standard": std}),
            scope=scope))
    mlp = {v: R.get(coherent, v) for v in MLP_READINGS if R.get(coherent, v)}
    if cpl and mlp:
        groups = {"coupled": cpl, **mlp}
        comps = {MLP_READINGS[v]: compare(*paired(cpl, g), "decrease", smallest_effect=SMALLEST["mlp-only"])
                 for v, g in mlp.items()}
        claims.append(_claim(
            "B2", f"The coupling, not the extra MLP, gives the gain: coupled beats the uncoupled MLP-only control of "
            f"equal parameter count ({coherent}; paper 60M: 22.55-22.62 vs 23.81).", comps,
            _ppl_evidence(**groups), "Effect: log ppl(coupled) - log ppl(MLP-only) per seed.",
            preconditions=learnt + acts, ablation=ablations(groups), scope=scope))
        comps = {MLP_READINGS[v]: compare_variance(*paired(cpl, g), "decrease", paper_effect=SMALLEST["variance"])
                 for v, g in mlp.items()}
        claims.append(_claim(
            "B3", f"Coupling steadies training: the seed-to-seed spread of perplexity is smaller for coupled than "
            f"for MLP-only ({coherent}; paper: std 0.04 vs 0.31, 8x).", comps,
            {name: {"std_log_ppl": sample_summary(paired(g, g)[0])["std"]} for name, g in groups.items()},
            "Effect: log(var coupled / var MLP-only) of log ppl over seeds (negative = coupled steadier).",
            preconditions=learnt + acts, ablation=ablations(groups), scope=scope))
    leap = R.get(coherent, "coupled-leapfrog")
    if cpl and leap:
        claims.append(_claim(
            "B4", f"Hamiltonian (leapfrog) and Euler integration give the same results ({coherent}).",
            {"leapfrog vs Euler": compare(*paired(leap, cpl), "same", margin=SAME_MARGIN)},
            _ppl_evidence(euler=cpl, leapfrog=leap),
            f"Equivalence within +-{SAME_MARGIN:.3g} in log ppl (half the paper's 60M gain of coupling).",
            preconditions=learnt + acts, ablation=ablations({"euler": cpl, "leapfrog": leap}), scope=scope))
    sweep = {(h, n): R.get(coherent, "coupled-euler", n=n, horizon=h)
             for h in HORIZON_READINGS for n in sorted({r["n"] for r in runs if r["variant"] == "coupled-euler"}) if n != 1}
    sweep = {k: g for k, g in sweep.items() if g}
    if cpl and sweep:
        groups = {"n=1": cpl, **{f"n={n}, {HORIZON_READINGS[h]}": g for (h, n), g in sweep.items()}}
        claims.append(_claim(
            "B5", f"1 to 7 integration steps make no difference ({coherent}).",
            {f"n={n} vs n=1 ({HORIZON_READINGS[h]})": compare(*paired(g, cpl), "same", margin=SAME_MARGIN)
             for (h, n), g in sweep.items()},
            _ppl_evidence(**groups),
            f"Equivalence within +-{SAME_MARGIN:.3g} in log ppl, each n against n = 1, paired by seed, under each "
            "reading of the horizon: n steps of dt (time n dt) or n steps of dt/n (time dt).",
            preconditions=learnt + acts, ablation=ablations(groups), scope=scope))
    efficiency = _efficiency(R, coherent, cpl, learnt, scope)
    if efficiency:
        claims.append(efficiency)
    diff = R.get(coherent, "diff")
    if cpl and diff:
        claims.append(_claim(
            "B7", f"Coupled QK beats Differential Attention at small scale ({coherent}; paper 150M: 20.12 vs 21.11; "
            "Differential Attention wins at 350M).",
            {"coupled vs diff": compare(*paired(cpl, diff), "decrease", smallest_effect=SMALLEST["diff"])},
            _ppl_evidence(coupled=cpl, diff=diff), "Effect: log ppl(coupled) - log ppl(diff) per seed.",
            preconditions=learnt, ablation=ablations({"coupled": cpl, "diff": diff}), scope=scope))
    std_h, cpl_h = R.get(heterogeneous, "standard"), R.get(heterogeneous, "coupled-euler")
    if std and cpl and std_h and cpl_h:
        gap_c = dict(zip(*_seeds_and(cpl, std), strict=True))
        gap_h = dict(zip(*_seeds_and(cpl_h, std_h), strict=True))
        seeds = sorted(set(gap_c) & set(gap_h))
        claims.append(_claim(
            "B8", f"Coupling helps on domain-coherent text more than on heterogeneous text ({coherent} vs "
            f"{heterogeneous}; paper: WikiText-103 -6.6%, PubMed -4.5%, OpenWebText +10.3%).",
            {"gap coherent - gap heterogeneous": compare([gap_c[s] for s in seeds], [gap_h[s] for s in seeds], "decrease",
                                                         smallest_effect=SMALLEST["corpus"])},
            {"gap_coherent": sample_summary(list(gap_c.values())), "gap_heterogeneous": sample_summary(list(gap_h.values()))},
            "Per seed, gap = log ppl(coupled) - log ppl(standard) on each corpus; effect = coherent gap - "
            "heterogeneous gap (negative = coupling helps more on coherent text).",
            preconditions=learnt + lm_preconditions(R, heterogeneous, count_models) + acts
            + [mechanism_precondition(cpl_h, f"coupled Euler on {heterogeneous}")],
            ablation=ablations({f"coupled ({coherent})": cpl, f"coupled ({heterogeneous})": cpl_h}), scope=scope))
    mqar = _mqar(R, runs)
    if mqar:
        claims.append(mqar)
    return {"claims": claims, "tables": tables(R, runs, coherent, heterogeneous), "coherent": coherent,
            "heterogeneous": heterogeneous, "curves": _curves(R, coherent), "lm_steps": R.lm_steps,
            "count_models": count_models}


def _seeds_and(a: dict[int, dict], b: dict[int, dict]) -> tuple[list[int], list[float]]:
    seeds = sorted(set(a) & set(b))
    return seeds, [log_ppl(a[s]) - log_ppl(b[s]) for s in seeds]


def _efficiency(R: Runs, coherent: str, cpl: dict[int, dict], preconditions: list, scope: str) -> Claim | None:
    lengths = sorted({r["max_steps"] for r in R.runs if r["task"] == "lm" and r["data"] == coherent
                      and r["variant"] == "standard" and r["n"] == 1})
    if not cpl or len(lengths) < 2:
        return None
    ratios, rows = {}, []
    for seed, run in sorted(cpl.items()):
        ladder = [R.get(coherent, "standard", steps=n).get(seed) for n in lengths]
        ladder = [r for r in ladder if r is not None]
        if len(ladder) < 2:
            continue
        if all(math.isfinite(log_ppl(r)) for r in (run, *ladder)):
            tokens, how = tokens_to_match(ladder, log_ppl(run))
        else:  # a diverged run is not measured: never "standard did not reach it", a lower bound in coupled's favour
            tokens, how = math.nan, "not measured (a perplexity is not finite)"
        ratios[seed] = tokens / run["tokens"]
        rows.append({"seed": seed, "coupled ppl": run["final"]["val_ppl"], "coupled tokens": run["tokens"],
                     "standard tokens to match": round(tokens) if math.isfinite(tokens) else tokens,
                     "ratio": ratios[seed], "read": how if how != "censored" else "censored (ratio is a lower bound)"})
    if not ratios:
        return None
    logs = [math.log(ratios[s]) for s in sorted(ratios)]
    censored = [r["read"].startswith("censored") for r in rows]
    comp = compare_censored(logs, censored, "increase", smallest_effect=SMALLEST["efficiency"])
    bound = (f" {sum(censored)} of {len(rows)} seeds censored at the longest length (standard never reached coupled's "
             f"perplexity: ratio >= {min(r['ratio'] for r, c in zip(rows, censored, strict=True) if c):.3g}); censored seeds are "
             "judged by the sign test on their bounds only." if any(censored) else " No seed censored.")
    return _claim(
        "B6", f"Sample efficiency: standard attention needs more tokens (paper: 2.4x) to reach coupled attention's "
        f"perplexity ({coherent}).", {"log token ratio": comp},
        {"standard_lengths_steps": lengths, "ratios": ratios, "censored": int(sum(censored))},
        "Standard attention trained to each length (own schedule); tokens to reach the coupled run's final "
        "perplexity interpolated in log tokens between bracketing lengths; effect = log(standard tokens / coupled "
        f"tokens) per seed.{bound}", ["sample_efficiency.png"], preconditions=preconditions,
        ablation=ablations({"coupled": cpl}), scope=scope, table=rows)


def _mqar(R: Runs, runs: list[dict]) -> Claim | None:
    tasks = sorted({r["mqar"] for r in runs if r["task"] == "mqar"})
    comps, evidence, preconditions, groups, scopes = {}, {}, [], {}, []
    acc = lambda r: r["final"]["mqar_acc"]  # noqa: E731
    for task in tasks:
        c, s = R.get(task, "coupled-euler", task="mqar"), R.get(task, "standard", task="mqar")
        if not c or not s:
            continue
        comps[f"{task}: above standard"] = compare(*paired(c, s, acc), "increase")
        cs = [acc(c[k]) for k in sorted(c)]
        comps[f"{task}: 100%"] = compare(cs, [1.0] * len(cs), "no-worse", margin=0.01)
        evidence[task] = {"coupled": sample_summary(cs), "standard": sample_summary([acc(s[k]) for k in sorted(s)]),
                          "strength": strength(c)}
        groups.update({f"{task} coupled": c, f"{task} standard": s})
        scopes.append(mqar_scope(task, list(s.values()), [acc(s[k]) for k in sorted(s)]))
        preconditions.append(Precondition(
            f"{task}: standard recall clearly above guessing an in-context value", _worst(map(acc, s.values()), False), ">",
            recall_floor(guessing_rate(next(iter(s.values())))),
            f"worst seed; floor: guessing g (mean over settings of 1 / kv pairs) + {RECALL_SHARE:g} (1 - g)"))
    if not comps:
        return None
    return _claim("B9", "MQAR associative recall: coupled QK reaches 100% on the easy and medium settings, above "
                  "standard attention.", comps, evidence,
                  "Accuracy over seeds; '100%' is non-inferiority to 1.0 within 0.01.", ["mqar_accuracy.png"],
                  preconditions=preconditions, ablation=ablations(groups, "mqar_acc"), unit="MQAR accuracy",
                  scope=" ".join(scopes))


def tables(R: Runs, runs: list[dict], coherent: str, heterogeneous: str) -> dict:
    """Per corpus and variant (base length, n = 1): perplexity per token and per byte, the runs' own
    95% intervals, coupling strength, ablations and throughput; the steps sweep per horizon
    (n = 1 in each); MQAR accuracies and ablations."""
    out = {"perplexity": {}, "steps": {}, "mqar": {}}
    variants = list(dict.fromkeys(r["variant"] for r in runs))
    for data in (coherent, heterogeneous):
        for v in variants:
            g = R.get(data, v)
            if not g:
                continue
            rs = list(g.values())
            out["perplexity"].setdefault(data, {})[v] = {
                "val_ppl": sample_summary([r["final"]["val_ppl"] for r in rs]),
                "val_ppl_byte": sample_summary([r["final"].get("val_ppl_byte", math.nan) for r in rs]),
                "run_interval": [(r["final"].get("val_ppl_lo", math.nan), r["final"].get("val_ppl_hi", math.nan)) for r in rs],
                "tokens_per_s": sample_summary([r["tokens_per_s"] for r in rs]), "strength": strength(g),
                "ablation": ablations({v: g}).get(v, {})}
    for horizon in HORIZON_READINGS:
        for n in sorted({r["n"] for r in runs if r["variant"] == "coupled-euler" and r["task"] == "lm"}):
            g = R.get(coherent, "coupled-euler", n=n, horizon=horizon)
            if g:
                out["steps"].setdefault(HORIZON_READINGS[horizon], {})[n] = sample_summary(
                    [r["final"]["val_ppl"] for r in g.values()])
    out["steps"] = {h: t for h, t in out["steps"].items() if len(t) > 1}
    for task in sorted({r["mqar"] for r in runs if r["task"] == "mqar"}):
        for v in ("standard", "coupled-euler"):
            g = R.get(task, v, task="mqar")
            if g:
                keys = [k for k in next(iter(g.values()))["final"] if k.startswith("acc_") or k == "mqar_acc"]
                out["mqar"].setdefault(task, {})[v] = {k: sample_summary([r["final"][k] for r in g.values()]) for k in keys}
                out["mqar"][task][v].update({f"Δ acc, {what}": s for what, s in
                                             ablations({v: g}, "mqar_acc").get(v, {}).items()})
    return out


def _curves(R: Runs, coherent: str) -> dict:
    """Mean validation-perplexity curve (tokens, ppl) of each variant and standard length on the coherent corpus."""
    curves = {}
    for r in R.runs:
        if r["task"] == "lm" and r["data"] == coherent and r["n"] == 1:
            label = r["variant"] if r["max_steps"] == R.lm_steps else f"{r['variant']} ({r['max_steps']} steps)"
            curves.setdefault(label, []).append(r["evals"])
    out = {}
    for label, curve_list in curves.items():
        length = min(len(c) for c in curve_list)
        out[label] = {"tokens": [e["tokens"] for e in curve_list[0][:length]],
                      "val_ppl": [float(np.mean([c[i]["val_ppl"] for c in curve_list])) for i in range(length)]}
    return out


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
        std = {s: r for s, r in R.get(coherent, "standard", preset=preset, steps=None).items()}
        cpl = R.get(coherent, "coupled-euler", preset=preset, steps=None)
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
        claims.append(_claim(f"T-{preset}", f"Coupled QK lowers perplexity vs standard attention at {params:,} "
                             f"non-embedding parameters ({coherent}).", {"coupled vs standard": comp},
                             _ppl_evidence(coupled=cpl, standard=std),
                             "Effect: log ppl(coupled) - log ppl(standard) per seed.", ["scale_trend.png"],
                             preconditions=lm_preconditions(R, coherent, count_models or {}, preset),
                             ablation=ablations({"coupled": cpl, "standard": std})))
    return {"rows": rows, "claims": claims, "coherent": coherent}
