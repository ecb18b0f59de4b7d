"""Count models of the same tokens: the floor a language model must clear before its verdicts speak.

Fitted on the training split's tokens x_1..x_N (vocabulary V), scored on every target of the
validation split (each validation token but the first, given the one before it):

* unigram, add-one: p(w) = (c(w) + 1) / (N + V);
* bigram, interpolated absolute discounting (Ney, Essen & Kneser 1994):
  p(w | v) = max(c(v w) - D, 0) / c(v) + D N1+(v .) / c(v) p(w), with c(v) the count of v as a
  context, N1+(v .) the number of distinct successors of v, p the unigram above, and the
  discount estimated from the counts of counts, D = n1 / (n1 + 2 n2) (n_r: bigram types seen r
  times); a context never seen backs off to p(w).

Perplexity = exp(mean negative log-likelihood per target), the unit of the models' ``val_ppl``.
:func:`write_count_models` stores both under a key of the corpus and tokenizer in the study's
``count_models.json``; the analysis reads them as the language-modelling preconditions.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from qkdyn import atomic
from qkdyn.runs import read_json

FILE = "count_models.json"


def count_model_perplexities(train: np.ndarray, val: np.ndarray, vocab: int) -> dict:
    """Unigram and bigram perplexities of ``val`` under count models of ``train`` (module docstring)."""
    train, val = np.asarray(train, dtype=np.int64), np.asarray(val, dtype=np.int64)
    unigram = (np.bincount(train, minlength=vocab) + 1.0) / (len(train) + vocab)
    codes, counts = np.unique(train[:-1] * vocab + train[1:], return_counts=True)
    n1, n2 = (counts == 1).sum().item(), (counts == 2).sum().item()
    discount = n1 / (n1 + 2 * n2) if n1 + 2 * n2 else 0.5
    context = np.bincount(train[:-1], minlength=vocab).astype(float)
    successors = np.bincount(codes // vocab, minlength=vocab).astype(float)

    prev, nxt = val[:-1], val[1:]
    query = prev * vocab + nxt
    at = np.clip(np.searchsorted(codes, query), 0, len(codes) - 1)
    pair = np.where(codes[at] == query, counts[at], 0).astype(float)
    c = context[prev]
    seen = c > 0
    safe = np.where(seen, c, 1.0)
    p_bigram = np.where(seen, np.maximum(pair - discount, 0) / safe + discount * successors[prev] / safe * unigram[nxt],
                        unigram[nxt])
    return {"unigram_ppl": math.exp(-float(np.log(unigram[nxt]).mean())),
            "bigram_ppl": math.exp(-float(np.log(p_bigram).mean())), "discount": discount,
            "train_tokens": int(len(train)), "val_targets": int(len(nxt)), "vocab": int(vocab)}


def key(corpus: str, tokenizer: str, vocab: int) -> str:
    return f"{corpus}|{tokenizer}|{vocab}"


def write_count_models(runs_dir: str | Path, corpus: str, tokenizer: str, vocab_size: int) -> dict:
    """Fit and score the count models of ``corpus`` under ``tokenizer``; store them in the study's
    ``count_models.json`` (atomic; other corpora's entries kept). Returns this corpus's entry."""
    from qkdyn.empirical.coupled.experiment import lm_splits

    train, val, _, vocab = lm_splits(corpus, tokenizer, vocab_size)
    entry = count_model_perplexities(train, val, vocab)
    path = Path(runs_dir) / FILE
    table = read_json(path) if path.exists() else {}
    table[key(corpus, tokenizer, vocab)] = entry
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic.write_text(path, json.dumps(table, indent=2, sort_keys=True) + "\n")
    return entry


def read_count_models(runs_dir: str | Path) -> dict:
    """The study's count models (empty when none were computed)."""
    path = Path(runs_dir) / FILE
    return read_json(path) if path.exists() else {}
