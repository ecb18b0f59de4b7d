"""The one statistical rule for empirical claims (docs/setting.md section 3), shared by every study.

Runs with the same seed are paired (same initial weights where they share shapes, same data order),
so an effect is measured on the per-seed differences ``d_i = treatment_i - control_i``:

* effect   = mean(d), spread = sample standard deviation of d over seeds, n = number of seeds;
* p        = two-sided paired t-test of mean(d) = 0 (a one-sample t-test on d);
* interval = 95% t-interval of mean(d).

Directional claims (``claimed="increase"`` or ``"decrease"``):
  ``holds`` when the effect goes the claimed way with p < alpha; ``fails`` when it goes the other
  way with p < alpha, or when the interval excludes the smallest effect the paper reports (the
  effect, if any, is smaller than what the paper claims); otherwise ``inconclusive``.
Non-inferiority claims (``claimed="no-worse"``, "stable or better", within ``margin``): one-sided
  test of mean(d) > -margin; ``holds`` when p < alpha; ``fails`` when the mean is significantly
  below -margin (p < alpha the other way); otherwise ``inconclusive``.
Equivalence claims (``claimed="same"``, within ``margin``): two one-sided tests (TOST);
  ``holds`` when p_TOST < alpha (the interval lies within +-margin); ``fails`` when the difference
  is significant (p < alpha) and the interval lies wholly outside +-margin; otherwise
  ``inconclusive``.
Fewer than two seeds cannot give a spread: always ``inconclusive``. Identical differences (zero
spread, as deterministic runs give) are decided by their sign: p = 0 when the effect is non-zero.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Sequence

import numpy as np

ALPHA = 0.05
CLAIMS = ("increase", "decrease", "same", "no-worse")


def sample_summary(values: Sequence[float]) -> dict:
    """n, mean, sample standard deviation (NaN below two values: no spread to report) and the values."""
    a = np.asarray(values, dtype=float)
    return {"n": int(a.size), "mean": float(a.mean()) if a.size else math.nan,
            "std": float(a.std(ddof=1)) if a.size > 1 else math.nan, "values": a.tolist()}


@dataclasses.dataclass(frozen=True)
class Comparison:
    """A paired comparison over seeds and its verdict (see the module docstring for the rule)."""

    claimed: str
    effect: float
    spread: float
    n: int
    p_value: float
    interval: tuple[float, float]
    verdict: str
    margin: float | None = None
    smallest_effect: float | None = None
    test: str = "paired t-test"

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)

    def describe(self) -> str:
        """One line for reports: effect +- spread (n seeds), interval, p."""
        lo, hi = self.interval
        return (f"effect {self.effect:+.4g} (sd {self.spread:.3g} over {self.n} seeds; 95% CI "
                f"[{lo:+.4g}, {hi:+.4g}]), {self.test} p = {self.p_value:.3g}")


def compare(treatment: Sequence[float], control: Sequence[float], claimed: str, *,
            smallest_effect: float | None = None, margin: float | None = None,
            alpha: float = ALPHA) -> Comparison:
    """Judge ``treatment - control`` (paired by position: one entry per seed) against a claim.

    ``smallest_effect`` (directional claims): the smallest effect the paper reports, as a positive
    magnitude in the claimed direction. ``margin`` (``"same"``, ``"no-worse"``): the largest difference
    that still counts as "the same" / "not worse", a positive number in the units of the data.
    """
    from scipy import stats

    if claimed not in CLAIMS:
        raise ValueError(f"claimed must be one of {CLAIMS}, got {claimed!r}")
    if claimed in ("same", "no-worse") and not (margin is not None and margin > 0):
        raise ValueError(f"a {claimed!r} claim needs a positive margin")
    a, b = np.asarray(treatment, dtype=float), np.asarray(control, dtype=float)
    if a.shape != b.shape or a.ndim != 1:
        raise ValueError(f"paired samples must be two equal-length vectors, got {a.shape} and {b.shape}")
    d = a - b
    n = len(d)
    effect = float(d.mean()) if n else math.nan
    if n < 2:
        return Comparison(claimed, effect, math.nan, n, math.nan, (math.nan, math.nan), "inconclusive",
                          margin, smallest_effect)
    spread = float(d.std(ddof=1))
    se = spread / math.sqrt(n)
    half = float(stats.t.ppf(1 - alpha / 2, n - 1)) * se
    interval = (effect - half, effect + half)

    def p_greater(shift: float) -> float:
        """One-sided p-value of the hypothesis mean(d) <= shift (small: the mean exceeds shift)."""
        if se == 0:
            return 0.0 if effect > shift else 1.0
        return float(stats.t.sf((effect - shift) / se, n - 1))

    def p_less(shift: float) -> float:
        """One-sided p-value of the hypothesis mean(d) >= shift (small: the mean is below shift)."""
        if se == 0:
            return 0.0 if effect < shift else 1.0
        return float(stats.t.cdf((effect - shift) / se, n - 1))

    p_two = min(1.0, 2 * min(p_greater(0.0), p_less(0.0)))
    if claimed == "same":
        p_tost = max(p_greater(-margin), p_less(margin))
        outside = interval[0] > margin or interval[1] < -margin
        verdict = "holds" if p_tost < alpha else "fails" if (p_two < alpha and outside) else "inconclusive"
        return Comparison(claimed, effect, spread, n, p_tost, interval, verdict, margin, None, "TOST (paired)")
    if claimed == "no-worse":
        p_above, p_below = p_greater(-margin), p_less(-margin)
        verdict = "holds" if p_above < alpha else "fails" if p_below < alpha else "inconclusive"
        return Comparison(claimed, effect, spread, n, p_above, interval, verdict, margin, None,
                          "one-sided paired t-test (non-inferiority)")
    verdict = _directional_verdict(claimed, effect, p_two, interval, smallest_effect, alpha)
    return Comparison(claimed, effect, spread, n, p_two, interval, verdict, None, smallest_effect)


def _directional_verdict(claimed: str, effect: float, p: float, interval: tuple[float, float],
                         smallest_effect: float | None, alpha: float) -> str:
    """The rule for "increase"/"decrease" claims: ``holds`` the claimed way with p < alpha (and not
    short of the paper's smallest effect); ``fails`` the other way with p < alpha, or when the interval's
    far end in the claimed direction stays short of ``smallest_effect``; else ``inconclusive``."""
    sign = 1.0 if claimed == "increase" else -1.0
    toward = sign * effect > 0
    short_of_paper = smallest_effect is not None and sign * (interval[1] if sign > 0 else interval[0]) < smallest_effect
    if toward and p < alpha and not short_of_paper:
        return "holds"
    if (not toward and effect != 0 and p < alpha) or short_of_paper:
        return "fails"
    return "inconclusive"


def compare_variance(treatment: Sequence[float], control: Sequence[float], claimed: str, *,
                     smallest_effect: float | None = None, alpha: float = ALPHA) -> Comparison:
    """Judge the seed variance of ``treatment`` against that of ``control`` (paired by seed).

    effect = log(s_t^2 / s_c^2), the log ratio of the sample variances; ``claimed`` "decrease"
    (treatment steadier) or "increase". The samples are paired (same seeds, shared initial weights
    and data order), so the test is Pitman-Morgan's: var(t) = var(c) iff corr(t + c, t - c) = 0,
    tested by the t statistic r sqrt(n - 2) / sqrt(1 - r^2) on n - 2 degrees of freedom (two-sided).
    The 95% interval of the variance ratio is F (K -+ sqrt(K^2 - 1)) with F = s_t^2 / s_c^2,
    K = 1 + 2 (1 - rho^2) t^2 / (n - 2), rho = corr(t, c), t the t quantile on n - 2 degrees of freedom
    (Pitman 1939); reported on the log scale. spread = sd over seeds of the differences t - c.
    Verdict, as :func:`compare`: ``holds`` when the ratio goes the claimed way with p < alpha,
    ``fails`` when it goes the other way with p < alpha or the interval excludes ``smallest_effect``
    (a positive log variance ratio in the claimed direction), else ``inconclusive``. Fewer than three
    seeds (no degree of freedom) are always ``inconclusive``.
    """
    from scipy import stats

    if claimed not in ("increase", "decrease"):
        raise ValueError(f"a variance comparison claims 'increase' or 'decrease', got {claimed!r}")
    a, b = np.asarray(treatment, dtype=float), np.asarray(control, dtype=float)
    if a.shape != b.shape or a.ndim != 1:
        raise ValueError(f"paired samples must be two equal-length vectors, got {a.shape} and {b.shape}")
    n = len(a)
    test = "Pitman-Morgan paired variance test"
    if n < 3:
        return Comparison(claimed, math.nan, math.nan, n, math.nan, (math.nan, math.nan), "inconclusive",
                          None, smallest_effect, test)
    var_a, var_b = float(a.var(ddof=1)), float(b.var(ddof=1))
    spread = float((a - b).std(ddof=1))
    if var_a == 0 or var_b == 0:  # a constant side: decided by which side varies
        effect = math.inf if var_b == 0 < var_a else -math.inf if var_a == 0 < var_b else 0.0
        p, interval = (0.0 if effect else 1.0), (effect, effect)
    else:
        effect = math.log(var_a / var_b)
        s, d = a + b, a - b
        r = float(np.corrcoef(s, d)[0, 1]) if s.std() > 0 and d.std() > 0 else 0.0
        df = n - 2
        p = 0.0 if abs(r) >= 1 else float(2 * stats.t.sf(abs(r) * math.sqrt(df / (1 - r * r)), df))
        rho = float(np.corrcoef(a, b)[0, 1]) if a.std() > 0 and b.std() > 0 else 0.0
        tq = float(stats.t.ppf(1 - alpha / 2, df))
        k = 1 + 2 * (1 - rho * rho) * tq * tq / df
        root = math.sqrt(k * k - 1)
        interval = (effect + math.log(k - root), effect + math.log(k + root))
    verdict = _directional_verdict(claimed, effect, p, interval, smallest_effect, alpha)
    return Comparison(claimed, effect, spread, n, p, interval, verdict, None, smallest_effect, test)
