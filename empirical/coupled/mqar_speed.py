"""MQAR sample efficiency: the steps a run needs to reach 99% recall, read from its evaluation curve,
and the paired comparison of two variants when some runs never get there (censored at max steps).

Per seed the effect is e = log(steps of the control / steps of the treatment) (positive: the treatment
reaches the target first; steps of at least 1). A run that never reaches the target is *censored*:
its steps are only known to exceed its max steps. The comparison follows the shared rule
(:func:`qkdyn.stats.compare`, paired t-test on e) when no run is censored; otherwise it is decided
only by what censoring leaves known, the *order* of each pair:

* both reached: the sign of e (equal steps: a tie);
* one censored: the other first when it reached the target before the censored run's max steps
  (otherwise unknown);
* both censored: unknown.

Ties and unknown pairs drop out; the exact sign test on the seeds of known order (binomial, p = P(X
>= k | n_known, 1/2)) gives ``holds`` when the treatment first is significant at alpha, ``fails`` when
the control first is, else ``inconclusive``. Its power (:func:`sign_test_power`): at n seeds the test
decides only when at least k_alpha go one way, and it detects with 80% power only a probability q
that a seed favours the treatment of at least the q solving P(Binomial(n, q) >= k_alpha) = 0.8.
"""
from __future__ import annotations

import itertools
import math

import numpy as np

from qkdyn.stats import ALPHA, POWER, Comparison, compare

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


def known_order(treatment: tuple[float, bool], control: tuple[float, bool]) -> int:
    """+1 when the treatment reached the target first, -1 when the control did, 0 for a tie or an
    unknown order (module docstring); each side is (steps, censored)."""
    (t, t_cens), (c, c_cens) = treatment, control
    if t_cens and c_cens:
        return 0
    if t_cens:
        return -1 if c < t else 0
    if c_cens:
        return 1 if t < c else 0
    return int(np.sign(c - t))


def sign_test_power(n: int, alpha: float = ALPHA, power: float = POWER) -> tuple[int | None, float]:
    """The sign test over ``n`` seeds: the fewest seeds one way that give p < ``alpha`` (None when even
    all ``n`` do not) and the probability q that a seed goes that way at which it has ``power``."""
    from scipy import optimize, stats

    needed = next((k for k in range(n + 1) if stats.binom.sf(k - 1, n, 0.5) < alpha), None)
    if needed is None:
        return None, math.nan
    return needed, float(optimize.brentq(lambda q: stats.binom.sf(needed - 1, n, q) - power, 0.5, 1.0, xtol=1e-12))


def compare_steps(treatment: list[tuple[float, bool]], control: list[tuple[float, bool]],
                  alpha: float = ALPHA) -> Comparison:
    """Judge "the treatment reaches the target in fewer steps" over seeds paired by position (module
    docstring); each entry (steps, censored)."""
    from scipy import stats

    if len(treatment) != len(control):
        raise ValueError(f"paired samples must have equal lengths, got {len(treatment)} and {len(control)}")
    log_t = [math.log(max(s, 1.0)) for s, _ in treatment]
    log_c = [math.log(max(s, 1.0)) for s, _ in control]
    censored = sum(t or c for (_, t), (_, c) in zip(treatment, control, strict=True))
    if not censored:
        return compare(log_c, log_t, "increase", alpha=alpha)
    orders = [known_order(t, c) for t, c in zip(treatment, control, strict=True)]
    first, second = orders.count(1), orders.count(-1)
    known = first + second
    p_first, p_second = (float(stats.binom.sf(k - 1, known, 0.5)) if known else 1.0 for k in (first, second))
    verdict = "holds" if p_first < alpha else "fails" if p_second < alpha else "inconclusive"
    effects = np.subtract(log_c, log_t)
    n = len(effects)
    return Comparison("increase", float(effects.mean()), float(effects.std(ddof=1)) if n > 1 else math.nan, n,
                      p_second if verdict == "fails" else p_first, (math.nan, math.nan), verdict,
                      test=f"exact sign test over the {known} seeds of known order ({first} treatment first, {second} "
                      f"control first; censored runs read at their max steps)", censored=int(censored))
