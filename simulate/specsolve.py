"""Solve the reduced flow of a circuit spec (:class:`qkdyn.theory.spec.Spec`) in log-time.

The same integration as :func:`qkdyn.simulate.solve.solve` (log-time tau = log(1 + t), loss events,
output rows), on the numeric functions :mod:`qkdyn.theory.specnumeric` prints from the spec's
derivation; DOP853 is SciPy's here (there are no compiled kernels for a spec written as data), and
LSODA, Radau and BDF take the derived Jacobian. The reported qk, ov and attn are the spec's own:
qk = s (a - b), ov = u - w (token-weighted means with token weights), attn = the population mean of
the attention mass on the distinct tokens (the query's own share is not counted). ``loss`` is the data
loss L (cross-entropy, or the spec's square loss), and loss events (``until_loss``, ``record_losses``,
matched loss) are levels of L; with weight decay the flow descends the objective L + P, and the
penalty P = sum_c (lambda_c / 2) sum_i w_i x_i^2 and the objective are their own attributes and CSV
columns (:mod:`qkdyn.theory.specflow`, step 4).
"""
from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import ArrayLike
from qkdyn.simulate.solve import DenseSolution, TrajectoryExports, integrate_flow
from qkdyn.theory.setting import Setting
from qkdyn.theory.spec import Spec

from qkdyn.errors import InputError

if TYPE_CHECKING:
    from qkdyn.simulate.sharpness import Sharpness


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
    with the same exports as :class:`~qkdyn.simulate.solve.Trajectory` (the solution at any other time,
    :meth:`at` or ``tr(t)``, and :meth:`plot` among them)."""

    spec: Spec
    setting: Setting
    t: np.ndarray
    state: np.ndarray  # (dim, T)
    variables: tuple[str, ...]
    event_t: float | None
    stats: dict
    crossings: dict = dataclasses.field(default_factory=dict)  # loss level -> (t, state) where it is first reached
    # the solver's continuous solution (:meth:`at`); None for a trajectory not made by solve
    dense: DenseSolution | None = dataclasses.field(default=None, repr=False, compare=False)

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
        penalty = np.array([float(_penalty(self.spec)(x, p)) for x in self.state.T])
        return {"qk": qk, "ov": ov, "attn": attn, "loss": loss, "penalty": penalty, "objective": loss + penalty}

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
        """The data loss L (cross-entropy, or the spec's square loss), without the weight-decay penalty."""
        return self._values["loss"]

    @property
    def penalty(self) -> np.ndarray:
        """The weight decay P = sum_c (lambda_c / 2) sum_i w_i x_i^2 (0 without)."""
        return self._values["penalty"]

    @property
    def objective(self) -> np.ndarray:
        """L + P: what the flow descends (the loss itself without weight decay)."""
        return self._values["objective"]

    def columns(self) -> dict[str, np.ndarray]:
        """CSV columns: t, qk, ov, attn, loss, with weight decay penalty and objective, then the raw state."""
        cols = super().columns()
        if not _decayed(self.spec):
            return cols
        head = {name: cols.pop(name) for name in ("t", "qk", "ov", "attn", "loss")}
        return {**head, "penalty": self.penalty, "objective": self.objective, **cols}

    def drifts(self) -> dict[str, float]:
        """Largest relative drift of every conserved polynomial the spec's derivation found (none with
        weight decay or an MLP coupling): max_t |I(t) - I(0)| / max_t |x|^k for I of degree k, as
        :meth:`qkdyn.simulate.solve.Trajectory.drifts` (which also has the line, a closed form of the exact forms)."""
        import sympy as sp
        from qkdyn.theory.model import PARAMS
        from qkdyn.theory.specflow import derive_spec
        from qkdyn.theory.specnumeric import lambdify

        d = derive_spec(self.spec)
        p = np.asarray(self.setting.numeric(), dtype=float)
        x_scale = np.max(np.abs(self.state), axis=0)
        out = {}
        for circuit, found in d.invariants.items():
            for i, invariant in enumerate([] if isinstance(found, str) else found):
                value = lambdify([list(d.symbols), list(PARAMS)], invariant)
                values = np.array([float(value(x, p)) for x in self.state.T])
                degree = sp.Poly(invariant, *d.symbols).total_degree()
                scale = np.maximum(x_scale**degree, 1e-300)
                out[f"I_{circuit}{i + 1}"] = float(np.max(np.abs(values - values[0]) / scale))
        return out

    @property
    def log_odds(self) -> np.ndarray:
        """log(attn / (1 - attn)), from attn (the spec's attention need not be a logistic of qk)."""
        return np.asarray(np.log(self.attn) - np.log1p(-self.attn))



def _decayed(spec: Spec) -> bool:
    return any(cs.weight_decay for cs in (spec.qk, spec.ov))


@functools.cache
def _penalty(spec: Spec):
    """P(x, p) of ``spec`` as a numeric function (0 without weight decay, then no derivation is needed)."""
    if not _decayed(spec):
        return lambda x, p: 0.0
    from qkdyn.theory.model import PARAMS
    from qkdyn.theory.specflow import derive_spec
    from qkdyn.theory.specnumeric import lambdify

    d = derive_spec(spec)
    return lambdify([list(d.symbols), list(PARAMS)], d.penalty)


def solve_spec(setting: Setting, spec: Spec, *, t_max: float | None = None, until_loss: float | None = None,
               points: int = 200, at: Sequence[float] = (), rtol: float = 1e-11, atol: float = 1e-14,
               method: str = "DOP853", record_losses: Sequence[float] = ()) -> SpecTrajectory:
    """The reduced flow of ``spec`` from its init (docs/setting.md, balanced factors of its depth) to
    ``t_max`` or the loss level ``until_loss`` (``record_losses`` too): the implementation behind the public
    verb ``qkdyn.solve(setting, spec, ...)``, which callers use."""
    if not isinstance(setting, Setting):
        raise InputError(f"must be a Setting, got {type(setting).__name__}", "setting")
    spec.check_setting(setting)
    return SpecTrajectory(spec, setting, *integrate_flow(
        spec.name, _Field(spec), setting, t_max=t_max, until_loss=until_loss, points=points, at=at, rtol=rtol,
        atol=atol, method=method, record_losses=tuple(record_losses), kernels=False))


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


def spec_sharpness(setting: Setting, spec: Spec, rhos: ArrayLike, levels: ArrayLike) -> SpecSharpness:
    """Matched-loss quantities of any spec from ODE events (:func:`qkdyn.sharpness` gives the exact forms
    in closed form): for each rho (eta_QK = rho eta_OV) one solve to the lowest level, the crossing of
    every other level located by the solver's event finder."""
    from qkdyn.theory.specnumeric import numeric

    rho_values, level_values = np.asarray(rhos, dtype=float), np.asarray(levels, dtype=float)
    lowest = float(level_values.min())
    out = {name: np.full((len(rho_values), len(level_values)), np.nan) for name in ("qk", "ov", "attn", "t")}
    p, functions = np.asarray(setting.numeric(), dtype=float), numeric(spec)
    for i, rho in enumerate(rho_values):
        tr = solve_spec(setting.replace(eta_qk=float(rho) * setting.eta_ov), spec, until_loss=lowest, points=4,
                        record_losses=tuple(float(v) for v in level_values if v != lowest))
        crossings = dict(tr.crossings)
        if tr.event_t is not None:
            crossings[lowest] = (tr.event_t, tr.state[:, -1])
        for j, level in enumerate(level_values):
            if float(level) in crossings:
                t, x = crossings[float(level)]
                out["qk"][i, j], out["ov"][i, j], out["attn"][i, j] = functions.features(x, p)
                out["t"][i, j] = t
    return SpecSharpness(rho_values, level_values, **out)


def events_sharpness(setting: Setting | Mapping, spec: Spec, rho, loss, *, time: bool = True,
                     grid: bool = False) -> Sharpness:
    """:func:`qkdyn.sharpness` for a spec without a closed form: ``rho`` and ``loss`` broadcast (or, with
    ``grid``, form their outer product) as there, each value from :func:`spec_sharpness` (one solve per
    distinct rho, every level's crossing from the event finder; NaN where a level is not reached)."""
    from qkdyn.simulate.grid import arrange
    from qkdyn.simulate.sharpness import Sharpness

    if not isinstance(setting, Setting):
        raise InputError(f"must be one Setting for a spec without a closed form (its matched loss comes from ODE "
                         f"events), got {type(setting).__name__}", "setting")
    _, rho, loss, axes = arrange(setting, rho, loss, grid)
    rho_a, loss_a = np.broadcast_arrays(np.asarray(rho, dtype=float), np.asarray(loss, dtype=float))
    if np.any(~np.isfinite(rho_a) | (rho_a < 0)) or np.any(~np.isfinite(loss_a) | (loss_a <= 0)):
        raise InputError("rho must be finite and >= 0 and every loss level finite and > 0", "rho")
    rhos, levels = np.unique(rho_a), np.unique(loss_a)
    found = spec_sharpness(setting, spec, rhos, levels)
    i, j = np.searchsorted(rhos, rho_a), np.searchsorted(levels, loss_a)
    return Sharpness(found.qk[i, j], found.ov[i, j], found.attn[i, j], found.t[i, j] if time else None, axes)
