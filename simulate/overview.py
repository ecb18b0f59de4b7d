"""Overview figures: trajectories in log-time and the (ov, qk) phase portrait.

Measured and drawn apart: :func:`measure_trajectories` and :func:`measure_phase_portrait` solve and return
the curves as JSON data (:func:`qkdyn.simulate.plotting.drawn`), :func:`draw_trajectories` and
:func:`draw_phase_portrait` draw TRAJECTORIES_FIGURE and PHASE_PORTRAIT_FIGURE from that data alone;
:func:`trajectories_plot` and :func:`phase_portrait` do both for one setting."""
from __future__ import annotations

from pathlib import Path

import numpy as np
from qkdyn.simulate.plotting import COLOURS, drawn, save, subplots
from qkdyn.simulate.solve import solve
from qkdyn.theory.compiled import load
from qkdyn.theory.setting import ALL_PARAMS, EXACT_PARAMS, Setting

TRAJECTORIES_FIGURE, PHASE_PORTRAIT_FIGURE = "trajectories.png", "phase_portrait.png"
FEATURES = ("qk", "ov", "attn", "loss")
#: the direction field's grid: this many points per axis over the panel's range (the data's, plus matplotlib's
#: default 5 % margin on either side)
FIELD_POINTS, MARGIN = 18, 0.05


def measure_trajectories(setting: Setting, t_max: float) -> dict:
    """Per parameterisation, t and the features qk, ov, attn, loss along the solution to ``t_max``
    (300 output times, all but t = 0)."""
    out = {}
    for param in ALL_PARAMS:
        tr = solve(setting, param, t_max=t_max, points=300)
        out[param] = {"t": drawn(tr.t[1:]), **{name: drawn(getattr(tr, name)[1:]) for name in FEATURES}}
    return out


def draw_trajectories(curves: dict, figures: Path) -> str:
    """TRAJECTORIES_FIGURE from :func:`measure_trajectories`'s curves: one panel per feature against log t."""
    fig, axes = subplots(1, len(FEATURES))
    for param, curve in curves.items():
        for ax, name in zip(axes[0], FEATURES, strict=True):
            ax.plot(curve["t"], curve[name], color=COLOURS[param], label=param)
            ax.set(xscale="log", xlabel="t", ylabel=name, title=name)
    axes[0, 3].set_yscale("log")
    axes[0, 0].legend()
    return save(fig, figures, TRAJECTORIES_FIGURE)


def trajectories_plot(setting: Setting, t_max: float, figures: Path) -> str:
    """:func:`measure_trajectories` drawn into ``figures`` (:func:`draw_trajectories`)."""
    return draw_trajectories(measure_trajectories(setting, t_max), figures)


def measure_phase_portrait(setting: Setting, rhos, t_max: float) -> dict:
    """Per exact parameterisation and rho = eta_QK / eta_OV in ``rhos``, the solution's (ov, qk) to ``t_max``
    (``paths``), and the CACO direction field at rho = 1 over the range of CACO's paths (``field``:
    :func:`direction_field`)."""
    paths: dict[str, list[dict]] = {}
    for param in EXACT_PARAMS:
        paths[param] = []
        for rho in rhos:
            tr = solve(setting.replace(eta_qk=rho * setting.eta_ov), param, t_max=t_max, points=300)
            paths[param].append({"rho": float(rho), "ov": drawn(tr.ov), "qk": drawn(tr.qk)})
    caco = paths["CACO"]
    ov = np.concatenate([p["ov"] for p in caco])
    qk = np.concatenate([p["qk"] for p in caco])
    return {"paths": paths, "field": direction_field(setting, _padded(ov), _padded(qk))}


def _padded(values: np.ndarray) -> tuple[float, float]:
    """The range of ``values`` widened by MARGIN of its width on either side (matplotlib's default view)."""
    lo, hi = float(np.min(values)), float(np.max(values))
    return lo - MARGIN * (hi - lo), hi + MARGIN * (hi - lo)


def direction_field(setting: Setting, ov_range: tuple[float, float], qk_range: tuple[float, float]) -> dict:
    """The CACO flow's (d ov/dt, d qk/dt) at rho = 1 on a FIELD_POINTS x FIELD_POINTS grid over the ranges
    (rows: qk, columns: ov; the grid is read back from the ranges, :func:`_mesh`)."""
    compiled, p = load("CACO"), setting.numeric()
    ov_grid, qk_grid = _mesh(ov_range, qk_range, FIELD_POINTS, FIELD_POINTS)
    d_ov, d_qk = np.zeros_like(ov_grid), np.zeros_like(qk_grid)
    for index in np.ndindex(ov_grid.shape):
        # a CACO state with this gap and margin: a = qk/s, b = 0, u = ov, w = z = 0
        x = np.array([qk_grid[index] / setting.scale, 0.0, ov_grid[index], 0.0, 0.0])
        v = compiled.rhs(x, p)
        d_qk[index] = setting.scale * (v[0] - v[1])
        d_ov[index] = v[2] - v[3]
    return {"ov_range": list(ov_range), "qk_range": list(qk_range), "d_ov": drawn(d_ov), "d_qk": drawn(d_qk)}


def _mesh(ov_range, qk_range, rows: int, cols: int) -> tuple[np.ndarray, np.ndarray]:
    """The (ov, qk) meshgrid of ``rows`` x ``cols`` points equally spaced over the ranges."""
    (ov_lo, ov_hi), (qk_lo, qk_hi) = ov_range, qk_range
    ov, qk = np.meshgrid(np.linspace(ov_lo, ov_hi, cols), np.linspace(qk_lo, qk_hi, rows))
    return ov, qk


def draw_phase_portrait(evidence: dict, figures: Path) -> str:
    """PHASE_PORTRAIT_FIGURE from :func:`measure_phase_portrait`'s evidence: per form, its paths in the (ov, qk)
    plane; CACO's over the direction field."""
    paths = evidence["paths"]
    fig, axes = subplots(1, len(paths))
    for col, (param, runs) in enumerate(paths.items()):
        ax = axes[0, col]
        for run in runs:
            ax.plot(run["ov"], run["qk"], label=f"rho={run['rho']:g}")
        if param == "CACO":
            field = evidence["field"]
            ax.streamplot(*_mesh(field["ov_range"], field["qk_range"], *np.shape(field["d_ov"])), np.asarray(field["d_ov"]), np.asarray(field["d_qk"]), color="0.8",
                          density=0.8, linewidth=0.6)
        ax.set(xlabel="ov", ylabel="qk", title=param)
        ax.legend()
    return save(fig, figures, PHASE_PORTRAIT_FIGURE)


def phase_portrait(setting: Setting, rhos, t_max: float, figures: Path) -> str:
    """Trajectories in the (ov, qk) plane for several rho, over the CACO direction field at rho = 1
    (:func:`measure_phase_portrait` drawn by :func:`draw_phase_portrait`)."""
    return draw_phase_portrait(measure_phase_portrait(setting, rhos, t_max), figures)
