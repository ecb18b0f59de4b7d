"""CSV output shared by ``solve`` and ``sgd``: header first, ``t`` ascending, written atomically."""
from __future__ import annotations

import csv
import math
import os
from collections.abc import Mapping

import numpy as np
from numpy.typing import ArrayLike

from qkdyn.atomic import atomic_path
from qkdyn.errors import InputError


def write_columns(path: str | os.PathLike, columns: Mapping[str, ArrayLike]) -> None:
    """Write equal-length columns as CSV (full float precision) to ``path`` atomically."""
    names = list(columns)
    data = np.column_stack([np.asarray(columns[name], dtype=float) for name in names])
    with atomic_path(path) as tmp:
        with open(tmp, "w", newline="") as fh:
            writer = csv.writer(fh)
            writer.writerow(names)
            for row in data:
                writer.writerow([repr(float(v)) for v in row])


def parse_times(text: str | None) -> list[float]:
    """Parse ``--at t1,t2,...`` into non-negative finite floats."""
    if not text:
        return []
    from argparse import ArgumentTypeError

    from qkdyn.configflags import parse_float

    values = []
    for item in text.split(","):
        try:
            value = parse_float(item)
        except ValueError:
            raise InputError(f"--at expects comma-separated numbers, got {item!r}") from None
        except ArgumentTypeError as exc:
            raise InputError(f"--at time {exc}") from None
        if not (math.isfinite(value) and value >= 0):
            raise InputError(f"--at times must be finite and non-negative, got {item!r}")
        values.append(value)
    return sorted(values)
