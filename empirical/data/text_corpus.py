"""Load a text corpus as byte tokens, split into training and validation parts.

``load_splits(spec)`` accepts
* the name of a registry corpus of :mod:`qkdyn.empirical.data.sources_lm` (fetched and cached), or
* a path: a text file, or a directory. A directory holding one file whose name contains ``train``
  and one containing ``valid`` or ``val`` (WikiText-103's ``wiki.train.tokens`` /
  ``wiki.valid.tokens``, or a user's PubMed / OpenWebText dump) uses those as the two splits;
  otherwise all its files, in name order, are concatenated.

Without a given validation file, the last ``val_fraction`` of the bytes is the validation split.
Single files are memory-mapped, so large corpora are not read into memory.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from qkdyn.errors import InputError


def _bytes_of(path: Path) -> np.ndarray:
    if path.stat().st_size == 0:
        raise InputError(f"corpus file is empty: {path}")
    return np.memmap(path, dtype=np.uint8, mode="r")


def _split(tokens: np.ndarray, val_fraction: float) -> tuple[np.ndarray, np.ndarray]:
    cut = int(len(tokens) * (1 - val_fraction))
    return tokens[:cut], tokens[cut:]


def _directory_splits(root: Path, val_fraction: float) -> tuple[np.ndarray, np.ndarray]:
    files = sorted(p for p in root.iterdir() if p.is_file() and not p.name.startswith("."))
    if not files:
        raise InputError(f"no corpus files in {root}")
    train = [p for p in files if "train" in p.name]
    valid = [p for p in files if "valid" in p.name or ".val" in p.name or "_val" in p.name]
    if len(train) == 1 and len(valid) == 1:
        return _bytes_of(train[0]), _bytes_of(valid[0])
    from qkdyn.memory import check_memory

    # read whole (not mapped): the files, their concatenation, and the split views of it
    check_memory(2 * sum(p.stat().st_size for p in files), f"the {len(files)} corpus files in {root}")
    return _split(np.concatenate([np.fromfile(p, dtype=np.uint8) for p in files]), val_fraction)


def load_splits(spec: str, val_fraction: float = 0.05) -> tuple[np.ndarray, np.ndarray]:
    """(train, validation) byte tokens of corpus ``spec`` (a registry name or a path)."""
    from qkdyn.empirical.data.sources_lm import SOURCES

    names = {s.name for s in SOURCES}
    if spec in names:
        from qkdyn.empirical.data.fetch import fetch

        return _split(_bytes_of(fetch(spec) / "text.txt"), val_fraction)
    from qkdyn.inputs import check_not_special

    path = Path(spec)
    check_not_special(path, "--data")
    if path.is_file():
        return _split(_bytes_of(path), val_fraction)
    if path.is_dir():
        return _directory_splits(path, val_fraction)
    raise InputError(f"--data {spec!r} is neither a corpus name ({', '.join(sorted(names))}) nor an existing path")
