"""Fake run folders for the circuits report's figures: what :func:`qkdyn.empirical.circuits.plots.plot_all`
reads from a run besides its record (the per-evaluation ``metrics.jsonl``), written for hand-made arms.

(``tests/`` is on ``sys.path`` because ``tests/conftest.py`` lives there.)"""
from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from pathlib import Path

from qkdyn import atomic


def run_dirs(root: Path, arms: Iterable[str], seeds: int, rows: Callable[[int], list[dict]]) -> dict[str, list[Path]]:
    """{arm: [run folder per seed]} under ``root / "runs"``, each with a ``metrics.jsonl`` of ``rows(seed)``
    (one JSON object per evaluation)."""
    out: dict[str, list[Path]] = {}
    for i, arm in enumerate(arms):
        out[arm] = []
        for seed in range(seeds):
            folder = root / "runs" / f"{i}-{seed}"
            folder.mkdir(parents=True)
            atomic.write_text(folder / "metrics.jsonl", "".join(json.dumps(row) + "\n" for row in rows(seed)))
            out[arm].append(folder)
    return out
