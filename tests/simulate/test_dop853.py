"""The written-out DOP853 combinations (qkdyn.simulate.dop853) are current and equal the loops over SciPy's
tables bit for bit."""
import ctypes

import numpy as np
from qkdyn.simulate import dop853, stagegen
from scipy.integrate._ivp import dop853_coefficients as dop


def test_the_generated_module_is_current():
    assert stagegen.TARGET.read_text() == stagegen.source(), "run python -m qkdyn.simulate.stagegen"


def _table_sum(coefficients, K, i, k_first=False):
    acc = 0.0
    for j, c in enumerate(coefficients):
        acc += K[j, i] * c if k_first else c * K[j, i]
    return acc


def _c(combination, *args):
    """Call a combination's C function on arrays (as pointers to their data) and integers."""
    double = ctypes.POINTER(ctypes.c_double)
    combination.ctypes(*(a.ctypes.data_as(double) if isinstance(a, np.ndarray) else a for a in args))


def test_every_combination_equals_the_table_loop_bit_for_bit():
    """Random stages over many magnitudes and signs, exact zeros among them, for up to 7 components in up
    to 19 lanes (SIMD loops and their remainders), a step per element: each written-out sum equals the
    full loop over the table (zero coefficients included) in the same order."""
    rng = np.random.default_rng(7)
    for _ in range(20):
        dim, lanes = int(rng.integers(1, 8)), int(rng.integers(1, 20))
        n = dim * lanes
        K = rng.standard_normal((16, n)) * 10.0 ** rng.integers(-300, 300, (16, n))
        K[rng.random((16, n)) < 0.2] = 0.0
        K[rng.random((16, n)) < 0.1] = -0.0
        y, h = rng.standard_normal(n), rng.uniform(1e-6, 3.0, n)
        out = np.empty(n)
        for s in range(1, 16):
            _c(dop853.stage_state, y, h, K, s, out, n)
            assert np.array_equal(out, [y[i] + h[i] * _table_sum(dop.A[s, :s], K, i) for i in range(n)]), s
        _c(dop853.solution, y, h, K, out, n)
        assert np.array_equal(out, [y[i] + h[i] * _table_sum(dop.B, K, i) for i in range(n)])
        e5, e3 = np.empty(n), np.empty(n)
        _c(dop853.error_sums, K, e5, e3, n)
        for i in range(n):
            assert (e5[i], e3[i]) == (_table_sum(dop.E5, K, i, True), _table_sum(dop.E3, K, i, True))
        rows = np.empty((4, n))
        _c(dop853.dense_rows, K, h, rows, n)
        assert np.array_equal(rows, [[h[i] * _table_sum(dop.D[r], K, i) for i in range(n)] for r in range(4)])
