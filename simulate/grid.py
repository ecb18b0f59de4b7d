"""How :func:`qkdyn.sharpness` combines its inputs, and its results as labelled tables.

One convention, in Python and on the command line (``qkdyn sharpness`` uses ``grid=True``):

* ``grid=False`` (default): ``rho``, ``loss`` and every array-valued Setting field broadcast against
  each other by numpy's rules; shapes that do not broadcast are an :class:`~qkdyn.errors.InputError`
  that names each shape and says how to shape them;
* ``grid=True``: the outer product. ``rho``, ``loss`` and each array-valued Setting field are 1-D
  lists of values, and the result has one axis per input, in the order rho, loss, then the Setting
  fields in the order given. Only then are the axes known by name, so only then
  :meth:`LabelledGrid.to_xarray` and :meth:`LabelledGrid.to_pandas` can label them.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from qkdyn.errors import InputError


def arrange(setting: Any, rho: Any, loss: Any, grid: bool) -> tuple[Any, Any, Any, dict[str, np.ndarray] | None]:
    """(setting, rho, loss, axes): inputs shaped for broadcasting, and the named axes of a grid
    (None unless ``grid``)."""
    fields = dict(setting) if isinstance(setting, Mapping) else {}
    arrays = {name: np.asarray(value) for name, value in fields.items() if np.ndim(value) > 0}
    if not grid:
        shapes = {"rho": np.shape(rho), "loss": np.shape(loss), **{name: a.shape for name, a in arrays.items()}}
        try:
            np.broadcast_shapes(*shapes.values())
        except ValueError:
            listed = ", ".join(f"{name} {shape}" for name, shape in shapes.items())
            raise InputError(f"the shapes of rho, loss and the Setting fields do not broadcast: {listed}; pass "
                             "grid=True for every combination (the outer product, one axis per input), or shape "
                             "them yourself, e.g. rho=np.array(rhos)[:, None], loss=np.array(levels)[None, :]") from None
        return setting, rho, loss, None
    axes = {"rho": np.asarray(rho, dtype=float), "loss": np.asarray(loss, dtype=float)}
    axes.update({name: a for name, a in arrays.items()})
    for name, values in axes.items():
        if values.ndim > 1:
            raise InputError(f"with grid=True must be a scalar or a 1-D list of values, got shape {values.shape}", name)
    axes = {name: np.atleast_1d(values) for name, values in axes.items()}
    n = len(axes)

    def along(index: int, values: np.ndarray) -> np.ndarray:
        return values.reshape([-1 if i == index else 1 for i in range(n)])

    names = list(axes)
    shaped = {name: along(i, values) for i, (name, values) in enumerate(axes.items())}
    if isinstance(setting, Mapping):
        setting = {**fields, **{name: shaped[name] for name in names[2:]}}
    return setting, shaped["rho"], shaped["loss"], axes


class LabelledGrid:
    """Export of a result on a grid (``grid=True``): ``axes`` names each axis, the arrays ``qk``,
    ``ov``, ``attn`` and ``t`` (None when not computed) share their shape."""

    axes: dict[str, np.ndarray] | None
    qk: np.ndarray
    ov: np.ndarray
    attn: np.ndarray
    t: np.ndarray | None

    def _labelled(self) -> dict[str, np.ndarray]:
        if self.axes is None:
            raise ValueError("labelled export needs named axes: call sharpness(..., grid=True)")
        return {name: values for name, values in (("qk", self.qk), ("ov", self.ov), ("attn", self.attn), ("t", self.t))
                if values is not None}

    def to_xarray(self):
        """An ``xarray.Dataset``: variables qk, ov, attn (and t) over the dimensions rho, loss and the
        Setting fields given as lists (needs the ``frames`` extra: ``pip install qkdyn[frames]``)."""
        import xarray as xr

        data = self._labelled()
        dims = list(self.axes)
        return xr.Dataset({name: (dims, values) for name, values in data.items()}, coords=dict(self.axes))

    def to_pandas(self):
        """A ``pandas.DataFrame`` with one row per grid point: a MultiIndex of the axes (rho, loss, ...)
        and columns qk, ov, attn (and t) (needs the ``frames`` extra)."""
        import pandas as pd

        data = self._labelled()
        index = pd.MultiIndex.from_product(list(self.axes.values()), names=list(self.axes))
        return pd.DataFrame({name: values.ravel() for name, values in data.items()}, index=index)
