"""Tokens/s of coupled-QK vs standard attention at the study's defaults: the ``tiny`` GPT with the
BPE vocabulary (8192), the default coupling (hidden 4, field gain 1, dt 0.1), forward + backward, on CPU.

Variants are timed in alternating rounds (median of the rounds) so that a shared machine's load
affects them alike. Prints tokens/s per variant and the slowdown ratio standard / variant (the
issue's aim: under 1.3x for coupled at n = 1).

The step's allocator: a minimal training loop (``tiny`` GPT, 2048 tokens a step, vocabulary 8192: 64 MiB
logit buffers, AdamW) run in two fresh processes, with glibc's default allocator and with
:func:`qkdyn.empirical.coupled.train.keep_freed_memory` (what ``qkdyn lm`` sets on CPU); prints the CPU time
(user + system) of each and the ratio default / kept (> 1: the setting saves time).
"""
import resource
import subprocess
import sys
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
    allocator()
    return med


def minimal_loop(steps: int, keep: bool) -> None:
    """nanoGPT-style loop on random tokens; with ``keep`` the allocator setting of ``qkdyn lm`` first."""
    if keep:
        from qkdyn.empirical.coupled.train import keep_freed_memory

        keep_freed_memory()
    torch.manual_seed(0)
    model = GPT(preset_config("tiny", vocab_size=VOCAB, attention=AttentionConfig()))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x = torch.randint(0, VOCAB, (2048 // model.cfg.block_size, model.cfg.block_size))
    for _ in range(steps):
        loss = model(x, x)[1]
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()


def allocator(steps: int = 30) -> float:
    """CPU seconds of the minimal loop in a fresh process, default allocator / kept memory."""
    cpu = {}
    for keep in (False, True):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        subprocess.run([sys.executable, "-c", f"from benchmarks.bench_coupled import minimal_loop; "
                        f"minimal_loop({steps}, {keep})"], check=True)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu[keep] = (after.ru_utime - before.ru_utime, after.ru_stime - before.ru_stime)
    for keep, (user, system) in cpu.items():
        print(f"minimal LM loop, {'kept freed memory' if keep else 'default allocator'}: {user + system:.2f} s CPU "
              f"({system:.2f} s system) for {steps} steps of 2048 tokens")
    ratio = sum(cpu[False]) / sum(cpu[True])
    print(f"allocator setting of qkdyn lm: default / kept CPU time = {ratio:.2f}")
    return ratio


if __name__ == "__main__":
    main()
