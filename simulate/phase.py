"""Phase diagrams of attention at matched loss (claims A4/A5), from the closed form.

Attention where the loss first reaches ``level`` (:func:`qkdyn.simulate.sharpness.sharpness`) over
two grids per parameterisation: (rho, m/n) with n fixed and m = 1, 2, ..., and (rho, K) with
K = 2, 3, .... Two A5 ordering boundaries are drawn on every panel:

* FAFO overtakes CACO(rho = 1): the contour FAFO(rho, y) = CACO(1, y) (y = m/n or K), i.e. the rho at
  which raising eta_QK moves the doubly factorized model past the collapsed one at equal rates;
* FACO and CACO meet: the contour FACO(rho, y) = CACO(rho, y).
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

import matplotlib.colors
import matplotlib.image
import numpy as np
from qkdyn.simulate.plotting import save, subplots
from qkdyn.simulate.sharpness import sharpness
from qkdyn.theory.setting import EXACT_PARAMS, Setting

from qkdyn.figures import PALETTE, colorbar

#: axis name -> (Setting field varied, label, value of the row index i = 0, 1, ...)
AXES = {"m/n": ("m", "m / n", lambda i: i + 1), "K": ("classes", "K (classes)", lambda i: i + 2)}


@dataclasses.dataclass
class Diagram:
    axis: str
    rhos: np.ndarray  # (R,)
    values: np.ndarray  # (Y,) the Setting field's values (m or K)
    y: np.ndarray  # (Y,) what is plotted (m/n or K)
    attn: dict  # param -> (Y, R)
    caco_at_one: np.ndarray  # (Y,) CACO at rho = 1

    def first_rho(self, difference: np.ndarray) -> np.ndarray:
        """Per row, the smallest rho of the grid where ``difference`` (Y, R) is >= 0 (nan: nowhere)."""
        hit = difference >= 0
        return np.where(hit.any(axis=1), self.rhos[np.argmax(hit, axis=1)], np.nan)

    def last_rho(self, difference: np.ndarray) -> np.ndarray:
        """Per row, the largest rho of the grid where ``difference`` is >= 0 (nan: nowhere)."""
        hit = difference[:, ::-1] >= 0
        return np.where(hit.any(axis=1), self.rhos[::-1][np.argmax(hit, axis=1)], np.nan)

    def boundaries(self) -> dict[str, np.ndarray]:
        """Per row: the rho from which FAFO >= CACO(rho=1), and the rho up to which CACO >= FACO."""
        return {"FAFO overtakes CACO(rho=1) from rho": self.first_rho(self.attn["FAFO"] - self.caco_at_one[:, None]),
                "CACO at least as sharp as FACO up to rho": self.last_rho(self.attn["CACO"] - self.attn["FACO"])}


def diagram(setting: Setting, axis: str, rhos, rows: int, level: float) -> Diagram:
    """Attention at loss ``level`` on the (rho, axis) grid of len(rhos) x rows points, per form."""
    field, _, value_of = AXES[axis]
    rhos = np.asarray(rhos, dtype=float)
    values = np.array([value_of(i) for i in range(rows)])
    fields = {f.name: getattr(setting, f.name) for f in dataclasses.fields(Setting) if getattr(setting, f.name) is not None}
    if "attn0" in fields:  # the initial attention is what is held; qk0 follows it along the m/n axis
        del fields["qk0"]
    fields[field] = values[:, None]
    attn = {param: sharpness(fields, param, rhos[None, :], level, time=False).attn for param in EXACT_PARAMS}
    caco_one = sharpness({**fields, field: values}, "CACO", 1.0, level, time=False).attn
    y = values / setting.n if axis == "m/n" else values.astype(float)
    return Diagram(axis, rhos, values, y, attn, caco_one)


def _screen_image(values: np.ndarray, y: np.ndarray, log_y: bool, oversample: int = 4) -> np.ndarray:
    """``values`` (Y, R) on rows ``y`` resampled to rows equally spaced on the panel's y axis (log or
    linear), linearly in that coordinate (what Gouraud shading of the grid draws); the columns (rho,
    log-spaced on a log axis) are equally spaced on the panel already."""
    coordinate = np.log(y) if log_y else np.asarray(y, dtype=float)
    target = np.linspace(coordinate[0], coordinate[-1], oversample * (len(y) - 1) + 1)
    index = np.clip(np.searchsorted(coordinate, target, side="right") - 1, 0, len(y) - 2)
    weight = ((target - coordinate[index]) / (coordinate[index + 1] - coordinate[index]))[:, None]
    resampled: np.ndarray = (1 - weight) * values[index] + weight * values[index + 1]
    return resampled


def _field(ax, d: Diagram, values: np.ndarray, log_y: bool):
    """The colour field of one panel: an image in axes coordinates over exactly the grid's range, its
    samples at the grid's points, interpolated between them. Gouraud-shaded ``pcolormesh`` of the same
    points looks the same and costs ~1 s per panel and file (two triangles per grid cell), this ~10 ms."""
    image = _screen_image(values, d.y, log_y)
    rows, cols = image.shape
    dx, dy = 0.5 / (cols - 1), 0.5 / (rows - 1)  # pixel centres on the grid's points, the first and last on the edges
    field = matplotlib.image.AxesImage(ax, cmap="viridis", norm=matplotlib.colors.Normalize(0, 1),
                                       interpolation="bilinear", origin="lower", extent=(-dx, 1 + dx, -dy, 1 + dy),
                                       transform=ax.transAxes)
    field.set_data(image)
    ax.add_image(field)
    ax.set_xlim(d.rhos[0], d.rhos[-1])
    ax.set_ylim(d.y[0], d.y[-1])
    return field


def plot(diagrams: list[Diagram], level: float, figures: Path, name: str = "a5_phase_diagrams.png") -> str:
    fig, axes = subplots(len(diagrams), len(EXACT_PARAMS))
    for row, d in enumerate(diagrams):
        log_y = d.axis == "m/n"
        for col, param in enumerate(EXACT_PARAMS):
            ax = axes[row, col]
            ax.set(xscale="log", yscale="log" if log_y else "linear")
            # colours at the grid's points, interpolated between them: the panel spans exactly the computed
            # range (cells of m +- 1/2 would reach m/n = 1/(2n), and on the log axis the step from m = 1 to
            # m = 2 would read as a seam at 1.5/n; the closed form is smooth there, tests/simulate/test_sharpness.py)
            mesh = _field(ax, d, d.attn[param], log_y)
            ax.contour(d.rhos, d.y, d.attn["FAFO"] - d.caco_at_one[:, None], levels=[0], colors="w",
                       linewidths=1.2)
            ax.contour(d.rhos, d.y, d.attn["FACO"] - d.attn["CACO"], levels=[0], colors=PALETTE[3], linewidths=1.0,
                       linestyles="--")
            ax.grid(False)
            ax.set(xlim=(d.rhos[0], d.rhos[-1]), ylim=(d.y[0], d.y[-1]), xlabel="rho", ylabel=AXES[d.axis][1],
                   title=f"{param}: attn at loss {level:g}")
        colorbar(fig, mesh, axes[row, :], f"attn at loss {level:g}")
    fig.suptitle("white: FAFO = CACO(rho=1); vermillion dashed: FACO = CACO")
    return save(fig, figures, name)


def summary(diagrams: list[Diagram]) -> dict:
    """Evidence: grid sizes and the range of each boundary's rho over the rows."""
    out = {}
    for d in diagrams:
        rows = {}
        for name, rho in d.boundaries().items():
            found = np.isfinite(rho)
            rows[name] = {"rows_where_it_occurs": int(found.sum()), "rows": int(rho.size),
                          "rho_range": [float(np.nanmin(rho)), float(np.nanmax(rho))] if found.any() else None}
        out[f"rho x {d.axis}"] = {"points_per_form": int(d.attn["CACO"].size), "boundaries": rows,
                                  f"{d.axis}_range": [float(d.y[0]), float(d.y[-1])]}
    return out
