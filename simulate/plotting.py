"""Shared figure conventions of the theory plots: the qkdyn style (:mod:`qkdyn.figures`), one colour
per parameterisation (colour-blind safe), panel sizes, atomic PNG + PDF; and :func:`drawn`, how a
measure stores the arrays a figure is later drawn from (the claims' ``render``, never their ``measure``,
draws)."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from qkdyn.figures import PALETTE, plt, save_png

COLOURS = {"CACO": PALETTE[0], "FACO": PALETTE[1], "CAFO": PALETTE[2], "FAFO": PALETTE[3], "paper": PALETTE[4]}
#: significant digits of an array kept only to be drawn (a figure resolves far less; the record stays small)
DRAWN_DIGITS = 4


def drawn(values, digits: int = DRAWN_DIGITS) -> list:
    """``values`` (an array of one or more dimensions) as nested lists of floats rounded to ``digits`` significant
    digits (NaN and infinities kept): the compact JSON form of an array a figure is drawn from."""
    array = np.asarray(values, dtype=float)
    return [drawn(row, digits) for row in array] if array.ndim > 1 else [float(f"{v:.{digits}g}") for v in array]


def save(fig, directory: Path, name: str) -> str:
    """Save ``fig`` as ``directory/name`` (and a PDF beside it, :func:`qkdyn.figures.save_png`), return ``name``."""
    save_png(fig, directory / name)
    return name


def subplots(rows: int, cols: int, **kwargs):
    """A grid of panels (constrained layout from the style), 3.4 x 2.8 inches each."""
    return plt.subplots(rows, cols, figsize=(3.4 * cols, 2.8 * rows), squeeze=False, **kwargs)
