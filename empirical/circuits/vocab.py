"""A word-level vocabulary built from the training split (no external tokenizer)."""
from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

#: special tokens, always the first ids; ``<pad>`` is 0
SPECIALS = ("<pad>", "<unk>", "<cls>", "<verb>", "<q>", "<c>", "<a>", "<eos>")


class Vocab:
    """Token <-> id maps. Unknown tokens map to ``<unk>``."""

    def __init__(self, itos: list[str]):
        self.itos = list(itos)
        self.stoi = {t: i for i, t in enumerate(self.itos)}
        self.unk = self.stoi["<unk>"]

    @classmethod
    def build(cls, token_lists: Iterable[Iterable[str]], max_size: int, min_count: int = 1) -> Vocab:
        """The ``max_size`` most frequent tokens seen at least ``min_count`` times (ties broken
        alphabetically, so the vocabulary is deterministic), after the specials."""
        counts = Counter(t for tokens in token_lists for t in tokens if t not in SPECIALS)
        ranked = sorted((t for t, c in counts.items() if c >= min_count), key=lambda t: (-counts[t], t))
        return cls(list(SPECIALS) + ranked[: max(0, max_size - len(SPECIALS))])

    def __len__(self) -> int:
        return len(self.itos)

    def encode(self, tokens: Iterable[str]) -> list[int]:
        return [self.stoi.get(t, self.unk) for t in tokens]

    def decode(self, ids: Iterable[int]) -> list[str]:
        return [self.itos[i] for i in ids]
