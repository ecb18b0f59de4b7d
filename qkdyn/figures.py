"""Saving figures: one PNG convention for every plot the project writes."""
from __future__ import annotations

import os
from pathlib import Path

from qkdyn.atomic import atomic_path


def save_png(fig, path: str | os.PathLike) -> Path:
    """Write ``fig`` to ``path`` as a PNG (110 dpi, tight bounding box) atomically, then close it."""
    import matplotlib.pyplot as plt

    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=110, bbox_inches="tight")
    plt.close(fig)
    return Path(path)
