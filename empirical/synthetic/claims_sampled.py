"""Claims A4-sampled and A5-sampled on both sampled generators (``clean`` and ``authors``), over seeds.

:func:`measure` trains (the expensive part, a run of the ``sampled`` study) and returns the evidence;
:func:`judge` decides the claims from that evidence alone (pure: what a run record stores suffices).

Measured (:func:`measure`): for each generator (:mod:`.clean`, :mod:`.authors`), every form x schedule
(equal, qkfast, ramp) x seed is trained by :func:`qkdyn.empirical.synthetic.batched.grid` (one tensor program
per generator; on ``authors`` every arm runs its notebook's horizon, compressed by one factor); each run's
test metrics (:mod:`.sampled`) are recorded at every running-loss level it reached.

Decided (:func:`judge`): comparisons are made at matched running loss (the lowest level every compared run
reached) and judged by the shared rule :func:`qkdyn.stats.compare` (at ``qkdyn.stats.ALPHA``), paired by
seed (runs with one seed share the data stream and, where the shapes agree, the init). A comparison without
a shared level, or with a value that could not be measured (NaN), is ``inconclusive``:

* A4-sampled-<gen>: per form, attention on distinct tokens of qkfast and of ramp vs equal ("increase").
* A5-sampled-<gen>: at equal rates, FACO vs CACO and FAFO vs CAFO ("increase": factorized QK sharpens),
  CAFO vs CACO and FAFO vs FACO ("decrease": factorized OV softens), FAFO qkfast vs equal ("increase").
* The shortcut (prose, no verdict): attention on the positions holding the query's own id
  (``attn_query_id``), faster vs equal, per form; on ``authors`` the query id is also a common token, so
  this mass can grow with the QK rate at the expense of the distinct tokens.
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
from qkdyn.empirical.synthetic import authors, batched, clean, plots, sampled
from qkdyn.empirical.synthetic.model import PARAMS

from qkdyn import stats
from qkdyn.claims import Claim, combine

METRICS = ("attn_distinct", "attn_query_id", "separability", "p_true")
#: the change in mean attention on the query's own id (faster QK vs equal) that counts as the shortcut acting
SHORTCUT_MOVE = 0.01


def tasks(cfg: dict) -> dict:
    return {"clean": (clean.task(cfg["clean_steps"]), cfg["clean_test"]),
            "authors": (authors.task(cfg["authors_compression"]), cfg["authors_test"])}


def measure(name: str, task, test_size: int, seeds, figures_dir: Path, perturb: int | None = None) -> dict:
    """Train generator ``name``'s grid (``perturb``: the seed of :func:`.batched.roundoff`) and return its
    evidence (JSON-serialisable, no verdict): ``runs``, one per form x schedule x seed in the grid's order,
    each with its SGD ``horizon``, ``steps`` run, final running ``loss`` and ``at_level``: the test metrics
    (:data:`METRICS`, means over the test set) at every running-loss ``level`` it reached; the ``generator``,
    ``seeds``, ``test_size``, ``base_lr``, ``perturb``, ``horizon_steps`` ("FORM schedule" -> steps) and
    ``figures`` (``attention``, ``dtap``: the files drawn into ``figures_dir``)."""
    results = batched.grid(task, PARAMS, seeds, test_size, perturb)
    figures = {"attention": f"sampled_{name}_attention.png", "dtap": f"sampled_{name}_dtap.png"}
    pooled = {(s, p): np.mean([sampled.dtap(results[(p, s, seed)].final) for seed in seeds], axis=0)
              for s in _schedules(results) for p in PARAMS}
    plots.dtap(pooled, figures_dir / figures["dtap"])
    plots.sampled_attention(table(results, seeds), figures_dir / figures["attention"], name)
    return {"generator": name, "seeds": list(seeds), "test_size": test_size, "base_lr": task.base_lr,
            "perturb": perturb, "figures": figures,
            "horizon_steps": {f"{p} {s}": task.horizon(p, s) for p in PARAMS for s in task.qk_factor},
            "runs": [{"form": p, "schedule": s, "seed": seed, "horizon": r.horizon, "steps": r.steps, "loss": r.loss,
                      "at_level": [{"level": level, **values} for level, values in r.at_level.items()]}
                     for (p, s, seed), r in results.items()]}


def judge(evidence: dict) -> list[Claim]:
    """A4-sampled-GEN and A5-sampled-GEN from :func:`measure`'s evidence (as a run record stores it); pure."""
    results = _results(evidence)
    rows = table(results, evidence["seeds"])
    return [a4_claim(evidence, results, rows), a5_claim(evidence, results)]


def _results(evidence: dict) -> dict:
    """(form, schedule, seed) -> :class:`.sampled.Result` from the evidence, in the grid's order (the
    per-sample test values of the end, ``final``, are not kept)."""
    return {(r["form"], r["schedule"], r["seed"]): sampled.Result(
        r["form"], r["schedule"], r["seed"], r["horizon"], r["steps"], r["loss"],
        {lv["level"]: {m: lv[m] for m in METRICS} for lv in r["at_level"]}, {}) for r in evidence["runs"]}


def _schedules(results: dict) -> list[str]:
    """The schedules a grid ran, in order (equal first)."""
    return list(dict.fromkeys(s for _, s, _ in results))


def _values(results, param, schedule, seeds, level, metric):
    return [results[(param, schedule, s)].at_level[level][metric] for s in seeds]


def _part(results, seeds, treat, control, level, claimed, metric="attn_distinct"):
    """(verdict, comparison dict, text) of treat vs control (each a (param, schedule)) at ``level``:
    :func:`qkdyn.stats.compare` at ``stats.ALPHA``; inconclusive without a shared level or a measured value."""
    if level is None:
        return "inconclusive", None, "no shared loss level"
    treated, controls = (_values(results, *arm, seeds, level, metric) for arm in (treat, control))
    missing = [seed for seed, a, b in zip(seeds, treated, controls, strict=True) if math.isnan(a) or math.isnan(b)]
    if missing:
        return "inconclusive", None, f"at loss {level:g}: {metric} not measured (NaN) for seeds {missing}"
    comparison = stats.compare(treated, controls, claimed, alpha=stats.ALPHA)
    return comparison.verdict, comparison.as_dict(), f"at loss {level:g}: {comparison.describe()}"


def table(results: dict, seeds) -> list[dict]:
    """One row per form x schedule: metrics at the form's matched level (mean, sd over seeds)."""
    rows = []
    for p in PARAMS:
        level = sampled.matched_level(results, [(p, s, seed) for s in _schedules(results) for seed in seeds])
        for s in _schedules(results):
            row = {"form": p, "schedule": s, "matched_loss": level if level is not None else float("nan")}
            for metric in METRICS:
                vals = np.array(_values(results, p, s, seeds, level, metric) if level is not None else [np.nan] * 2)
                row[metric], row[f"{metric}_sd"] = float(np.mean(vals)), float(np.std(vals, ddof=1))
            row["steps"] = float(np.mean([results[(p, s, seed)].steps for seed in seeds]))
            rows.append(row)
    return rows


def a4_claim(evidence: dict, results: dict, rows: list[dict]) -> Claim:
    """A4-sampled: per form, each faster schedule vs equal ("increase") at the form's matched level; the
    summary adds the attention on the query's own id and :func:`shortcut_sentence`."""
    name, seeds = evidence["generator"], evidence["seeds"]
    parts, comparisons, texts, shortcut = {}, {}, [], []
    for p in PARAMS:
        level = sampled.matched_level(results, [(p, s, seed) for s in _schedules(results) for seed in seeds])
        for s in _schedules(results)[1:]:
            key = f"{p}: {s} > equal"
            parts[key], comparisons[key], text = _part(results, seeds, (p, s), (p, "equal"), level, "increase")
            texts.append(f"{key} {text}")
        if level is not None:
            cut = [float(np.mean(_values(results, p, s, seeds, level, "attn_query_id"))) for s in _schedules(results)]
            shortcut.append(f"{p} " + "/".join(f"{c:.3f}" for c in cut))
    sentence = shortcut_sentence(rows)
    return Claim(
        f"A4-sampled-{name}", f"On the `{name}` sampled generator a faster QK circuit (fixed factor or ramp) puts "
        "more attention on the distinct tokens than equal rates, at the same running loss.",
        combine(parts), {"seeds": list(seeds), "horizon_steps": evidence["horizon_steps"],
                         "test_size": evidence["test_size"], "base_lr": evidence["base_lr"], "shortcut": sentence},
        "Paired by seed, test attention on distinct tokens at each form's matched running loss: " +
        "; ".join(texts) + ". Attention on the positions holding the query's own id (" + "/".join(_schedules(results))
        + "): " + "; ".join(shortcut) + ". " + sentence,
        [evidence["figures"]["attention"], evidence["figures"]["dtap"]], table=rows, parts=parts, stats=comparisons)


def a5_claim(evidence: dict, results: dict) -> Claim:
    """A5-sampled: the four equal-rate form comparisons at their shared level, FAFO qkfast vs equal at its own."""
    name, seeds = evidence["generator"], evidence["seeds"]
    eq_level = sampled.matched_level(results, [(p, "equal", seed) for p in PARAMS for seed in seeds])
    fafo_level = sampled.matched_level(results, [("FAFO", s, seed) for s in ("equal", "qkfast") for seed in seeds])
    checks = {
        "factorized QK sharpens: FACO > CACO": (("FACO", "equal"), ("CACO", "equal"), eq_level, "increase"),
        "factorized QK sharpens: FAFO > CAFO": (("FAFO", "equal"), ("CAFO", "equal"), eq_level, "increase"),
        "factorized OV softens: CAFO < CACO": (("CAFO", "equal"), ("CACO", "equal"), eq_level, "decrease"),
        "factorized OV softens: FAFO < FACO": (("FAFO", "equal"), ("FACO", "equal"), eq_level, "decrease"),
        "faster QK sharpens FAFO": (("FAFO", "qkfast"), ("FAFO", "equal"), fafo_level, "increase"),
    }
    parts, comparisons, texts = {}, {}, []
    for key, (treat, control, level, claimed) in checks.items():
        parts[key], comparisons[key], text = _part(results, seeds, treat, control, level, claimed)
        texts.append(f"{key} {text}")
    return Claim(
        f"A5-sampled-{name}", f"On the `{name}` sampled generator, at equal rates factorized QK sharpens and "
        "factorized OV softens attention; a faster QK sharpens FAFO.", combine(parts),
        {"equal_rates_level": eq_level, "fafo_level": fafo_level, "seeds": list(seeds)},
        "Paired by seed, test attention on distinct tokens at matched running loss: " + "; ".join(texts) + ".",
        [evidence["figures"]["attention"]], parts=parts, stats=comparisons)


def shortcut_sentence(rows: list[dict]) -> str:
    """One computed sentence: where a faster QK moves attention onto the query's own id, at matched loss
    (a change of more than :data:`SHORTCUT_MOVE` in mean attention counts; unmeasured (NaN) changes are left out)."""
    by = {(r["form"], r["schedule"]): r for r in rows}
    moved = [(f"{p} {s}", by[(p, s)]["attn_query_id"] - by[(p, "equal")]["attn_query_id"],
              by[(p, s)]["attn_distinct"] - by[(p, "equal")]["attn_distinct"])
             for p in PARAMS for s in dict.fromkeys(r["schedule"] for r in rows) if s != "equal"]
    moved = [m for m in moved if not math.isnan(m[1])]
    if not moved:
        return "The shortcut is not measured: no faster-QK run has a measured attention on the query's id."
    grown = [f"{k} ({dq:+.3f} on the query id, {dd:+.3f} on distinct tokens)" for k, dq, dd in moved
             if dq > SHORTCUT_MOVE]
    if not grown:
        return ("The shortcut does not act here: at matched loss no faster-QK run raises the attention on the "
                f"positions holding the query's id by more than {SHORTCUT_MOVE:g} "
                f"(largest change {max(d for _, d, _ in moved):+.3f}).")
    return ("The shortcut acts: at matched loss a faster QK moves attention onto the positions holding the query's own "
            "id in " + ", ".join(grown) + ".")
