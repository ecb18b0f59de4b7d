"""A study run's identity: every field that can change its result, hashed into its directory name.

A run of the study is a :class:`qkdyn.empirical.coupled.study.CoupledRun` (task, data, variant, the
attention, model and optimiser configuration, seed, budget, tokenizer, evaluation cap).
:func:`run_record` is that spec as plain data plus :data:`STUDY_VERSION`, the version of the code
that computes a run's result, and for an MQAR run the definition of its task
(:data:`qkdyn.empirical.coupled.configs.MQAR_PRESETS`: a task redefined under the same name is
another run) and the initialisation of its model (``MQAR_INIT``); :func:`run_key` is the first 12 hex digits of the SHA-256 of its
canonical JSON. The run's directory is named by a readable prefix and the key, so two runs that
differ in any field (a learning rate, a batch size, a block size) never share a directory, and a
finished result is reused only by a run of the same record. The record is stored beside the run
(``run.json``); :func:`claim` refuses a directory whose stored record differs, naming the first
field that does (one line).
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path

from qkdyn import atomic
from qkdyn.errors import InputError
from qkdyn.runs import first_difference, read_json

#: bump when a change of the code changes what a run computes (its metrics, its ablations)
STUDY_VERSION = 2
#: fields that do not change a result (how progress is shown)
IGNORED = ("progress",)
RECORD = "run.json"


def run_record(spec) -> dict:
    """The spec as plain data (JSON types), without :data:`IGNORED` fields, with the code version
    and, for an MQAR run, its task's definition (``mqar``) and its model's initialisation (``init``)."""
    from qkdyn.empirical.coupled.configs import MQAR_INIT, MQAR_PRESETS

    record = json.loads(json.dumps(dataclasses.asdict(spec)))
    for field in IGNORED:
        record.get("train", {}).pop(field, None)
    if spec.task == "mqar":
        record["mqar"] = json.loads(json.dumps(dataclasses.asdict(MQAR_PRESETS[spec.data])))
        record["init"] = MQAR_INIT
    return {**record, "version": STUDY_VERSION}


def run_key(spec) -> str:
    """12 hex digits of the SHA-256 of the canonical JSON of :func:`run_record`."""
    text = json.dumps(run_record(spec), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def claim(run_dir: str | Path, record: dict) -> None:
    """Make ``run_dir`` the directory of the run of ``record``: write ``run.json`` if it has none;
    InputError naming the first differing field if it holds another run's record."""
    path = Path(run_dir) / RECORD
    if path.exists():
        stored = read_json(path)
        where = first_difference(stored, record)
        if where is not None:
            field, old, new = where
            raise InputError(f"{run_dir} holds a run of another configuration ({field}: {old!r} there, {new!r} "
                             "now); delete it or use another --runs")
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic.write_text(path, json.dumps(record, indent=2, sort_keys=True) + "\n")
