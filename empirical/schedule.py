"""The learning-rate schedule shared by every trainer: linear warm-up, then cosine decay."""
from __future__ import annotations

import math


def cosine_with_warmup(step: int, warmup: int, total: int, floor: float = 0.0) -> float:
    """Multiplier of the base learning rate at ``step`` (0-based): (step+1)/warmup during warm-up,
    then floor + (1 - floor) (1 + cos(pi p)) / 2 with p the fraction of the decay done (p <= 1)."""
    if step < warmup:
        return (step + 1) / warmup
    progress = min(1.0, (step - warmup) / max(1, total - warmup))
    return floor + (1.0 - floor) * 0.5 * (1.0 + math.cos(math.pi * progress))
