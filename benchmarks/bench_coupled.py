"""Tokens/s of coupled-QK vs standard attention at the study's defaults: the ``tiny`` GPT with the
BPE vocabulary (8192), the default coupling (hidden 4, field gain 1, dt 0.1), forward + backward, on CPU.

Variants are timed in alternating rounds (median of the rounds) so that a shared machine's load
affects them alike. Prints tokens/s per variant and the slowdown ratio standard / variant (the
issue's aim: under 1.3x for coupled at n = 1).

The step's allocator: the minimal training loop (``tiny`` GPT, 2048 tokens a step, vocabulary 8192: 64 MiB
logit buffers, AdamW) with glibc's default allocator and with
:func:`qkdyn.empirical.coupled.train.keep_freed_memory` (what ``qkdyn lm`` sets on CPU): the CPU time
(user + system) of each in fresh processes and the ratio default / kept (> 1: the setting saves time).

The whole ``qkdyn lm`` process against the minimal loop: the same model (``tiny``, vocabulary 8192, standard
attention), 2048 tokens a step, the same number of AdamW steps, one torch thread each, every run a fresh
process; ``qkdyn lm`` on a generated text file with its BPE cache filled by an untimed first run, so it
pays its import, data loading, schedule, clipping, logging, the final evaluation (capped at 2048
validation tokens) and checkpoint. Rounds interleaved; prints the median over rounds of qkdyn lm CPU /
minimal loop CPU (target: <= 1.1), and the same against the minimal loop given qkdyn lm's allocator setting.
"""
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
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
    lm_process()
    return med


def minimal_loop(steps: int, keep: bool) -> None:
    """nanoGPT-style loop on random tokens (the logits, ``F.cross_entropy`` on them, AdamW); with ``keep``
    the allocator setting of ``qkdyn lm`` first."""
    if keep:
        from qkdyn.empirical.coupled.train import keep_freed_memory

        keep_freed_memory()
    torch.manual_seed(0)
    model = GPT(preset_config("tiny", vocab_size=VOCAB, attention=AttentionConfig()))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x = torch.randint(0, VOCAB, (2048 // model.cfg.block_size, model.cfg.block_size))
    for _ in range(steps):
        logits = model(x)[0]  # the full (tokens, vocabulary) logits, then the library's cross-entropy
        loss = torch.nn.functional.cross_entropy(logits.view(-1, VOCAB), x.view(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()


def child_cpu(command: list[str], env: dict | None = None) -> tuple[float, float]:
    """(user, system) CPU seconds of ``command`` run to completion in a fresh process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(command, check=True, env=env, stdout=subprocess.DEVNULL)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return after.ru_utime - before.ru_utime, after.ru_stime - before.ru_stime


def _minimal_command(steps: int, keep: bool) -> list[str]:
    return [sys.executable, "-c", f"from benchmarks.bench_coupled import minimal_loop; minimal_loop({steps}, {keep})"]


def lm_process(steps: int = 30, rounds: int = 3) -> float:
    """Median over interleaved rounds of CPU(qkdyn lm process) / CPU(minimal loop process), same model,
    tokens and steps, one thread each (module docstring)."""
    with tempfile.TemporaryDirectory() as tmp:
        words = np.array(["query", "key", "value", "attention", "flow", "step", "head", "layer", "token", "loss",
                          "the", "of", "a", "gradient", "softmax", "matrix", "learning", "rate", "circuit"])
        corpus = Path(tmp) / "corpus.txt"
        corpus.write_text(" ".join(words[np.random.default_rng(0).integers(0, len(words), 400_000)]))
        env = {**os.environ, "QKDYN_CACHE": str(Path(tmp) / "cache"), "OMP_NUM_THREADS": "1"}

        def lm(out: str, max_steps: int) -> list[str]:
            return [sys.executable, "-c", "import sys; from qkdyn.cli import main; sys.exit(main(sys.argv[1:]))",
                    "lm", "--data", str(corpus), "--out", str(Path(tmp) / out),
                    "--preset", "tiny", "--vocab-size", str(VOCAB), "--batch-size", str(2048 // 128),
                    "--max-steps", str(max_steps), "--eval-tokens", "2048", "--threads", "1", "--no-progress"]

        child_cpu(lm("warm", 1), env)  # learns the BPE once (cached): not timed
        sides = {"minimal": lambda r: _minimal_command(steps, False), "minimal, kept": lambda r: _minimal_command(steps, True),
                 "qkdyn lm": lambda r: lm(f"run{r}", steps)}
        cpu = {name: [] for name in sides}
        for r in range(rounds):
            for name, command in sides.items():
                cpu[name].append(child_cpu(command(r), env))
    total = {name: [sum(c) for c in runs] for name, runs in cpu.items()}
    print(f"whole process, {steps} steps of 2048 tokens, vocabulary {VOCAB}, 1 thread, CPU (median of {rounds} "
          "interleaved rounds):")
    for name, runs in cpu.items():
        print(f"  {name:14s} {statistics.median(total[name]):6.2f} s ({statistics.median(s for _, s in runs):.2f} s system)")
    ratio = statistics.median(a / b for a, b in zip(total["qkdyn lm"], total["minimal"], strict=True))
    kept = statistics.median(a / b for a, b in zip(total["qkdyn lm"], total["minimal, kept"], strict=True))
    allocator = statistics.median(a / b for a, b in zip(total["minimal"], total["minimal, kept"], strict=True))
    print(f"  allocator setting of qkdyn lm (keep_freed_memory): minimal / minimal kept = {allocator:.2f}")
    print(f"  qkdyn lm process / minimal loop = {ratio:.2f} ({'within' if ratio <= 1.1 else 'OVER'} the 1.1 target); "
          f"/ the minimal loop with kept freed memory = {kept:.2f}")
    return ratio


if __name__ == "__main__":
    main()
