"""The training loop (nanoGPT style): AdamW, warm-up + cosine, gradient accumulation, DDP, resume.

``train`` runs one model to ``max_steps`` optimiser steps. Every ``ckpt_interval`` steps it writes
``checkpoint.pt`` atomically (model, optimiser, step, RNG states, data position, accumulated training
time; the layout of :meth:`qkdyn.runs.RunDir.save`); if ``out_dir`` already has one, the run resumes
from it and reproduces the uninterrupted run exactly (same batches, same updates). Metrics go to
``metrics.jsonl`` (one JSON object a line, ``kind`` "train" or "eval"), the run's
:class:`~qkdyn.runs.RunRecord` to ``result.json`` (``final``: the last evaluation; ``details``:
tokens, step time ``train_time_s`` and ``tokens_per_s``).

Data parallel: launched by ``torchrun``, each process takes its rank's slice of every step's
micro-batches (see :mod:`qkdyn.empirical.coupled.lm_data`); gradients are averaged by DDP on the last
micro-step only. Rank 0 evaluates, logs and checkpoints.
"""
from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import time
from typing import Callable

import torch

from qkdyn.empirical.coupled.configs import TrainConfig
from qkdyn.empirical.coupled.model import GPT, GPTConfig
from qkdyn.empirical.schedule import cosine_with_warmup
from qkdyn.errors import InputError
from qkdyn.runs import Clock, RunDir, RunRecord


def lr_at(step: int, cfg: TrainConfig) -> float:
    """Linear warm-up to ``lr`` over ``warmup_steps``, then cosine decay to ``min_lr`` at ``max_steps``."""
    return cfg.lr * cosine_with_warmup(step, cfg.warmup_steps, cfg.max_steps, floor=cfg.min_lr / cfg.lr)


def make_optimizer(model: torch.nn.Module, cfg: TrainConfig, device_type: str) -> torch.optim.AdamW:
    """AdamW; matrices and embeddings (dim >= 2) decay, gains, dt and lambda vectors do not."""
    params = [p for p in model.parameters() if p.requires_grad]
    groups = [{"params": [p for p in params if p.dim() >= 2], "weight_decay": cfg.weight_decay},
              {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=cfg.lr, betas=(cfg.beta1, cfg.beta2), fused=device_type == "cuda")


def _distributed() -> tuple[int, int, bool]:
    """(rank, world size, is_ddp) from the torchrun environment; initialises the process group."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world == 1:
        return 0, 1, False
    import torch.distributed as dist

    if not dist.is_initialized():
        dist.init_process_group(backend="nccl" if torch.cuda.is_available() else "gloo")
    return dist.get_rank(), world, True


def _device(cfg: TrainConfig, rank: int) -> torch.device:
    if cfg.device == "auto":
        if torch.cuda.is_available():
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)))
            return torch.device("cuda", torch.cuda.current_device())
        return torch.device("cpu")
    return torch.device(cfg.device)


def _config_record(model_cfg: GPTConfig, cfg: TrainConfig, extra: dict) -> dict:
    run = {k: v for k, v in dataclasses.asdict(cfg).items() if k not in ("progress", "device", "compile")}
    return {"model": dataclasses.asdict(model_cfg), "train": run, **extra}


def train(model_cfg: GPTConfig, cfg: TrainConfig, make_batches: Callable, evaluate: Callable,
          out_dir: str | os.PathLike, extra_config: dict | None = None) -> RunRecord | None:
    """Train ``GPT(model_cfg)``; ``make_batches(seed, rank, world)`` gives the batch source and
    ``evaluate(model, device) -> dict`` the evaluation metrics. Returns the run's record (rank 0;
    None on the other ranks)."""
    rank, world, ddp = _distributed()
    device = _device(cfg, rank)
    master = rank == 0
    record = _config_record(model_cfg, cfg, {"world_size": world, **(extra_config or {})})
    rundir = RunDir(out_dir, record, writer=master)
    with rundir:
        return _train(model_cfg, cfg, make_batches, evaluate, rundir, rank, world, ddp, device)


def keep_freed_memory() -> bool:
    """On glibc, serve every allocation from the heap and keep freed memory there (``mallopt``:
    M_MMAP_MAX = 0, M_TRIM_THRESHOLD = 1 GiB), so that the large per-step buffers (the logits and their
    gradient, batch x block x vocab floats: 64 MiB at 2048 tokens x 8192 ids) are reused rather than mapped
    and unmapped at every step, which made the page faults and system time of a CPU run. True where set."""
    import ctypes

    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):  # not glibc
        return False
    M_TRIM_THRESHOLD, M_MMAP_MAX = -1, -4
    return bool(mallopt(M_MMAP_MAX, 0)) and bool(mallopt(M_TRIM_THRESHOLD, 1 << 30))


def _train(model_cfg: GPTConfig, cfg: TrainConfig, make_batches: Callable, evaluate: Callable, rundir: RunDir,
           rank: int, world: int, ddp: bool, device: torch.device) -> RunRecord | None:
    master = rank == 0
    autocast = (torch.autocast("cuda", dtype=torch.bfloat16) if device.type == "cuda" else contextlib.nullcontext())
    if device.type == "cpu":
        keep_freed_memory()

    torch.manual_seed(cfg.seed)
    model = GPT(model_cfg).to(device)
    optimizer = make_optimizer(model, cfg, device.type)
    batches = make_batches(cfg.seed, rank, world)
    step, train_time, clock = 0, 0.0, Clock()
    restored = rundir.restore(model, optimizer, data=batches, device=device)
    if restored is not None:
        step, clock = restored.step, restored.clock
        try:
            train_time = float(restored.extra["train_time_s"])
        except (KeyError, TypeError, ValueError) as exc:
            raise InputError(f"{rundir.checkpoint} is damaged ({type(exc).__name__}); delete it or use another --out")

    raw_model = model
    if cfg.compile:
        model = torch.compile(model)
    if ddp:
        from torch.nn.parallel import DistributedDataParallel

        model = DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
    tokens_per_step = cfg.batch_size * cfg.grad_accum * world * model_cfg.block_size

    log = rundir.log

    def run_eval() -> dict:
        raw_model.eval()
        with autocast:
            metrics = evaluate(raw_model, device)
        raw_model.train()
        return metrics

    def save_checkpoint() -> None:
        if not all(bool(torch.isfinite(p).all()) for p in raw_model.parameters()):
            raise InputError(f"training diverged at step {step}: parameters are not finite (the last checkpoint is "
                             "kept); try a smaller --lr")
        rundir.save(step, raw_model, optimizer, data=batches, device=device, clock=clock,
                    extra={"train_time_s": train_time})

    bar = None
    if master and cfg.progress:
        from tqdm import tqdm

        bar = tqdm(total=cfg.max_steps, initial=step, desc=rundir.path.name, unit="step", dynamic_ncols=True)
    metrics = {}
    if master and cfg.eval_at_start and step == 0:
        log({"kind": "eval", "step": 0, "tokens": 0, **run_eval()})
    while step < cfg.max_steps:
        t0 = time.perf_counter()
        lr = lr_at(step, cfg)
        for group in optimizer.param_groups:
            group["lr"] = lr
        total_loss = 0.0
        for micro, (x, y) in enumerate(batches.next_step()):
            x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
            if ddp:
                model.require_backward_grad_sync = micro == cfg.grad_accum - 1
            with autocast:
                loss = model(x, y)[1] / cfg.grad_accum
            loss.backward()
            total_loss += loss.item()
        if not math.isfinite(total_loss):  # before the step: the parameters and the last checkpoint stay finite
            raise InputError(f"training diverged at step {step + 1}: the training loss is {total_loss} (the last "
                             "checkpoint is kept); try a smaller --lr")
        if cfg.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        train_time += time.perf_counter() - t0
        step += 1
        if master:
            if step % cfg.log_interval == 0 or step == cfg.max_steps:
                log({"kind": "train", "step": step, "tokens": step * tokens_per_step, "loss": total_loss, "lr": lr,
                     "train_time_s": train_time})
            if step % cfg.eval_interval == 0 or step == cfg.max_steps:
                metrics = run_eval()
                log({"kind": "eval", "step": step, "tokens": step * tokens_per_step, **metrics})
                if bar is not None:
                    bar.set_postfix({k: round(v, 4) for k, v in metrics.items() if k in ("val_ppl", "mqar_acc")})
            if step % cfg.ckpt_interval == 0 or step == cfg.max_steps:
                save_checkpoint()
            if bar is not None:
                bar.update(1)
    if bar is not None:
        bar.close()
    record = None
    if master:
        if not metrics:  # resumed from the final checkpoint: evaluate it again
            metrics = run_eval()
        tokens = step * tokens_per_step
        record = RunRecord(
            trainer=rundir.config.get("task", "lm"), config=rundir.config, steps=step,
            parameters=sum(p.numel() for p in raw_model.parameters()), train_seconds=clock.totals(), final=metrics,
            details={"tokens": tokens, "train_time_s": train_time,
                     "tokens_per_s": tokens / train_time if train_time else float("nan")})
        rundir.write_record(record)
    if ddp:
        import torch.distributed as dist

        dist.barrier()
    return record
