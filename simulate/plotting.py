"""Shared figure conventions of the theory plots: the qkdyn style (:mod:`qkdyn.figures`), one colour
per parameterisation (colour-blind safe), panel sizes, atomic PNG + PDF."""
from __future__ import annotations

from pathlib import Path

from qkdyn.figures import PALETTE, plt, save_png

COLOURS = {"CACO": PALETTE[0], "FACO": PALETTE[1], "CAFO": PALETTE[2], "FAFO": PALETTE[3], "paper": PALETTE[4]}


def save(fig, directory: Path, name: str) -> str:
    """Save ``fig`` as ``directory/name`` (and a PDF beside it, :func:`qkdyn.figures.save_png`), return ``name``."""
    save_png(fig, directory / name)
    return name


def subplots(rows: int, cols: int, **kwargs):
    """A grid of panels (constrained layout from the style), 3.4 x 2.8 inches each."""
    return plt.subplots(rows, cols, figsize=(3.4 * cols, 2.8 * rows), squeeze=False, **kwargs)
