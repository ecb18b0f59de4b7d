"""Byte-level tokenisation: a token is one byte of the UTF-8 text (vocabulary 256, no network)."""
from __future__ import annotations

import numpy as np

VOCAB_SIZE = 256


def encode(text: str) -> np.ndarray:
    """The UTF-8 bytes of ``text`` as a uint8 array."""
    return np.frombuffer(text.encode("utf-8"), dtype=np.uint8).copy()


def decode(tokens) -> str:
    """The text of a sequence of byte tokens (invalid UTF-8 is replaced)."""
    return bytes(int(t) for t in tokens).decode("utf-8", errors="replace")
