"""Shared figure conventions: headless backend, one colour per parameterisation, atomic PNGs."""
from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from qkdyn.figures import save_png  # noqa: E402

COLOURS = {"CACO": "tab:blue", "FACO": "tab:orange", "CAFO": "tab:green", "FAFO": "tab:red",
           "paper": "tab:purple"}


def save(fig, directory: Path, name: str) -> str:
    """Save ``fig`` as ``directory/name`` (see :func:`qkdyn.figures.save_png`), return ``name``."""
    save_png(fig, directory / name)
    return name


def subplots(rows: int, cols: int, **kwargs):
    return plt.subplots(rows, cols, figsize=(4.2 * cols, 3.3 * rows), squeeze=False, **kwargs)
