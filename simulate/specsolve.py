"""Solve the reduced flow of a circuit spec (:class:`qkdyn.theory.spec.Spec`) in log-time.

The same integration as :func:`qkdyn.simulate.solve.solve` (log-time tau = log(1 + t), loss events,
output rows), on the numeric functions :mod:`qkdyn.theory.specnumeric` prints from the spec's
derivation; DOP853 is SciPy's here (there are no compiled kernels for a spec written as data), and
LSODA, Radau and BDF take the derived Jacobian. The reported qk, ov and attn are the spec's own:
qk = s (a - b), ov = u - w (token-weighted means with token weights), attn = the population mean of
the attention mass on the distinct tokens (the query's own share is not counted).
"""
from __future__ import annotations

import dataclasses
import functools
from typing import Sequence

import numpy as np

from qkdyn.errors import InputError
from qkdyn.simulate.solve import TrajectoryExports, integrate_flow
from qkdyn.theory.setting import Setting
from qkdyn.theory.spec import Spec


class _Field:
    """The spec's numeric functions in the shape integrate_flow reads (features -> the state itself)."""

    def __init__(self, spec: Spec):
        from qkdyn.theory.specnumeric import numeric

        self.numeric = numeric(spec)
        self.variables = self.numeric.variables

    def init(self, p, qk0, ov0):
        return self.numeric.init(np.asarray(p, dtype=float), qk0, ov0)

    def rhs(self, x, p):
        return self.numeric.rhs(x, np.asarray(p, dtype=float))

    def jac(self, x, p):
        return self.numeric.jac(x, np.asarray(p, dtype=float))

    def features(self, x, p):
        return (x,)

    def loss(self, x, p):
        return float(self.numeric.loss(x, np.asarray(p, dtype=float)))

    def state_loss(self, x, p):
        return self.loss(x, p)


@dataclasses.dataclass
class SpecTrajectory(TrajectoryExports):
    """A spec's solution sampled at times ``t``: the reduced state and the quantities of docs/setting.md,
    with the same exports as :class:`~qkdyn.simulate.solve.Trajectory`."""

    spec: Spec
    setting: Setting
    t: np.ndarray
    state: np.ndarray  # (dim, T)
    variables: tuple[str, ...]
    event_t: float | None
    stats: dict
    crossings: dict = dataclasses.field(default_factory=dict)  # loss level -> (t, state) where it is first reached

    @property
    def param(self) -> str:
        """The spec's name (what reports and :mod:`qkdyn.testing` messages print)."""
        return self.spec.name

    @functools.cached_property
    def _values(self) -> dict[str, np.ndarray]:
        from qkdyn.theory.specnumeric import numeric

        p, functions = np.asarray(self.setting.numeric(), dtype=float), numeric(self.spec)
        qk, ov, attn = np.array([functions.features(x, p) for x in self.state.T]).reshape(-1, 3).T
        loss = np.array([float(functions.loss(x, p)) for x in self.state.T])
        return {"qk": qk, "ov": ov, "attn": attn, "loss": loss}

    @property
    def qk(self) -> np.ndarray:
        return self._values["qk"]

    @property
    def ov(self) -> np.ndarray:
        return self._values["ov"]

    @property
    def attn(self) -> np.ndarray:
        return self._values["attn"]

    @property
    def loss(self) -> np.ndarray:
        return self._values["loss"]

    @property
    def log_odds(self) -> np.ndarray:
        """log(attn / (1 - attn)), from attn (the spec's attention need not be a logistic of qk)."""
        return np.log(self.attn) - np.log1p(-self.attn)



def solve_spec(setting: Setting, spec: Spec, *, t_max: float | None = None, until_loss: float | None = None,
               points: int = 200, at: Sequence[float] = (), rtol: float = 1e-11, atol: float = 1e-14,
               method: str = "DOP853", record_losses: Sequence[float] = ()) -> SpecTrajectory:
    """The reduced flow of ``spec`` from its init (docs/setting.md, balanced factors of its depth) to
    ``t_max`` or the loss level ``until_loss`` (as :func:`qkdyn.solve`, ``record_losses`` too)."""
    if not isinstance(setting, Setting):
        raise InputError(f"must be a Setting, got {type(setting).__name__}", "setting")
    spec.check_setting(setting)
    times, state, variables, event_t, stats, crossings = integrate_flow(
        spec.name, _Field(spec), setting, t_max=t_max, until_loss=until_loss, points=points, at=at, rtol=rtol,
        atol=atol, method=method, record_losses=tuple(record_losses), kernels=False)
    return SpecTrajectory(spec, setting, times, state, variables, event_t, stats, crossings)


@dataclasses.dataclass
class SpecSharpness:
    """qk, ov, attn and t where the loss first reaches each level, shape (len(rhos), len(levels)); NaN
    where the solution does not reach a level."""

    rho: np.ndarray
    loss: np.ndarray
    qk: np.ndarray
    ov: np.ndarray
    attn: np.ndarray
    t: np.ndarray


def spec_sharpness(setting: Setting, spec: Spec, rhos: Sequence[float], levels: Sequence[float]) -> SpecSharpness:
    """Matched-loss quantities of any spec from ODE events (:func:`qkdyn.sharpness` gives the exact forms
    in closed form): for each rho (eta_QK = rho eta_OV) one solve to the lowest level, the crossing of
    every other level located by the solver's event finder."""
    from qkdyn.theory.specnumeric import numeric

    rhos, levels = np.asarray(rhos, dtype=float), np.asarray(levels, dtype=float)
    lowest = float(levels.min())
    out = {name: np.full((len(rhos), len(levels)), np.nan) for name in ("qk", "ov", "attn", "t")}
    p, functions = np.asarray(setting.numeric(), dtype=float), numeric(spec)
    for i, rho in enumerate(rhos):
        tr = solve_spec(setting.replace(eta_qk=float(rho) * setting.eta_ov), spec, until_loss=lowest, points=4,
                        record_losses=tuple(float(v) for v in levels if v != lowest))
        crossings = dict(tr.crossings)
        if tr.event_t is not None:
            crossings[lowest] = (tr.event_t, tr.state[:, -1])
        for j, level in enumerate(levels):
            if float(level) in crossings:
                t, x = crossings[float(level)]
                out["qk"][i, j], out["ov"][i, j], out["attn"][i, j] = functions.features(x, p)
                out["t"][i, j] = t
    return SpecSharpness(rhos, levels, **out)
