"""Atomic file output: write to a temporary file beside the target, then rename.

A reader never sees a half-written file, and a failed run leaves nothing behind: the temporary file
``.NAME.PID.XXXXXXXX.tmp`` is removed when the write fails or is interrupted (the command line turns
SIGTERM into an interrupt), and one left by a killed process (SIGKILL) is removed by the next atomic
write in the same directory, or by :func:`remove_stale_temporaries`, once that process is gone. A
write that fails for lack of space or beyond the file-size limit raises its OSError naming the
target; the previous file is untouched. The result
gets the mode of a plain ``open()`` (0666 less the umask), not ``mkstemp``'s 0600.
"""
from __future__ import annotations

import contextlib
import os
import re
import tempfile
from collections.abc import Iterator
from pathlib import Path

from qkdyn.errors import InputError

_TEMPORARY = re.compile(r"^\.(?P<name>.+)\.(?P<pid>\d+)\.[A-Za-z0-9_]{8}\.tmp$")


def check_writable(path: str | os.PathLike) -> Path:
    """Fail early (as a :class:`InputError`) if ``path`` cannot be created or replaced: it must be
    new or a regular file (a device node, FIFO or socket is never replaced), in a writable directory."""
    from qkdyn.inputs import special_kind

    if not str(path):
        raise InputError("output path is empty")
    target = Path(path)
    parent = target.parent if str(target.parent) else Path(".")
    if target.is_dir():
        raise InputError(f"output path is a directory: {target}")
    kind = special_kind(target)
    if kind:
        raise InputError(f"output path {target} is {kind}; give a regular file or a new path")
    if not parent.is_dir():
        raise InputError(f"output directory does not exist: {parent}")
    if not os.access(parent, os.W_OK):
        raise InputError(f"output directory is not writable: {parent}")
    return target


def process_alive(pid: int) -> bool:
    """Whether process ``pid`` exists (one of another user's counts as alive)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_stale_temporaries(directory: str | os.PathLike, name: str | None = None) -> None:
    """Remove our temporary files in ``directory`` (of target ``name``, or all) whose writer is gone."""
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return
    for entry in entries:
        match = _TEMPORARY.match(entry.name)
        if match and (name is None or match["name"] == name) and not process_alive(int(match["pid"])):
            with contextlib.suppress(OSError):
                os.unlink(entry.path)


def _umask_mode() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path to write; on success it replaces ``path`` atomically."""
    target = check_writable(path)
    directory = target.parent or Path(".")
    remove_stale_temporaries(directory)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.{os.getpid()}.", suffix=".tmp", dir=directory)
    os.close(fd)
    try:
        yield Path(tmp)
        os.chmod(tmp, _umask_mode())
        os.replace(tmp, target)
    except OSError as exc:  # disk full, file-size limit: name the output, not the temporary
        if exc.filename is None or exc.filename == tmp:
            exc.filename = str(target)
        raise
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def write_text(path: str | os.PathLike, text: str) -> None:
    """Write ``text`` to ``path`` atomically."""
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")
