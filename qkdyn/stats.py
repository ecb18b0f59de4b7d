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

Power (every comparison carries it, :func:`detectable_effect`, :func:`seeds_needed`): at the measured
spread s over n seeds, ``mde`` is the smallest true effect the design detects with 80% power, and
``seeds_needed`` how many seeds the paper's effect (``paper_effect``: the smallest effect or the
margin unless given) would need for 80% power at that spread. For the paired t-test, power is that
of the noncentral t with n - 1 degrees of freedom and noncentrality delta sqrt(n) / s; for TOST
(true difference 0) and non-inferiority (true difference at the claimed side's edge) the shifted
central t: power = 2 F_t(m / se - t_{1-alpha}) - 1 and F_t(m / se - t_{1-alpha}); for the variance
test, Fisher's z of the Pitman-Morgan correlation: |log F| >= 2 (z_{1-alpha/2} + z_power) / sqrt(n - 3)
(F the variance ratio, uncorrelated sides).

Censored values (:func:`compare_censored`: a value known only as a lower bound, e.g. a run that
never reached its target) are decided only where the bounds decide: by the exact one-sided sign
test, which raising a bound cannot overturn; never by a t-test on bounds (their spread is not the
data's, and identical bounds would give p = 0). Paired times to a target where either side may be
censored (:func:`compare_censored_times`) are decided the same way, on the order of each pair.
"""
from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

import numpy as np

ALPHA = 0.05
POWER = 0.8
CLAIMS = ("increase", "decrease", "same", "no-worse")
#: the largest seed count the power planner considers
MAX_SEEDS = 10_000


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
    mde: float = math.nan
    paper_effect: float | None = None
    seeds_needed: int | None = None
    censored: int = 0

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)

    def describe(self) -> str:
        """One line for reports: effect +- spread (n seeds), interval, p, and the design's power."""
        lo, hi = self.interval
        return (f"effect {self.effect:+.4g} (sd {self.spread:.3g} over {self.n} seeds; 95% CI "
                f"[{lo:+.4g}, {hi:+.4g}]), {self.test} p = {self.p_value:.3g}; {power_line(self.as_dict())}")


def power_line(comparison: dict) -> str:
    """The design's power in words: the smallest effect detected with 80% power, seeds the paper's effect needs."""
    mde, need, paper = comparison.get("mde", math.nan), comparison.get("seeds_needed"), comparison.get("paper_effect")
    text = "power not computable" if math.isnan(mde) else f"detects >= {mde:.3g} with {POWER:.0%} power"
    if paper is not None:
        text += (f"; the paper's {paper:.3g} needs {need} seeds" if need is not None
                 else f"; the paper's {paper:.3g} needs more than {MAX_SEEDS} seeds")
    return text


def _t_power(kind: str, delta: float, spread: float, n: int, alpha: float = ALPHA) -> float:
    """Power of the paired test ``kind`` over ``n`` seeds at spread ``spread`` (module docstring):
    "two-sided" at true effect ``delta``; "tost" (margin ``delta``, true difference 0); "one-sided"
    (distance ``delta`` between the true difference and the bound)."""
    from scipy import stats

    if n < 2:
        return math.nan
    df = n - 1
    if spread == 0:
        return 1.0 if delta > 0 else 0.0
    se = spread / math.sqrt(n)
    if kind == "two-sided":
        crit = stats.t.ppf(1 - alpha / 2, df)
        nc = delta / se
        far = float(stats.nct.cdf(-crit, df, nc))  # the wrong-sign tail: NaN in scipy where it underflows
        return float(stats.nct.sf(crit, df, nc)) + (0.0 if math.isnan(far) else far)
    shift = delta / se - stats.t.ppf(1 - alpha, df)
    if kind == "tost":
        return float(max(0.0, 2 * stats.t.cdf(shift, df) - 1))
    return float(stats.t.cdf(shift, df))


def detectable_effect(kind: str, spread: float, n: int, power: float = POWER, alpha: float = ALPHA) -> float:
    """The smallest effect (or margin, for "tost") the paired design detects with ``power``; NaN
    below two seeds or at an unknown spread. ``kind``: "two-sided", "tost", "one-sided", or
    "variance" (log variance ratio, Pitman-Morgan via Fisher's z; infinite at n <= 3)."""
    from scipy import optimize, stats

    if not (n >= 2 and spread == spread):
        return math.nan
    if kind == "variance":
        if n <= 3:
            return math.inf
        return 2 * float(stats.norm.ppf(1 - alpha / 2) + stats.norm.ppf(power)) / math.sqrt(n - 3)
    if spread == 0:
        return 0.0
    hi = 1.0  # the detectable effect is linear in the spread: solve at spread 1
    while _t_power(kind, hi, 1.0, n, alpha) < power:
        hi *= 2
    return spread * float(optimize.brentq(lambda d: _t_power(kind, d, 1.0, n, alpha) - power, 0.0, hi, xtol=1e-12))


def seeds_needed(kind: str, effect: float | None, spread: float, n: int | None = None, power: float = POWER,
                 alpha: float = ALPHA) -> int | None:
    """The fewest seeds (>= 2; >= 4 for "variance") at which the paired design detects ``effect`` with
    ``power`` at ``spread``; None when the effect or spread is unknown or more than :data:`MAX_SEEDS`
    would be needed."""
    if effect is None or not effect > 0 or not spread == spread:
        return None
    if kind == "variance":
        from scipy import stats

        z = float(stats.norm.ppf(1 - alpha / 2) + stats.norm.ppf(power))
        need = 3 + math.ceil((2 * z / effect) ** 2)
        return need if need <= MAX_SEEDS else None
    if spread == 0:
        return 2
    effect = effect / spread  # power depends on effect / spread only
    lo, hi = 2, 2
    while _t_power(kind, effect, 1.0, hi, alpha) < power:
        if hi >= MAX_SEEDS:
            return None
        lo, hi = hi, min(2 * hi, MAX_SEEDS)
    while lo < hi:  # power rises with n: bisect for the first n that reaches it
        mid = (lo + hi) // 2
        lo, hi = (mid + 1, hi) if _t_power(kind, effect, 1.0, mid, alpha) < power else (lo, mid)
    return lo


def _with_power(c: Comparison, kind: str, paper_effect: float | None) -> Comparison:
    paper = paper_effect if paper_effect is not None else c.smallest_effect if c.smallest_effect is not None else c.margin
    return dataclasses.replace(c, mde=detectable_effect(kind, c.spread, c.n), paper_effect=paper,
                               seeds_needed=seeds_needed(kind, paper, c.spread, c.n))


def compare(treatment: Sequence[float], control: Sequence[float], claimed: str, *,
            smallest_effect: float | None = None, margin: float | None = None,
            alpha: float = ALPHA, paper_effect: float | None = None) -> Comparison:
    """Judge ``treatment - control`` (paired by position: one entry per seed) against a claim.

    ``smallest_effect`` (directional claims): the smallest effect the paper reports, as a positive
    magnitude in the claimed direction. ``margin`` (``"same"``, ``"no-worse"``): the largest difference
    that still counts as "the same" / "not worse", a positive number in the units of the data.
    ``paper_effect``: the effect the power plan sizes for (default ``smallest_effect``, else ``margin``).
    """
    kind = {"same": "tost", "no-worse": "one-sided"}.get(claimed, "two-sided")
    return _with_power(_compare(treatment, control, claimed, smallest_effect, margin, alpha), kind, paper_effect)


def _compare(treatment, control, claimed: str, smallest_effect, margin, alpha) -> Comparison:
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
                     smallest_effect: float | None = None, alpha: float = ALPHA,
                     paper_effect: float | None = None) -> Comparison:
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
        return _with_power(Comparison(claimed, math.nan, math.nan, n, math.nan, (math.nan, math.nan), "inconclusive",
                                      None, smallest_effect, test), "variance", paper_effect)
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
    return _with_power(Comparison(claimed, effect, spread, n, p, interval, verdict, None, smallest_effect, test),
                       "variance", paper_effect)


def compare_censored(values: Sequence[float], censored: Sequence[bool], claimed: str, *,
                     smallest_effect: float | None = None, alpha: float = ALPHA) -> Comparison:
    """Judge per-seed effects ``values`` (against 0) of which those flagged ``censored`` are lower bounds.

    Without censoring this is :func:`compare` against zeros. With it, the bounds decide only what
    raising them cannot change: the exact one-sided sign test. ``claimed`` "increase": ``holds`` when
    the seeds known to be above 0 (every value > 0, bounds included) make the binomial p =
    P(X >= k | n, 1/2) < alpha; ``fails`` when the uncensored seeds known to be below 0 do so the
    other way ("decrease": the roles swap). "Short of the paper's effect" cannot be shown (the bounds'
    true values may be larger). effect: mean of the values, bounds included (itself a lower bound);
    spread: their sd; no interval; ``censored``: how many are bounds. Power: no detectable effect is
    computable from bounds (``mde`` NaN); ``seeds_needed`` is the fewest seeds at which the sign test
    can decide at all (all seeds one way: p = 2^-n < alpha).
    """
    from scipy import stats

    a, cens = np.asarray(values, dtype=float), np.asarray(censored, dtype=bool)
    if a.shape != cens.shape or a.ndim != 1:
        raise ValueError("values and censored flags must be two equal-length vectors")
    if not cens.any():
        return compare(a, np.zeros_like(a), claimed, smallest_effect=smallest_effect, alpha=alpha)
    if claimed not in ("increase", "decrease"):
        raise ValueError(f"a censored comparison claims 'increase' or 'decrease', got {claimed!r}")
    n = len(a)
    above, below = int((a > 0).sum()), int(((a < 0) & ~cens).sum())  # bounds > 0 are known to be > 0
    p_up, p_down = (float(stats.binom.sf(k - 1, n, 0.5)) for k in (above, below))
    toward, against = (p_up, p_down) if claimed == "increase" else (p_down, p_up)
    verdict = "holds" if toward < alpha else "fails" if against < alpha else "inconclusive"
    p = against if verdict == "fails" else toward
    spread = float(a.std(ddof=1)) if n > 1 else math.nan
    fewest = math.ceil(math.log2(1 / alpha) + 1e-12)  # seeds at which all-one-way reaches p < alpha
    return Comparison(claimed, float(a.mean()), spread, n, p, (math.nan, math.nan), verdict, None, smallest_effect,
                      "exact sign test (censored values are lower bounds)", paper_effect=smallest_effect,
                      seeds_needed=fewest, censored=int(cens.sum()))


def known_order(treatment: tuple[float, bool], control: tuple[float, bool]) -> int:
    """+1 when the treatment's time is known to be shorter, -1 when the control's is, 0 for a tie or
    an unknown order; each side is (time, censored), a censored time only a lower bound:

    * both observed: the sign of control - treatment (equal: a tie);
    * one censored: the other shorter when it is below the censored bound (otherwise unknown);
    * both censored: unknown.
    """
    (t, t_cens), (c, c_cens) = treatment, control
    if t_cens and c_cens:
        return 0
    if t_cens:
        return -1 if c < t else 0
    if c_cens:
        return 1 if t < c else 0
    return int(np.sign(c - t))


def sign_test_power(n: int, alpha: float = ALPHA, power: float = POWER) -> tuple[int | None, float]:
    """The one-sided exact sign test over ``n`` pairs: the fewest pairs one way that give p < ``alpha``
    (None when even all ``n`` do not) and the probability q that a pair goes that way at which the
    test has ``power``: the q solving P(Binomial(n, q) >= k_alpha) = power."""
    from scipy import optimize, stats

    needed = next((k for k in range(n + 1) if stats.binom.sf(k - 1, n, 0.5) < alpha), None)
    if needed is None:
        return None, math.nan
    return needed, float(optimize.brentq(lambda q: stats.binom.sf(needed - 1, n, q) - power, 0.5, 1.0, xtol=1e-12))


def compare_censored_times(treatment: Sequence[tuple[float, bool]], control: Sequence[tuple[float, bool]],
                           alpha: float = ALPHA) -> Comparison:
    """Judge "the treatment needs less time" (steps to a target) over pairs matched by position; each
    entry (time, censored), a censored time only known to exceed its value (a run that never reached
    the target, read at its max steps).

    Per pair the effect is e = log(control time / treatment time) (times of at least 1). Without
    censoring this is :func:`compare` of the log times, claimed "increase". With it, only the *order*
    of a pair is used (:func:`known_order`): ties and unknown pairs drop out, and the exact one-sided
    sign test on the k of the pairs of known order (p = P(X >= k | n_known, 1/2)) gives ``holds``
    when the treatment-first pairs are significant at ``alpha``, ``fails`` when the control-first
    ones are, else ``inconclusive``. Its power: :func:`sign_test_power`.
    """
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
                      test=f"exact sign test over the {known} pairs of known order ({first} treatment first, {second} "
                      f"control first; censored runs read at their max steps)", censored=int(censored))
