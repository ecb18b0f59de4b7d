"""The example types the circuit experiments read, and the one word tokenizer they share.

Every loader (``hatexplain``, ``sva``, ``brown``, ``vader``, ``squad``) returns these types, so the
training code never sees a corpus format.
"""
from __future__ import annotations

import dataclasses
import re

_WORD = re.compile(r"\w+(?:'\w+)*|[^\w\s]", re.UNICODE)


def tokenize(text: str) -> list[tuple[str, int, int]]:
    """Lower-cased word tokens with character spans: word-character runs (inner apostrophes kept,
    as in "century's"), or one punctuation character. Returns ``[(token, start, end), ...]``."""
    return [(m.group().lower(), m.start(), m.end()) for m in _WORD.finditer(text)]


@dataclasses.dataclass(frozen=True)
class Example:
    """A classification instance.

    tokens:     the input words (the model appends nothing; loaders add task tokens themselves).
    label:      class index.
    rationales: one tuple of token positions per annotator (may be empty: no rationale known).
    uid:        an identifier from the source corpus.
    """

    tokens: tuple[str, ...]
    label: int
    rationales: tuple[tuple[int, ...], ...]
    uid: str


@dataclasses.dataclass(frozen=True)
class QAExample:
    """An extractive question-answering instance, already windowed and tokenized.

    question, context: word tokens.
    answer_span:  (first, last) context-token positions of the training answer (inclusive).
    answers:      every gold answer text (for EM/F1).
    """

    question: tuple[str, ...]
    context: tuple[str, ...]
    answer_span: tuple[int, int]
    answers: tuple[str, ...]
    uid: str


@dataclasses.dataclass(frozen=True)
class Splits:
    """train/dev/test lists of examples plus the class names (empty for QA)."""

    train: list
    dev: list
    test: list
    classes: tuple[str, ...] = ()
