"""Byte-level BPE sub-word tokens, trained on a corpus's training split with the ``tokenizers`` library.

The tokenizer is GPT-2's recipe at a chosen vocabulary size: the text is pre-split by the ByteLevel
pre-tokenizer (words with their leading space), every byte is in the initial alphabet (so any text
encodes, with no unknown token), and BPE merges are learnt on the training split only. The
validation split never influences the vocabulary.

Each token decodes to a known byte string, so ``token_bytes[id]`` (its length in UTF-8 bytes) turns
a per-token loss into a per-byte one: nats per byte = sum over targets of the loss / sum of
``token_bytes[target]``. This makes perplexities comparable across tokenizers (and with the
byte-level runs, where every token is one byte).

Text is encoded line by line (lines keep their newline), which decodes back to the exact text. The
splits are cut in bytes by :mod:`qkdyn.empirical.data.text_corpus`; when the cut falls inside a
multi-byte character, that character's leading bytes move to the validation split
(:func:`char_boundary`), so every byte is in exactly one split and each split decodes.

Cache: ``cache_dir() / "bpe" / <sha256 of both splits>-v<vocab>`` holds ``tokenizer.json``,
``train.npy``, ``val.npy``, ``token_bytes.npy`` and ``meta.json`` (written last: the sha256 of each
other file and the counts); a second call with the same corpus, split and vocabulary reads them
back, verified like the corpora before use: every file's sha256, then each array's dtype and shape
(1-D ids of the tokenizer's dtype, ``token_bytes`` int64 of the vocabulary's length, each token at
least one byte) and the id range (every id below the vocabulary size). Arrays are read with
``allow_pickle=False``. A cache that fails any check is regenerated, with one warning line. Training is deterministic (single-threaded, fixed input order); a test
checks that two trainings give the same vocabulary and merges.
"""
from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path

import numpy as np

from qkdyn.errors import InputError

MIN_VOCAB = 257  # the 256 bytes plus at least one merge


def _text(tokens: np.ndarray) -> str:
    return np.asarray(tokens, dtype=np.uint8).tobytes().decode("utf-8", errors="replace")


def _lines(text: str) -> list[str]:
    return text.splitlines(keepends=True)


def train_tokenizer(text: str, vocab_size: int):
    """A byte-level BPE ``tokenizers.Tokenizer`` with ``vocab_size`` entries learnt from ``text``."""
    os.environ.setdefault("RAYON_NUM_THREADS", "1")  # deterministic and polite on a shared machine
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False, special_tokens=[])
    tok.train_from_iterator(_lines(text), trainer=trainer, length=None)
    return tok


def encode(tok, text: str) -> np.ndarray:
    """Token ids of ``text`` (line by line; see the module docstring)."""
    ids = [i for enc in tok.encode_batch(_lines(text)) for i in enc.ids]
    dtype = np.uint16 if tok.get_vocab_size() <= 1 << 16 else np.uint32
    return np.asarray(ids, dtype=dtype)


def token_byte_lengths(tok) -> np.ndarray:
    """Length in bytes of each token: byte-level BPE spells every byte as one printable stand-in
    character (GPT-2's table, ``ByteLevel.alphabet()``), so a token's byte length is its length."""
    from tokenizers import pre_tokenizers

    alphabet = set(pre_tokenizers.ByteLevel.alphabet())
    lengths = np.zeros(tok.get_vocab_size(), dtype=np.int64)
    for piece, idx in tok.get_vocab().items():
        if not set(piece) <= alphabet:
            raise ValueError(f"token {piece!r} is not spelt in the byte-level alphabet")
        lengths[idx] = len(piece)
    return lengths


def char_boundary(train: np.ndarray, val: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Move the cut between two byte splits back to the start of a UTF-8 character (a no-op when the
    validation split does not start with a continuation byte 0b10xxxxxx)."""
    if not len(val) or (int(val[0]) & 0xC0) != 0x80:
        return train, val
    i = len(train)
    while i > 0 and len(train) - i < 3 and (int(train[i - 1]) & 0xC0) == 0x80:
        i -= 1
    i = max(0, i - 1)  # the character's lead byte
    return train[:i], np.concatenate([np.asarray(train[i:]), np.asarray(val)])


def _digest(train: np.ndarray, val: np.ndarray) -> str:
    h = hashlib.sha256()
    for part in (train, val):
        h.update(np.asarray(part, dtype=np.uint8).tobytes())
        h.update(b"\0split\0")
    return h.hexdigest()[:20]


def bpe_splits(train_bytes: np.ndarray, val_bytes: np.ndarray, vocab_size: int,
               cache: Path | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(train ids, validation ids, token_bytes) of a byte split, with a BPE of ``vocab_size`` learnt on
    the training bytes; cached (see the module docstring)."""
    if vocab_size < MIN_VOCAB:
        raise InputError(f"must be >= {MIN_VOCAB} for byte-level BPE, got {vocab_size}", "vocab_size")
    from qkdyn.empirical.data.fetch import cache_dir, sha256_of

    from qkdyn import atomic

    root = (cache or cache_dir() / "bpe") / f"{_digest(train_bytes, val_bytes)}-v{vocab_size}"
    if (root / "meta.json").exists():
        problem, arrays = _read_cache(root)
        if problem is None:
            return arrays
        sys.stderr.write(f"qkdyn: warning: BPE token cache {root} {problem}; regenerating it\n")
    train_bytes, val_bytes = char_boundary(train_bytes, val_bytes)
    tok = train_tokenizer(_text(train_bytes), vocab_size)
    arrays = (encode(tok, _text(train_bytes)), encode(tok, _text(val_bytes)), token_byte_lengths(tok))
    root.mkdir(parents=True, exist_ok=True)
    for name, arr in zip(ARRAYS, arrays, strict=True):
        with atomic.atomic_path(root / name) as tmp:
            with open(tmp, "wb") as fh:
                np.save(fh, arr, allow_pickle=False)
    atomic.write_text(root / "tokenizer.json", tok.to_str())
    hashes = {name: sha256_of(root / name) for name in (*ARRAYS, "tokenizer.json")}
    atomic.write_text(root / "meta.json", json.dumps({
        "vocab_size": vocab_size, "tokens": len(arrays[2]), "dtype": str(arrays[0].dtype),
        "train_tokens": len(arrays[0]), "val_tokens": len(arrays[1]), "train_bytes": len(train_bytes),
        "val_bytes": len(val_bytes), "sha256": hashes}) + "\n")
    return arrays


ARRAYS = ("train.npy", "val.npy", "token_bytes.npy")


def _read_cache(root: Path) -> tuple[str | None, tuple]:
    """(None, the cached arrays) if the cache in ``root`` verifies, else (what is wrong, ())."""
    from qkdyn.empirical.data.fetch import sha256_of

    from qkdyn.jsonio import read_json

    try:
        meta = read_json(root / "meta.json", limit=1 << 20)
    except InputError as exc:
        return f"has an unreadable meta.json ({exc})", ()
    hashes = meta.get("sha256") if isinstance(meta, dict) else None
    if not isinstance(hashes, dict) or not isinstance(meta.get("tokens"), int):
        return "has no content hashes (written by an older version)", ()
    for name in (*ARRAYS, "tokenizer.json"):
        if not (root / name).is_file() or sha256_of(root / name) != hashes.get(name):
            return f"has a {name} that does not match its sha256", ()
    try:
        train, val, lengths = (np.load(root / name, mmap_mode="r", allow_pickle=False) for name in ARRAYS)
    except (OSError, ValueError) as exc:
        return f"has an array numpy cannot read ({type(exc).__name__})", ()
    vocab = meta["tokens"]
    if not (lengths.dtype == np.int64 and lengths.shape == (vocab,) and (len(lengths) == 0 or lengths.min() >= 1)):
        return "has a token_bytes table of the wrong type, length or content", ()
    for name, ids in (("train", train), ("val", val)):
        if ids.ndim != 1 or ids.dtype not in (np.uint16, np.uint32) or str(ids.dtype) != meta.get("dtype"):
            return f"has {name} ids of the wrong type or shape", ()
        if len(ids) and int(ids.max()) >= vocab:
            return f"has {name} ids outside the vocabulary of {vocab}", ()
    return None, (train, val, lengths)
