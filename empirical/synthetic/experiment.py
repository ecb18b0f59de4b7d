"""One training run of the full model from the canonical init, and its distance from the ODE.

``run`` composes the pieces (model, per-circuit optimiser, batches, observer, loop) and returns one
row per recorded step with ``t = step * h``. ``flow_error`` compares rows with the reduced flow
solved by :func:`qkdyn.simulate.solve.solve` at exactly those times:

    err = max over rows and over f in (qk, ov) of |f_run(t) - f_ODE(t)| / |f_ODE(t)|.

For SGD this misses most of the noise: at a symmetric state the per-context gradient is linear in
the counts, and the orbit sums of the counts (m distinct, n common tokens) are the same for every
context, so the symmetric part of an SGD step *equals* the population step; the noise lives in the
directions off the symmetric subspace (and feeds back into qk, ov only at second order).
``sgd_deviation`` therefore adds, in quadrature, the relative distance from the symmetric subspace
(``sym_dist``; the flow lies in that subspace, and the orbit average is an orthogonal projection):

    dev = max over rows of sqrt(err(t)^2 + sym_dist(t)^2).
"""
from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Sequence

import numpy as np
import torch
from qkdyn.empirical.synthetic import observe, reduced, stability, train
from qkdyn.simulate.solve import solve


def run(param: str, setting, step: float, steps: int, *, optimizer: str = "gd", batch: int | None = None,
        seed: int = 0, points: int = 50, extra_steps: Iterable[int] = (), stop_below: float | None = None,
        progress: bool = False, perturb: float = 0.0, perturb_seed: int = 0) -> list[dict]:
    """Train from the canonical init; ``batch=None`` is the population. Rows carry ``step`` and ``t``.
    ``perturb`` > 0 starts off the symmetric subspace by a seeded transverse perturbation of that relative
    size (:func:`.stability.perturbed_model`). Runs on one thread (tiny matrices: more threads only contend)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        model = (stability.perturbed_model(setting, param, perturb, perturb_seed) if perturb
                 else reduced.new_model(param, setting))
        opt = train.make_optimizer(model, optimizer, step, setting.eta_qk, setting.eta_ov)
        rows = train.train(model, opt, train.batch_source(setting, batch, seed), steps,
                           train.record_steps(steps, points, extra_steps), observe.observer(param, setting),
                           stop_below=stop_below, progress=progress)
    finally:
        torch.set_num_threads(threads)
    for row in rows:
        row["t"] = row["step"] * step
    return rows


def relative_errors(rows: Sequence[dict], param: str, setting, keys: Sequence[str] = ("qk", "ov")) -> np.ndarray:
    """Per row: max over f in ``keys`` of |f_run(t) - f_ODE(t)| / |f_ODE(t)|."""
    times = np.array([row["t"] for row in rows])
    trajectory = solve(setting, param, t_max=float(times.max()), at=times, points=1)
    index = np.searchsorted(trajectory.t, times)
    return np.max([np.abs(np.array([row[k] for row in rows]) - getattr(trajectory, k)[index])
                   / np.abs(getattr(trajectory, k)[index]) for k in keys], axis=0)


def flow_error(rows: Sequence[dict], param: str, setting) -> float:
    """err: the max relative deviation of (qk, ov) from the ODE over the rows."""
    return float(relative_errors(rows, param, setting).max())


def sgd_deviation(rows: Sequence[dict], param: str, setting) -> float:
    """dev = max over rows of sqrt(err^2 + sym_dist^2) (module docstring)."""
    return float(np.max(np.hypot(relative_errors(rows, param, setting), [row["sym_dist"] for row in rows])))


@dataclasses.dataclass
class Recording:
    """A training run of the full matrix model, as numpy columns (docs/setting.md section 2 names):
    t = step * h, qk, ov, attn, loss, the reduced state read from the matrices (orbit means), acc
    (fixed sampled test batch), sym_dist (relative distance from the symmetric subspace), step.
    Columns are also attributes: ``rec.attn``."""

    param: str
    setting: object
    columns: dict[str, np.ndarray]

    def __getattr__(self, name: str) -> np.ndarray:
        try:
            return self.__dict__["columns"][name]
        except KeyError:
            raise AttributeError(name) from None

    def to_csv(self, path) -> None:
        """Write the columns as CSV atomically: what ``qkdyn sgd`` writes."""
        from qkdyn.csvio import write_columns

        write_columns(path, self.columns)


def _recording(param: str, setting, rows: list[dict]) -> Recording:
    names = ["t"] + [k for k in rows[0] if k not in ("t", "step")] + ["step"]
    return Recording(param, setting, {name: np.array([row[name] for row in rows], dtype=float) for name in names})


def gd(setting, param: str, step: float, steps: int, *, points: int = 200, at: Sequence[float] = (),
       progress: bool = False) -> Recording:
    """Full-batch gradient descent of the full matrix model on the exact population loss.

    From the canonical init, each step moves circuit $c$ by $-h\\,\\eta_c \\nabla_c L$ ($h$ = ``step``), so
    after $k$ steps the model tracks the gradient flow at $t = k h$ with an error $O(h)$ (claim A6).

    Parameters
    ----------
    setting : Setting
        The setting: sizes, rates $\\eta_{QK}$, $\\eta_{OV}$ and init.
    param : {"CACO", "FACO", "CAFO", "FAFO"}
        The parameterisation of the (QK, OV) circuits: collapsed or factorized.
    step : float
        The step size $h > 0$.
    steps : int
        The number of steps (at least 1); the run ends at $t$ = ``steps * step``.
    points : int
        Rows recorded at this many log-spaced steps.
    at : sequence of float
        Times $t$ recorded besides: the step nearest each (none beyond the last step).
    progress : bool
        Show a progress bar on stderr.

    Returns
    -------
    Recording
        The rows as numpy columns (``t``, ``qk``, ``ov``, ``attn``, ``loss``, the reduced state read off
        the matrices, ``acc``, ``sym_dist``, ``step``), also attributes: ``rec.attn``.

    Examples
    --------
    >>> rec = qkdyn.gd(qkdyn.Setting(), "CACO", step=0.01, steps=1000)   # doctest: +SKIP
    >>> rec.t[-1], rec.attn[-1]                                          # doctest: +SKIP
    """
    return _train(setting, param, step, steps, "gd", None, 0, points, at, progress)


def sgd(setting, param: str, step: float, steps: int, *, batch: int = 32, seed: int = 0, optimizer: str = "sgd",
        points: int = 200, at: Sequence[float] = (), progress: bool = False) -> Recording:
    """Stochastic training of the full matrix model on sampled batches, seeded; otherwise as :func:`gd`.

    Each step draws ``batch`` sequences and moves circuit $c$ by ``optimizer`` at learning rate
    $h\\,\\eta_c$ ($h$ = ``step``) on their mean loss.

    Parameters
    ----------
    setting : Setting
        The setting: sizes, rates $\\eta_{QK}$, $\\eta_{OV}$ and init.
    param : {"CACO", "FACO", "CAFO", "FAFO"}
        The parameterisation of the (QK, OV) circuits.
    step : float
        The step size $h > 0$.
    steps : int
        The number of steps (at least 1).
    batch : int
        Sequences per step (at least 1).
    seed : int
        Seeds the sampled batches (the init is the canonical one whatever the seed).
    optimizer : {"sgd", "adam"}
        Plain SGD, or Adam with the same per-circuit learning rates.
    points : int
        Rows recorded at this many log-spaced steps.
    at : sequence of float
        Times $t$ recorded besides: the step nearest each.
    progress : bool
        Show a progress bar on stderr.

    Returns
    -------
    Recording
        The rows as numpy columns, as :func:`gd` returns them.

    Examples
    --------
    >>> rec = qkdyn.sgd(qkdyn.Setting(), "FAFO", step=0.01, steps=500, batch=64, seed=1)  # doctest: +SKIP
    """
    return _train(setting, param, step, steps, optimizer, batch, seed, points, at, progress)


def _train(setting, param, step, steps, optimizer, batch, seed, points, at, progress) -> Recording:
    from qkdyn.errors import InputError

    if not (math.isfinite(step) and step > 0):
        raise InputError(f"must be a positive finite number, got {step!r}", "step")
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise InputError(f"must be a positive integer, got {steps!r}", "steps")
    if batch is not None and (isinstance(batch, bool) or not isinstance(batch, int) or batch < 1):
        raise InputError(f"must be a positive integer, got {batch!r}", "batch")
    at_steps = [round(t / step) for t in at]
    if at_steps and max(at_steps) > steps:
        raise InputError(f"time {max(at)} lies beyond the last step ({steps * step:g})", "at")
    rows = run(param, setting, step, steps, optimizer=optimizer, batch=batch, seed=seed, points=points,
               extra_steps=at_steps, progress=progress)
    return _recording(param, setting, rows)
