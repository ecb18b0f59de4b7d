"""Examples -> padded id tensors, for classification and for QA generation.

QA sequences are ``<q> question <c> context <a> answer <eos>``; the loss is taken on the answer and
``<eos>`` only, and the read-out position is the ``<a>`` token.
"""
from __future__ import annotations

import dataclasses

import torch
from qkdyn.empirical.circuits.vocab import Vocab
from qkdyn.empirical.data.examples_circuits import Example, QAExample

MAX_QUESTION = 32


def pad(seqs: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-pad with 0 (``<pad>``): (ids (B, T), lengths (B,))."""
    lengths = torch.tensor([len(s) for s in seqs])
    ids = torch.zeros(len(seqs), int(lengths.max()), dtype=torch.long)
    for i, s in enumerate(seqs):
        ids[i, : len(s)] = torch.tensor(s, dtype=torch.long)
    return ids, lengths


def classification_batch(examples: list[Example], vocab: Vocab) -> dict:
    ids, lengths = pad([vocab.encode(e.tokens) for e in examples])
    return {"ids": ids, "lengths": lengths, "labels": torch.tensor([e.label for e in examples])}


@dataclasses.dataclass(frozen=True)
class QASequence:
    """An encoded QA example: the prompt ids (ending in ``<a>``), the answer ids (ending in
    ``<eos>``), and the answer span's positions in the prompt."""

    prompt: list[int]
    answer: list[int]
    span_positions: tuple[int, ...]


def encode_qa(example: QAExample, vocab: Vocab, max_len: int) -> QASequence | None:
    """None when the whole sequence would exceed ``max_len``."""
    question = list(example.question[:MAX_QUESTION])
    prompt = vocab.encode(["<q>", *question, "<c>", *example.context, "<a>"])
    first, last = example.answer_span
    answer = vocab.encode([*example.context[first: last + 1], "<eos>"])
    if len(prompt) + len(answer) > max_len:
        return None
    offset = len(question) + 2
    return QASequence(prompt, answer, tuple(range(offset + first, offset + last + 1)))


def qa_batch(seqs: list[QASequence]) -> dict:
    """Teacher-forcing batch: ids = prompt + answer; targets = -100 except on the answer."""
    ids, lengths = pad([s.prompt + s.answer for s in seqs])
    targets = torch.full_like(ids, -100)
    for i, s in enumerate(seqs):
        targets[i, len(s.prompt): len(s.prompt) + len(s.answer)] = torch.tensor(s.answer)
    return {"ids": ids, "lengths": lengths, "targets": targets}
