"""Command-line flags shared by ``qkdyn lm`` and ``qkdyn mqar``, and their conversion to configs.

Imports nothing heavy: the config classes are imported inside the conversion functions.
"""
from __future__ import annotations

import argparse

from qkdyn.errors import InputError

PRESET_NAMES = ("tiny", "1M", "4M", "60M", "150M", "350M")


def add_model_arguments(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("model")
    g.add_argument("--preset", default="tiny", choices=PRESET_NAMES, help="model shape (default tiny)")
    g.add_argument("--attention", default="standard", choices=("standard", "coupled", "mlp-only", "mlp-only-shared", "diff"))
    g.add_argument("--integrator", default="euler", choices=("euler", "leapfrog"),
                   help="coupled: Euler, or leapfrog (kick-drift-kick)")
    g.add_argument("--coupling-steps", type=int, default=1, help="integration steps n (coupled, mlp-only)")
    g.add_argument("--coupling-hidden", type=int, default=4,
                   help="hidden width of the per-head MLP f (default 4: ~0.1%% overhead at 60M)")
    g.add_argument("--dt-init", type=float, default=0.1, help="initial per-head step dt")
    g.add_argument("--field-gain", type=float, default=1.0,
                   help="init scale of f: W1 ~ N(0, 1/d_head), W2 ~ N(0, gain^2/hidden) (default 1: |f(q)|/|k| ~ 0.5)")


def add_train_arguments(parser: argparse.ArgumentParser, max_steps: int, lr: float) -> None:
    g = parser.add_argument_group("training")
    g.add_argument("--out", required=True, help="run directory (resumes if it holds ckpt.pt)")
    g.add_argument("--seed", type=int, default=0)
    g.add_argument("--max-steps", type=int, default=max_steps)
    g.add_argument("--batch-size", type=int, default=16, help="sequences per micro-batch per process")
    g.add_argument("--grad-accum", type=int, default=1)
    g.add_argument("--lr", type=float, default=lr)
    g.add_argument("--min-lr", type=float, default=None, help="final learning rate (default lr/10)")
    g.add_argument("--warmup-steps", type=int, default=None, help="default: 10%% of max steps")
    g.add_argument("--weight-decay", type=float, default=0.1)
    g.add_argument("--grad-clip", type=float, default=1.0)
    g.add_argument("--eval-interval", type=int, default=50)
    g.add_argument("--ckpt-interval", type=int, default=50)
    g.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:1, ...")
    g.add_argument("--compile", action="store_true", help="torch.compile the model")
    g.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    g.add_argument("--no-progress", action="store_true", help="no tqdm progress bar")


def attention_config(args):
    from qkdyn.empirical.coupled.attention import AttentionConfig

    try:
        return AttentionConfig(kind=args.attention, integrator=args.integrator, steps=args.coupling_steps,
                               hidden=args.coupling_hidden, dt_init=args.dt_init, field_gain=args.field_gain)
    except ValueError as exc:
        raise InputError(str(exc))


def train_config(args):
    from qkdyn.empirical.coupled.train import TrainConfig

    positive = {"--max-steps": args.max_steps, "--batch-size": args.batch_size, "--grad-accum": args.grad_accum,
                "--eval-interval": args.eval_interval, "--ckpt-interval": args.ckpt_interval}
    for flag, value in positive.items():
        if value < 1:
            raise InputError(f"{flag} must be >= 1, got {value}")
    if args.lr <= 0:
        raise InputError("--lr must be positive")
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    return TrainConfig(
        max_steps=args.max_steps, batch_size=args.batch_size, grad_accum=args.grad_accum, lr=args.lr,
        min_lr=args.lr / 10 if args.min_lr is None else args.min_lr,
        warmup_steps=max(1, args.max_steps // 10) if args.warmup_steps is None else args.warmup_steps,
        weight_decay=args.weight_decay, grad_clip=args.grad_clip, eval_interval=args.eval_interval,
        ckpt_interval=args.ckpt_interval, log_interval=min(10, args.eval_interval), seed=args.seed,
        device=args.device, compile=args.compile, progress=not args.no_progress)
