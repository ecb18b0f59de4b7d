"""A custom theory plot: attention against loss for two settings overlaid, saved as a PNG.

    python examples/overlay_plot.py [OUT.png]

Two learning-rate ratios of the FAFO model: the faster QK circuit reaches every loss level with
sharper attention (claim A4). Change the settings to compare anything else.
"""
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

import qkdyn  # noqa: E402


def main(out: str = "overlay.png") -> None:
    fig, ax = plt.subplots(figsize=(5, 3.5))
    for rho in (1.0, 10.0):
        setting = qkdyn.Setting(eta_qk=rho)
        trajectory = qkdyn.solve(setting, "FAFO", until_loss=1e-3, points=300)
        ax.plot(trajectory.loss, trajectory.attn, label=f"FAFO, rho = {rho:g}")
    ax.set(xscale="log", xlabel="population loss", ylabel="attention on distinct tokens")
    ax.invert_xaxis()
    ax.legend()
    fig.savefig(out, dpi=110, bbox_inches="tight")
    print(f"wrote {out}")


if __name__ == "__main__":
    main(*sys.argv[1:2])
