"""Small scalar helpers of the compiled matched-loss closed form (:mod:`qkdyn.simulate.closedform`,
:mod:`qkdyn.simulate.qkline`), inlined where they are used: clipping, binary search, log(1 + e^y), an
insertion sort, and the safeguarded Newton step (rtsafe) of every root the closed form finds.
"""
from __future__ import annotations

import math
import sys

from qkdyn.theory.kernels import cached_njit

_inline = cached_njit(error_model="numpy", inline="always")  # small helpers: no call boundary


@_inline
def clip(x, lo, hi):
    """x clipped to [lo, hi]."""
    return hi if x > hi else lo if x < lo else x


@_inline
def logaddexp0(y):
    """log(1 + e^y) (numpy's logaddexp(0, y))."""
    if y == 0.0:
        return math.log(2.0)
    return y + math.log1p(math.exp(-y)) if y > 0 else math.log1p(math.exp(y))


@_inline
def search(values, row, start, stop, x, right):
    """numpy's searchsorted(values[row, start:stop], x, side) as an index into the row."""
    lo, hi = start, stop
    while lo < hi:
        mid = (lo + hi) // 2
        if values[row, mid] < x or (right and values[row, mid] == x):
            lo = mid + 1
        else:
            hi = mid
    return lo


#: log of the largest double: e^x overflows beyond it
LOG_DOUBLE_MAX = math.log(sys.float_info.max)


@_inline
def _split(lo, hi):
    """Bisection point of [lo, hi]: the midpoint, or, for a bracket much wider than its distance from
    0, lo + sqrt(w (hi - lo)), w = max(|lo|, 1) (a bracket spanning 1e300 shrinks in about ten steps),
    as sqrt(w) sqrt(hi - lo) where the product w (hi - lo) overflows (a bracket from 1e200 to 1e300)."""
    width, scale = hi - lo, max(abs(lo), 1.0)
    if width <= 4 * scale:
        return lo + 0.5 * width
    root = math.sqrt(scale * width)
    return lo + (root if root < math.inf else math.sqrt(scale) * math.sqrt(width))


@_inline
def rtsafe_step(x, value, slope, lo, hi, before_last, last, run, convex, tol, floor):
    """One step of the safeguarded Newton iteration for a root of an increasing function: Newton, or
    bisection when it leaves [lo, hi], lands on its other end from further than the tolerance (round-off: see
    below), or (unless ``convex``: Newton from above is then monotone) does not halve the step before last.
    ``run``: how many Newton steps in a row led to x (0 at the start).
    Returns (x, lo, hi, before_last, last, run, done): done once the step (or the bracket) is below tol
    (floor + |x|), or steps below 1e3 times that stop shrinking (round-off), or three Newton steps
    d_{k-2}, d_{k-1}, d_k show quadratic convergence e_{k+1} ~ K d_k^2: K estimated from each pair,
    K_1 = d_{k-1} / d_{k-2}^2 and K_2 = d_k / d_{k-1}^2, agreeing (K_2 <= 10 K_1) and both predicting
    K d_k^2 below 1e-3 of the tolerance, i.e. a rounding (the step that would confirm it is not taken:
    one evaluation fewer; at the tolerance itself a CAFO qk was 7e-12 off, where the confirmed step leaves
    it at round-off). One pair alone is no evidence: a first step of 8e6 from a bracket end onto a root of
    a curve straight on that scale but not near the root (CACO, z* = 746) gave K_2 = 3e-15 where the root's
    own K is 4e-7, and stopped with ov 2e-11 off."""
    if value < 0:
        lo = x
    if value > 0:
        hi = x
    new = x - value / slope
    scale = tol * (floor + abs(x))
    bad = not math.isfinite(new) or new < lo or new > hi
    if not convex and abs(new - x) > 0.5 * before_last:
        bad = True
    # Newton back onto the bracket's other end: the values there are round-off (a factorized QK line at
    # Phi - Phi(qk0) = -3.5e6, rounded to 4.7e-10, swung between two ends 6.5e-10 apart for ever)
    if new == (lo if value > 0 else hi) and abs(new - x) > scale:
        bad = True
    if bad:
        new = _split(lo, hi)
    step = abs(new - x)
    quadratic = False
    if not bad and run >= 2 and step <= 1e-2 * last:
        k_1, k_2 = last / before_last / before_last, step / last / last  # (ratios: no overflow for steps of 1e200)
        quadratic = k_2 <= 10 * k_1 and max(k_1, k_2) * step * step <= 1e-3 * scale
    done = step <= scale or hi - lo <= 4 * scale or (step <= 1e3 * scale and step >= 0.5 * last) or quadratic
    if value == 0:
        return x, lo, hi, last, step, run + 1, True
    return new, lo, hi, last, step, 0 if bad else run + 1, done


@_inline
def insertion_sort(values):
    """Sort in place (the path samples: a few sorted runs, for which this is the fast sort)."""
    for i in range(1, values.size):
        x, j = values[i], i - 1
        while j >= 0 and values[j] > x:
            values[j + 1] = values[j]
            j -= 1
        values[j + 1] = x
