"""Multi-query associative recall (MQAR), with the semantics of Zoology (Arora et al. 2023).

A sequence of length T starts with ``num_kv_pairs`` key-value pairs ``k1 v1 k2 v2 ...``; keys are
drawn without replacement from the first half of the vocabulary (excluding token 0), values from
the second half. The rest of the sequence holds every key once more, as a query, at even offsets
2g after the pairs; the gaps g are drawn without replacement with probability proportional to
g^(a-1), g = 1..(T - 2 num_kv_pairs)/2 (power law, ``power_a`` = 0.01 as in Zoology). All other
positions are random fillers from the whole vocabulary. The label at a query's position is the
value paired with that key; all other labels are -100 (ignored). Accuracy is the share of
labelled positions whose arg-max prediction is the value.

Presets (vocabulary, then the (sequence length, kv pairs) settings a model trains on - one
setting per batch, in turn - and is scored on):

* small:  vocabulary 256, (32, 8) (the CPU study's: the tiny model learns it in 400-600 steps of 64
  sequences, docs/coupled.md "MQAR")
* easy:   vocabulary 256, (64, 4), (64, 8)
* medium: vocabulary 256, (128, 8), (128, 16)
* hard:   vocabulary 512, (256, 16), (256, 32), (256, 64)

Zoology itself uses a vocabulary of 8192 and lengths up to 512; these presets are scaled for a
tiny CPU model and are flags of :class:`MQARPreset`.
"""
from __future__ import annotations

import numpy as np
import torch
from qkdyn.empirical.coupled.configs import MQARPreset


def _sample_without_replacement(rng: np.random.Generator, n: int, population: int, k: int,
                                log_weights: np.ndarray | None = None) -> np.ndarray:
    """``n`` rows of ``k`` distinct indices in [0, population); weighted if ``log_weights`` (Gumbel top-k)."""
    scores = rng.gumbel(size=(n, population))
    if log_weights is not None:
        scores = scores + log_weights
    return np.argsort(-scores, axis=1)[:, :k]


def generate(num_examples: int, seq_len: int, num_kv_pairs: int, vocab_size: int, rng: np.random.Generator,
             power_a: float = 0.01, random_non_queries: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """(inputs, labels), both int64 of shape (num_examples, seq_len); see the module docstring."""
    context = 2 * num_kv_pairs
    if seq_len % 2 or 4 * num_kv_pairs > seq_len or vocab_size <= seq_len:
        raise ValueError("MQAR needs an even seq_len >= 4 * kv pairs and a vocabulary larger than seq_len")
    half = vocab_size // 2
    keys = 1 + _sample_without_replacement(rng, num_examples, half - 1, num_kv_pairs)
    values = half + _sample_without_replacement(rng, num_examples, vocab_size - half, num_kv_pairs)
    space = (seq_len - context) // 2
    log_p = (power_a - 1) * np.log(np.arange(1, space + 1))
    gaps = _sample_without_replacement(rng, num_examples, space, num_kv_pairs, log_p)

    examples = np.zeros((num_examples, seq_len + 1), dtype=np.int64)
    examples[:, 0:context:2], examples[:, 1:context:2] = keys, values
    rows = np.arange(num_examples)[:, None]
    examples[rows, context + 2 * gaps] = keys
    labels = np.full((num_examples, seq_len + 1), -100, dtype=np.int64)
    labels[rows, context + 2 * gaps + 1] = values
    inputs, labels = examples[:, :-1], labels[:, 1:]
    if random_non_queries:
        fill = inputs == 0
        inputs[fill] = rng.integers(0, vocab_size, size=int(fill.sum()))
    return inputs, labels


class MQARBatches:
    """Fresh MQAR batches, one preset setting per step in turn; same interface as ``LMBatches``."""

    def __init__(self, preset: MQARPreset, batch_size: int, grad_accum: int, seed: int,
                 rank: int = 0, world_size: int = 1):
        self.preset, self.rank = preset, rank
        self.shape = (grad_accum, world_size, batch_size)
        self.rng = np.random.default_rng(seed)
        self.step = 0

    def next_step(self):
        seq_len, kv = self.preset.settings[self.step % len(self.preset.settings)]
        self.step += 1
        n = int(np.prod(self.shape))
        x, y = generate(n, seq_len, kv, self.preset.vocab_size, self.rng, self.preset.power_a,
                        self.preset.random_non_queries)
        x, y = (torch.from_numpy(a.reshape(*self.shape, seq_len)) for a in (x, y))
        return [(x[m, self.rank], y[m, self.rank]) for m in range(self.shape[0])]

    def state_dict(self) -> dict:
        return {"rng": self.rng.bit_generator.state, "step": self.step}

    def load_state_dict(self, state: dict) -> None:
        self.rng.bit_generator.state = state["rng"]
        self.step = state["step"]


class MQAREvaluator:
    """Accuracy on a fixed test set of ``n_test`` sequences per setting (seeded apart from training)."""

    def __init__(self, preset: MQARPreset, n_test: int, seed: int):
        rng = np.random.default_rng([seed, 1])
        self.sets = {(t, kv): tuple(torch.from_numpy(a) for a in generate(
            n_test, t, kv, preset.vocab_size, rng, preset.power_a, preset.random_non_queries))
            for t, kv in preset.settings}

    @torch.no_grad()
    def __call__(self, model, device) -> dict:
        out, accs = {}, []
        for (t, kv), (x, y) in self.sets.items():
            correct = total = 0
            for i in range(0, len(x), 64):
                xb, yb = x[i:i + 64].to(device), y[i:i + 64].to(device)
                pred = model(xb)[0].argmax(-1)
                mask = yb != -100
                correct += int((pred[mask] == yb[mask]).sum())
                total += int(mask.sum())
            out[f"acc_T{t}_kv{kv}"] = correct / total
            accs.append(correct / total)
        out["mqar_acc"] = float(np.mean(accs))
        return out
