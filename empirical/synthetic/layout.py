"""Token indices of the one-hot vocabulary of the canonical setting (V = K D + N + 1 + K).

    distinct token i of class k :  k D + i                 (0 <= k < K, 0 <= i < D)
    common token c              :  K D + c                 (0 <= c < N)
    query token q               :  K D + N
    label token of class k      :  K D + N + 1 + k

With one-hot embeddings and no positional encoding the order of the indices carries no meaning;
this one keeps each class's distinct tokens contiguous.
"""
from __future__ import annotations

import dataclasses

import numpy as np


@dataclasses.dataclass(frozen=True)
class Layout:
    classes: int  # K
    distinct: int  # D
    commons: int  # N

    @classmethod
    def of(cls, setting) -> Layout:
        return cls(setting.classes, setting.distinct, setting.commons)

    @property
    def vocab(self) -> int:
        return self.classes * self.distinct + self.commons + 1 + self.classes

    @property
    def context(self) -> np.ndarray:
        """Indices of every token that can appear in a context (distinct, then commons)."""
        return np.arange(self.classes * self.distinct + self.commons)

    def distinct_of(self, k: int) -> np.ndarray:
        return np.arange(k * self.distinct, (k + 1) * self.distinct)

    @property
    def common(self) -> np.ndarray:
        start = self.classes * self.distinct
        return np.arange(start, start + self.commons)

    @property
    def query(self) -> int:
        return self.classes * self.distinct + self.commons

    @property
    def labels(self) -> np.ndarray:
        return np.arange(self.query + 1, self.query + 1 + self.classes)

    def token_class(self) -> np.ndarray:
        """Class owning each context token, -1 for commons (shape: len(context))."""
        owner = np.repeat(np.arange(self.classes), self.distinct)
        return np.concatenate([owner, -np.ones(self.commons, dtype=int)])
