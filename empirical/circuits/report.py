"""Aggregate the circuits study's arms over seeds: mean/std table and the claims, per task.

Arms (keys of the summary, :func:`arm_key`): ``same lr`` (every parameter at the base rate), ``QK xR``
(the QK group R times faster), ``all xR`` (every parameter R times faster: the control that separates
faster QK from faster everything) and ``QK w/o embedding xR`` (vader: the QK group without the token
embedding, which also feeds V, the MLP and the head).

Claims, each judged by the project's one rule (:func:`qkdyn.stats.compare`, paired by seed on the test
split), on the primary metric :data:`PRIMARY`, the attention mass on the rationale without the
read-out position (the reading with it is reported beside it):

- ``TASK QK xR``: the mass rises against the same-lr arm (``"increase"``; where the task is one of the
  paper's own, an interval below the paper's gain :data:`PAPER_MASS_GAIN` counts as ``fails``) and the
  accuracy (F1 for QA) is not lower by more than ``acc_tolerance`` (``"no-worse"``);
- ``TASK QK xR beyond all xR``: the QK arm's mass exceeds the all-parameters arm's;
- ``TASK QK w/o embedding xR``: as the first, for the QK group without the token embedding.

Preconditions (:class:`qkdyn.claims.Precondition`, measured in the same runs; any unmet makes the claim
``inconclusive``): the same-lr arm's mass is clearly away from uniform attention's mass on the same
examples (every seed differs by more than :data:`BASELINE_MARGIN`; uniform mass computed per example,
:func:`qkdyn.empirical.circuits.evaluate.uniform_mass`), so it is a baseline that has learned to attend;
and every run the claim compares reached the study's target training loss (trained to matched training
loss, not for a fixed number of epochs).
"""
from __future__ import annotations

import math
from pathlib import Path

from qkdyn.claims import Claim, Precondition, combine, gate
from qkdyn.stats import compare, sample_summary

#: the paper's attention-mass gain (faster minus same) on its own tasks: the smallest effect it reports there
PAPER_MASS_GAIN = {"sva": 0.186 - 0.099, "hatexplain": 0.31 - 0.027, "squad": 0.194 - 0.118}
#: the primary attention metric: mass on the rationale, the read-out position left out
PRIMARY = "attention_mass_without_readout"
#: the second reading of a multi-layer model: mass by attention rollout (the primary is the layer average)
ROLLOUT = "attention_mass_by_method.rollout"
#: how far (absolute mass) every seed of the same-lr arm must be from uniform attention's mass
BASELINE_MARGIN = 0.02
#: the arms and their labels
ARM_LABELS = {"qk": "QK", "all": "all", "qk-noemb": "QK w/o embedding"}

#: (key in the evaluation dict, label) rows of the table; missing keys are skipped
ROWS = (
    ("accuracy", "accuracy"), ("macro_f1", "macro-F1"), ("exact_match", "SQuAD EM"), ("f1", "SQuAD F1"),
    (PRIMARY, "attention mass on rationale, read-out position excluded (primary)"),
    ("uniform_mass_without_readout", "uniform attention's mass, read-out position excluded"),
    (ROLLOUT, "attention mass on rationale, attention rollout (several layers)"),
    ("uniform_mass_by_method.rollout", "uniform attention's rollout mass"),
    ("attention_mass", "attention mass on rationale, read-out position included"),
    ("uniform_mass", "uniform attention's mass, read-out position included"),
    ("ac_area", "AC area"), ("ac_at_default", "AC @ tau"),
    ("acmc_area", "ACMC area (kappa)"), ("acmc_at_default", "ACMC @ tau, kappa"),
    ("comprehensiveness", "comprehensiveness @5%"), ("sufficiency", "sufficiency @5% (lower = better)"),
    ("eraser.comprehensiveness_aopc", "comprehensiveness AOPC"), ("eraser.sufficiency_aopc", "sufficiency AOPC"),
)
#: run-level rows (not split metrics): the training loss where the run stopped, and the step
RUN_ROWS = (("final_train_loss", "training loss at the stop (matched-loss criterion)"),
            ("stopped_at", "steps trained"))


def arm_key(arm: str, mult: float) -> str:
    """The summary key of an arm: ``same lr`` at R = 1, else e.g. ``QK x30``."""
    return "same lr" if mult == 1.0 else f"{ARM_LABELS[arm]} x{mult:g}"


def lookup(result: dict, key: str):
    for part in key.split("."):
        if not isinstance(result, dict) or part not in result:
            return None
        result = result[part]
    return result


def summarize(results: dict[str, list[dict]], split: str = "test") -> dict:
    """{arm key: {metric key: mean/std over seeds}} for the table's metrics (runs in seed order)."""
    out = {}
    for key_, runs in results.items():
        out[key_] = {}
        for key, _ in ROWS:
            values = [lookup(r[split], key) for r in runs]
            if all(v is not None for v in values):
                out[key_][key] = sample_summary(values)
        for key, _ in RUN_ROWS:
            values = [r.get(key) for r in runs]
            if all(isinstance(v, (int, float)) for v in values):
                out[key_][key] = sample_summary([float(v) for v in values])
    return out


def baseline_precondition(task: str, base: dict, key: str = PRIMARY, uniform_key: str = "uniform_mass_without_readout",
                          reading: str = "") -> Precondition:
    """The same-lr arm has learned to attend: every seed's mass (``key``; default the primary) is more
    than :data:`BASELINE_MARGIN` from uniform attention's mass (``uniform_key``) on the same examples."""
    mass, uniform = base[key]["values"], base[uniform_key]["values"]
    gaps = [abs(m - u) for m, u in zip(mass, uniform, strict=True)]
    gap = math.nan if any(math.isnan(g) for g in gaps) else min(gaps)  # min() alone skips a later NaN
    return Precondition(
        f"{task}: the same-lr arm attends away from uniform{reading}", gap, ">", BASELINE_MARGIN,
        f"smallest |mass - uniform mass| over {len(mass)} seeds, read-out position left out; same lr "
        f"{fmt(base[key])}, uniform {fmt(base[uniform_key])} (per example, then averaged)")


def matched_loss_precondition(task: str, arms: dict[str, dict], target: float) -> Precondition:
    """Every run of ``arms`` stopped at a training loss below ``target`` (NaN target: not trained to one)."""
    losses = [v for s in arms.values() for v in s.get("final_train_loss", {}).get("values", [math.nan])]
    worst = max(losses) if losses and not any(math.isnan(v) for v in losses) else math.nan
    return Precondition(
        f"{task}: every compared run reached the target training loss", worst, "<", target if target > 0 else math.nan,
        f"largest training loss at the stop over {', '.join(arms)} ({len(losses)} runs)"
        + ("" if target > 0 else "; the runs trained for a fixed number of steps, not to a target loss"))


def _claim(cid: str, statement: str, comparisons: dict, parts: dict, evidence: dict,
           preconditions: list[Precondition]) -> Claim:
    parts = gate(parts, preconditions)
    return Claim(cid, statement, combine(parts), evidence,
                 "; ".join(f"{name}: {c.describe()}" for name, c in comparisons.items()) + ".",
                 parts=parts, stats={name: c.as_dict() for name, c in comparisons.items()}, preconditions=preconditions)


def claims(task: str, summary: dict, performance_key: str, acc_tolerance: float, target_loss: float) -> list[Claim]:
    """The claims of the module docstring, one set per faster multiplier R present."""
    base = summary["same lr"]
    learned = [baseline_precondition(task, base)]
    rollout = ROLLOUT in base and "uniform_mass_by_method.rollout" in base  # a multi-layer model
    if rollout:
        learned.append(baseline_precondition(task, base, ROLLOUT, "uniform_mass_by_method.rollout", " (rollout)"))
    from qkdyn.empirical.circuits.tasks import is_qa

    with_readout = not is_qa(task)  # QA: the read-out <a> is never in the answer span, the two readings agree
    mults = sorted({float(k.rsplit("x", 1)[1]) for k in summary if k != "same lr"})
    out = []
    for mult in mults:
        arms = {arm: summary.get(arm_key(arm, mult)) for arm in ARM_LABELS}
        for arm in ("qk", "qk-noemb"):
            s = arms[arm]
            if s is None:
                continue
            label = arm_key(arm, mult)
            mass = compare(s[PRIMARY]["values"], base[PRIMARY]["values"], "increase",
                           smallest_effect=PAPER_MASS_GAIN.get(task))
            perf = compare(s[performance_key]["values"], base[performance_key]["values"], "no-worse",
                           margin=acc_tolerance)
            comparisons = {"attention mass (primary)": mass}
            parts = {"sharper attention": mass.verdict}
            if rollout:
                comparisons["attention mass (rollout)"] = compare(s[ROLLOUT]["values"], base[ROLLOUT]["values"],
                                                                  "increase")
                parts["sharper attention (rollout)"] = comparisons["attention mass (rollout)"].verdict
            if with_readout:
                comparisons["attention mass with the read-out position"] = compare(
                    s["attention_mass"]["values"], base["attention_mass"]["values"], "increase")
            comparisons[performance_key] = perf
            parts[f"no {performance_key} loss"] = perf.verdict
            group = "the QK group" if arm == "qk" else "the QK group without the token embedding"
            out.append(_claim(
                f"{task} {label}", f"Raising the learning rate of {group} {mult:g}x sharpens attention on rationales "
                f"(read-out position left out{'; layer average and rollout' if rollout else ''}) without lowering "
                f"{performance_key} by more than {acc_tolerance:g}, at matched training loss ({task}).",
                comparisons, parts,
                {"qk_lr_mult": mult, "arm": arm, PRIMARY: {"same lr": fmt(base[PRIMARY]), label: fmt(s[PRIMARY])},
                 "uniform mass": {"same lr": fmt(base["uniform_mass_without_readout"])},
                 performance_key: {"same lr": fmt(base[performance_key]), label: fmt(s[performance_key])}},
                [*learned, matched_loss_precondition(task, {"same lr": base, label: s}, target_loss)]))
        if arms["qk"] is not None and arms["all"] is not None:
            qk, every = arms["qk"], arms["all"]
            beyond = compare(qk[PRIMARY]["values"], every[PRIMARY]["values"], "increase")
            out.append(_claim(
                f"{task} QK x{mult:g} beyond all x{mult:g}", f"Raising only the QK group's learning rate {mult:g}x "
                f"sharpens attention more than raising every parameter's {mult:g}x, at matched training loss ({task}).",
                {"attention mass (primary)": beyond}, {"sharper than faster everything": beyond.verdict},
                {"qk_lr_mult": mult, PRIMARY: {arm_key("qk", mult): fmt(qk[PRIMARY]),
                                               arm_key("all", mult): fmt(every[PRIMARY])}},
                [*learned, matched_loss_precondition(task, {arm_key("qk", mult): qk, arm_key("all", mult): every},
                                                    target_loss)]))
    return out


def fmt(ms: dict) -> str:
    return f"{ms['mean']:.3f} ± {ms['std']:.3f}"


def markdown(task: str, summary: dict, notes: list[str], plots: list[str]) -> str:
    """The task's table section of figures/circuits/report.md (the claims are rendered by qkdyn.report)."""
    arms = list(summary)
    n = summary[arms[0]]["attention_mass"]["n"]
    lines = [f"## {task}: all metrics", "", f"Test split, mean ± standard deviation over {n} seeds.", ""]
    lines.append("| metric | " + " | ".join(arms) + " |")
    lines.append("|---" * (len(arms) + 1) + "|")
    for key, label in ROWS + RUN_ROWS:
        if all(key in summary[a] for a in arms):
            lines.append(f"| {label} | " + " | ".join(fmt(summary[a][key]) for a in arms) + " |")
    lines += [""] + [f"- {note}" for note in notes] + [""]
    lines += [f"![{Path(p).stem}]({Path(p).name})" for p in plots] + [""]
    return "\n".join(lines)


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
        lines.append(f"- **{p['task']}** ({layers} layer{'s' if layers > 1 else ''}, {len(p['seeds'])} seeds; same lr: "
                     f"{key} {fmt(base[key])}, mass on the rationale without the read-out position "
                     f"{fmt(base[PRIMARY])}, uniform attention's {fmt(base['uniform_mass_without_readout'])}{rollout}):")
        for claim in task_claims[p["task"]]:
            verdicts = ", ".join(f"{name} {v}" for name, v in claim.parts.items())
            lines.append(f"  {claim.id}: {verdicts} -> claim **{claim.verdict}**.")
        lines += [f"  {note}" for note in p["notes"]]
    lines += ["", "These are small CPU-scale tests, not the paper's scale. The notebooks' recipes exist as presets, "
              "`paper-<task>` (equal rates) and `paper-<task>-faster` (the faster-QK arm) for hatexplain, sva and squad, "
              "with the differences that remain listed in docs/authors-experiments.md; they need the corpora, which "
              "cannot be downloaded here. `--metrics authors` adds the notebooks' attention-mass and DTAP definitions.", ""]
    return "\n".join(lines)
