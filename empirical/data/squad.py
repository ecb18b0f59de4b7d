"""SQuAD v1.1 and v2.0 JSON (``{"data": [{"title", "paragraphs": [{"context", "qas": [...]}]}]}``).

Following Paper A's recipe: answerable questions only (v2.0 ``is_impossible`` ones are dropped); the
context is cut to a window of ``window`` characters on each side of the first gold answer, then
word-tokenized. Files: ``PATH`` is a directory holding ``train*.json`` and ``dev*.json``; the
official dev file is our test split, and articles whose title hashes into 5% of the training file
form our dev split (for monitoring).
"""
from __future__ import annotations

import hashlib
from pathlib import Path

from qkdyn.empirical.data.examples_circuits import QAExample, Splits, tokenize

from qkdyn.errors import InputError


def examples_from(squad: dict, window: int = 200) -> list[tuple[str, QAExample]]:
    """``(article title, example)`` for every answerable question of a parsed SQuAD file."""
    out = []
    for article in squad["data"]:
        for paragraph in article["paragraphs"]:
            context = paragraph["context"]
            for qa in paragraph["qas"]:
                if qa.get("is_impossible") or not qa["answers"]:
                    continue
                first = qa["answers"][0]
                a0 = first["answer_start"]
                a1 = a0 + len(first["text"])
                lo, hi = max(0, a0 - window), min(len(context), a1 + window)
                tokens = tokenize(context[lo:hi])
                inside = [i for i, (_, s, e) in enumerate(tokens) if s + lo < a1 and e + lo > a0]
                if not inside:
                    continue
                example = QAExample(
                    question=tuple(t for t, _, _ in tokenize(qa["question"])),
                    context=tuple(t for t, _, _ in tokens),
                    answer_span=(inside[0], inside[-1]),
                    answers=tuple(a["text"] for a in qa["answers"]),
                    uid=qa["id"],
                )
                out.append((article.get("title", ""), example))
    return out


def _read(path: Path) -> dict:
    from qkdyn.jsonio import read_json

    return read_json(path, what="SQuAD")


def load(path: str | Path, window: int = 200) -> Splits:
    """train / dev (5% of training articles) / test (the official dev file)."""
    path = Path(path)
    train_files, dev_files = sorted(path.glob("train*.json")), sorted(path.glob("dev*.json"))
    if len(train_files) != 1 or len(dev_files) != 1:
        raise InputError(f"{path}: expected exactly one train*.json and one dev*.json")
    train, dev = [], []
    for title, example in examples_from(_read(train_files[0]), window):
        held_out = int(hashlib.sha256(title.encode()).hexdigest(), 16) % 20 == 0
        (dev if held_out else train).append(example)
    test = [e for _, e in examples_from(_read(dev_files[0]), window)]
    return Splits(train, dev, test)
