"""Data inputs: regular files only, read with a size bound.

A device node (``/dev/zero``), a FIFO or a socket given where a data file is expected would hang
(a FIFO with no writer) or never end (``/dev/zero``); both are refused before anything is read. The
check is made on the opened descriptor (opened non-blocking, so a FIFO cannot block the open), so
the file read is the file checked. ``limit`` bounds how much is read: a file above it is refused
with one line instead of filling memory.
"""
from __future__ import annotations

import os
import stat

from qkdyn.errors import InputError

#: default bound on one data file read whole (JSON documents, TSV tables): 4 GiB
MAX_BYTES = 4 << 30


def _kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device node"
    return "a directory" if stat.S_ISDIR(mode) else "not a regular file"


def special_kind(path: str | os.PathLike) -> str | None:
    """What ``path`` is if it exists and is not a regular file or directory (following links), else None."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return None
    return None if stat.S_ISREG(mode) or stat.S_ISDIR(mode) else _kind(mode)


def check_not_special(path: str | os.PathLike, what: str = "data") -> None:
    """InputError if ``path`` is a device node, FIFO or socket (a missing path or a directory passes)."""
    kind = special_kind(path)
    if kind:
        raise InputError(f"{what} path {path} is {kind}; give a regular file")


def read_bytes(path: str | os.PathLike, limit: int = MAX_BYTES, what: str = "data") -> bytes:
    """The content of the regular file ``path``, at most ``limit`` bytes (else an InputError)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as exc:
        raise InputError(f"cannot read {what} file {path}: {exc.strerror or exc}") from None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):  # before fdopen, which refuses a directory with its own error
        os.close(fd)
        raise InputError(f"{what} path {path} is {_kind(info.st_mode)}; give a regular file")
    with os.fdopen(fd, "rb") as fh:
        if info.st_size > limit:
            raise InputError(f"{what} file {path} has {info.st_size} bytes, more than the {limit} this reader accepts")
        os.set_blocking(fd, True)
        try:
            data = fh.read(limit + 1)
        except OSError as exc:
            raise InputError(f"cannot read {what} file {path}: {exc.strerror or exc}") from None
    if len(data) > limit:  # grew while read
        raise InputError(f"{what} file {path} has more than the {limit} bytes this reader accepts")
    return data


def read_text(path: str | os.PathLike, limit: int = MAX_BYTES, what: str = "data") -> str:
    """:func:`read_bytes` decoded as UTF-8; text that is not UTF-8 is an InputError naming the file."""
    try:
        return read_bytes(path, limit, what).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"{what} file {path} is not UTF-8 text (byte {exc.start})") from None

