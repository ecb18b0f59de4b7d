"""The Linzen, Dupoux & Goldberg (2016) agreement TSV (e.g. ``agr_50_mostcommon_10K.tsv``).

Columns read by header name: ``sentence`` (or ``orig_sentence``; whitespace-tokenized), ``verb_pos`` (VBZ or VBP),
``subj_index`` and ``verb_index`` (1-based word positions, as in the authors' code). As in Paper
A's recipe the model reads the whole sentence, followed by a ``<cls>`` read-out token; label VBZ =
singular, VBP = plural; rationale = {subject, verb}. Rows whose verb tag is neither are skipped.
There is no official split: a deterministic 80/10/10 split by row hash is used.
"""
from __future__ import annotations

import csv
import hashlib
import io
from pathlib import Path

from qkdyn.empirical.data.examples_circuits import Example, Splits

from qkdyn.errors import InputError

CLASSES = ("singular", "plural")
CLS_TOKEN = "<cls>"
VERB_TAGS = {"VBZ": 0, "VBP": 1}


def load(path: str | Path, max_len: int = 64) -> Splits:
    """Rows of the TSV at ``path`` as examples; sentences longer than ``max_len - 1`` words, or
    whose subject/verb index falls outside, are skipped."""
    splits: dict[str, list[Example]] = {"train": [], "dev": [], "test": []}
    from qkdyn.inputs import read_text

    text = read_text(path, what="agreement TSV")
    rows = list(csv.DictReader(io.StringIO(text, newline=""), delimiter="\t", quoting=csv.QUOTE_NONE))
    if rows and not {"verb_pos", "subj_index", "verb_index"} <= rows[0].keys():
        raise InputError(f"{path}: expected columns verb_pos, subj_index, verb_index")
    for n, row in enumerate(rows):
        if row["verb_pos"] not in VERB_TAGS:
            continue
        words = tuple((row.get("sentence") or row["orig_sentence"]).lower().split())
        subj, verb = int(row["subj_index"]) - 1, int(row["verb_index"]) - 1
        if len(words) > max_len - 1 or not (0 <= subj < len(words) and 0 <= verb < len(words)):
            continue
        uid = f"{n}"
        h = int(hashlib.sha256(" ".join(words).encode()).hexdigest(), 16) % 10
        split = "test" if h == 0 else "dev" if h == 1 else "train"
        splits[split].append(Example(words + (CLS_TOKEN,), VERB_TAGS[row["verb_pos"]], ((subj, verb),), uid))
    return Splits(splits["train"], splits["dev"], splits["test"], CLASSES)
