"""MQAR sample efficiency: the steps a run needs to reach 99% recall, read from its evaluation curve.

A run that never reaches the target is *censored*: its steps are only known to exceed its max steps.
Two variants are compared on these (steps, censored) pairs, paired by seed, by
:func:`qkdyn.stats.compare_censored_times` (log steps of the control over the treatment; the exact sign
test on the pairs of known order when any run is censored).
"""
from __future__ import annotations

import itertools

#: the recall a run must reach
RECALL_TARGET = 0.99
#: evaluations a run's curve needs before its steps to the target are read from it
MIN_CURVE_EVALS = 20


def steps_to_recall(evals: list[dict], target: float = RECALL_TARGET) -> float | None:
    """The first step at which ``mqar_acc`` reaches ``target``, linearly interpolated between the
    evaluation before and the first at or above it; None when the curve never reaches it."""
    curve = [e for e in evals if "mqar_acc" in e]
    if curve and curve[0]["mqar_acc"] >= target:
        return float(curve[0]["step"])
    for before, after in itertools.pairwise(curve):
        if after["mqar_acc"] >= target:
            frac = (target - before["mqar_acc"]) / (after["mqar_acc"] - before["mqar_acc"])
            return float(before["step"] + frac * (after["step"] - before["step"]))
    return None


def recall_steps(run: dict, target: float = RECALL_TARGET) -> tuple[float, bool]:
    """(steps, censored) of one MQAR run: its steps to ``target``, or its max steps, censored."""
    found = steps_to_recall(run["evals"], target)
    return (found, False) if found is not None else (float(run["max_steps"]), True)
