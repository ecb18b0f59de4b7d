"""Overview figures: trajectories in log-time and the (ov, qk) phase portrait."""
from __future__ import annotations

from pathlib import Path

import numpy as np
from qkdyn.simulate.plotting import COLOURS, save, subplots
from qkdyn.simulate.solve import solve
from qkdyn.theory.compiled import load
from qkdyn.theory.setting import ALL_PARAMS, EXACT_PARAMS, Setting


def trajectories_plot(setting: Setting, t_max: float, figures: Path) -> str:
    fig, axes = subplots(1, 4)
    for param in ALL_PARAMS:
        tr = solve(setting, param, t_max=t_max, points=300)
        t = tr.t[1:]
        for ax, values, name in zip(axes[0], (tr.qk, tr.ov, tr.attn, tr.loss), ("qk", "ov", "attn", "loss"), strict=True):
            ax.plot(t, values[1:], color=COLOURS[param], label=param)
            ax.set(xscale="log", xlabel="t", ylabel=name, title=name)
    axes[0, 3].set_yscale("log")
    axes[0, 0].legend()
    return save(fig, figures, "trajectories.png")


def phase_portrait(setting: Setting, rhos, t_max: float, figures: Path) -> str:
    """Trajectories in the (ov, qk) plane for several rho, over the CACO direction field at rho = 1."""
    fig, axes = subplots(1, len(EXACT_PARAMS))
    for col, param in enumerate(EXACT_PARAMS):
        ax = axes[0, col]
        for rho in rhos:
            tr = solve(setting.replace(eta_qk=rho * setting.eta_ov), param, t_max=t_max, points=300)
            ax.plot(tr.ov, tr.qk, label=f"rho={rho:g}")
        if param == "CACO":
            _direction_field(ax, setting)
        ax.set(xlabel="ov", ylabel="qk", title=param)
        ax.legend()
    return save(fig, figures, "phase_portrait.png")


def _direction_field(ax, setting: Setting) -> None:
    compiled, p = load("CACO"), setting.numeric()
    x_lo, x_hi = ax.get_xlim()
    y_lo, y_hi = ax.get_ylim()
    ov_grid, qk_grid = np.meshgrid(np.linspace(x_lo, x_hi, 18), np.linspace(y_lo, y_hi, 18))
    d_ov, d_qk = np.zeros_like(ov_grid), np.zeros_like(qk_grid)
    for index in np.ndindex(ov_grid.shape):
        # a CACO state with this gap and margin: a = qk/s, b = 0, u = ov, w = z = 0
        x = np.array([qk_grid[index] / setting.scale, 0.0, ov_grid[index], 0.0, 0.0])
        v = compiled.rhs(x, p)
        d_qk[index] = setting.scale * (v[0] - v[1])
        d_ov[index] = v[2] - v[3]
    ax.streamplot(ov_grid, qk_grid, d_ov, d_qk, color="0.8", density=0.8, linewidth=0.6)
