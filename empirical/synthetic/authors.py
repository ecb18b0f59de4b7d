"""The authors' synthetic experiment (papers.md, Paper A), as a variant of the canonical model.

Where it differs from DESIGN.md section 1 (everything else is the canonical model, reused):
* tokens are drawn i.i.d. per position from the class's weighted distribution: its D = 10 distinct
  tokens with weights 0.1, 0.2, ..., 1.0 and the N = 10 commons with weight 1 each, normalised
  together (so the number of distinct tokens in a context is random, mean 62 * 5.5 / 15.5 = 22);
* context length 62 (the authors use 62-126; we fix the shortest), K = 4 classes;
* the query attends to itself: the softmax runs over the context *and* the query position (the
  count vector gets c_q = 1), and the query's value W_OV[labels, q] enters the logits;
* scores scaled by s = 1/sqrt(50) (50 context tokens);
* every trainable matrix starts at 1e-6 * identity (factors 1e-6 I, balanced; so a factorized
  product starts at 1e-12 I); plain SGD, batch 32; learning rates per circuit: equal, QK 20x, or
  QK ramped linearly 1x -> 40x over the run; stop when the loss (mean of the last 50 batch losses)
  reaches 1e-3, or at a step cap.
Our vocabulary keeps the canonical layout (V = 55: 40 distinct, 10 commons, query, 4 labels);
with one-hot tokens the index order carries no meaning.
"""
from __future__ import annotations

import dataclasses
import math
from collections import deque

import numpy as np
import torch

from qkdyn.empirical.synthetic import reduced
from qkdyn.empirical.synthetic.layout import Layout
from qkdyn.empirical.synthetic.model import DTYPE, AttentionHead, cross_entropy

LAYOUT = Layout(classes=4, distinct=10, commons=10)
CONTEXT = 62
SCALE = 1 / math.sqrt(50)
INIT = 1e-6
#: running-loss levels at which the test attention is recorded (comparisons at matched loss)
LEVELS = (0.3, 0.1, 0.03, 0.01, 3e-3, 1e-3)
SCHEDULES = {"equal": lambda frac: 1.0, "qk20": lambda frac: 20.0, "ramp": lambda frac: 1.0 + 39.0 * frac}


def token_probabilities() -> np.ndarray:
    """(K, V): class k's distribution over tokens (distinct weights 0.1..1.0, commons 1)."""
    probs = np.zeros((LAYOUT.classes, LAYOUT.vocab))
    for k in range(LAYOUT.classes):
        probs[k, LAYOUT.distinct_of(k)] = np.arange(1, LAYOUT.distinct + 1) / 10
        probs[k, LAYOUT.common] = 1.0
    return probs / probs.sum(axis=1, keepdims=True)


def sample(batch: int, generator: torch.Generator):
    """(counts (B, V) with the query counted once, labels, weights 1/B)."""
    labels = torch.randint(LAYOUT.classes, (batch,), generator=generator)
    probs = torch.as_tensor(token_probabilities(), dtype=DTYPE)[labels]
    tokens = torch.multinomial(probs, CONTEXT, replacement=True, generator=generator)
    counts = torch.zeros(batch, LAYOUT.vocab, dtype=DTYPE)
    counts.scatter_add_(1, tokens, torch.ones_like(tokens, dtype=DTYPE))
    counts[:, LAYOUT.query] = 1.0
    return counts, labels, torch.full((batch,), 1.0 / batch, dtype=DTYPE)


def new_model(param: str) -> AttentionHead:
    """Every trainable matrix (collapsed or factor) = 1e-6 I: balanced factors, near-zero products."""
    model = AttentionHead(param, LAYOUT, SCALE)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(INIT * torch.eye(*p.shape, dtype=DTYPE))
    return model


@dataclasses.dataclass
class Result:
    """One run: its end state on the test samples, the balance history, attention at loss levels."""

    param: str
    schedule: str
    steps: int
    loss: float  # mean of the last 50 batch losses
    reached: bool
    balance: list  # (step, max balance error over factorized circuits)
    attn_at_loss: dict  # running-loss level -> mean test attention on distinct tokens when first reached
    attn: np.ndarray  # test samples: attention on the class's distinct tokens
    p_true: np.ndarray  # test samples: probability of the true label
    acc: float


def distinct_attention(attn: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Attention mass on the distinct tokens of each sample's own class."""
    owner = torch.as_tensor(LAYOUT.token_class())
    mask = torch.zeros(len(labels), LAYOUT.vocab, dtype=torch.bool)
    mask[:, : len(owner)] = owner[None, :] == labels[:, None]
    return (attn * mask).sum(dim=1)


def _test_attention(model: AttentionHead, test) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(attention on distinct tokens, p(true label), correct) per test sample."""
    counts, labels, _ = test
    with torch.no_grad():
        logits, attn = model(counts)
        probs = torch.softmax(logits, dim=1)
    return (distinct_attention(attn, labels), probs[torch.arange(len(labels)), labels],
            logits.argmax(dim=1) == labels)


def train(param: str, schedule: str, lr: float, max_steps: int, seed: int = 0, target: float = 1e-3,
          batch: int = 32, test_size: int = 2000) -> Result:
    """Plain SGD with per-circuit learning rates lr * multiplier(schedule) (QK) and lr (OV), until the
    running loss (mean of the last 50 batch losses) is below ``target`` or ``max_steps`` steps.
    The mean test attention on distinct tokens is recorded when the running loss first falls below
    each of LEVELS (for comparisons at matched loss)."""
    generator = torch.Generator().manual_seed(seed)
    test = sample(test_size, torch.Generator().manual_seed(seed + 10_000))
    model = new_model(param)
    opt = torch.optim.SGD([{"params": model.circuit_parameters("QK"), "lr": lr},
                           {"params": model.circuit_parameters("OV"), "lr": lr}], lr=lr)
    recent: deque = deque(maxlen=50)
    balance, attn_at_loss = [], {}
    steps = 0
    while steps < max_steps:
        if steps % max(max_steps // 50, 1) == 0 and (model.qk_factorized or model.ov_factorized):
            balance.append((steps, max(reduced.balance_error(model).values())))
        opt.param_groups[0]["lr"] = lr * SCHEDULES[schedule](steps / max_steps)
        counts, labels, weights = sample(batch, generator)
        loss = cross_entropy(model(counts)[0], labels, weights)
        recent.append(loss.item())
        running = sum(recent) / len(recent) if len(recent) == recent.maxlen else math.inf
        for level in LEVELS:
            if running < level and level not in attn_at_loss:
                attn_at_loss[level] = float(_test_attention(model, test)[0].mean())
        if running < target:
            break
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        steps += 1
    attn, p_true, correct = _test_attention(model, test)
    return Result(param, schedule, steps, running, running < target, balance, attn_at_loss, attn.numpy(),
                  p_true.numpy(), float(correct.double().mean()))


def dtap(result: Result) -> np.ndarray:
    """5 x 5 histogram (% of test samples): rows = attention on distinct tokens, cols = p(true)."""
    edges = np.linspace(0, 1, 6)
    hist, _, _ = np.histogram2d(np.clip(result.attn, 0, 1), np.clip(result.p_true, 0, 1), bins=[edges, edges])
    return 100 * hist / len(result.attn)
