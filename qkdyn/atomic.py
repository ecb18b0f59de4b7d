"""Atomic file output: write to a temporary file beside the target, then rename.

A reader never sees a half-written file, and a failed run leaves nothing behind.
"""
from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path
from typing import Iterator

from qkdyn.errors import InputError


def check_writable(path: str | os.PathLike) -> Path:
    """Fail early (as a :class:`InputError`) if ``path`` cannot be created or replaced."""
    target = Path(path)
    parent = target.parent if str(target.parent) else Path(".")
    if target.is_dir():
        raise InputError(f"output path is a directory: {target}")
    if not parent.is_dir():
        raise InputError(f"output directory does not exist: {parent}")
    if not os.access(parent, os.W_OK):
        raise InputError(f"output directory is not writable: {parent}")
    return target


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path to write; on success it replaces ``path`` atomically."""
    target = check_writable(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent or ".")
    os.close(fd)
    try:
        yield Path(tmp)
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def write_text(path: str | os.PathLike, text: str) -> None:
    """Write ``text`` to ``path`` atomically."""
    with atomic_path(path) as tmp:
        tmp.write_text(text)
