"""A custom theory plot: attention against loss for two settings overlaid, in the qkdyn style.

    python examples/overlay_plot.py [OUT.png]

Two learning-rate ratios of the FAFO model: the faster QK circuit reaches every loss level with
sharper attention (claim A4). Change the settings to compare anything else. Importing
``qkdyn.figures`` applies the qkdyn style sheet (sizes for a paper, constrained layout, colour-blind-safe
colours); ``figures.save_png`` writes the PNG and a PDF beside it and warns if a label is missing or
text runs into another panel.
"""
import sys

import qkdyn
from qkdyn import figures


def main(out: str = "overlay.png") -> None:
    fig, ax = figures.plt.subplots(figsize=(3.6, 2.8))
    for rho in (1.0, 10.0):
        setting = qkdyn.Setting(eta_qk=rho)
        trajectory = qkdyn.solve(setting, "FAFO", until_loss=1e-3, points=300)
        ax.plot(trajectory.loss, trajectory.attn, label=f"FAFO, rho = {rho:g}")
    ax.set(xscale="log", xlabel="population loss", ylabel="attention on distinct tokens")
    ax.invert_xaxis()
    ax.legend()
    figures.save_png(fig, out)
    print(f"wrote {out} and its PDF")


if __name__ == "__main__":
    main(*sys.argv[1:2])
