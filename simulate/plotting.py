"""Shared figure conventions: headless backend, one colour per parameterisation, atomic PNGs."""
from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from qkdyn.atomic import atomic_path  # noqa: E402

COLOURS = {"CACO": "tab:blue", "FACO": "tab:orange", "CAFO": "tab:green", "FAFO": "tab:red",
           "paper": "tab:purple"}


def save(fig, directory: Path, name: str) -> str:
    """Save ``fig`` as ``directory/name`` atomically, close it, return ``name``."""
    with atomic_path(directory / name) as tmp:
        fig.savefig(tmp, format="png", dpi=110, bbox_inches="tight")
    plt.close(fig)
    return name


def subplots(rows: int, cols: int, **kwargs):
    return plt.subplots(rows, cols, figsize=(4.2 * cols, 3.3 * rows), squeeze=False, **kwargs)
