"""Tokens/s of coupled-QK vs standard attention at the study's defaults: the ``tiny`` GPT with the
BPE vocabulary (8192), the default coupling (hidden 4, field gain 1, dt 0.1), forward + backward, on CPU.

Variants are timed in alternating rounds (median of the rounds) so that a shared machine's load
affects them alike. Prints tokens/s per variant and the slowdown ratio standard / variant (the
issue's aim: under 1.3x for coupled at n = 1).
"""
import statistics
import time

import torch

from qkdyn.empirical.coupled.attention import AttentionConfig
from qkdyn.empirical.coupled.model import GPT, preset_config

VARIANTS = {
    "standard": AttentionConfig(),
    "coupled euler n=1": AttentionConfig(kind="coupled", integrator="euler", steps=1),
    "coupled leapfrog n=1": AttentionConfig(kind="coupled", integrator="leapfrog", steps=1),
    "mlp-only n=1": AttentionConfig(kind="mlp-only", steps=1),
    "mlp-only-shared n=1": AttentionConfig(kind="mlp-only-shared", steps=1),
    "mlp-only-q n=1": AttentionConfig(kind="mlp-only-q", steps=1),
    "diff": AttentionConfig(kind="diff"),
}
VOCAB = 8192


def _tokens_per_s(model: torch.nn.Module, x: torch.Tensor, iters: int) -> float:
    start = time.perf_counter()
    for _ in range(iters):
        model(x, x)[1].backward()
    return iters * x.numel() / (time.perf_counter() - start)


def main(rounds: int = 5, iters: int = 10, batch: int = 16) -> dict:
    torch.manual_seed(0)
    models = {name: GPT(preset_config("tiny", vocab_size=VOCAB, attention=cfg)) for name, cfg in VARIANTS.items()}
    x = torch.randint(0, VOCAB, (batch, models["standard"].cfg.block_size))
    for model in models.values():
        _tokens_per_s(model, x, 2)  # warm-up
    speed = {name: [] for name in models}
    for _ in range(rounds):
        for name, model in models.items():
            speed[name].append(_tokens_per_s(model, x, iters))
    med = {name: statistics.median(v) for name, v in speed.items()}
    for name, v in med.items():
        print(f"{name:22s} {v:10.0f} tokens/s   slowdown vs standard x{med['standard'] / v:.3f}")
    return med


if __name__ == "__main__":
    main()
