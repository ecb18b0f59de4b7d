"""A trajectory at any time (``Trajectory.at``, ``tr(t)``) from the solver's dense output, and its plot."""
import pickle

import numpy as np
import pytest

import qkdyn
from qkdyn import figures
from qkdyn.errors import InputError

SETTING = qkdyn.Setting(eta_qk=3.0)
DEEP = qkdyn.Spec("deep", qk=qkdyn.CircuitSpec("factorized", depth=3))


@pytest.mark.parametrize("method", ["DOP853", "LSODA"])
def test_at_the_stored_rows_gives_the_stored_rows_exactly(method):
    tr = qkdyn.solve(SETTING, "FAFO", until_loss=1e-3, record_losses=(0.5,), method=method, points=40)
    assert tr.stats["method"] == method
    again = tr.at(tr.t)
    assert np.array_equal(again.t, tr.t) and np.array_equal(again.state, tr.state)
    assert np.array_equal(again.attn, tr.attn) and np.array_equal(again.loss, tr.loss)
    if method == "LSODA":  # the precondition that makes this case bite: LSODA's interpolant misses the exact init
        assert not np.array_equal(tr.dense(tr.t[:1])[:, 0], tr.state[:, 0])


def _between_rows(tr, count: int) -> np.ndarray:
    """``count`` times, each the geometric midpoint of two consecutive positive rows, spread over the span."""
    positive = tr.t[tr.t > 0]
    mids = np.sqrt(positive[:-1] * positive[1:])
    return mids[np.linspace(0, len(mids) - 1, count).round().astype(int)]


@pytest.mark.parametrize("param", ["CACO", "FAFO", DEEP], ids=["CACO", "FAFO", "spec"])
def test_between_rows_it_agrees_with_a_fresh_solve_ending_there(param):
    """A solve to t_max = t ends with a step at t exactly: the interpolant must agree with it within 1e-9 at
    the default rtol 1e-11 (docs/api.md; the interpolant is up to about 100x less accurate than the step ends)."""
    tr = qkdyn.solve(SETTING, param, t_max=1e6, points=25)
    times = _between_rows(tr, 5)
    assert not np.isin(times, tr.t).any()  # between the rows, not on them
    read = tr.at(times)
    for j, t in enumerate(times):
        fresh = qkdyn.solve(SETTING, param, t_max=float(t), points=2)
        assert fresh.t[-1] == t
        np.testing.assert_allclose(read.state[:, j], fresh.state[:, -1], rtol=1e-9, atol=1e-13)
        np.testing.assert_allclose(read.attn[j], fresh.attn[-1], rtol=1e-9)


def test_at_is_vectorised_in_any_order_and_call_is_at():
    tr = qkdyn.solve(SETTING, "CACO", t_max=1e8, points=30)
    times = np.array([1e7, 0.0, 3.5, 1e8, 42.0])
    together = tr.at(times)
    assert np.array_equal(together.t, times)
    for j, t in enumerate(times):
        alone = tr(t)
        assert alone.t.shape == (1,) and np.array_equal(alone.state[:, 0], together.state[:, j])
    assert np.array_equal(tr(times).state, together.state)
    assert type(tr.at(1.0)) is qkdyn.Trajectory and type(qkdyn.solve(SETTING, DEEP, t_max=10.0).at(1.0)).__name__ == "SpecTrajectory"


def test_a_sweeps_trajectories_read_their_own_steps():
    settings = [SETTING.replace(eta_qk=rho) for rho in (0.5, 3.0, 20.0)]
    swept = qkdyn.solve(settings, "CACO", t_max=1e8, points=20)
    times = _between_rows(swept[1], 6)
    for one, tr in zip(settings, swept, strict=True):
        assert np.array_equal(tr.at(times).state, qkdyn.solve(one, "CACO", t_max=1e8, points=20).at(times).state)


def test_a_trajectory_pickles_with_its_dense_output():
    tr = qkdyn.solve(SETTING, "FACO", t_max=1e5, points=10)
    times = _between_rows(tr, 3)
    assert np.array_equal(pickle.loads(pickle.dumps(tr)).at(times).state, tr.at(times).state)


@pytest.mark.parametrize("t,message", [
    (2e6, r"within \[0, 1e\+06\]"), (-1.0, "within"), (np.nan, "within"), ([[1.0, 2.0]], "1-D"), ("soon", "number"),
])
def test_times_outside_the_span_or_not_times_are_input_errors(t, message):
    tr = qkdyn.solve(SETTING, "CACO", t_max=1e6, points=10)
    with pytest.raises(InputError, match=message):
        tr.at(t)


def test_after_a_loss_target_the_span_ends_at_the_event():
    tr = qkdyn.solve(SETTING, "CACO", until_loss=0.1)
    assert tr.at(tr.event_t).loss[0] == tr.loss[-1]
    with pytest.raises(InputError, match="span solved"):
        tr.at(tr.event_t * (1 + 1e-9))


def test_a_trajectory_without_dense_output_says_so():
    tr = qkdyn.solve(SETTING, "CACO", t_max=10.0, points=5)
    bare = qkdyn.Trajectory(tr.param, tr.setting, tr.t, tr.state, tr.variables, tr.event_t, tr.stats)
    with pytest.raises(InputError, match="no dense output"):
        bare.at(1.0)


def test_plot_draws_each_quantity_against_t_and_overlays_on_given_axes():
    fast = qkdyn.solve(qkdyn.Setting(eta_qk=10.0), "FAFO", until_loss=1e-3)
    slow = qkdyn.solve(qkdyn.Setting(), "FAFO", until_loss=1e-3)
    axes = fast.plot()
    assert len(axes) == 4 and list(slow.plot(axes=axes)) == list(axes)
    fig = axes[0].figure
    try:
        assert figures.layout_problems(fig) == []
        for ax, name in zip(axes, ("attn", "loss", "qk", "ov"), strict=True):
            assert ax.get_xscale() == "log" and ax.get_yscale() == ("log" if name == "loss" else "linear")
            (first, second) = ax.get_lines()
            assert np.array_equal(first.get_xdata(), fast.t[1:]) and np.array_equal(second.get_ydata(),
                                                                                     getattr(slow, name)[1:])
        assert [text.get_text() for text in axes[0].get_legend().get_texts()] == ["FAFO, rho = 10", "FAFO, rho = 1"]
    finally:
        import matplotlib.pyplot as plt

        plt.close(fig)


def test_plot_refuses_unknown_quantities_and_a_wrong_number_of_axes():
    import matplotlib.pyplot as plt

    tr = qkdyn.solve(SETTING, "CACO", t_max=10.0, points=5)
    with pytest.raises(InputError, match="'odds'"):
        tr.plot(("attn", "odds"))
    one = tr.plot(("attn",))
    with pytest.raises(InputError, match="one Axes per quantity"):
        tr.plot(("attn", "loss"), axes=one)
    plt.close(one[0].figure)
