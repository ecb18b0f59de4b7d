"""Training batches and validation perplexity for byte-level language modelling.

A batch source yields, for each optimiser step, this rank's list of micro-batches ``(x, y)``; its
whole position in the data is the state of one seeded ``torch.Generator`` (``state_dict``), so a
resumed run draws exactly the batches an uninterrupted run would.

The windows of one step are drawn for all micro-steps and ranks at once, as an array indexed
(micro-step, rank, row); rank r takes its slice. Hence 2 ranks with 1 micro-step see the same data
as 1 rank with 2 micro-steps.
"""
from __future__ import annotations

import math

import numpy as np
import torch

from qkdyn.errors import InputError


class LMBatches:
    """Random windows of ``block_size + 1`` tokens; y is x shifted by one."""

    def __init__(self, tokens: np.ndarray, block_size: int, batch_size: int, grad_accum: int,
                 seed: int, rank: int = 0, world_size: int = 1):
        if len(tokens) <= block_size + 1:
            raise InputError(f"gives a training split of {len(tokens)} tokens, fewer than the block size "
                             f"{block_size} + 2", "data")
        self.tokens, self.block_size = tokens, block_size
        self.shape = (grad_accum, world_size, batch_size)
        self.rank = rank
        self.generator = torch.Generator().manual_seed(seed)

    def windows(self, offsets: torch.Tensor):
        rows = np.stack([np.asarray(self.tokens[o:o + self.block_size + 1], dtype=np.int64) for o in offsets.tolist()])
        data = torch.from_numpy(rows)
        return data[:, :-1], data[:, 1:]

    def next_step(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        high = len(self.tokens) - self.block_size - 1
        offsets = torch.randint(0, high, self.shape, generator=self.generator)
        return [self.windows(offsets[m, self.rank]) for m in range(self.shape[0])]

    def state_dict(self) -> dict:
        return {"generator": self.generator.get_state()}

    def load_state_dict(self, state: dict) -> None:
        self.generator.set_state(state["generator"])


class LMEvaluator:
    """Validation loss over the first ``max_tokens`` tokens of the split, in non-overlapping windows.

    Returns ``val_loss`` (nats per byte), ``val_ppl`` = exp(val_loss) (per-byte perplexity) and
    ``val_bpb`` (bits per byte).
    """

    def __init__(self, tokens: np.ndarray, block_size: int, max_tokens: int, batch_size: int = 16):
        n = min(len(tokens) - 1, max_tokens) // block_size
        if n < 1:
            raise InputError(f"gives a validation split shorter than one block ({block_size} + 1 tokens)", "data")
        rows = np.asarray(tokens[: n * block_size + 1], dtype=np.int64)
        self.x = torch.from_numpy(rows[:-1].reshape(n, block_size))
        self.y = torch.from_numpy(rows[1:].reshape(n, block_size))
        self.batch_size = batch_size

    @torch.no_grad()
    def __call__(self, model, device) -> dict:
        total = 0.0
        for i in range(0, len(self.x), self.batch_size):
            x, y = self.x[i:i + self.batch_size].to(device), self.y[i:i + self.batch_size].to(device)
            total += model(x, y)[1].item() * len(x)
        loss = total / len(self.x)
        return {"val_loss": loss, "val_ppl": math.exp(loss), "val_bpb": loss / math.log(2)}
