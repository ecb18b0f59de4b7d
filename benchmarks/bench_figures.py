"""Saving figures: :func:`qkdyn.figures.save_png` (PNG + PDF, a layout check) against the same function with
its text and font shortcuts off (every text laid out at every request, fontTools subsetting the whole font
for each PDF) and against what a user would write (``savefig`` of the PNG and of the PDF, each with
``bbox_inches="tight"``, no layout check).

Two figures like the report's: a 2 x 5 grid of log-log panels with legends and a colour bar (the A2 and
phase-diagram figures), and a 4 x 4 grid of heatmaps with a number in every cell (the sampled DTAP figures).
CPU time, median of interleaved rounds; ratio = other's time / save_png's (> 1: save_png is faster). The
shortcuts' files are checked to be the same bytes as without them.
"""
import contextlib
import statistics
import tempfile
import time
from pathlib import Path
from unittest import mock

import numpy as np

from qkdyn import figures
from qkdyn.figures import plt


def panels():
    fig, axes = plt.subplots(2, 5, figsize=(17, 5.6))
    t = np.geomspace(1, 1e15, 100)
    for i, ax in enumerate(axes.ravel()):
        for k in range(4):
            ax.plot(t, np.log1p(t) ** (1 + k / 3) * (1 + i), label=f"form {k}")
        ax.set(xscale="log", yscale="log", xlabel="t", ylabel="qk", title=f"rho = {10 ** (i - 4):g}")
        ax.legend()
    mesh = axes[0, 0].pcolormesh(np.eye(3))
    figures.colorbar(fig, mesh, axes[:, -1], "attn at loss 0.01")
    return fig


def heatmaps():
    fig, axes = plt.subplots(4, 4, figsize=(10, 9))
    values = np.random.default_rng(0).random((4, 4, 5, 5))
    for (i, j), ax in np.ndenumerate(axes):
        ax.imshow(values[i, j], vmin=0, vmax=1)
        for (r, c), v in np.ndenumerate(values[i, j]):
            ax.text(c, r, f"{v:.2f}", ha="center", va="center", fontsize=6)
        ax.set(xlabel="id", ylabel="class", title=f"arm {i}, seed {j}")
    return fig


def plain(fig, path: Path) -> None:
    for suffix in (".png", ".pdf"):
        fig.savefig(path.with_suffix(suffix), bbox_inches="tight")
    plt.close(fig)


def main(rounds: int = 3) -> None:
    off = {"_text_layouts_once": contextlib.nullcontext, "_two_stage_font_subsets": contextlib.nullcontext}

    def shortcuts_off(fig, path):
        with mock.patch.multiple(figures, **off):
            figures.save_png(fig, path)

    sides = {"save_png": figures.save_png, "shortcuts off": shortcuts_off, "plain savefig x2": plain}
    with tempfile.TemporaryDirectory() as tmp:
        for make in (panels, heatmaps):
            times = {name: [] for name in sides}
            for r in range(rounds):
                order = list(sides) if r % 2 == 0 else list(sides)[::-1]
                for name in order:
                    fig, path = make(), Path(tmp) / f"{name.replace(' ', '_')}.png"
                    figures._common_subset.cache_clear()  # each round from a cold font cache: no head start
                    start = time.process_time()
                    sides[name](fig, path)
                    times[name].append(time.process_time() - start)
            same = all((Path(tmp) / f"save_png{s}").read_bytes() == (Path(tmp) / f"shortcuts_off{s}").read_bytes()
                       for s in (".png", ".pdf"))
            base = statistics.median(times["save_png"])
            print(f"{make.__name__}: CPU, median of {rounds} interleaved rounds: save_png {base:.2f} s; "
                  + "; ".join(f"{n} {statistics.median(t):.2f} s (ratio {statistics.median(t) / base:.2f})"
                              for n, t in times.items() if n != "save_png")
                  + f"; PNG and PDF the same bytes with and without the shortcuts: {'yes' if same else 'NO'}")
