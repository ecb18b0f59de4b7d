"""From a run configuration to the task's train/dev/test examples."""
from __future__ import annotations

import csv
from pathlib import Path

from qkdyn.empirical.circuits.presets import RunConfig
from qkdyn.empirical.data.examples_circuits import Splits

from qkdyn.errors import InputError

#: task -> registry source used when --data is not given
FETCHED = {"brown-sva": "brown", "vader": "vader", "brown-qa": "brown-qa"}
#: the extractive question-answering tasks (generation: EM / F1, attention on the answer span)
QA_TASKS = ("squad", "brown-qa")


def is_qa(task: str) -> bool:
    return task in QA_TASKS


def data_path(cfg: RunConfig) -> Path:
    """``--data`` if given (must exist), else the fetched registry copy (brown-sva, brown-qa, vader)."""
    if cfg.data:
        from qkdyn.inputs import check_not_special

        path = Path(cfg.data)
        if not path.exists():
            raise InputError(f"--data path does not exist: {path}")
        check_not_special(path, "--data")
        return path
    if cfg.task not in FETCHED:
        raise InputError(f"task {cfg.task} needs --data PATH (the corpus cannot be downloaded here)")
    from qkdyn.empirical.data.fetch import fetch

    return fetch(FETCHED[cfg.task])


def load_splits(cfg: RunConfig) -> Splits:
    """The examples of ``cfg.task``; a task without training or test examples, or data files that
    are malformed (wrong structure, not UTF-8, bad numbers), is one InputError naming the path."""
    path = data_path(cfg)
    try:
        splits = _load(cfg, path)
    except InputError:
        raise
    except (KeyError, IndexError, TypeError, ValueError, AttributeError, csv.Error) as exc:
        detail = str(exc).splitlines()[0][:120] if str(exc) else ""
        raise InputError(f"{path} is not valid {cfg.task} data ({type(exc).__name__}{': ' + detail if detail else ''})") from None
    if not splits.train or not splits.test:
        raise InputError(f"{path}: no training or no test examples for task {cfg.task}")
    return splits


def _load(cfg: RunConfig, path: Path) -> Splits:
    from qkdyn.empirical.data import brown, brown_qa, hatexplain, squad, sva, vader

    if cfg.task == "hatexplain":
        splits = hatexplain.load(path, cfg.max_len)
    elif cfg.task == "sva":
        splits = sva.load(path, cfg.max_len)
    elif cfg.task == "brown-sva":
        splits = brown.load(path, cfg.max_len, cfg.verb_visible)
    elif cfg.task == "vader":
        splits = vader.load(path, cfg.max_len, cfg.vader_margin)
    elif cfg.task == "brown-qa":
        splits = brown_qa.load(path)
    else:
        splits = squad.load(path, cfg.squad_window)
    return splits
