"""The run skeleton shared by the torch trainers (``train-circuits``, ``lm``, ``mqar``).

A run directory holds a checkpoint (``checkpoint.pt`` / ``ckpt.pt``), ``metrics.jsonl`` (one JSON
object a line, each with a ``step``) and the final result. :class:`RunDir` owns the bookkeeping:

* the path is checked before anything is created (not a file, not under a file, writable);
* the directory itself is locked (``flock`` on it, no lock file) while a run trains, so two runs
  with the same ``--out`` cannot interleave their metrics: the second gets one line and exit 2;
* directories it created are removed again (if still empty) when the run fails with an InputError;
* checkpoints are written atomically and read with ``torch.load(..., weights_only=True)``: a file on
  disk is data, never code, so a crafted pickle cannot run anything; a damaged one is one line;
* the configuration stored in the checkpoint must equal the run's (a plain dict);
* on resume, metric rows after the checkpoint's step are dropped (the resumed run writes them
  again), and a last line cut by a kill is repaired rather than fatal;
* stale temporary files of our atomic-write pattern (``.NAME.*.tmp``) are removed.

Also here: :class:`Clock` (wall and CPU seconds summed over the sessions of a run), RNG states as
tensors and plain types (:func:`capture_rng`, :func:`restore_rng`) and :func:`pin_threads`.
"""
from __future__ import annotations

import json
import os
import random
import time
from pathlib import Path

from qkdyn.atomic import atomic_path, remove_stale_temporaries
from qkdyn.errors import InputError


def check_run_dir(path: str | os.PathLike, flag: str = "--out") -> Path:
    """``path`` as a usable run directory (existing or creatable); nothing is created."""
    if not str(path):
        raise InputError(f"{flag} is empty; name a directory")
    out = Path(path)
    if out.exists():
        if not out.is_dir():
            raise InputError(f"{flag} is not a directory: {out}")
        if not os.access(out, os.W_OK | os.X_OK):
            raise InputError(f"{flag} is not writable: {out}")
        return out
    parent = out.parent
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir():
        raise InputError(f"{flag} lies under a file: {parent}")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise InputError(f"{flag} cannot be created: {parent} is not writable")
    return out


class RunDir:
    """A run directory: lock, checkpoint, metrics. Use as a context manager (it holds the lock)."""

    def __init__(self, path: str | os.PathLike, checkpoint: str = "checkpoint.pt", metrics: str = "metrics.jsonl",
                 lock: bool = True):
        self.path = check_run_dir(path)
        self.checkpoint = self.path / checkpoint
        self.metrics = self.path / metrics
        self._lock_wanted, self._lock_fd = lock, None

    def __enter__(self) -> "RunDir":
        self._created = [p for p in (self.path, *self.path.parents) if not p.exists()]
        try:
            self.path.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise InputError(f"cannot create {self.path}: {exc.strerror or exc}")
        if self._lock_wanted:
            import fcntl

            fd = os.open(self.path, os.O_RDONLY)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                os.close(fd)
                raise InputError(f"{self.path} is in use by another run (locked); wait for it or use another --out")
            self._lock_fd = fd
            remove_stale_temporaries(self.path)
        return self

    def __exit__(self, kind, value, traceback) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # closing the descriptor releases the flock
            self._lock_fd = None
        if kind is not None and issubclass(kind, InputError):
            for directory in self._created:  # innermost first; stops at the first non-empty one
                try:
                    directory.rmdir()
                except OSError:
                    break

    # checkpoints -----------------------------------------------------------------------------
    def load_checkpoint(self, config: dict) -> dict | None:
        """The checkpoint's state (None if there is none); its ``config`` must equal ``config``."""
        if not self.checkpoint.exists():
            return None
        state = load_state(self.checkpoint)
        if not isinstance(state, dict) or not isinstance(state.get("config"), dict) or "step" not in state:
            raise InputError(f"{self.checkpoint} is not a checkpoint of this program; delete it or use another --out")
        where = first_difference(state["config"], config)
        if where is not None:
            field, old, new = where
            raise InputError(f"{self.checkpoint} was written by a different configuration ({field}: {old!r} there, "
                             f"{new!r} now); use another --out")
        return state

    def save_checkpoint(self, state: dict) -> None:
        save_state(self.checkpoint, state)

    # metrics ---------------------------------------------------------------------------------
    def start_metrics(self, step: int | None) -> None:
        """Fresh run (``step`` None): remove old metrics. Resume: keep rows up to ``step`` only."""
        from qkdyn.inputs import check_not_special

        check_not_special(self.metrics, "metrics")
        if step is None:
            if self.metrics.exists():
                self.metrics.unlink()
            return
        if self.metrics.exists():
            rows = read_metrics(self.metrics, repair=True)
            kept = [json.dumps(row) + "\n" for row in rows if row["step"] <= step]
            with atomic_path(self.metrics) as tmp:
                tmp.write_text("".join(kept))

    def log(self, row: dict) -> None:
        with open(self.metrics, "a") as fh:
            fh.write(json.dumps(row) + "\n")


def first_difference(old, new, prefix: str = "") -> tuple[str, object, object] | None:
    """The first field (dotted path, keys in sorted order) where the plain-data records ``old`` and
    ``new`` differ, with both values (``None`` for a missing key); None when they are equal."""
    if isinstance(old, dict) and isinstance(new, dict):
        for key in sorted(set(old) | set(new), key=str):
            found = first_difference(old.get(key), new.get(key), f"{prefix}{key}.")
            if found is not None:
                return found
        return None
    if isinstance(old, (list, tuple)) and isinstance(new, (list, tuple)) and len(old) == len(new):
        for i, (a, b) in enumerate(zip(old, new)):
            found = first_difference(a, b, f"{prefix}{i}.")
            if found is not None:
                return found
        return None
    return None if old == new else (prefix.rstrip(".") or "(record)", old, new)


def read_metrics(path: Path, repair: bool = False) -> list[dict]:
    """The rows of a metrics JSONL file; with ``repair``, a cut last line (a kill mid-write) is dropped."""
    from qkdyn.jsonio import loads, read_lines

    hint = "delete the run directory or use another --out"
    lines = read_lines(path, hint)
    rows = []
    for index, (number, line) in enumerate(lines):
        try:
            row = loads(line, str(path), number, hint=hint)
            if not isinstance(row, dict) or not isinstance(row.get("step"), int):
                raise InputError(f"{path}: line {number} is not a metrics row; {hint}")
        except InputError:
            if repair and index == len(lines) - 1:
                break
            raise
        rows.append(row)
    return rows


def save_state(path: Path, state: dict) -> None:
    """``torch.save`` atomically; ``state`` holds tensors and plain types only (see :func:`load_state`)."""
    import torch

    with atomic_path(path) as tmp, open(tmp, "wb") as fh:
        sink = _Sink(fh)
        try:
            torch.save(state, sink)
        except RuntimeError:
            if sink.error is not None:  # torch wraps a failed write (disk full, file-size limit); keep the OSError
                raise sink.error from None
            raise


class _Sink:
    """A file for ``torch.save`` that remembers the OSError of a failed write (torch reports only its own)."""

    def __init__(self, fh):
        self.fh, self.error = fh, None

    def write(self, data) -> int:
        try:
            return self.fh.write(data)
        except OSError as exc:
            self.error = exc
            raise

    def flush(self) -> None:
        self.fh.flush()


def load_state(path: Path) -> dict:
    """``torch.load(path, weights_only=True)``: tensors and plain types only, never code."""
    import torch

    from qkdyn.inputs import check_not_special

    check_not_special(path, "checkpoint")
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # any unpickling / zip / EOF failure is a bad file, reported as one line
        raise InputError(f"{path} is not a loadable checkpoint ({type(exc).__name__}); delete it or use another --out")


class Clock:
    """Wall and CPU seconds summed over the sessions of a run (``wall``, ``cpu`` carried over)."""

    def __init__(self, wall: float = 0.0, cpu: float = 0.0):
        self.base_wall, self.base_cpu = wall, cpu
        self.start_wall, self.start_cpu = time.time(), time.process_time()

    def totals(self) -> dict:
        return {"wall": self.base_wall + time.time() - self.start_wall,
                "cpu": self.base_cpu + time.process_time() - self.start_cpu}


def capture_rng(device=None, numpy_legacy: bool = False, python: bool = False) -> dict:
    """The global RNG states as tensors and plain types (loadable with ``weights_only=True``)."""
    import torch

    state = {"torch": torch.get_rng_state()}
    if device is not None and device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(device)
    if numpy_legacy:
        import numpy as np

        name, keys, pos, has_gauss, cached = np.random.get_state()
        state["numpy"] = {"name": name, "keys": torch.from_numpy(keys.astype(np.int64)), "pos": int(pos),
                          "has_gauss": int(has_gauss), "cached_gaussian": float(cached)}
    if python:
        version, internal, gauss_next = random.getstate()
        state["python"] = {"version": version, "internal": list(internal), "gauss_next": gauss_next}
    return state


def restore_rng(state: dict, device=None) -> None:
    """Set the RNG states captured by :func:`capture_rng` (each one present)."""
    import torch

    torch.set_rng_state(state["torch"])
    if "cuda" in state:
        torch.cuda.set_rng_state(state["cuda"], device)
    if "numpy" in state:
        import numpy as np

        s = state["numpy"]
        np.random.set_state((s["name"], s["keys"].numpy().astype(np.uint32), s["pos"], s["has_gauss"],
                             s["cached_gaussian"]))
    if "python" in state:
        s = state["python"]
        random.setstate((s["version"], tuple(s["internal"]), s["gauss_next"]))


def pin_threads(n: int | None) -> None:
    """Use ``n`` torch CPU threads (None: torch's choice); ``n`` < 1 is an InputError."""
    if n is None:
        return
    if n < 1:
        raise InputError(f"must be a positive integer, got {n}", "threads")
    import torch

    torch.set_num_threads(n)


def read_json(path: str | os.PathLike):
    """The JSON document in ``path`` (:func:`qkdyn.jsonio.read_json`); damage is one InputError naming the file."""
    from qkdyn.jsonio import read_json as read

    return read(path, "delete it to recompute it")
