"""Training batches and validation perplexity for language modelling (byte or sub-word tokens).

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
    """Validation loss over the validation split (all of it unless ``max_tokens`` caps it), in
    non-overlapping windows of ``block_size`` targets.

    Returns, with L_i the cross-entropy (nats) of target i and b_i its length in bytes
    (``token_bytes[target]``; 1 for byte tokens):

    * ``val_loss`` = mean_i L_i (nats per token), ``val_ppl`` = exp(val_loss) (per-token perplexity);
    * ``val_ppl_byte`` = exp(sum_i L_i / sum_i b_i) (per-byte perplexity), ``val_bpb`` = bits per byte;
    * ``val_ppl_lo``, ``val_ppl_hi``: a 95% interval of ``val_ppl`` over the evaluated text, exp of
      val_loss -+ 1.96 standard errors of the mean over windows (windows as the sampling unit);
    * ``val_tokens``, ``val_bytes``: how much was evaluated.

    The model's logits come a batch of ``batch_size`` windows at a time; their cross-entropy one window at a
    time, so its log-softmax (and the float32 copy of bf16 logits) is one window's (4 MiB at 128 tokens x
    8192 ids) rather than the batch's (64 MiB at 16 windows): the rows are independent, so the numbers are
    those of the batch's at once.
    """

    def __init__(self, tokens: np.ndarray, block_size: int, max_tokens: int | None = None, batch_size: int = 16,
                 token_bytes: np.ndarray | None = None):
        usable = len(tokens) - 1 if max_tokens is None else min(len(tokens) - 1, max_tokens)
        n = usable // block_size
        if n < 1:
            raise InputError(f"gives a validation split shorter than one block ({block_size} + 1 tokens)", "data")
        rows = np.asarray(tokens[: n * block_size + 1], dtype=np.int64)
        self.x = torch.from_numpy(rows[:-1].reshape(n, block_size))
        self.y = torch.from_numpy(rows[1:].reshape(n, block_size))
        lengths = np.ones(int(rows.max()) + 1, dtype=np.int64) if token_bytes is None else np.asarray(token_bytes)
        self.n_bytes = int(lengths[rows[1:]].sum())
        self.batch_size = batch_size

    @torch.no_grad()
    def __call__(self, model, device) -> dict:
        per_window = []
        for i in range(0, len(self.x), self.batch_size):
            x, y = self.x[i:i + self.batch_size].to(device), self.y[i:i + self.batch_size].to(device)
            logits = model(x)[0]
            nll = torch.cat([torch.nn.functional.cross_entropy(window.float(), target, reduction="none")
                             for window, target in zip(logits, y, strict=True)])
            per_window.append(nll.view(len(x), -1).mean(1).cpu())
        window_loss = torch.cat(per_window).double().numpy()
        loss = float(window_loss.mean())
        se = float(window_loss.std(ddof=1) / math.sqrt(len(window_loss))) if len(window_loss) > 1 else float("nan")
        per_byte = loss * self.y.numel() / self.n_bytes
        return {"val_loss": loss, "val_ppl": math.exp(loss), "val_ppl_lo": math.exp(loss - 1.96 * se),
                "val_ppl_hi": math.exp(loss + 1.96 * se), "val_ppl_byte": math.exp(per_byte),
                "val_bpb": per_byte / math.log(2), "val_tokens": int(self.y.numel()), "val_bytes": self.n_bytes}
