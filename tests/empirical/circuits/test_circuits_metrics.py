"""Metric functions of qkdyn.empirical.circuits.metrics against hand-computed values and brute force."""
import itertools
import math

import numpy as np
import pytest
from qkdyn.empirical.circuits import metrics as M


def test_head_and_layer_combinations_by_hand():
    att = np.array([[[1.0, 0.0], [0.5, 0.5]], [[1.0, 0.0], [0.1, 0.9]]])
    np.testing.assert_allclose(M.head_mean(att), [[1.0, 0.0], [0.3, 0.7]])
    a, b = np.array([[1.0, 0.0], [0.2, 0.8]]), np.array([[1.0, 0.0], [0.6, 0.4]])
    np.testing.assert_allclose(M.layer_average([a, b]), [[1.0, 0.0], [0.4, 0.6]])
    np.testing.assert_allclose(M.layer_maxpool([a, b]), [[1.0, 0.0], [0.6, 0.8]])
    # rollout: A' = (A + I)/2 (rows already sum to 1), R = B' A'
    a2, b2 = np.array([[1.0, 0.0], [0.1, 0.9]]), np.array([[1.0, 0.0], [0.3, 0.7]])
    np.testing.assert_allclose(M.rollout([a, b]), b2 @ a2)
    assert np.allclose(M.rollout([a, b]).sum(1), 1.0)


def test_rationale_mass_averages_annotators_and_is_nan_without_rationale():
    row = np.array([0.1, 0.2, 0.3, 0.4])
    assert M.rationale_mass(row, [(0, 3), (2,)]) == pytest.approx((0.5 + 0.3) / 2)
    assert math.isnan(M.rationale_mass(row, []))
    assert math.isnan(M.rationale_mass(row, [()]))


def test_ac_acmc_and_areas_by_hand():
    mass = np.array([0.1, 0.6, 0.8, np.nan])
    conf = np.array([0.95, 0.5, 0.99, 0.99])
    th = np.array([0.0, 0.5, 0.7, 1.0])
    np.testing.assert_allclose(M.ac_curve(mass, th), [1.0, 2 / 3, 1 / 3, 0.0])
    np.testing.assert_allclose(M.acmc_curve(mass, conf, th, 0.9), [2 / 3, 1 / 3, 1 / 3, 0.0])
    assert M.curve_area(np.array([0.0, 0.5, 1.0]), np.array([1.0, 0.5, 0.0])) == pytest.approx(0.5)
    # the area under AC over [0, 1] is the mean mass (up to the grid)
    m = np.random.default_rng(0).random(500)
    grid = np.linspace(0, 1, 2001)
    assert M.curve_area(grid, M.ac_curve(m, grid)) == pytest.approx(m.mean(), abs=2e-3)


def test_dtap_histogram_by_hand():
    mass = np.array([0.05, 0.25, 1.0, 0.99, np.nan])
    p = np.array([0.05, 0.05, 1.0, 0.81, 0.5])
    h = M.dtap_histogram(mass, p)
    expected = np.zeros((5, 5))
    expected[0, 0] = expected[1, 0] = expected[4, 4] = 1
    expected[4, 4] += 1
    np.testing.assert_allclose(h, 100 * expected / 4)
    assert h.sum() == pytest.approx(100)


def test_top_positions_counts_ceil_and_breaks_ties_by_position():
    imp = np.array([0.1, 0.5, 0.5, 0.2, 0.0])
    assert M.top_positions(imp, [0, 1, 2, 3], 0.05) == [1]
    assert M.top_positions(imp, [0, 1, 2, 3], 0.5) == [1, 2]
    assert M.top_positions(imp, [0, 2, 3], 0.5) == [2, 3]


def _toy_model(xs):
    """p(class 1) = sigmoid(sum of token values - 3), a deterministic stand-in for a model."""
    z = np.array([sum(x) - 3.0 for x in xs])
    p1 = 1 / (1 + np.exp(-z))
    return np.stack([1 - p1, p1], axis=1)


def _brute_force(inputs, importances, keep, fractions):
    """ERASER written out directly: for each example, enumerate subsets of removable positions of
    the right size and pick the one with the largest total importance (first by position order)."""
    comp = {f: [] for f in fractions}
    suff = {f: [] for f in fractions}
    for x, imp, fixed in zip(inputs, importances, keep, strict=True):
        full = _toy_model([x])[0]
        y = int(np.argmax(full))
        cand = [p for p in range(len(x)) if p not in fixed]
        for f in fractions:
            k = max(1, math.ceil(f * len(cand)))
            best = max(itertools.combinations(cand, k), key=lambda s: (sorted(imp[list(s)])[::-1], [-p for p in s]))
            best = set(best)
            without = [t for p, t in enumerate(x) if p not in best]
            only = [t for p, t in enumerate(x) if p in best or p in fixed]
            comp[f].append(full[y] - _toy_model([without])[0][y])
            suff[f].append(full[y] - _toy_model([only])[0][y])
    return comp, suff


def test_eraser_matches_brute_force():
    rng = np.random.default_rng(1)
    inputs = [list(rng.integers(0, 3, size=n)) for n in (3, 5, 8, 6)]
    importances = [rng.permutation(len(x)).astype(float) for x in inputs]
    keep = [[len(x) - 1] for x in inputs]
    fractions = (0.05, 0.2, 0.5)
    got = M.eraser(_toy_model, inputs, importances, keep, fractions)
    comp, suff = _brute_force(inputs, importances, keep, fractions)
    for f in fractions:
        assert got[f"comprehensiveness@{f:g}"] == pytest.approx(np.mean(comp[f]))
        assert got[f"sufficiency@{f:g}"] == pytest.approx(np.mean(suff[f]))
    assert got["comprehensiveness_aopc"] == pytest.approx(np.mean([np.mean(comp[f]) for f in fractions]))
    assert got["sufficiency_aopc"] == pytest.approx(np.mean([np.mean(suff[f]) for f in fractions]))


def test_accuracy_and_macro_f1_by_hand():
    y, p = np.array([0, 0, 1, 1, 2]), np.array([0, 1, 1, 1, 0])
    assert M.accuracy(y, p) == pytest.approx(0.6)
    # class 0: tp1 fp1 fn1 -> 0.5; class 1: tp2 fp1 fn0 -> 0.8; class 2: tp0 -> 0
    assert M.macro_f1(y, p) == pytest.approx((0.5 + 0.8 + 0.0) / 3)


def test_squad_normalisation_em_and_f1():
    assert M.normalize_answer("The  Eiffel-Tower, a tower!") == "eiffeltower tower"
    assert M.squad_em("the Eiffel Tower", ["Eiffel Tower", "Paris"]) == 1.0
    assert M.squad_em("Eiffel", ["Eiffel Tower"]) == 0.0
    # pred {eiffel}, gold {eiffel, tower}: P=1, R=1/2 -> F1 = 2/3
    assert M.squad_f1("Eiffel", ["Eiffel Tower"]) == pytest.approx(2 / 3)
    assert M.squad_f1("Paris", ["Eiffel Tower", "in Paris"]) == pytest.approx(2 / 3)
    assert M.squad_f1("", ["a"]) == 1.0  # both empty after normalisation


def test_authors_mass_divides_by_three_slots_and_counts_empty_posts_as_zero():
    row = np.array([0.5, 0.1, 0.3, 0.1])
    assert M.authors_rationale_mass(row, [(0, 3), (2,)]) == pytest.approx((0.6 + 0.3) / 3)
    assert M.authors_rationale_mass(row, []) == 0.0  # the standard definition leaves this post out (NaN)
    assert M.authors_rationale_mass(row, [(0, 1, 2, 3)]) == pytest.approx(1 / 3)


def test_authors_dtap_uses_their_bins():
    mass, p_true = np.array([0.1, 0.5, 0.9, 1.0]), np.array([0.2, 0.2, 0.7, 1.0])
    hist = M.authors_dtap(mass, p_true, M.AUTHORS_DTAP_EDGES["hatexplain"])
    assert hist.shape == (3, 3) and hist.sum() == pytest.approx(100)
    assert hist[0, 0] == 25 and hist[1, 0] == 25 and hist[2, 2] == 50  # 1.0 falls in the last bin (edge 1.1)


def test_positional_nulls_on_a_hand_made_example():
    """Four items (read-out r, rationales read-out excluded): r = 3 subject at 1; r = 2 subject at 1 (the token
    before the read-out); r = 4 with two annotators, {0} and {0, 3} (one-hot weights: position 0 -> 1,
    position 3 -> 1/2); r = 1 without a rationale (left out). By hand over the three:
    uniform (1/4 + 1/3 + (1/5 + 2/5) / 2) / 3; previous token (0 + 1 + 1/2) / 3 = 1/2;
    offsets k = 1..4: 1/2, 1/3, 0, 1/3 (k = 4 is clipped to position 0 in every item) -> best k = 1;
    absolute p = 0..4: 1/3, 2/3, 0, 1/6 (p = 3 beyond item two's read-out falls on it: 0), 0 -> best p = 1."""
    nulls = M.positional_masses([3, 2, 4, 1], [((1,),), ((1,),), ((0,), (0, 3)), ((),)])
    assert nulls == pytest.approx({"n": 3, "uniform": (1 / 4 + 1 / 3 + 0.3) / 3, "previous_token": 0.5,
                                   "best_offset": 0.5, "best_offset_k": 1, "best_absolute": 2 / 3,
                                   "best_absolute_p": 1})
    # without the adjacent item the previous-token head fails; offset 2 and position 0 tie with offset 4 / p 1
    far = M.positional_masses([3, 4], [((1,),), ((0,), (0, 3))])
    assert far == pytest.approx({"n": 2, "uniform": (1 / 4 + 0.3) / 2, "previous_token": 0.25, "best_offset": 0.5,
                                 "best_offset_k": 2, "best_absolute": 0.5, "best_absolute_p": 0})
    empty = M.positional_masses([2], [((),)])
    assert empty["n"] == 0 and math.isnan(empty["best_offset"]) and empty["best_offset_k"] == -1
    np.testing.assert_allclose(M.rationale_weights([((0,), (0, 3)), ((),)], 5)[0], [1, 0, 0, 0.5, 0])
    assert np.isnan(M.rationale_weights([((),)], 3)).all()
