"""HateXplain (Mathew et al. 2021) from its release files ``dataset.json`` and
``post_id_divisions.json``.

``dataset.json`` maps post ids to ``{"post_tokens": [...], "annotators": [{"label": ...}, ...],
"rationales": [[0/1 per token], ...]}``. Label = the majority of the annotators' labels (at least
two of three); posts without a majority ('undecided') are dropped. Rationales: one position set per
annotator who marked any token (normal posts usually have none).
"""
from __future__ import annotations

from collections import Counter
from pathlib import Path

from qkdyn.empirical.data.examples_circuits import Example, Splits

CLASSES = ("hatespeech", "normal", "offensive")
CLS_TOKEN = "<cls>"
SPLIT_NAMES = {"train": "train", "dev": "val", "test": "test"}


def majority_label(annotators: list[dict]) -> int | None:
    """Index in :data:`CLASSES` of the label given by a strict majority, or None (undecided)."""
    counts = Counter(a["label"] for a in annotators)
    label, votes = counts.most_common(1)[0]
    if 2 * votes <= len(annotators) or label not in CLASSES:
        return None
    return CLASSES.index(label)


def load(path: str | Path, max_len: int = 128) -> Splits:
    """Read the two release files from directory ``path``; tokens are the lower-cased post tokens
    (first ``max_len - 1``) followed by ``<cls>``, the read-out position."""
    from qkdyn.jsonio import read_json

    path = Path(path)
    posts = read_json(path / "dataset.json", what="HateXplain")
    divisions = read_json(path / "post_id_divisions.json", what="HateXplain")
    splits: dict[str, list[Example]] = {}
    for ours, theirs in SPLIT_NAMES.items():
        splits[ours] = []
        for post_id in divisions[theirs]:
            post = posts[post_id]
            label = majority_label(post["annotators"])
            if label is None:
                continue
            words = tuple(w.lower() for w in post["post_tokens"])[: max_len - 1]
            rationales = tuple(
                tuple(i for i, flag in enumerate(mask[: len(words)]) if flag)
                for mask in post.get("rationales", []) if any(mask)
            )
            splits[ours].append(Example(words + (CLS_TOKEN,), label, rationales, post_id))
    return Splits(splits["train"], splits["dev"], splits["test"], CLASSES)
