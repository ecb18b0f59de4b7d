"""The run directory shared by the torch trainers (``train-circuits``, ``lm``, ``mqar``).

Every run directory holds the same three files: ``checkpoint.pt`` (one layout for every trainer,
:meth:`RunDir.save`), ``metrics.jsonl`` (one JSON object a line, each with a ``step``) and
``result.json`` (a :class:`RunRecord`, schema-versioned). :class:`RunDir` owns the names and the
bookkeeping, and :meth:`RunDir.restore` is the one way back from a checkpoint:

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

import dataclasses
import json
import math
import os
import random
import time
from pathlib import Path

from qkdyn.atomic import atomic_path, remove_stale_temporaries
from qkdyn.atomic import write_text as atomic_write
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


#: the files of a run directory, the same for every trainer
CHECKPOINT, METRICS, RESULT = "checkpoint.pt", "metrics.jsonl", "result.json"
#: the version of the checkpoint layout (:meth:`RunDir.save`) and of the record schema (:class:`RunRecord`)
CHECKPOINT_FORMAT = RECORD_SCHEMA = 1


@dataclasses.dataclass(frozen=True)
class RunRecord:
    """``result.json`` of every trainer: what a finished run measured.

    ``config`` is the configuration the run's checkpoint is keyed on (equal config, same run);
    ``steps`` the steps trained (where the run stopped); ``parameters`` the model's parameter count;
    ``train_seconds`` wall and CPU seconds of training summed over the run's sessions (:class:`Clock`);
    ``final`` the final evaluation (``lm``/``mqar``: metric -> value; ``circuits``: split -> metrics);
    ``details`` what only one trainer has (``circuits``: classes, vocabulary size, planned steps,
    target reached, training loss at the stop, training examples, final-evaluation seconds;
    ``lm``/``mqar``: tokens, tokens per second of step time)."""

    trainer: str
    config: dict
    steps: int
    parameters: int
    train_seconds: dict
    final: dict
    details: dict = dataclasses.field(default_factory=dict)
    schema: int = RECORD_SCHEMA

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data, source: str = "the run record") -> RunRecord:
        """The record of ``data`` (from ``source``); a record written before the schema (the old
        ``final.json`` of ``train-circuits``, ``result.json`` of ``lm``/``mqar``) is read through
        :func:`from_legacy`; anything else is one InputError naming ``source``. Keys beside the
        fields (a study's record adds ``files``) are not part of the run record and are left out."""
        hint = "delete it (and its run directory) to run it again"
        if isinstance(data, dict) and "schema" not in data:
            data = from_legacy(data)
        if not isinstance(data, dict) or data.get("schema") != RECORD_SCHEMA:
            version = data.get("schema") if isinstance(data, dict) else None
            raise InputError(f"{source} is not a run record of schema {RECORD_SCHEMA} (schema {version!r}); {hint}")
        try:
            record = cls(**{k: v for k, v in data.items() if k in _RECORD_FIELDS})
        except TypeError as exc:
            raise InputError(f"{source} is not a run record ({exc}); {hint}") from None
        types = {"trainer": str, "config": dict, "steps": int, "parameters": int, "train_seconds": dict,
                 "final": dict, "details": dict}
        wrong = [name for name, kind in types.items() if not isinstance(getattr(record, name), kind)]
        if wrong:
            raise InputError(f"{source} is not a run record ({wrong[0]} is not a {types[wrong[0]].__name__}); {hint}")
        return record


_RECORD_FIELDS = frozenset(f.name for f in dataclasses.fields(RunRecord))


def from_legacy(data: dict) -> dict | None:
    """An old result file as a schema-1 record dict (None when it is neither old layout): the
    ``final.json`` of ``train-circuits`` and the ``result.json`` of ``lm``/``mqar`` (the study's
    records add ``evals`` and ``ablation``, kept in ``details``); their training time (step time
    only, wall clock) is kept as ``train_seconds.wall`` with ``cpu`` unknown (NaN)."""
    if {"config", "dev", "test", "n_parameters", "stopped_at"} <= data.keys():
        details = {k: data[k] for k in ("classes", "vocab_size", "target_reached", "final_train_loss", "n_train",
                                        "final_eval_seconds") if k in data}
        return {"trainer": "circuits", "config": data["config"], "steps": data["stopped_at"],
                "parameters": data["n_parameters"], "train_seconds": data.get("train_seconds", {}),
                "final": {"dev": data["dev"], "test": data["test"]},
                "details": {**details, "planned_steps": data.get("steps")}, "schema": RECORD_SCHEMA}
    if {"model", "train", "final", "parameters", "steps"} <= data.keys():
        moved = ("parameters", "steps", "final", "tokens", "train_time_s", "tokens_per_s", "evals", "ablation")
        return {"trainer": data.get("task", "lm"), "config": {k: v for k, v in data.items() if k not in moved},
                "steps": data["steps"], "parameters": data["parameters"],
                "train_seconds": {"wall": data.get("train_time_s", math.nan), "cpu": math.nan}, "final": data["final"],
                "details": {k: data[k] for k in moved[3:] if k in data}, "schema": RECORD_SCHEMA}
    return None


@dataclasses.dataclass(frozen=True)
class Restored:
    """What :meth:`RunDir.restore` gives back besides the loaded states: the step, the clock
    carried over and the trainer's own ``extra`` state (plain data)."""

    step: int
    clock: Clock
    extra: dict


class RunDir:
    """A run directory: lock, checkpoint, metrics, record. Use as a context manager (the writer
    holds the lock). ``config`` (plain data) keys the checkpoint and the record; ``writer`` False
    (the other ranks of a data-parallel run) only restores: no lock, no metrics, no files written."""

    def __init__(self, path: str | os.PathLike, config: dict, writer: bool = True):
        self.path = check_run_dir(path)
        self.config = config
        self.checkpoint, self.metrics, self.result = (self.path / name for name in (CHECKPOINT, METRICS, RESULT))
        self.writer, self._lock_fd = writer, None

    def __enter__(self) -> RunDir:
        self._created = [p for p in (self.path, *self.path.parents) if not p.exists()]
        try:
            self.path.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise InputError(f"cannot create {self.path}: {exc.strerror or exc}") from None
        if self.writer:
            import fcntl

            fd = os.open(self.path, os.O_RDONLY)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                os.close(fd)
                raise InputError(f"{self.path} is in use by another run (locked); wait for it or use another --out") from None
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
    def restore(self, model, optimizer, scheduler=None, data=None, device=None) -> Restored | None:
        """Load the checkpoint into ``model``, ``optimizer``, ``scheduler`` and the batch source
        ``data`` (each with ``load_state_dict``; None: not part of this trainer) and set the RNG
        states; the writer keeps the metric rows up to its step only (all are removed on a fresh
        start). None when there is no checkpoint. A checkpoint of another configuration, of an older
        layout, a negative step, or damaged is one InputError, raised before the metrics file is touched."""
        state = self._read_checkpoint()
        restored = None if state is None else self._load(state, model, optimizer, scheduler, data, device)
        if self.writer:
            self._start_metrics(None if restored is None else restored.step)
        return restored

    def _load(self, state: dict, model, optimizer, scheduler, data, device) -> Restored:
        damaged = f"{self.checkpoint} is damaged"
        step = state.get("step")
        if not isinstance(step, int) or isinstance(step, bool) or step < 0:
            raise InputError(f"{damaged} (step {step!r} is not a count of steps); delete it or use another --out")
        try:
            model.load_state_dict(state["model"])
            optimizer.load_state_dict(state["optimizer"])
            for part, name in ((scheduler, "scheduler"), (data, "data")):
                if part is not None:
                    part.load_state_dict(state[name])
            restore_rng(state["rng"], device)
            return Restored(step, Clock(state["clock"]["wall"], state["clock"]["cpu"]), dict(state["extra"]))
        except (KeyError, TypeError, ValueError, RuntimeError) as exc:
            raise InputError(f"{damaged} ({type(exc).__name__}); delete it or use another --out") from None

    def save(self, step: int, model, optimizer, scheduler=None, data=None, device=None, clock: Clock | None = None,
             extra: dict | None = None) -> None:
        """Write the checkpoint (atomic): format, configuration, step, the state dicts of the parts
        given, every RNG state, the clock's totals and the trainer's ``extra`` (plain data)."""
        totals = clock.totals() if clock is not None else {"wall": 0.0, "cpu": 0.0}
        save_state(self.checkpoint, {
            "format": CHECKPOINT_FORMAT, "config": self.config, "step": step, "model": model.state_dict(),
            "optimizer": optimizer.state_dict(), "scheduler": None if scheduler is None else scheduler.state_dict(),
            "data": None if data is None else data.state_dict(), "rng": capture_rng(device), "clock": totals,
            "extra": extra or {}})

    def _read_checkpoint(self) -> dict | None:
        old = self.path / "ckpt.pt"
        if not self.checkpoint.exists():
            if old.exists():
                raise InputError(f"{old} is a checkpoint of an older qkdyn (before the one checkpoint format); delete "
                                 "it or use another --out")
            return None
        state = load_state(self.checkpoint)
        if not isinstance(state, dict) or not isinstance(state.get("config"), dict) or "step" not in state:
            raise InputError(f"{self.checkpoint} is not a checkpoint of this program; delete it or use another --out")
        if state.get("format") != CHECKPOINT_FORMAT:
            raise InputError(f"{self.checkpoint} is a checkpoint of an older qkdyn (format {state.get('format')!r}, "
                             f"this one reads {CHECKPOINT_FORMAT}); delete it or use another --out")
        where = first_difference(state["config"], self.config)
        if where is not None:
            field, old_value, new_value = where
            raise InputError(f"{self.checkpoint} was written by a different configuration ({field}: {old_value!r} "
                             f"there, {new_value!r} now); use another --out")
        return state

    # record ----------------------------------------------------------------------------------
    def write_record(self, record: RunRecord) -> None:
        """Write ``result.json`` (atomic)."""
        atomic_write(self.result, json.dumps(record.to_dict(), indent=1) + "\n")

    def finished(self) -> RunRecord | None:
        """The record of this configuration's finished run in the directory, or None."""
        if not self.result.exists():
            return None
        record = read_record(self.result)
        return record if first_difference(record.config, self.config) is None else None

    # metrics ---------------------------------------------------------------------------------
    def _start_metrics(self, step: int | None) -> None:
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

    def rows(self) -> list[dict]:
        """The metric rows written so far."""
        return read_metrics(self.metrics) if self.metrics.exists() else []


def read_record(path: str | os.PathLike) -> RunRecord:
    """The :class:`RunRecord` in ``path`` (``result.json``); damage or another schema is one InputError."""
    return RunRecord.from_dict(read_json(path), str(path))


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
        for i, (a, b) in enumerate(zip(old, new, strict=True)):
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
        raise InputError(f"{path} is not a loadable checkpoint ({type(exc).__name__}); delete it or use another --out") from None


class Clock:
    """Wall and CPU seconds summed over the sessions of a run (``wall``, ``cpu`` carried over)."""

    def __init__(self, wall: float = 0.0, cpu: float = 0.0):
        self.base_wall, self.base_cpu = wall, cpu
        self.start_wall, self.start_cpu = time.time(), time.process_time()

    def totals(self) -> dict:
        return {"wall": self.base_wall + time.time() - self.start_wall,
                "cpu": self.base_cpu + time.process_time() - self.start_cpu}


def capture_rng(device=None) -> dict:
    """The global RNG states (torch's, the device's on CUDA, NumPy's legacy generator's and Python's)
    as tensors and plain types, loadable with ``weights_only=True``."""
    import numpy as np
    import torch

    state = {"torch": torch.get_rng_state()}
    if device is not None and device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(device)
    name, keys, pos, has_gauss, cached = np.random.get_state()
    state["numpy"] = {"name": name, "keys": torch.from_numpy(keys.astype(np.int64)), "pos": int(pos),
                      "has_gauss": int(has_gauss), "cached_gaussian": float(cached)}
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
