"""From a run configuration to the task's train/dev/test examples, what each task can speak for, and the
per-item facts its claims split the test items by.

Roles (read by the report, :mod:`qkdyn.empirical.circuits.report`):

- :data:`SUBSETS`: the items a task's sharpening claims are decided on, where a previous-token head puts no
  mass on the rationale (the other content-free nulls, a fixed offset or position, are printed beside); the
  all-items number stays beside as a secondary line;
- :data:`NEGATIVE_CONTROLS`: tasks where uniform attention is optimal, so the theory predicts that faster
  QK does not change what the model attends to; their claims are "no sharpening";
- :data:`COPY_TESTS`: what a QA task tests, in words, where it is not the paper's task.
"""
from __future__ import annotations

import csv
import functools
from pathlib import Path

from qkdyn.empirical.circuits.presets import RunConfig
from qkdyn.empirical.data.examples_circuits import Splits

from qkdyn.errors import InputError

#: task -> registry source used when --data is not given
FETCHED = {"brown-sva": "brown", "vader": "vader", "brown-qa": "brown-qa"}
#: the extractive question-answering tasks (generation: EM / F1, attention on the answer span)
QA_TASKS = ("squad", "brown-qa")
#: task -> {subset: what its items are}: the items a sharpening claim is decided on (a previous-token head fails
#: there; the other positional nulls are printed beside, not excluded)
SUBSETS = {"brown-sva": {
    "non-adjacent": "the rationale (subject head) is not the token just before the read-out, so a previous-token "
                    "head puts no mass on it",
    "attractor": "a noun (or subject pronoun) of the other number stands between the subject head and the verb "
                 "(the corpus's own Brown tags), so the nearest noun is the wrong cue"}}
#: negative controls, task -> the task whose effect their power is printed against: tasks where uniform attention
#: is optimal (vader: a 1-layer causal model read out at the last token with uniform attention reads the
#: bag-of-words mean, the best strategy for lexicon sentiment)
NEGATIVE_CONTROLS = {"vader": "brown-sva"}
#: QA tasks that test something else than the paper's SQuAD claim: what they speak for
COPY_TESTS = {"brown-qa": "a 2-layer copy test: the cloze question is the answer's own neighbours in the passage, so "
                          "matching and copying solve it; it speaks for \"faster QK sharpens a 2-layer copy circuit\", "
                          "not for the paper's SQuAD claim"}


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


@functools.lru_cache(maxsize=2)
def _brown_attractors(path: str) -> dict[str, bool | None]:
    """uid -> whether the item has an attractor, for every item of a prepared brown-sva file (None: the item
    carries no tags)."""
    from qkdyn.empirical.circuits.handcheck import has_attractor

    from qkdyn.jsonio import loads, read_lines

    file = Path(path) / "items.jsonl" if Path(path).is_dir() else Path(path)
    flags: dict[str, bool | None] = {}
    for number, line in read_lines(file):
        item = loads(line, str(file), number)
        tags = item.get("tags")
        flags[str(item.get("uid"))] = (has_attractor(tags, item["subject"], item["verb"])
                                       if isinstance(tags, list) else None)
    return flags


def item_flags(cfg: RunConfig, examples: list) -> dict[str, list]:
    """Per-item facts the subsets of :data:`SUBSETS` need beyond positions, in ``examples``' order: for
    brown-sva ``attractor`` (a noun or subject pronoun of the other number between the subject head and the
    verb, by the corpus's Brown tags: :func:`qkdyn.empirical.circuits.handcheck.has_attractor`), present only
    when every item's prepared record carries its tags (``tags``, the prefix's); else, and for other tasks,
    nothing."""
    if cfg.task != "brown-sva":
        return {}
    known = _brown_attractors(str(data_path(cfg)))
    flags = [known.get(e.uid) for e in examples]
    return {"attractor": flags} if all(f is not None for f in flags) else {}
