"""The study: the unit of every experiment, one plan / run / judge / render interface.

A study declares its budgets once (:data:`BUDGETS`: ``quick``, ``cpu``, ``gpu``, ``paper``) and
implements

* ``config_class`` and ``budgets``: the study's one configuration type (a frozen dataclass whose
  fields declare their domains) and its instance at each budget;
* ``plan(budget) -> [RunSpec]``: the runs, read from the budget's configuration; a :class:`RunSpec`
  is typed, hashable and JSON round-trippable, and its ``config`` (nested JSON allowed) fully
  determines the run (so a spec is a self-contained job);
* ``measure(spec, scratch) -> dict``: the expensive part of one run (training, solving); it returns
  evidence only (numbers, arrays, run facts: never a verdict), and files it writes go to ``scratch``;
  :meth:`Study.run` wraps it: resumable and idempotent (a finished run is read back from
  ``runs_dir/STUDY/NAME.json``, never recomputed);
* ``claims(records, budget) -> [Claim]``: pure (no training, no plotting, no files): the verdicts
  from the records' evidence alone, so it is unit-tested on hand-written evidence, and a runs folder
  is judged again under the current rule whenever it is reported;
* ``render(records, claims, figures) -> [str]``: the figures (files written into ``figures``);
  returns further (non-claim) plots for the report. A study whose report has more than figures
  (tables, an introduction) overrides ``report(records, claims, budget, figures)`` instead, which
  returns ``{"plots": [...], "sections": [markdown, ...], "json": {...}}`` (default: ``render``'s plots).

:func:`judge` applies a study's claims to whatever runs have finished: when some are missing every
claim of the study is ``inconclusive`` saying "k of n runs". The registry :data:`STUDIES` maps
names to studies (``qkdyn verify`` runs the ones in :data:`VERIFY`); :mod:`qkdyn.executors` runs
the missing specs locally or on Ray, and ``qkdyn plan`` lists them as commands for any scheduler.

A run record is data from a folder that may be shared (Ray, Slurm), so it is checked before use
(:func:`check_record`): exactly ``spec`` and ``result``, no verdict anywhere in the result (a record
that holds one is refused, not believed), and ``files`` a list of plain file names (no separator, no
``..``), each one the study declares it writes (:attr:`Study.outputs`, :meth:`Study.check_files`): what
:func:`copy_files` copies, atomically, into the figures folder and nowhere else. Evidence a study cannot read
(a key missing, a wrong type) is one InputError naming the records' folder (:func:`reading_evidence`). Before any
judge reads a record, its evidence is checked against the study's schema of types and ranges (:attr:`Study.schema`,
:mod:`qkdyn.recordschema`): a record of impossible values (a recall of 7.3, a loss of -1) is one InputError naming
its file, never judged; a run whose measure returns one is not recorded.
"""
from __future__ import annotations

import contextlib
import dataclasses
import fnmatch
import functools
import hashlib
import importlib
import json
import math
import re
import shutil
from collections.abc import Iterable, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any, Generic, TypeVar

from qkdyn import recordschema
from qkdyn.claims import Claim
from qkdyn.errors import InputError

BUDGETS = ("quick", "cpu", "gpu", "paper")

#: study name -> "module:class" (imported on first use, so the registry is light)
STUDIES: dict[str, str] = {
    "theory": "qkdyn.study_theory:TheoryStudy",
    "a6": "qkdyn.empirical.synthetic.study:A6Study",
    "sampled": "qkdyn.empirical.synthetic.study:SampledStudy",
    "fixed-attention": "qkdyn.empirical.synthetic.study:FixedAttentionStudy",
    "stability": "qkdyn.empirical.synthetic.study:StabilityStudy",
    "circuits": "qkdyn.empirical.circuits.study:CircuitsStudy",
    "coupled": "qkdyn.empirical.coupled.study:CoupledStudy",
}
#: the studies of ``qkdyn verify``, in report order; the first is the theory (no torch)
VERIFY = ("theory", "a6", "sampled", "fixed-attention", "stability")


def _freeze(value, where: str):
    """A JSON value made immutable: lists (and tuples) as tuples, dicts as read-only mappings with
    sorted keys; a TypeError naming ``where`` for anything else (a set, an object, a non-string key, a
    non-finite float: a run's config is written to, and compared as, strict JSON)."""
    if value is None or isinstance(value, (str, int)):  # bool is an int
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise TypeError(f"RunSpec config {where} is {value}: a run's config holds finite numbers only")
        return value
    if isinstance(value, (list, tuple)):
        return tuple(_freeze(v, f"{where}[{i}]") for i, v in enumerate(value))
    if isinstance(value, Mapping):
        bad = [k for k in value if not isinstance(k, str)]
        if bad:
            raise TypeError(f"RunSpec config {where} has the key {bad[0]!r}: JSON object keys are strings")
        return MappingProxyType({k: _freeze(value[k], f"{where}.{k}") for k in sorted(value)})
    raise TypeError(f"RunSpec config {where} is a {type(value).__name__} ({value!r}): a run's config holds "
                    "JSON values only (numbers, strings, booleans, None, and lists and dicts of them)")


def _thaw(value):
    """A frozen value (:func:`_freeze`) as plain JSON data: tuples as lists, mappings as dicts."""
    if isinstance(value, tuple):
        return [_thaw(v) for v in value]
    if isinstance(value, Mapping):
        return {k: _thaw(v) for k, v in value.items()}
    return value


@dataclasses.dataclass(frozen=True, eq=False)
class RunSpec:
    """One run: the study's name, a file-safe name unique in the plan, the full configuration
    (sorted ``(key, value)`` pairs; a value is any JSON value, nested dicts and lists included, held
    immutable) and the resources it asks for.

    A spec is its canonical JSON (:meth:`to_json`): two specs are equal, and hash equal, exactly when
    their canonical JSON is, so a config's key order never matters and ``1`` is not ``1.0`` nor
    ``True``; :attr:`digest` is the run's identity."""

    study: str
    name: str
    config: tuple[tuple[str, Any], ...]
    cpus: float = 1.0
    gpus: float = 0.0

    def __post_init__(self):
        config = dict(self.config)
        if len(config) != len(self.config):
            raise TypeError(f"RunSpec {self.name!r}: a config key is given twice")
        object.__setattr__(self, "config", tuple((k, _freeze(config[k], k)) for k in sorted(config)))
        object.__setattr__(self, "cpus", float(self.cpus))
        object.__setattr__(self, "gpus", float(self.gpus))

    @classmethod
    def make(cls, study: str, name: str, *, cpus: float = 1.0, gpus: float = 0.0, **config) -> RunSpec:
        return cls(study, name, tuple(config.items()), cpus, gpus)

    @property
    def params(self) -> dict:
        """The configuration as plain JSON data (dicts and lists, as given; tuples as lists)."""
        return _thaw(dict(self.config))

    def to_dict(self) -> dict:
        return {"study": self.study, "name": self.name, "config": self.params, "cpus": self.cpus, "gpus": self.gpus}

    @functools.cached_property
    def _canonical(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))

    def to_json(self) -> str:
        """The canonical JSON of the spec (sorted keys, no spaces): what identifies it."""
        return self._canonical

    @property
    def digest(self) -> str:
        """The run's identity: the SHA-256 (hex) of its canonical JSON (:meth:`to_json`)."""
        return hashlib.sha256(self._canonical.encode()).hexdigest()

    def __eq__(self, other) -> bool:
        return self._canonical == other._canonical if isinstance(other, RunSpec) else NotImplemented

    def __hash__(self) -> int:
        return hash(self._canonical)

    @classmethod
    def from_dict(cls, data: dict) -> RunSpec:
        """The spec ``data`` (as :meth:`to_dict` writes it); an InputError for anything else, unknown
        fields included (a misspelt field is refused, never ignored)."""
        if not isinstance(data, dict):
            raise InputError(f"not a run spec: a JSON object is needed, got {type(data).__name__}", "spec")
        unknown = sorted(set(data) - SPEC_FIELDS)
        if unknown:
            raise InputError(f"not a run spec: unknown field(s) {', '.join(map(repr, unknown))} "
                             f"(a spec has {', '.join(sorted(SPEC_FIELDS))})", "spec")
        try:
            return cls.make(data["study"], data["name"], cpus=data.get("cpus", 1.0), gpus=data.get("gpus", 0.0),
                            **data["config"])
        except (KeyError, TypeError, AttributeError) as exc:
            raise InputError(f"not a run spec ({type(exc).__name__}: {exc})", "spec") from None


SPEC_FIELDS = frozenset({"study", "name", "config", "cpus", "gpus"})
#: the spec fields that request resources (how a run is scheduled, not which run it is): a record is the
#: record of a spec whatever these were when it was planned (a run planned on a GPU machine is found on a CPU one)
RESOURCE_FIELDS = frozenset({"cpus", "gpus"})
#: a file name a record may list: letters, digits, ``_``, ``-`` and ``.``, not starting with ``.``
PLAIN_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")
#: keys that carry a judgement, never evidence: a record holding one was not written by a measure
VERDICT_KEYS = frozenset({"verdict", "claims"})


def plain_name(name) -> bool:
    """Whether ``name`` is a plain file name (no folder, no ``..``, not absolute, no control character)."""
    return isinstance(name, str) and bool(PLAIN_NAME.match(name)) and ".." not in name


def _verdict_path(value, where: str = "result") -> str | None:
    """The first place in ``value`` (nested dicts and lists) that holds a verdict key, or None."""
    if isinstance(value, dict):
        for key, item in value.items():
            if key in VERDICT_KEYS:
                return f"{where}.{key}"
            found = _verdict_path(item, f"{where}.{key}")
            if found:
                return found
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found = _verdict_path(item, f"{where}[{index}]")
            if found:
                return found
    return None


def check_record(data, where: str) -> dict:
    """``data`` (a record as read from ``where``) if it is one; else an InputError naming the file.

    A record is ``{"spec": ..., "result": {...}}`` and nothing else; its result holds evidence only
    (no ``verdict`` or ``claims`` key at any depth: verdicts are judged from the evidence when the
    runs are reported, so one typed into a record is refused, not shown); ``files``, when present, is
    a list of plain file names (:func:`plain_name`)."""
    hint = "delete it to recompute it"
    if not isinstance(data, dict) or set(data) != {"spec", "result"}:
        raise InputError(f"{where}: not a run record (a JSON object with exactly 'spec' and 'result'); {hint}")
    result = data["result"]
    if not isinstance(result, dict):
        raise InputError(f"{where}: the record's result is {type(result).__name__}, not an object; {hint}")
    verdict = _verdict_path(result)
    if verdict:
        raise InputError(f"{where}: the record holds a verdict ({verdict}); records hold evidence only and "
                         f"verdicts are judged from it; {hint}")
    files = result.get("files", [])
    if not isinstance(files, list) or not all(plain_name(name) for name in files):
        bad = files if not isinstance(files, list) else [n for n in files if not plain_name(n)][0]
        raise InputError(f"{where}: the record lists {bad!r} among its files; only plain file names (no folder, "
                         f"no '..') are allowed; {hint}")
    return data


def _run_identity(spec) -> str | None:
    """The canonical JSON (as :meth:`RunSpec.to_json`) of a spec as a record holds it
    (:meth:`RunSpec.to_dict`) less its resource requests (:data:`RESOURCE_FIELDS`); None for anything
    but a JSON object."""
    if not isinstance(spec, dict):
        return None
    return json.dumps({k: v for k, v in spec.items() if k not in RESOURCE_FIELDS}, sort_keys=True, separators=(",", ":"))


@dataclasses.dataclass(frozen=True)
class Record:
    """A finished run: its spec, the measured result (JSON data) and the directory of its files."""

    spec: RunSpec
    result: dict
    scratch: Path


def json_default(value):
    """numpy scalars and arrays for JSON: floats where they are one number, else their text."""
    try:
        return float(value)
    except (TypeError, ValueError):
        return str(value)


#: a study's configuration type (a frozen dataclass)
Config = TypeVar("Config")


class Study(Generic[Config]):
    """Base class; see the module docstring. Subclasses set ``name``, ``title``, ``config_class`` and
    ``budgets`` (and ``outputs`` when their runs write files) and implement ``plan``, ``measure``, ``claims``
    (and ``render`` when they draw figures).

    ``config_class`` is the study's one configuration: a frozen dataclass whose fields declare their
    domains (:mod:`qkdyn.configflags`), so a command's flags and their help (each budget's default)
    are generated from it; ``budgets`` holds one instance of it per budget of :data:`BUDGETS`, a budget
    that differs from another written as :func:`dataclasses.replace` of it."""

    name = ""
    title = ""
    #: the study's configuration type (a frozen dataclass)
    config_class: type[Config]
    #: budget -> the study's configuration at that budget (an instance of ``config_class``; declared once)
    budgets: Mapping[str, Config] = MappingProxyType({})
    #: the ids of the claims the study makes (what is reported inconclusive while runs are missing)
    claim_names: tuple[str, ...] = ()
    #: run name -> its CPU seconds at the ``cpu`` budget, as measured (a scheduling hint, never evidence)
    costs: dict[str, float] = {}
    #: the files a run of the study may list in its record's ``files``: plain names or :mod:`fnmatch` patterns
    #: (``a6_*.png``) of what its ``measure`` writes into its scratch folder; a record listing anything else
    #: was not written by this study and is refused (:meth:`check_files`)
    outputs: tuple[str, ...] = ()
    #: run-name pattern (:mod:`fnmatch`) -> {field path: kind} (:mod:`qkdyn.recordschema`): the types and ranges of
    #: the evidence its runs record, checked before it is recorded and before it is judged (:meth:`check_evidence`)
    schema: Mapping[str, Mapping[str, recordschema.Kind]] = MappingProxyType({})

    def cost(self, spec: RunSpec) -> float:
        """The expected CPU seconds of ``spec`` (:attr:`costs`, 1 for a run not listed): the executors
        start the longest runs first, so that the runs last to finish are short ones and both workers stay
        busy to the end."""
        return float(self.costs.get(spec.name, 1.0))

    def claim_ids(self, budget: str) -> tuple[str, ...]:
        return self.claim_names

    def budget(self, budget: str) -> Config:
        """The study's configuration at ``budget`` (an InputError with the nearest name for an unknown one)."""
        if budget not in BUDGETS:
            from qkdyn.suggest import unknown_choice

            raise InputError(unknown_choice("budget", budget, BUDGETS))
        return self.budgets[budget]

    def plan(self, budget: str) -> list[RunSpec]:
        raise NotImplementedError

    def measure(self, spec: RunSpec, scratch: Path) -> dict:
        raise NotImplementedError

    def claims(self, records: list[Record], budget: str) -> list[Claim]:
        raise NotImplementedError

    def render(self, records: list[Record], claims: list[Claim], figures: Path) -> list[str]:
        """Default: copy every file the runs listed under ``result["files"]`` into ``figures``."""
        return copy_files(records, figures)

    def report(self, records: list[Record], claims: list[Claim], budget: str, figures: Path) -> dict:
        """The study's part of the report: ``plots`` (further figures), ``sections`` (markdown after
        the claims) and ``json`` (stored under the study's name in report.json)."""
        return {"plots": self.render(records, claims, figures), "sections": [], "json": {}}

    def check(self, spec: RunSpec) -> None:
        """InputError unless ``spec`` is a run this study can make: by default, a run of its plan at
        some budget, whatever resources either asked for (a spec from elsewhere, or edited, is refused
        before anything runs)."""
        identity = _run_identity(spec.to_dict())
        if not any(_run_identity(s.to_dict()) == identity for b in BUDGETS for s in self.plan(b)):
            raise InputError(f"the spec {spec.name!r} is not a run of study {self.name}'s plan at any budget "
                             f"({', '.join(BUDGETS)}); list them with `qkdyn plan {self.name}`")

    def context(self, budget: str) -> dict:
        """What the report's "Setting" section shows for this study."""
        return {"budget": budget}

    def check_files(self, result: dict, where: str, hint: str = "delete it to recompute it") -> None:
        """InputError naming ``where`` (and ending in ``hint``) unless every name ``result["files"]`` lists is
        one of the study's declared :attr:`outputs` (a record of another study, or one edited to fetch another
        file, is refused before anything is copied)."""
        undeclared = [name for name in result.get("files", [])
                      if not any(fnmatch.fnmatchcase(name, pattern) for pattern in self.outputs)]
        if undeclared:
            declared = ", ".join(self.outputs) or "none"
            raise InputError(f"{where}: the record lists {undeclared[0]!r} among its files, which study {self.name} "
                             f"does not write (its outputs: {declared}); {hint}")

    def check_evidence(self, spec: RunSpec, result: dict, where: str, hint: str = "delete it to recompute it") -> None:
        """InputError naming ``where`` (and ending in ``hint``) unless ``result`` (JSON data), the result of ``spec``'s
        run, has the types and ranges of :attr:`schema` (every pattern matching the run's name): a record of
        impossible values (a recall of 7.3, a loss of -1, a NaN perplexity) is refused, never judged. A result in an
        older run-record layout is checked as the record it is read as (:func:`qkdyn.runs.from_legacy`)."""
        from qkdyn.runs import from_legacy

        result = (from_legacy(result) if "schema" not in result else None) or result
        for pattern, fields in self.schema.items():
            if fnmatch.fnmatchcase(spec.name, pattern):
                recordschema.check(fields, result, spec.params, where, hint)

    # -- generic parts ---------------------------------------------------------------------------
    def record_path(self, spec: RunSpec, runs_dir: Path) -> Path:
        return Path(runs_dir) / spec.study / f"{spec.name}.json"

    def load(self, spec: RunSpec, runs_dir: Path) -> Record | None:
        """The finished record of ``spec`` under ``runs_dir``, or None (missing, or another spec's). The
        record's spec must be ``spec`` exactly (study, name, config) but for the resources it asked for
        (:data:`RESOURCE_FIELDS`), which do not change what the run is."""
        from qkdyn.runs import read_json

        path = self.record_path(spec, runs_dir)
        if not path.exists():
            return None
        data = check_record(read_json(path), str(path))
        if _run_identity(data["spec"]) != _run_identity(spec.to_dict()):
            return None
        self.check_files(data["result"], str(path))
        return Record(spec, data["result"], path.with_suffix(""))

    def run(self, spec: RunSpec, runs_dir: str | Path) -> Record:
        """Run ``spec`` unless its record exists (idempotent), on ``spec.cpus`` torch threads; the
        record is written atomically, with ``files``: what the run wrote into its scratch directory."""
        record = self.load(spec, Path(runs_dir))
        if record is None:
            scratch = self.record_path(spec, Path(runs_dir)).with_suffix("")
            scratch.mkdir(parents=True, exist_ok=True)
            result = _with_threads(max(1, int(spec.cpus)), lambda: self.measure(spec, scratch))
            result.setdefault("files", sorted(p.name for p in scratch.iterdir() if p.is_file()))
            self.check_files(result, f"the record of run {spec.name}", f"not recorded (the run wrote it into "
                             f"{scratch}: add it to the study's outputs, or have the run write it elsewhere)")
            self.check_evidence(spec, json.loads(json.dumps(result, default=json_default)),
                                f"the record of run {spec.name}", f"not recorded (study {self.name}'s measure or its "
                                "schema is wrong)")
            record = save(Record(spec, result, scratch), runs_dir)
        return record


def save(record: Record, runs_dir: str | Path) -> Record:
    """Write ``record`` as ``runs_dir/STUDY/NAME.json`` (atomic); returns it as read back, so a
    record in memory is exactly what a later ``report`` reads (JSON types, NaN kept)."""
    from qkdyn.atomic import write_text

    path = Path(runs_dir) / record.spec.study / f"{record.spec.name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps({"spec": json.loads(record.spec.to_json()), "result": record.result}, default=json_default)
    read_back = check_record(json.loads(text), f"the record of run {record.spec.name}")  # evidence only
    write_text(path, text)
    return Record(record.spec, read_back["result"], path.with_suffix(""))


def die_with_parent() -> None:
    """Pool initializer: SIGKILL this worker when the process that started it dies (Linux)."""
    import multiprocessing
    import os
    import sys

    if sys.platform.startswith("linux"):
        import ctypes
        import signal

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        parent = multiprocessing.parent_process()
        if parent is not None and os.getppid() != parent.pid:  # it died before prctl took effect
            os._exit(1)



def _with_threads(n: int, fn):
    import torch

    saved = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        return fn()
    finally:
        torch.set_num_threads(saved)


def copy_files(records: Iterable[Record], figures: Path) -> list[str]:
    """Copy the regular files each record lists in ``result["files"]`` from its scratch directory into
    ``figures``, each atomically (a full disk leaves the previous file whole and no partial one; the
    error names the destination). Only plain names are copied (:func:`check_record` refused the rest
    when the record was read; checked again here for records made in memory)."""
    from qkdyn.atomic import atomic_path

    figures = Path(figures)
    figures.mkdir(parents=True, exist_ok=True)
    for record in records:
        for name in record.result.get("files", []):
            if not plain_name(name):
                raise InputError(f"run {record.spec.name}: {name!r} is not a plain file name; nothing is copied "
                                 "outside the figures folder")
            source = record.scratch / name
            if source.is_file() and not source.is_symlink():
                with atomic_path(figures / name) as tmp:
                    try:
                        shutil.copyfile(source, tmp)
                    except OSError as exc:  # shutil names the source on ENOSPC; the full disk is the target's
                        exc.filename, exc.filename2 = str(tmp), None
                        raise
    return []


def get(name: str) -> Study:
    """The registered study ``name`` (an InputError with the nearest name if there is none)."""
    if name not in STUDIES:
        from qkdyn.suggest import unknown_choice

        raise InputError(unknown_choice("study", name, STUDIES))
    module, cls = STUDIES[name].split(":")
    return getattr(importlib.import_module(module), cls)()


def find(study: Study, specs: list[RunSpec], runs_dir: str | Path) -> dict[RunSpec, Record]:
    """The finished records of ``specs`` under ``runs_dir``."""
    found = {spec: study.load(spec, Path(runs_dir)) for spec in specs}
    return {spec: r for spec, r in found.items() if r is not None}


#: what reading a record's evidence raises when it is not of the shape and types the study writes (a key missing,
#: a string where a number is, an empty list, ...)
EVIDENCE_ERRORS = (KeyError, IndexError, TypeError, ValueError, AttributeError, ArithmeticError)


@contextlib.contextmanager
def reading_evidence(study: Study, records: Iterable[Record]):
    """While ``study`` judges or draws ``records`` read from a runs folder: an error of reading their evidence
    (:data:`EVIDENCE_ERRORS`) is one InputError naming the folder of the records (a record of the right keys but
    not of the study's evidence, say one edited in a shared runs folder, is bad input, not a crash). The error it
    stands for is kept as its cause (``raise ... from``), with its message in the line, so a judge's own bug stays
    in sight; over records this process has just computed, where such an error can only be a bug, it is not used
    (:func:`qkdyn.verify.drive`)."""
    try:
        yield
    except EVIDENCE_ERRORS as exc:
        if isinstance(exc, InputError):
            raise
        folders = sorted({str(record.scratch.parent) for record in records})
        where = ", ".join(folders) or f"the runs of study {study.name}"
        raise InputError(f"{where}: study {study.name} cannot read the evidence of these run records "
                         f"({type(exc).__name__}: {exc}); a record edited, or written by another version, is "
                         "recomputed once deleted") from exc


def judge(study: Study, budget: str, specs: list[RunSpec], records: dict[RunSpec, Record]) -> list[Claim]:
    """The study's claims from the finished ``records`` of its plan ``specs``, each record's evidence first checked
    against the study's schema (:meth:`Study.check_evidence`: one InputError naming the record's file); with runs
    missing, each claim the study makes (:meth:`claim_ids`) is ``inconclusive``, saying "k of n runs"."""
    done = [records[s] for s in specs if s in records]
    if len(done) == len(specs):
        for record in done:  # the evidence's types and ranges before the judges (and then the drawings) read it
            study.check_evidence(record.spec, record.result, str(record.scratch.parent / f"{record.spec.name}.json"))
        return study.claims(done, budget)
    missing = [s.name for s in specs if s not in records]
    text = (f"{len(done)} of {len(specs)} runs of study {study.name} (budget {budget}) have finished; "
            f"missing: {', '.join(missing[:5])}{', ...' if len(missing) > 5 else ''}. Not judged until all have.")
    return [Claim(cid, f"{study.title}: {cid}", "inconclusive",
                  {"runs_finished": len(done), "runs_planned": len(specs)}, text)
            for cid in study.claim_ids(budget)]



def claim_to_dict(claim: Claim) -> dict:
    """``claim`` as the JSON data report.json holds."""
    return json.loads(json.dumps(dataclasses.asdict(claim), default=json_default))
