"""Binary movie-review sentiment from the vaderSentiment 3.3.2 source distribution.

The sdist carries ``additional_resources/hutto_ICWSM_2014.tar.gz`` with 10,605 Rotten Tomatoes
snippets, each rated on [-4, 4] by about 20 people (``movieReviewSnippets_GroundTruth.txt``: id,
mean rating, text), and the human-rated lexicon ``vaderSentiment/vader_lexicon.txt`` (token, mean
valence, ...). Label: positive if the mean rating >= ``margin``, negative if <= -``margin``;
near-neutral snippets are dropped. Rationales are a PROXY: the positions of tokens found in the
VADER lexicon (people rated those words' valence, not their role in this sentence).
"""
from __future__ import annotations

import hashlib
import math
import tarfile
from pathlib import Path

from qkdyn.empirical.data.examples_circuits import Example, Splits, tokenize

CLASSES = ("negative", "positive")
CLS_TOKEN = "<cls>"
SNIPPETS = "hutto_ICWSM_2014/movieReviewSnippets_GroundTruth.txt"


def prepare(unpacked: Path, out: Path) -> None:
    """Copy the rated snippets (``snippets.tsv``: id, mean, text) and the lexicon (``lexicon.tsv``:
    token, mean valence) out of the unpacked sdist."""
    root = next(unpacked.glob("vaderSentiment-*"))
    with tarfile.open(root / "additional_resources" / "hutto_ICWSM_2014.tar.gz") as tar:
        raw = tar.extractfile(SNIPPETS).read().decode("utf-8", errors="replace")
    rows = [line.split("\t", 2) for line in raw.splitlines() if line.strip()]
    (out / "snippets.tsv").write_text("".join(f"{i}\t{m}\t{t.strip()}\n" for i, m, t in rows))
    lexicon = (root / "vaderSentiment" / "vader_lexicon.txt").read_text(encoding="utf-8", errors="replace")
    (out / "lexicon.tsv").write_text("".join("\t".join(l.split("\t")[:2]) + "\n" for l in lexicon.splitlines() if l.strip()))


def _split_of(uid: str) -> str:
    """Deterministic 80/10/10 split by snippet id."""
    h = int(hashlib.sha256(uid.encode()).hexdigest(), 16) % 10
    return "test" if h == 0 else "dev" if h == 1 else "train"


def load(path: str | Path, max_len: int = 64, margin: float = 0.5) -> Splits:
    """Snippets with |mean rating| >= ``margin`` as binary examples; tokens = the first
    ``max_len - 1`` words, then ``<cls>`` (the read-out position). One proxy rationale per example:
    lexicon-word positions (empty tuple if the snippet has none)."""
    from qkdyn.errors import InputError
    from qkdyn.inputs import read_text

    path = Path(path)
    lexicon = {line.split("\t")[0].lower() for line in read_text(path / "lexicon.tsv").splitlines() if line}
    splits: dict[str, list[Example]] = {"train": [], "dev": [], "test": []}
    snippets = path / "snippets.tsv"
    for number, line in enumerate(read_text(snippets).splitlines(), 1):
        try:
            uid, mean, text = line.split("\t", 2)
            rating = float(mean)
        except ValueError:
            raise InputError(f"{snippets}: line {number} is not id, mean rating, text") from None
        if not math.isfinite(rating):
            raise InputError(f"{snippets}: line {number}: the mean rating {mean!r} is not a finite number")
        if abs(rating) < margin:
            continue
        words = tuple(w for w, _, _ in tokenize(text))[: max_len - 1]
        rationale = tuple(i for i, w in enumerate(words) if w in lexicon)
        example = Example(words + (CLS_TOKEN,), int(rating > 0), (rationale,), uid)
        splits[_split_of(uid)].append(example)
    return Splits(splits["train"], splits["dev"], splits["test"], CLASSES)
