"""The sampled solution of the reduced flow: :class:`Trajectory` (what :func:`qkdyn.simulate.solve.solve` returns
for a named form) and the exports it shares with a spec's
:class:`~qkdyn.simulate.specsolve.SpecTrajectory` (:class:`TrajectoryExports`): the quantities of docs/setting.md
section 2 at the rows, the solution at any other time from the solver's dense output, a plot, CSV, pandas and
xarray.
"""
from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, ClassVar, TypeVar

import numpy as np
from numpy.typing import ArrayLike
from qkdyn.simulate.logtime import DenseSolution
from qkdyn.theory.compiled import Compiled, load
from qkdyn.theory.setting import Setting

from qkdyn.errors import InputError

#: a Trajectory or a SpecTrajectory: what :meth:`TrajectoryExports.at` returns for each
_Sampled = TypeVar("_Sampled", bound="TrajectoryExports")
#: the y-axis label of each quantity :meth:`TrajectoryExports.plot` draws (any other column: its name)
_AXIS_LABELS = {"attn": "attention on the distinct tokens", "loss": "loss", "qk": "qk", "ov": "ov",
                "penalty": "weight-decay penalty", "objective": "loss + penalty"}
#: the quantities :meth:`TrajectoryExports.plot` draws on a log y axis (positive along every trajectory)
_LOG_Y = ("loss", "objective")


def _stored_rows(t_rows: np.ndarray, times: np.ndarray) -> np.ndarray:
    """The index of each of ``times`` among the rows' times ``t_rows`` (any order), -1 where none equals it."""
    order = np.argsort(t_rows, kind="stable")
    sorted_rows = t_rows[order]
    position = np.searchsorted(sorted_rows, times).clip(max=len(order) - 1)
    return np.where(sorted_rows[position] == times, order[position], -1)


class TrajectoryExports:
    """The labelled exports of a sampled solution (:class:`Trajectory`, and a spec's
    :class:`~qkdyn.simulate.specsolve.SpecTrajectory`): it has ``t``, ``state``, ``variables``,
    ``param``, ``setting``, ``dense`` (its :class:`DenseSolution`, or None) and the quantities ``qk``,
    ``ov``, ``attn``, ``loss``."""

    if TYPE_CHECKING:  # what each subclass has, as dataclass fields or properties (each is a dataclass)
        __dataclass_fields__: ClassVar[dict[str, dataclasses.Field]]
        t: np.ndarray
        state: np.ndarray
        variables: tuple[str, ...]
        setting: Setting
        dense: DenseSolution | None

        @property
        def param(self) -> str: ...
        @property
        def qk(self) -> np.ndarray: ...
        @property
        def ov(self) -> np.ndarray: ...
        @property
        def attn(self) -> np.ndarray: ...
        @property
        def loss(self) -> np.ndarray: ...

    def at(self: _Sampled, t: ArrayLike) -> _Sampled:
        """The trajectory at the times ``t``, read off the solver's dense output.

        Parameters
        ----------
        t : float or array_like
            One time or a 1-D array of times (any order), each within [0, t_end], t_end the last
            time solved (``t_max``, or the time the loss reached ``until_loss``).

        Returns
        -------
        Trajectory or SpecTrajectory
            Of the same type, with ``t`` the times asked for (1-D) and ``state`` the solution there, so
            ``tr.at(t).attn``, ``.qk``, ``.ov``, ``.loss``, ``.invariants()`` and the exports are the
            quantities at those times. A time that is one of the stored rows gets that row exactly
            (the exact initial state at t = 0, the event row at ``event_t``); between rows the state
            is DOP853's 7th-order interpolant between the solver's steps, accurate to about the
            solver's tolerance (``rtol``; docs/api.md, "A trajectory at any time"), the same
            interpolant the rows were read off.

        Raises
        ------
        InputError
            Where a time is not a finite number within [0, t_end], or the trajectory holds no dense
            output (one not made by :func:`solve`).

        Examples
        --------
        >>> tr = qkdyn.solve(qkdyn.Setting(), "CACO", t_max=1e6)
        >>> attn = tr.at([10.0, 1e3]).attn      # the attention at t = 10 and t = 1000
        >>> same = tr(1e3).state                # tr(t) is tr.at(t)
        """
        dense = self.dense
        if dense is None:
            raise InputError("this trajectory holds no dense output (it was not made by qkdyn.solve)", "t")
        try:
            times = np.atleast_1d(np.asarray(t, dtype=float))
        except (TypeError, ValueError):
            raise InputError(f"must be a number or a 1-D array of numbers, got {t!r}", "t") from None
        if times.ndim != 1:
            raise InputError(f"must be a number or a 1-D array of times, got an array of shape {times.shape}", "t")
        outside = ~((times >= 0) & (times <= dense.t_end))  # NaN is outside too
        if outside.any():
            raise InputError(f"must lie within [0, {dense.t_end:g}] (the span solved), got {float(times[outside][0])!r}", "t")
        state = dense(times)
        rows = _stored_rows(self.t, times)
        state[:, rows >= 0] = self.state[:, rows[rows >= 0]]
        return dataclasses.replace(self, t=times, state=state)

    __call__ = at

    def plot(self, quantities: Sequence[str] = ("attn", "loss", "qk", "ov"), *, axes=None, label: str | None = None):
        """Draw ``quantities`` against t on a log axis, one panel each, in the project's figure style
        (:mod:`qkdyn.figures`); the row t = 0 is left out (a log axis has no 0).

        Parameters
        ----------
        quantities : sequence of str
            Columns of :meth:`columns` (attn, loss, qk, ov, a spec's penalty and objective, or a
            reduced variable); loss and objective on a log y axis.
        axes : sequence of matplotlib Axes, optional
            One per quantity, to draw into (e.g. those a previous call returned: several trajectories
            on one figure); by default a new figure with the panels stacked, sharing the t axis.
        label : str, optional
            The legend entry of this trajectory (default: its form and rho).

        Returns
        -------
        numpy.ndarray of matplotlib.axes.Axes
            The panels, in the order of ``quantities`` (the figure is ``axes[0].figure``).

        Examples
        --------
        >>> axes = qkdyn.solve(qkdyn.Setting(eta_qk=10.0), "FAFO", until_loss=1e-3).plot()
        >>> axes = qkdyn.solve(qkdyn.Setting(), "FAFO", until_loss=1e-3).plot(axes=axes)   # rho = 1 beside it
        >>> axes[0].figure.savefig("fafo.png")
        """
        import matplotlib.pyplot as plt

        import qkdyn.figures  # noqa: F401 (applies the project's style)

        columns = self.columns()
        unknown = [name for name in quantities if name == "t" or name not in columns]
        if unknown or not quantities:
            raise InputError(f"must name columns of {', '.join(c for c in columns if c != 't')}, got "
                             f"{', '.join(map(repr, unknown)) or 'none'}", "quantities")
        if axes is None:
            width, height = plt.rcParams["figure.figsize"]
            _, grid = plt.subplots(len(quantities), 1, sharex=True, squeeze=False,
                                   figsize=(width, 0.45 * height * (1 + len(quantities))))
            panels = grid[:, 0]
        else:
            panels = np.asarray(axes, dtype=object).ravel()
            if len(panels) != len(quantities):
                raise InputError(f"must hold one Axes per quantity ({len(quantities)}), got {len(panels)}", "axes")
        drawn = self.t > 0
        rho = self.setting.rho
        for ax, name in zip(panels, quantities, strict=True):
            ax.plot(self.t[drawn], columns[name][drawn], label=label or f"{self.param}, rho = {rho:g}")
            ax.set_xscale("log")
            if name in _LOG_Y:
                ax.set_yscale("log")
            ax.set_ylabel(_AXIS_LABELS.get(name, name))
        panels[-1].set_xlabel("t")
        panels[0].legend()
        return panels

    def columns(self) -> dict[str, np.ndarray]:
        """CSV columns: t, qk, ov, attn, loss, then the raw reduced state."""
        cols = {"t": self.t, "qk": self.qk, "ov": self.ov, "attn": self.attn, "loss": self.loss}
        cols.update({name: self.state[i] for i, name in enumerate(self.variables)})
        return cols

    def to_csv(self, path) -> None:
        """Write :meth:`columns` as CSV (header first, full precision) atomically: what ``qkdyn solve`` writes."""
        from qkdyn.csvio import write_columns

        write_columns(path, self.columns())

    def to_pandas(self):
        """:meth:`columns` as a ``pandas.DataFrame`` indexed by t; ``attrs`` holds ``param`` and the
        Setting's fields (needs the ``frames`` extra: ``pip install qkdyn[frames]``)."""
        import pandas as pd

        columns = self.columns()
        frame = pd.DataFrame({name: values for name, values in columns.items() if name != "t"},
                             index=pd.Index(columns["t"], name="t"))
        frame.attrs = {"param": self.param, **dataclasses.asdict(self.setting)}
        return frame


@dataclasses.dataclass
class Trajectory(TrajectoryExports):
    """A solution sampled at times ``t``; the quantities of docs/setting.md section 2 as properties,
    the solution at any other time (:meth:`at`, also ``tr(t)``), a plot (:meth:`plot`) and labelled
    exports (:meth:`to_pandas`, :meth:`to_xarray`, :meth:`to_csv`)."""

    param: str
    setting: Setting
    t: np.ndarray  # (T,)
    state: np.ndarray  # (dim, T) reduced variables, names in ``variables``
    variables: tuple[str, ...]
    event_t: float | None  # time at which the loss target was reached, if one was set
    stats: dict
    crossings: dict = dataclasses.field(default_factory=dict)  # loss level -> (t, state) at crossing
    # the solver's continuous solution (:meth:`at`); None for a trajectory not made by solve
    dense: DenseSolution | None = dataclasses.field(default=None, repr=False, compare=False)
    # (qk, ov) at the rows: given by a sweep (one vector call for all of its trajectories), else computed
    # from ``state`` when first read
    features: tuple[np.ndarray, np.ndarray] | None = dataclasses.field(default=None, init=False, repr=False,
                                                                      compare=False)

    @property
    def compiled(self) -> Compiled:
        return load(self.param)

    def _qk_ov(self) -> tuple[np.ndarray, np.ndarray]:
        if self.features is None:
            self.features = self.compiled.features(self.state, self.setting.numeric())
        return self.features

    @property
    def qk(self) -> np.ndarray:
        return self._qk_ov()[0]

    @property
    def ov(self) -> np.ndarray:
        return self._qk_ov()[1]

    @property
    def attn(self) -> np.ndarray:
        return np.asarray(self.compiled.attention(self.qk, self.setting.numeric()))

    @property
    def loss(self) -> np.ndarray:
        return np.asarray(self.compiled.loss(self.qk, self.ov, self.setting.numeric()))

    @property
    def log_odds(self) -> np.ndarray:
        """log(attn / (1 - attn)) = qk + log(m/n), exact even where attn rounds to 1."""
        return self.qk + math.log(self.setting.m / self.setting.n)

    def invariants(self) -> dict[str, np.ndarray]:
        """The derived conserved polynomials of the reduced state (factor balances, mean modes)."""
        names = self.compiled.invariant_names
        if not names:  # (the generated function of a form without invariants returns a placeholder 0)
            return {}
        return dict(zip(names, self.compiled.invariants(self.state, self.setting.numeric()), strict=True))

    def line(self) -> tuple[np.ndarray, np.ndarray]:
        """(Phi(qk), Psi(ov)) along the trajectory: the first integral is Phi - rho Psi = const (claim A2).

        Psi is closed form; Phi(qk) = int_0^qk (1 + (m/n) e^y) / M_QK(y) dy by adaptive quadrature of
        its derived integrand between consecutive rows (exact for collapsed QK, where M_QK is constant).
        """
        from scipy.integrate import quad  # here, not at import: scipy.integrate costs a quick first solve a quarter

        p = self.setting.numeric()
        kappa = float(self.compiled.kappa(self.state[:, 0], p))
        pieces = [quad(lambda x: float(self.compiled.dphi(x, kappa, p)), a, b, epsabs=0, epsrel=1e-13, limit=200)[0]
                  for a, b in zip(np.concatenate([[0.0], self.qk[:-1]]), self.qk, strict=True)]
        return np.cumsum(pieces), self.compiled.psi(self.ov, p)

    def drifts(self) -> dict[str, float]:
        """Largest relative drift of every conserved quantity along the trajectory.

        A polynomial invariant I of degree k drifts by max_t |I(t) - I(0)| / max_t |x|^k (x: the reduced
        state); the line by max_t |Phi - rho Psi - const| / max_t max(|Phi|, rho |Psi|).
        """
        x_scale = np.max(np.abs(self.state), axis=0)
        out = {name: float(np.max(np.abs(values - values[0]) / np.maximum(x_scale**degree, 1e-300)))
               for (name, values), degree in zip(self.invariants().items(), self.compiled.invariant_degrees, strict=True)}
        phi, psi = self.line()
        line = phi - self.setting.rho * psi
        out["line"] = float(np.max(np.abs(line - line[0])) / np.max(np.maximum(np.abs(phi), self.setting.rho * np.abs(psi))))
        return out


    def to_xarray(self):
        """:meth:`columns` as an ``xarray.Dataset`` over the dimension t; ``attrs`` as in :meth:`to_pandas`."""
        import xarray as xr

        columns = self.columns()
        attrs = {name: value for name, value in self.to_pandas().attrs.items() if value is not None}
        return xr.Dataset({name: ("t", values) for name, values in columns.items() if name != "t"},
                          coords={"t": columns["t"]}, attrs=attrs)
