"""The compiled primitives of qkdyn.theory.kernels."""
import math

import numpy as np
from numba import njit
from qkdyn.theory.kernels import _EXP2_TABLE, lane_exp, lane_expit, lane_expit_pair


@njit
def _lane_exps(xs):
    out = np.empty(xs.size)
    for i in range(xs.size):
        out[i] = lane_exp(xs[i])
    return out


def test_lane_exp_is_within_one_ulp_of_exp_and_exact_at_the_ends():
    """On 3e6 random points of the normal range (and where the field's arguments live) and on the table's
    nodes lane_exp is within one ulp of numpy's e^x; past the ends (0, subnormals, inf), at zero and for
    NaN it gives numpy's value exactly."""
    rng = np.random.default_rng(0)
    xs = np.concatenate([rng.uniform(-708, 709.7, 10**6), rng.uniform(-2, 2, 10**6), rng.uniform(-40, 40, 10**6),
                         np.arange(-512, 513) * math.log(2) / 512])
    ours, theirs = _lane_exps(xs), np.exp(xs)
    assert np.max(np.abs(ours - theirs) / np.spacing(theirs)) <= 1.0
    special = np.array([-np.inf, -800.0, -745.2, -745.1, -740.0, 0.0, -0.0, 1e-300, 709.78, 709.79, 710.0, 800.0, np.inf])
    with np.errstate(over="ignore"):
        assert np.array_equal(_lane_exps(special), np.exp(special))
    assert np.isnan(_lane_exps(np.array([np.nan]))[0])


@njit
def _expit_pairs(xs):
    out = np.empty((4, xs.size))
    for i in range(xs.size):
        out[0, i], out[1, i] = lane_expit_pair(xs[i])
        out[2, i], out[3, i] = lane_expit(xs[i]), lane_expit(-xs[i])
    return out


def test_lane_expit_pair_is_lane_expit_at_x_and_minus_x_to_the_bit():
    """lane_expit_pair(x) shares one exponential between expit(x) and expit(-x): the same bits as two calls of
    lane_expit, at random points, zero of either sign, past the exponential's ends, the infinities and NaN."""
    rng = np.random.default_rng(1)
    xs = np.concatenate([rng.normal(0, 3, 10**5), rng.uniform(-800, 800, 10**5),
                         [0.0, -0.0, 1e-300, -1e-300, 745.2, -745.2, 800.0, -800.0, np.inf, -np.inf, np.nan]])
    pair, alone = _expit_pairs(xs)[:2], _expit_pairs(xs)[2:]
    assert np.array_equal(pair, alone, equal_nan=True)
    assert np.isnan(pair[:, -1]).all()


def test_the_exp2_table_holds_the_nearest_doubles():
    """Each 2^(j/size) in the table is the double nearest to it: checked with exact rationals (the
    midpoints to its neighbours one ulp either side bracket 2^(j/size): their size-th powers bracket 2^j)."""
    from fractions import Fraction

    size = len(_EXP2_TABLE)
    for j, value in enumerate(_EXP2_TABLE):
        target = Fraction(2) ** j
        below, above = Fraction(np.nextafter(value, 0)), Fraction(np.nextafter(value, 4))
        mid_lo, mid_hi = (below + Fraction(value)) / 2, (above + Fraction(value)) / 2
        assert mid_lo**size <= target <= mid_hi**size, j
