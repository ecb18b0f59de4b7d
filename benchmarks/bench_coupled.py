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
validation tokens) and checkpoint. The minimal loop steps ``torch.optim.AdamW``, whose constructor imports
``torch._dynamo`` as a nanoGPT-style loop's does; ``qkdyn lm`` on the CPU takes the same steps to the bit without it
(:mod:`qkdyn.empirical.adam`). Rounds interleaved; prints the median over rounds of qkdyn lm CPU /
minimal loop CPU (target: <= 1.1), and the same against the minimal loop given qkdyn lm's allocator setting
(target: <= 1, at least as fast). In the same runs, each process's peak resident memory (``ru_maxrss`` of
that child alone, started by a small launcher) and the median over rounds of qkdyn lm peak / minimal loop peak, against
each minimal loop (target: <= 1.2); beside them the peak of a bare ``import torch`` process, the floor that
every side's peak includes, and the peak of the untimed first ``qkdyn lm`` (one step), which learns the BPE.
"""
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
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
    speed: dict[str, list[float]] = {name: [] for name in models}
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


#: runs argv[1:] and prints its rusage: a small process between the benchmark and each measured child, since a
#: child's ``ru_maxrss`` starts at the resident size of the process that forked it (Linux carries the old
#: address space's peak across ``fork`` and ``exec``), which in the benchmark is hundreds of MiB of torch and models
_LAUNCHER = ("import resource, subprocess, sys; subprocess.run(sys.argv[1:], check=True, stdout=subprocess.DEVNULL); "
             "u = resource.getrusage(resource.RUSAGE_CHILDREN); print(u.ru_utime, u.ru_stime, u.ru_maxrss)")


def child_usage(command: list[str], env: dict | None = None) -> tuple[float, float, int]:
    """(user CPU seconds, system CPU seconds, peak resident bytes) of ``command`` run to completion in a
    fresh process (its descendants included), started by a small launcher (:data:`_LAUNCHER`) so that the
    peak is the child's own."""
    usage = subprocess.run([sys.executable, "-c", _LAUNCHER, *command], env=env, check=True,
                           stdout=subprocess.PIPE, text=True).stdout.split()
    return float(usage[0]), float(usage[1]), int(usage[2]) * (1 if sys.platform == "darwin" else 1024)


def _minimal_command(steps: int, keep: bool) -> list[str]:
    return [sys.executable, "-c", f"from benchmarks.bench_coupled import minimal_loop; minimal_loop({steps}, {keep})"]


def lm_process(steps: int = 30, rounds: int = 3) -> float:
    """Median over interleaved rounds of CPU(qkdyn lm process) / CPU(minimal loop process), same model,
    tokens and steps, one thread each; printed with the other CPU and peak-memory ratios (module docstring)."""
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

        first = child_usage(lm("warm", 1), env)  # learns the BPE once (cached): not timed
        sides = {"minimal": lambda r: _minimal_command(steps, False), "minimal, kept": lambda r: _minimal_command(steps, True),
                 "qkdyn lm": lambda r: lm(f"run{r}", steps), "import torch": lambda r: [sys.executable, "-c", "import torch"]}
        usage: dict[str, list[tuple[float, float, int]]] = {name: [] for name in sides}
        for r in range(rounds):
            for name, command in sides.items():
                usage[name].append(child_usage(command(r), env))
    total = {name: [user + system for user, system, _ in runs] for name, runs in usage.items()}
    peak = {name: [rss for _, _, rss in runs] for name, runs in usage.items()}
    print(f"whole process, {steps} steps of 2048 tokens, vocabulary {VOCAB}, 1 thread, CPU (median of {rounds} "
          f"interleaved rounds; load average {', '.join(f'{x:.2f}' for x in os.getloadavg())}):")
    for name, runs in usage.items():
        print(f"  {name:14s} {statistics.median(total[name]):6.2f} s ({statistics.median(s for _, s, _ in runs):.2f} s system), "
              f"peak memory {statistics.median(peak[name]) / 2**20:6.0f} MiB")
    ratio = _median_ratio(total["qkdyn lm"], total["minimal"])
    kept = _median_ratio(total["qkdyn lm"], total["minimal, kept"])
    allocator = _median_ratio(total["minimal"], total["minimal, kept"])
    print(f"  allocator setting of qkdyn lm (keep_freed_memory): minimal / minimal kept = {allocator:.2f}")
    print(f"  qkdyn lm process / minimal loop = {ratio:.2f} ({_against(ratio, 1.1)} the 1.1 target); "
          f"/ the minimal loop with kept freed memory = {kept:.2f} ({_against(kept, 1.0)} the 1.0 target)")
    print(f"  (the untimed first qkdyn lm, 1 step, learning the BPE: peak memory {first[2] / 2**20:.0f} MiB)")
    for peer in ("minimal", "minimal, kept"):
        memory = _median_ratio(peak["qkdyn lm"], peak[peer])
        print(f"  peak memory: qkdyn lm / {peer} = {memory:.2f} ({_against(memory, 1.2)} the 1.2 target)")
    return ratio


def _median_ratio(numerators: Sequence[float], denominators: Sequence[float]) -> float:
    """Median over rounds of the ratio of a round's two measurements."""
    return statistics.median(a / b for a, b in zip(numerators, denominators, strict=True))


def _against(ratio: float, target: float) -> str:
    return "within" if ratio <= target else "OVER"


if __name__ == "__main__":
    main()
