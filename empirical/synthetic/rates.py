"""Claim A1's measurement on the full matrix model: the rate factor R_c read off gradient descent.

At a state x of the reduced flow, embedded in the full matrices (theta = :meth:`.fullflow.FullFlow.embed`),
one GD step theta_h = theta + h F(theta), F = -E grad L the full model's update direction (exact
population gradient of the matrices: mean-count batch, exact on the symmetric subspace), moves each
feature f in (qk, ov) (read from the computed function: qk = mean score of the distinct tokens minus
that of the commons, ov = own minus cross label value of the distinct tokens) by f(theta_h) - f(theta).
The features are at most bilinear in the parameters, so f(theta_h) is a quadratic in h and the
velocity df/dt = 2 D(h/2) - D(h), D(h) = (f(theta_h) - f(theta)) / h, is exact (Richardson on two GD
steps). Then

    M_c = (df/dt) / (-eta_c dL/df),      R_c = M_c / M_c^CACO

with dL/df the full collapsed model's gradient along the matrix direction that moves f alone (the
loss depends on the state only through (qk, ov)), and M_c^CACO the same measurement on the collapsed model at the same (qk, ov).
No reduced-state formula enters: a wrong update (a planted wrong right-hand side ``field``) changes
the measured R_c.
"""
from __future__ import annotations

import functools
from collections.abc import Callable

import numpy as np
from qkdyn.empirical.synthetic import data
from qkdyn.empirical.synthetic.fullflow import FullFlow
from qkdyn.theory.compiled import load

STEP = 1e-3


def features(flow: FullFlow, theta: np.ndarray) -> np.ndarray:
    """(qk, ov) of the function computed by ``theta`` (orbit means of scores and label values)."""
    a, B = flow.function(theta)
    lay = flow.lay
    owner = lay.token_class()
    qk = a[owner >= 0].mean() - a[owner < 0].mean()
    own = np.mean([B[k, owner == k].mean() for k in range(lay.classes)])
    cross = np.mean([B[j, owner == k].mean() for k in range(lay.classes) for j in range(lay.classes) if j != k])
    return np.array([qk, own - cross])


def velocity(flow: FullFlow, theta: np.ndarray, field: Callable) -> np.ndarray:
    """d(qk, ov)/dt from two GD steps (h and h/2) along ``field(flow, theta)`` (module docstring); h
    moves theta by STEP relative, so that the steps stay resolvable as the gradient shrinks."""
    f0, direction = features(flow, theta), field(flow, theta)
    h = STEP * np.linalg.norm(theta) / np.linalg.norm(direction)
    D = lambda h: (features(flow, theta + h * direction) - f0) / h  # noqa: E731
    return 2 * D(h / 2) - D(h)


@functools.lru_cache(maxsize=16)
def _flow(setting, param: str) -> FullFlow:
    return FullFlow(setting, param, batch=data.mean_counts(setting))


def loss_slopes(setting, qk: float, ov: float) -> np.ndarray:
    """(dL/dqk, dL/dov) of the full collapsed model's population loss at the state with (qk, ov): its
    gradient along the matrix directions that move qk (W_QK[q, distinct] by 1/s) or ov (W_OV[label_k,
    class-k distinct] by 1) alone."""
    flow, caco = _flow(setting, "CACO"), load("CACO")
    p = setting.numeric()
    gradient = flow.gradient(flow.embed(caco.init(p, qk, ov)))
    unit = np.eye(len(caco.variables))
    names = list(caco.variables)
    move_qk = flow.embed(unit[names.index("qk_distinct")] / setting.scale)
    move_ov = flow.embed(unit[names.index("ov_own")])
    return np.array([gradient @ move_qk, gradient @ move_ov])


def gd_rate_factors(setting, param: str, states: np.ndarray,
                    field: Callable = lambda flow, theta: flow.field(theta)) -> dict[str, np.ndarray]:
    """Measured R_QK, R_OV at each reduced state (columns of ``states``) of form ``param``."""
    flow, caco_flow = _flow(setting, param), _flow(setting, "CACO")
    caco, p = load("CACO"), setting.numeric()
    eta = np.array([setting.eta_qk, setting.eta_ov])
    out = np.zeros((2, states.shape[1]))
    for i in range(states.shape[1]):
        theta = flow.embed(states[:, i])
        qk, ov = features(flow, theta)
        slopes = loss_slopes(setting, qk, ov)
        metric = velocity(flow, theta, field) / (-eta * slopes)
        reference = velocity(caco_flow, caco_flow.embed(caco.init(p, qk, ov)), lambda f, th: f.field(th)) / (-eta * slopes)
        out[:, i] = metric / reference
    return {"QK": out[0], "OV": out[1]}
