"""Aggregate the circuits study's arms over seeds: mean/std table and the claims, per task.

Arms (keys of the summary, :func:`arm_key`): ``same lr`` (every parameter at the base rate), ``QK xR``
(the QK group R times faster), ``all xR`` (every parameter R times faster: the control that separates
faster QK from faster everything) and ``QK w/o embedding xR`` (vader: the QK group without the token
embedding, which also feeds V, the MLP and the head).

Nulls beside every attention metric, on the same test items (:func:`qkdyn.empirical.circuits.metrics.positional_masses`):
uniform attention, a previous-token head, the best fixed relative offset and the best fixed absolute
position (read-out rows that read no content). Beside ERASER's numbers: ERASER with a content-free
ranking (the most recent positions first).

Claims, each judged by the project's one rule (:func:`qkdyn.stats.compare`, paired by seed on the test
split), on the primary metric :data:`PRIMARY`, the attention mass on the rationale without the
read-out position (the reading with it is reported beside it):

- ``TASK QK xR``: the mass rises against the same-lr arm (``"increase"``; where the task is one of the
  paper's own, an interval below the paper's gain :data:`PAPER_MASS_GAIN` counts as ``fails``) and the
  accuracy (F1 for QA) is not lower by more than ``acc_tolerance`` (``"no-worse"``). Where the task names
  subsets (:data:`qkdyn.empirical.circuits.tasks.SUBSETS`: the items a previous-token head cannot explain, e.g.
  brown-sva's non-adjacent and attractor items), the sharpening is decided on each subset (one part each,
  the mass averaged over the subset's items from the records' per-item evidence) and the all-items mass
  is a secondary line; a subset the records cannot split makes its part ``inconclusive``;
- ``TASK QK xR beyond all xR``: the QK arm's mass exceeds the all-parameters arm's (on the subsets, as above);
- ``TASK QK w/o embedding xR``: as the first, for the QK group without the token embedding;
- ``TASK QK xR faithfulness`` (classifiers): ERASER at the authors' 5% of positions, comprehensiveness
  rises (``"increase"``) and sufficiency falls (``"decrease"``) against the same-lr arm (AOPC and the
  recency-ranked null beside, not judged);
- on a negative control (:data:`qkdyn.empirical.circuits.tasks.NEGATIVE_CONTROLS`: uniform attention is
  optimal there) the claims are instead ``TASK QK xR no sharpening`` (and w/o embedding): the mass stays
  within :data:`CONTROL_MARGIN` of the same-lr arm's (``"same"``, two one-sided tests), with the power to
  detect the effect seen on the reference task printed beside.

Preconditions (:class:`qkdyn.claims.Precondition`, measured in the same runs; any unmet makes the claim
``inconclusive``): the same-lr arm's mass is clearly away from uniform attention's mass on the same
examples (every seed differs by more than :data:`BASELINE_MARGIN`; uniform mass computed per example,
:func:`qkdyn.empirical.circuits.evaluate.uniform_mass`), so it is a baseline that has learned to attend
(a negative control needs the opposite: every seed within the margin); and every run the claim compares
reached the study's target training loss (trained to matched training loss, not for a fixed number of epochs).
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from qkdyn.claims import Claim, Precondition, combine, gate
from qkdyn.stats import Comparison, compare, detectable_effect, sample_summary, seeds_needed

#: the paper's attention-mass gain (faster minus same) on its own tasks: the smallest effect it reports there
PAPER_MASS_GAIN = {"sva": 0.186 - 0.099, "hatexplain": 0.31 - 0.027, "squad": 0.194 - 0.118}
#: the paper's ERASER gains at 5% on its own tasks (HateXplain: comprehensiveness 0.48 vs 0.35, sufficiency
#: 0.33 vs 0.37), as positive magnitudes in the claimed direction
PAPER_FAITHFULNESS = {"hatexplain": {"comprehensiveness": 0.48 - 0.35, "sufficiency": 0.37 - 0.33}}
#: the primary attention metric: mass on the rationale, the read-out position left out
PRIMARY = "attention_mass_without_readout"
#: the second reading of a multi-layer model: mass by attention rollout (the primary is the layer average)
ROLLOUT = "attention_mass_by_method.rollout"
#: how far (absolute mass) every seed of the same-lr arm must be from uniform attention's mass
BASELINE_MARGIN = 0.02
#: a negative control's equivalence margin on the primary mass: the change that still counts as "attends to
#: the same"; the same tolerance that tells a baseline that attends from one at uniform (BASELINE_MARGIN)
CONTROL_MARGIN = BASELINE_MARGIN
#: the arms and their labels
ARM_LABELS = {"qk": "QK", "all": "all", "qk-noemb": "QK w/o embedding"}
#: the positional nulls (keys of an evaluation's ``positional``), their labels, and the key of their choice
NULLS = (("uniform", "uniform attention", ""), ("previous_token", "a previous-token head", ""),
         ("best_offset", "the best fixed relative offset", "best_offset_k"),
         ("best_absolute", "the best fixed absolute position", "best_absolute_p"))
#: ERASER's two readings judged as faithfulness: (key at 5%, claimed direction, part name)
FAITHFULNESS = (("comprehensiveness", "increase", "comprehensiveness rises"),
                ("sufficiency", "decrease", "sufficiency falls"))

#: (key in the evaluation dict, label) rows of the table; missing keys are skipped
ROWS = (
    ("accuracy", "accuracy"), ("macro_f1", "macro-F1"), ("exact_match", "SQuAD EM"), ("f1", "SQuAD F1"),
    (PRIMARY, "attention mass on rationale, read-out position excluded (primary)"),
    ("uniform_mass_without_readout", "uniform attention's mass, read-out position excluded"),
    ("positional.previous_token", "previous-token head's mass (no content), read-out position excluded"),
    ("positional.best_offset", "best fixed relative offset's mass (no content)"),
    ("positional.best_absolute", "best fixed absolute position's mass (no content)"),
    ("mass_previous@all", "attention mass on the token just before the read-out"),
    (ROLLOUT, "attention mass on rationale, attention rollout (several layers)"),
    ("uniform_mass_by_method.rollout", "uniform attention's rollout mass"),
    ("attention_mass", "attention mass on rationale, read-out position included"),
    ("uniform_mass", "uniform attention's mass, read-out position included"),
    ("ac_area", "AC area"), ("ac_at_default", "AC @ tau"),
    ("acmc_area", "ACMC area (kappa)"), ("acmc_at_default", "ACMC @ tau, kappa"),
    ("comprehensiveness", "comprehensiveness @5%"), ("sufficiency", "sufficiency @5% (lower = better)"),
    ("comprehensiveness_recency", "comprehensiveness @5%, recency ranking (null)"),
    ("sufficiency_recency", "sufficiency @5%, recency ranking (null)"),
    ("eraser.comprehensiveness_aopc", "comprehensiveness AOPC"), ("eraser.sufficiency_aopc", "sufficiency AOPC"),
    ("eraser_recency.comprehensiveness_aopc", "comprehensiveness AOPC, recency ranking (null)"),
    ("eraser_recency.sufficiency_aopc", "sufficiency AOPC, recency ranking (null)"),
)
#: the nulls' choices (offset k, position p): constant over seeds, printed in their rows' labels
CHOICE_ROWS = ("positional.best_offset_k", "positional.best_absolute_p")
#: run-level rows (not split metrics): the training loss where the run stopped, and the step
RUN_ROWS = (("final_train_loss", "training loss at the stop (matched-loss criterion)"),
            ("stopped_at", "steps trained"))
#: the subsets the per-item evidence can be split into (:func:`subset_masks`)
SUBSET_NAMES = ("non-adjacent", "attractor")
#: (metric, label) rows of each subset, keys ``metric@subset`` (:func:`item_views`)
SUBSET_ROWS = (("n_items", "items"), ("attention_mass", "attention mass on rationale, read-out excluded"),
               ("uniform", "uniform attention's mass"), ("previous_token", "previous-token head's mass"),
               ("best_offset", "best fixed relative offset's mass"),
               ("best_absolute", "best fixed absolute position's mass"),
               ("mass_previous", "attention mass on the token just before the read-out"),
               ("score", "accuracy (F1 for QA)"))


def arm_key(arm: str, mult: float) -> str:
    """The summary key of an arm: ``same lr`` at R = 1, else e.g. ``QK x30``."""
    return "same lr" if mult == 1.0 else f"{ARM_LABELS[arm]} x{mult:g}"


def lookup(result: dict, key: str):
    for part in key.split("."):
        if not isinstance(result, dict) or part not in result:
            return None
        result = result[part]
    return result


# --- the per-item evidence split into subsets -----------------------------------------------------
def subset_masks(items: dict) -> dict[str, np.ndarray]:
    """{subset: boolean mask over the items} of the subsets the evidence can tell (items with a rationale only):
    ``non-adjacent``, where a previous-token head puts no mass on the rationale (none of its annotators marks
    position r - 1); ``attractor``, where the task's flags count at least one attractor (only when recorded)."""
    from qkdyn.empirical.circuits.metrics import rationale_mass

    has = np.array([any(len(r) for r in rat) for rat in items["rationale"]], dtype=bool)
    previous = np.array([rationale_mass(np.eye(r + 1)[max(r - 1, 0)], rat) if h else math.nan
                         for r, rat, h in zip(items["read"], items["rationale"], has, strict=True)])
    masks = {"non-adjacent": has & (np.nan_to_num(previous, nan=1.0) == 0)}
    if "attractor" in items.get("flags", {}):
        masks["attractor"] = has & (np.asarray(items["flags"]["attractor"], dtype=float) > 0)
    return masks


def item_views(evaluation: dict) -> dict[str, float]:
    """Numbers of one run derived from its per-item evidence (``evaluation["items"]``, absent in older records:
    then nothing), keys ``metric@view``: over all items ``mass_previous@all``; for each subset of
    :func:`subset_masks` its item count, the model's mean mass on the rationale (read-out excluded), the
    positional nulls re-chosen on the subset (:func:`~qkdyn.empirical.circuits.metrics.positional_masses`),
    the model's mass on the token just before the read-out and the mean score."""
    from qkdyn.empirical.circuits.metrics import positional_masses

    items = evaluation.get("items")
    if not items:
        return {}
    mass, previous, score = (np.asarray(items[k], dtype=float) for k in ("mass", "mass_previous", "score"))
    has = np.array([any(len(r) for r in rat) for rat in items["rationale"]], dtype=bool)
    later = np.asarray(items["read"]) > 0  # a token before the read-out exists
    out = {"mass_previous@all": _mean(previous, has & later)}
    for name, mask in subset_masks(items).items():
        index = np.flatnonzero(mask)
        nulls = positional_masses([items["read"][i] for i in index], [items["rationale"][i] for i in index])
        out.update({f"n_items@{name}": float(len(index)), f"attention_mass@{name}": _mean(mass, mask),
                    f"mass_previous@{name}": _mean(previous, mask & later), f"score@{name}": _mean(score, mask),
                    **{f"{key}@{name}": float(nulls[key]) for key, _, _ in NULLS},
                    **{f"{choice}@{name}": float(nulls[choice]) for _, _, choice in NULLS if choice}})
    return out


def _mean(values: np.ndarray, mask: np.ndarray) -> float:
    """Mean of ``values`` where ``mask`` (NaN when it selects none; a NaN value, a diverged model's, propagates)."""
    return float(np.mean(values[mask])) if mask.any() else math.nan


def summarize(results: dict[str, list[dict]], split: str = "test") -> dict:
    """{arm key: {metric key: mean/std over seeds}} for the table's metrics and the per-item views
    (:func:`item_views`) every run of the arm has (runs in seed order)."""
    out: dict[str, dict] = {}
    for key_, runs in results.items():
        out[key_] = {}
        for key in [k for k, _ in ROWS] + list(CHOICE_ROWS):
            values = [lookup(r[split], key) for r in runs]
            if all(v is not None for v in values):
                out[key_][key] = sample_summary(values)
        views = [item_views(r[split]) for r in runs]
        for key in sorted(set.intersection(*(set(v) for v in views))) if views else ():
            out[key_][key] = sample_summary([v[key] for v in views])
        for key, _ in RUN_ROWS:
            values = [r.get(key) for r in runs]
            if all(isinstance(v, (int, float)) for v in values):
                out[key_][key] = sample_summary([float(v) for v in values])
    return out


def seed_values(arm: dict, key: str, n: int) -> list[float]:
    """The per-seed values of ``key`` in an arm's summary, or ``n`` NaN where it was not measured (an older
    record without it, a subset the records cannot tell): a comparison of them is ``inconclusive``."""
    return arm[key]["values"] if key in arm else [math.nan] * n


# --- preconditions -------------------------------------------------------------------------------
def baseline_precondition(task: str, base: dict, key: str = PRIMARY, uniform_key: str = "uniform_mass_without_readout",
                          reading: str = "") -> Precondition:
    """The same-lr arm has learned to attend: every seed's mass (``key``; default the primary) is more
    than :data:`BASELINE_MARGIN` from uniform attention's mass (``uniform_key``) on the same examples."""
    gap, detail = _uniform_gaps(base, key, uniform_key, min)
    return Precondition(f"{task}: the same-lr arm attends away from uniform{reading}", gap, ">", BASELINE_MARGIN,
                        f"smallest {detail}")


def uniform_regime_precondition(task: str, base: dict) -> Precondition:
    """A negative control's regime: every seed of the same-lr arm attends within :data:`BASELINE_MARGIN` of
    uniform attention's mass on the same examples (it has settled where uniform attention is optimal)."""
    gap, detail = _uniform_gaps(base, PRIMARY, "uniform_mass_without_readout", max)
    return Precondition(f"{task}: the same-lr arm attends at uniform (the negative control's regime)", gap, "<",
                        BASELINE_MARGIN, f"largest {detail}")


def _uniform_gaps(base: dict, key: str, uniform_key: str, pick) -> tuple[float, str]:
    """``pick`` (min or max) over seeds of |mass - uniform mass| (NaN if any is NaN), and its description."""
    mass, uniform = base[key]["values"], base[uniform_key]["values"]
    gaps = [abs(m - u) for m, u in zip(mass, uniform, strict=True)]
    gap = math.nan if any(math.isnan(g) for g in gaps) else pick(gaps)  # min() alone skips a later NaN
    return gap, (f"|mass - uniform mass| over {len(mass)} seeds, read-out position left out; same lr "
                 f"{fmt(base[key])}, uniform {fmt(base[uniform_key])} (per example, then averaged)")


def matched_loss_precondition(task: str, arms: dict[str, dict], target: float) -> Precondition:
    """Every run of ``arms`` stopped at a training loss below ``target`` (NaN target: not trained to one)."""
    losses = [v for s in arms.values() for v in s.get("final_train_loss", {}).get("values", [math.nan])]
    worst = max(losses) if losses and not any(math.isnan(v) for v in losses) else math.nan
    return Precondition(
        f"{task}: every compared run reached the target training loss", worst, "<", target if target > 0 else math.nan,
        f"largest training loss at the stop over {', '.join(arms)} ({len(losses)} runs)"
        + ("" if target > 0 else "; the runs trained for a fixed number of steps, not to a target loss"))


# --- claims --------------------------------------------------------------------------------------
def _claim(cid: str, statement: str, comparisons: dict, parts: dict, evidence: dict,
           preconditions: list[Precondition]) -> Claim:
    parts = gate(parts, preconditions)
    return Claim(cid, statement, combine(parts), evidence,
                 "; ".join(f"{name}: {c.describe()}" for name, c in comparisons.items()) + ".",
                 parts=parts, stats={name: c.as_dict() for name, c in comparisons.items()}, preconditions=preconditions)


def null_evidence(arm: dict, view: str = "") -> dict:
    """The positional nulls of an arm's summary in words (all items, or ``view`` a subset), where measured."""
    out = {}
    for key, label, choice in NULLS:
        name = f"{key}@{view}" if view else ("uniform_mass_without_readout" if key == "uniform" else f"positional.{key}")
        pick = f"{choice}@{view}" if view and choice else f"positional.{choice}" if choice else ""
        if name in arm:
            out[label + (f" ({choice[-1]} = {arm[pick]['values'][0]:g})" if pick in arm else "")] = fmt(arm[name])
    return out


def attention_comparisons(task: str, treat: dict, control: dict, part: str, smallest_effect: float | None = None
                          ) -> tuple[dict[str, Comparison], dict[str, str], dict]:
    """(comparisons, parts, evidence) of "``treat`` puts more mass on the rationales than ``control``". Without
    subsets: one part, the primary mass. With the task's subsets: one part per subset (its mean mass, read-out
    excluded), the all-items primary mass a secondary comparison; the evidence names each subset's items, its
    nulls and both arms' mass on the token just before the read-out."""
    from qkdyn.empirical.circuits.tasks import SUBSETS

    n = len(control[PRIMARY]["values"])
    overall = compare(seed_values(treat, PRIMARY, n), control[PRIMARY]["values"], "increase",
                      smallest_effect=smallest_effect)
    subsets = SUBSETS.get(task, {})
    if not subsets:
        return {"attention mass (primary)": overall}, {part: overall.verdict}, {}
    comparisons: dict[str, Comparison] = {}
    parts: dict[str, str] = {}
    evidence: dict = {}
    for name, meaning in subsets.items():
        key = f"attention_mass@{name}"
        comparisons[f"attention mass, {name} items (deciding)"] = c = compare(
            seed_values(treat, key, n), seed_values(control, key, n), "increase")
        parts[f"{part} ({name} items)"] = c.verdict
        evidence[f"{name} items"] = (
            {"what": meaning, "items": int(control[f"n_items@{name}"]["values"][0]),
             "mass": {"control": fmt(control[key]), "treatment": fmt(treat[key])},
             "mass on the token just before the read-out": {"control": fmt(control[f"mass_previous@{name}"]),
                                                            "treatment": fmt(treat[f"mass_previous@{name}"])},
             "nulls": null_evidence(control, name)}
            if key in control and key in treat else
            {"what": meaning, "items": "not measured: the records carry no per-item evidence for this subset "
                                       "(records from before it was recorded, or brown-sva items prepared without "
                                       "their Brown tags: delete the cached corpus and fetch it again)"})
    comparisons["attention mass (primary), all items (secondary)"] = overall
    return comparisons, parts, evidence


def claims(task: str, summary: dict, performance_key: str, acc_tolerance: float, target_loss: float,
           reference: dict | None = None) -> list[Claim]:
    """The claims of the module docstring, one set per faster multiplier R present. ``reference`` ({R: (what,
    effect)}, :func:`reference_effects`) is the effect a negative control's power is printed against."""
    from qkdyn.empirical.circuits.tasks import NEGATIVE_CONTROLS

    if task in NEGATIVE_CONTROLS:
        return control_claims(task, summary, target_loss, reference or {})
    return sharpening_claims(task, summary, performance_key, acc_tolerance, target_loss)


def _mults(summary: dict) -> list[float]:
    return sorted({float(k.rsplit("x", 1)[1]) for k in summary if k != "same lr"})


def sharpening_claims(task: str, summary: dict, performance_key: str, acc_tolerance: float,
                      target_loss: float) -> list[Claim]:
    """``TASK QK xR``, ``TASK QK w/o embedding xR``, ``TASK QK xR beyond all xR`` and, for classifiers,
    ``TASK QK xR faithfulness`` (module docstring)."""
    from qkdyn.empirical.circuits.tasks import COPY_TESTS, is_qa

    base = summary["same lr"]
    learned = [baseline_precondition(task, base)]
    rollout = ROLLOUT in base and "uniform_mass_by_method.rollout" in base  # a multi-layer model
    if rollout:
        learned.append(baseline_precondition(task, base, ROLLOUT, "uniform_mass_by_method.rollout", " (rollout)"))
    with_readout = not is_qa(task)  # QA: the read-out <a> is never in the answer span, the two readings agree
    n = len(base[PRIMARY]["values"])
    copy = f" ({task} is {COPY_TESTS[task]})" if task in COPY_TESTS else ""
    out = []
    for mult in _mults(summary):
        arms = {arm: summary.get(arm_key(arm, mult)) for arm in ARM_LABELS}
        for arm in ("qk", "qk-noemb"):
            s = arms[arm]
            if s is None:
                continue
            label = arm_key(arm, mult)
            comparisons, parts, subsets = attention_comparisons(task, s, base, "sharper attention",
                                                                PAPER_MASS_GAIN.get(task))
            perf = compare(seed_values(s, performance_key, n), seed_values(base, performance_key, n), "no-worse",
                           margin=acc_tolerance)
            if rollout:
                comparisons["attention mass (rollout)"] = compare(s[ROLLOUT]["values"], base[ROLLOUT]["values"],
                                                                  "increase")
                parts["sharper attention (rollout)"] = comparisons["attention mass (rollout)"].verdict
            if with_readout:
                comparisons["attention mass with the read-out position"] = compare(
                    seed_values(s, "attention_mass", n), seed_values(base, "attention_mass", n), "increase")
            comparisons[performance_key] = perf
            parts[f"no {performance_key} loss"] = perf.verdict
            group = "the QK group" if arm == "qk" else "the QK group without the token embedding"
            evidence = {"qk_lr_mult": mult, "arm": arm, PRIMARY: {"same lr": fmt(base[PRIMARY]), label: fmt(s[PRIMARY])},
                        "uniform mass": {"same lr": fmt(base["uniform_mass_without_readout"])},
                        performance_key: {"same lr": fmt(base[performance_key]), label: fmt(s[performance_key])}}
            evidence.update({"positional nulls, all items": null_evidence(base)} if null_evidence(base) else {})
            evidence.update(subsets)
            if copy:
                evidence[f"{performance_key} cost"] = (f"{perf.effect:+.4f} (95% CI [{perf.interval[0]:+.4f}, "
                                                       f"{perf.interval[1]:+.4f}]), {label} minus same lr")
            names = [name.removesuffix(" items") for name in subsets]
            where = ("" if not subsets else f"; decided on the {' and the '.join(names)} items, where a previous-token "
                     "head puts no mass on the rationale (every positional null beside), the all-items mass beside")
            out.append(_claim(
                f"{task} {label}", f"Raising the learning rate of {group} {mult:g}x sharpens attention on rationales "
                f"(read-out position left out{'; layer average and rollout' if rollout else ''}{where}) without "
                f"lowering {performance_key} by more than {acc_tolerance:g}, at matched training loss ({task}){copy}.",
                comparisons, parts, evidence,
                [*learned, matched_loss_precondition(task, {"same lr": base, label: s}, target_loss)]))
        if arms["qk"] is not None and arms["all"] is not None:
            qk, every = arms["qk"], arms["all"]
            comparisons, parts, subsets = attention_comparisons(task, qk, every, "sharper than faster everything")
            out.append(_claim(
                f"{task} QK x{mult:g} beyond all x{mult:g}", f"Raising only the QK group's learning rate {mult:g}x "
                f"sharpens attention more than raising every parameter's {mult:g}x, at matched training loss ({task}).",
                comparisons, parts,
                {"qk_lr_mult": mult, PRIMARY: {arm_key("qk", mult): fmt(qk[PRIMARY]),
                                               arm_key("all", mult): fmt(every[PRIMARY])}, **subsets},
                [*learned, matched_loss_precondition(task, {arm_key("qk", mult): qk, arm_key("all", mult): every},
                                                    target_loss)]))
        if arms["qk"] is not None and not is_qa(task):
            out.append(faithfulness_claim(task, mult, arms["qk"], base, learned, target_loss))
    return out


def faithfulness_claim(task: str, mult: float, s: dict, base: dict, learned: list[Precondition],
                       target_loss: float) -> Claim:
    """``TASK QK xR faithfulness``: ERASER at 5% judged (comprehensiveness up, sufficiency down; the paper's
    gain as the smallest effect on its own task), AOPC and the recency-ranked null as secondary lines."""
    n = len(base[PRIMARY]["values"])
    label = arm_key("qk", mult)
    comparisons: dict[str, Comparison] = {}
    parts: dict[str, str] = {}
    evidence: dict = {"qk_lr_mult": mult}
    for key, claimed, part in FAITHFULNESS:
        comparisons[f"{key} @5% (attention ranking)"] = c = compare(
            seed_values(s, key, n), seed_values(base, key, n), claimed,
            smallest_effect=PAPER_FAITHFULNESS.get(task, {}).get(key))
        parts[part] = c.verdict
        for secondary, what in ((f"eraser.{key}_aopc", f"{key} AOPC (secondary)"),
                                (f"{key}_recency", f"{key} @5%, recency ranking (null)")):
            comparisons[what] = compare(seed_values(s, secondary, n), seed_values(base, secondary, n), claimed)
        evidence[key] = {f"{arm} ({ranking})": fmt(a[k]) if k in a else "not measured"
                         for arm, a in (("same lr", base), (label, s))
                         for ranking, k in (("attention", key), ("recency", f"{key}_recency"))}
    return _claim(
        f"{task} {label} faithfulness", f"Raising the learning rate of the QK group {mult:g}x makes the attention "
        "ranking a more faithful explanation by ERASER at the top 5% of positions: deleting them costs more of the "
        "predicted class's probability (comprehensiveness rises) and keeping only them costs less (sufficiency "
        f"falls), at matched training loss ({task}).",
        comparisons, parts, evidence,
        [*learned, matched_loss_precondition(task, {"same lr": base, label: s}, target_loss)])


def control_claims(task: str, summary: dict, target_loss: float, reference: dict) -> list[Claim]:
    """A negative control's claims, ``TASK QK xR no sharpening`` (and w/o embedding): the primary mass stays
    within :data:`CONTROL_MARGIN` of the same-lr arm's (TOST, paired over seeds); beside it, the power this
    design has to detect the reference task's effect at the same R (``reference``)."""
    from qkdyn.empirical.circuits.tasks import NEGATIVE_CONTROLS

    base = summary["same lr"]
    regime = uniform_regime_precondition(task, base)
    n = len(base[PRIMARY]["values"])
    out = []
    for mult in _mults(summary):
        for arm in ("qk", "qk-noemb"):
            s = summary.get(arm_key(arm, mult))
            if s is None:
                continue
            label = arm_key(arm, mult)
            same = compare(seed_values(s, PRIMARY, n), base[PRIMARY]["values"], "same", margin=CONTROL_MARGIN)
            comparisons = {"attention mass (primary)": same, "attention mass with the read-out position": compare(
                seed_values(s, "attention_mass", n), seed_values(base, "attention_mass", n), "same",
                margin=CONTROL_MARGIN)}
            evidence = {"qk_lr_mult": mult, "arm": arm, PRIMARY: {"same lr": fmt(base[PRIMARY]), label: fmt(s[PRIMARY])},
                        "uniform mass": {"same lr": fmt(base["uniform_mass_without_readout"])},
                        "positional nulls, all items": null_evidence(base),
                        "power against the reference effect": reference_power(NEGATIVE_CONTROLS[task], same,
                                                                              reference.get(mult))}
            group = "the QK group" if arm == "qk" else "the QK group without the token embedding"
            out.append(_claim(
                f"{task} {label} no sharpening", f"Raising the learning rate of {group} {mult:g}x does not change "
                f"what the model attends to: its attention mass on rationales (read-out position left out) stays within "
                f"{CONTROL_MARGIN:g} of the same-lr arm's, at matched training loss ({task} is a negative control: "
                "uniform attention is optimal there, so the theory predicts no sharpening).",
                comparisons, {"no sharpening": same.verdict}, evidence,
                [regime, matched_loss_precondition(task, {"same lr": base, label: s}, target_loss)]))
    return out


def reference_power(reference_task: str, control: Comparison, effect: tuple[str, float] | None) -> str:
    """In words: whether the control's design (its spread over its seeds) would detect the reference task's
    effect ``effect`` = (what, size) with 80% power in a two-sided paired t-test, and how many seeds that needs."""
    mde = detectable_effect("two-sided", control.spread, control.n)
    if effect is None or not effect[1] == effect[1]:
        return (f"{reference_task}'s effect at this R is not in this report; this design detects >= {mde:.3g} "
                "(two-sided paired t-test, 80% power)")
    what, size = effect
    need = seeds_needed("two-sided", abs(size), control.spread)
    return (f"{reference_task}'s effect ({what}) {size:+.3g}: this design ({control.n} seeds, sd {control.spread:.3g}) "
            f"detects >= {mde:.3g} with 80% power, so it {'would' if abs(size) >= mde else 'would NOT'} detect that "
            f"effect; {need if need is not None else 'more than 10000'} seeds would")


def reference_effects(task_claims: list[Claim]) -> dict[float, tuple[str, float]]:
    """{R: (what, effect)} of a task's ``QK xR`` claims: the first deciding attention comparison that was
    measured (a subset's, else the all-items primary mass)."""
    out = {}
    for claim in task_claims:
        if claim.evidence.get("arm") != "qk" or not claim.stats or claim.id.endswith(("faithfulness", "no sharpening")):
            continue
        measured = [(name, c["effect"]) for name, c in claim.stats.items()
                    if name.startswith("attention mass") and "read-out" not in name and "rollout" not in name
                    and c["effect"] == c["effect"]]
        if measured:
            out[float(claim.evidence["qk_lr_mult"])] = measured[0]
    return out


# --- tables --------------------------------------------------------------------------------------
def fmt(ms: dict) -> str:
    return f"{ms['mean']:.3f} ± {ms['std']:.3f}"


def _choice_label(summary: dict, arms: list[str], key: str) -> str:
    """" (offset 1)" / " (position 0)": the choice of a best-offset or best-position null's row, as its runs made it."""
    for name, suffix, word in (("best_offset", "_k", "offset"), ("best_absolute", "_p", "position")):
        choice = key.replace(name, name + suffix)
        if name in key and choice != key and all(choice in summary[a] for a in arms):
            values = sorted({v for a in arms for v in summary[a][choice]["values"]})
            return f" ({word} {', '.join(f'{v:g}' for v in values)})"
    return ""


def markdown(task: str, summary: dict, notes: list[str], plots: list[str]) -> str:
    """The task's table section of figures/circuits/report.md (the claims are rendered by qkdyn.report): every
    metric with the positional nulls beside it, then each subset's numbers, then what the task speaks for."""
    from qkdyn.empirical.circuits.tasks import SUBSETS

    arms = list(summary)
    n = summary[arms[0]]["attention_mass"]["n"]
    lines = [f"## {task}: all metrics", "", f"Test split, mean ± standard deviation over {n} seeds. The positional "
             "nulls read no content: their rows are the same for every arm (the same test items); the best offset "
             "and position are chosen on the items they are scored on.", ""]
    lines.append("| metric | " + " | ".join(arms) + " |")
    lines.append("|---" * (len(arms) + 1) + "|")
    rows = list(ROWS + RUN_ROWS)
    for name in SUBSET_NAMES:
        meaning = SUBSETS.get(task, {}).get(name, "")
        rows += [(f"{metric}@{name}", f"{name} items{' (deciding)' if meaning else ''}: {label}")
                 for metric, label in SUBSET_ROWS]
    for key, label in rows:
        if all(key in summary[a] for a in arms):
            show = count if key.startswith("n_items@") else fmt
            lines.append(f"| {label}{_choice_label(summary, arms, key)} | "
                         + " | ".join(show(summary[a][key]) for a in arms) + " |")
    lines += [""] + [f"- {note}" for note in notes + task_lines(task, summary)] + [""]
    lines += [f"![{Path(p).stem}]({Path(p).name})" for p in plots] + [""]
    return "\n".join(lines)


def count(ms: dict) -> str:
    """An item count (the same in every seed: the same test items)."""
    values = sorted({int(v) for v in ms["values"]})
    return ", ".join(map(str, values))


def task_lines(task: str, summary: dict) -> list[str]:
    """Computed lines on what the task can speak for: its subsets, and for a copy test its F1 cost per arm."""
    from qkdyn.empirical.circuits.tasks import COPY_TESTS, NEGATIVE_CONTROLS, SUBSETS

    lines = [f"Sharpening is decided on the {name} items: {meaning}." for name, meaning in SUBSETS.get(task, {}).items()]
    if task in NEGATIVE_CONTROLS:
        lines.append(f"{task} is a negative control: uniform attention is optimal here, so the claims are \"no "
                     f"sharpening\" (within {CONTROL_MARGIN:g} of the same-lr arm's mass), with the power to detect "
                     f"{NEGATIVE_CONTROLS[task]}'s effect beside them.")
    if task in COPY_TESTS:
        key = "f1"
        base = summary["same lr"]
        costs = [f"{arm} {sample_summary(np.subtract(summary[arm][key]['values'], base[key]['values']))['mean']:+.3f}"
                 for arm in summary if arm != "same lr" and key in summary[arm] and key in base]
        lines.append(f"{task} is {COPY_TESTS[task]}. Its F1 cost (faster arm minus same lr, mean over paired seeds): "
                     + (", ".join(costs) or "not measured") + ".")
    return lines


def readme_section(payloads: list[dict], task_claims: dict[str, list[Claim]]) -> str:
    """A short results section for the project README, from the per-task summaries and claims."""
    lines = ["### Faster QK learning on real data (Paper A), CPU scale", "",
             "`qkdyn compare-circuits` trains Paper A's one-layer decoder classifier (for question answering its "
             "multi-layer GPT-style decoder) with the same learning rate for all parameters and with the QK circuit "
             "(W_Q, W_K) R times faster, over several seeds, and tests the claim \"sharper attention, same accuracy\" "
             "(F1 for question answering) with the shared rule (paired over seeds; details, plots, every metric: "
             "`figures/circuits/report.md`).", ""]
    for p in payloads:
        base = p["summary"]["same lr"]
        key = "f1" if "f1" in base else "accuracy"
        layers = p["config"]["n_layer"]
        rollout = (f"; rollout {fmt(base[ROLLOUT])}, uniform attention's {fmt(base['uniform_mass_by_method.rollout'])}"
                   if ROLLOUT in base and "uniform_mass_by_method.rollout" in base else "")
        nulls = "".join(f", {label} {value}" for label, value in null_evidence(base).items()
                        if not label.startswith("uniform"))
        lines.append(f"- **{p['task']}** ({layers} layer{'s' if layers > 1 else ''}, {len(p['seeds'])} seeds; same lr: "
                     f"{key} {fmt(base[key])}, mass on the rationale without the read-out position "
                     f"{fmt(base[PRIMARY])}, uniform attention's {fmt(base['uniform_mass_without_readout'])}{nulls}{rollout}):")
        for claim in task_claims[p["task"]]:
            verdicts = ", ".join(f"{name} {v}" for name, v in claim.parts.items())
            lines.append(f"  {claim.id}: {verdicts} -> claim **{claim.verdict}**.")
        lines += [f"  {note}" for note in p["notes"] + task_lines(p["task"], p["summary"])]
    lines += ["", "These are small CPU-scale tests, not the paper's scale. The notebooks' recipes exist as presets, "
              "`paper-<task>` (equal rates) and `paper-<task>-faster` (the faster-QK arm) for hatexplain, sva and squad, "
              "with the differences that remain listed in docs/authors-experiments.md; they need the corpora, which "
              "cannot be downloaded here. `--metrics authors` adds the notebooks' attention-mass and DTAP definitions.", ""]
    return "\n".join(lines)
