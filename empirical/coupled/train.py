"""The LM and MQAR trainer: AdamW, warm-up + cosine, gradient accumulation, DDP, resume, on the shared loop.

``train`` runs one model to ``max_steps`` optimiser steps. Every ``ckpt_interval`` steps it writes
``checkpoint.pt`` atomically (model, optimiser, step, RNG states, data position, accumulated training
time; the layout of :meth:`qkdyn.runs.RunDir.save`); if ``out_dir`` already has one, the run resumes
from it and reproduces the uninterrupted run exactly (same batches, same updates). Metrics go to
``metrics.jsonl`` (one JSON object a line, ``kind`` "train" or "eval"), the run's
:class:`~qkdyn.runs.RunRecord` to ``result.json`` (``final``: the numbers of the last evaluation, its
ablations and per-head lists being in its row of ``metrics.jsonl``; ``details``:
tokens, step time ``train_time_s`` (wall) and ``cpu_time_s`` (CPU seconds of this process in the
steps, ``time.process_time``: all its threads, evaluations excluded), ``tokens_per_s`` and the
instability ``diagnostics`` of :class:`Diagnostics`). Step times and diagnostics are kept in the
checkpoint, so a resumed run reports the same figures (times aside) as an uninterrupted one; a run
resumed from a checkpoint written before they existed reports them as None (not measured).

Data parallel: launched by ``torchrun``, each process takes its rank's slice of every step's
micro-batches (see :mod:`qkdyn.empirical.coupled.lm_data`); gradients are averaged by DDP on the last
micro-step only. Rank 0 evaluates, logs and checkpoints. The loop is the shared one
(:mod:`qkdyn.empirical.loop`); this module supplies the step (:class:`_Steps`): its micro-batches, the
learning rate of :func:`lr_at` (nanoGPT's ``get_lr``), the update and the evaluation row.
"""
from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import statistics
import time
from collections import deque
from collections.abc import Callable

import torch
from qkdyn.empirical import loop
from qkdyn.empirical.adam import PlainAdamW
from qkdyn.empirical.coupled.configs import TrainConfig
from qkdyn.empirical.coupled.model import GPT, GPTConfig
from qkdyn.empirical.schedule import cosine_with_warmup

from qkdyn.errors import InputError
from qkdyn.runs import Clock, RunDir, RunRecord


def lr_at(step: int, cfg: TrainConfig) -> float:
    """Linear warm-up to ``lr`` over ``warmup_steps``, then cosine decay to ``min_lr`` at ``max_steps``."""
    return cfg.lr * cosine_with_warmup(step, cfg.warmup_steps, cfg.max_steps, floor=cfg.min_lr / cfg.lr)


def make_optimizer(model: torch.nn.Module, cfg: TrainConfig, device_type: str) -> torch.optim.AdamW | PlainAdamW:
    """AdamW; matrices and embeddings (dim >= 2) decay, gains, dt and lambda vectors do not. On CUDA torch's fused
    AdamW; elsewhere the same steps as ``torch.optim.AdamW`` takes there, bit for bit, without importing
    ``torch._dynamo`` (:mod:`qkdyn.empirical.adam`). Their checkpoints resume in one another."""
    params = [p for p in model.parameters() if p.requires_grad]
    groups = [{"params": [p for p in params if p.dim() >= 2], "weight_decay": cfg.weight_decay},
              {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
    if device_type == "cuda":
        return torch.optim.AdamW(groups, lr=cfg.lr, betas=(cfg.beta1, cfg.beta2), fused=True)
    return PlainAdamW(groups, lr=cfg.lr, betas=(cfg.beta1, cfg.beta2))


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
          out_dir: str | os.PathLike, extra_config: dict | None = None, *,
          stop_after: int | None = None) -> RunRecord | None:
    """Train ``GPT(model_cfg)``; ``make_batches(seed, rank, world)`` gives the batch source and
    ``evaluate(model, device) -> dict`` the evaluation metrics. Returns the run's record (rank 0;
    None on the other ranks, and once ``stop_after`` steps are done: as if killed there, a test's kill)."""
    rank, world, ddp = _distributed()
    device = _device(cfg, rank)
    master = rank == 0
    record = _config_record(model_cfg, cfg, {"world_size": world, **(extra_config or {})})
    rundir = RunDir(out_dir, record, writer=master)
    with rundir:
        return _train(model_cfg, cfg, make_batches, evaluate, rundir, rank, world, ddp, device, stop_after)


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


class Diagnostics:
    """Instability diagnostics of a run, observed at every step (so ``grad_norm_every`` = 1):

    * ``max_grad_norm``: the largest global gradient norm before clipping (infinite once one was not finite);
    * ``clipped_fraction``: the share of steps whose pre-clip norm exceeded ``grad_clip`` (0 when
      clipping is off);
    * ``loss_spikes``: the steps whose training loss L exceeded the mean m of the previous
      :attr:`WINDOW` steps' losses by more than max(3 s, m / 2), s their standard deviation
      (n - 1 denominator): "more than 3 running sd or 50%, whichever is larger". A step is
      judged only once :attr:`WINDOW` earlier steps exist.

    Its state (:meth:`state_dict`: counts and the window of recent losses) goes into the checkpoint."""

    WINDOW = 50

    def __init__(self, grad_clip: float):
        self.grad_clip = grad_clip
        self.steps = self.clipped = self.spikes = 0
        self.max_grad_norm = 0.0
        self.recent: deque[float] = deque(maxlen=self.WINDOW)

    def observe(self, loss: float, grad_norm: float) -> None:
        """Record one step's training loss and pre-clip gradient norm."""
        self.steps += 1
        self.max_grad_norm = max(self.max_grad_norm, grad_norm) if math.isfinite(grad_norm) else math.inf
        self.clipped += int(self.grad_clip > 0 and grad_norm > self.grad_clip)
        if len(self.recent) == self.WINDOW:
            mean, sd = statistics.fmean(self.recent), statistics.stdev(self.recent)
            self.spikes += int(loss > mean + max(3 * sd, 0.5 * mean))
        self.recent.append(loss)

    def summary(self) -> dict:
        return {"max_grad_norm": self.max_grad_norm, "clipped_fraction": self.clipped / self.steps if self.steps else 0.0,
                "loss_spikes": self.spikes, "grad_norm_every": 1}

    def state_dict(self) -> dict:
        return {"steps": self.steps, "clipped": self.clipped, "spikes": self.spikes,
                "max_grad_norm": self.max_grad_norm, "recent": list(self.recent)}

    def load_state_dict(self, state: dict) -> None:
        self.steps, self.clipped, self.spikes = int(state["steps"]), int(state["clipped"]), int(state["spikes"])
        self.max_grad_norm = float(state["max_grad_norm"])
        self.recent = deque((float(x) for x in state["recent"]), maxlen=self.WINDOW)


class _Steps:
    """The hooks of the shared loop (:mod:`qkdyn.empirical.loop`) for a GPT: the micro-batches of a
    step (DDP gradient sync on the last), the learning rate of :func:`lr_at`, clip and AdamW step,
    a ``train`` row every ``log_interval`` steps and ``eval`` rows (``evaluate(model, device)``).
    ``times`` are the step times so far, wall and CPU (None: not measured since the start)."""

    hint = "try a smaller --lr"
    shown: tuple[str, ...] = ("val_ppl", "mqar_acc")
    done = False

    def __init__(self, model, optimizer, batches, evaluate: Callable, cfg: TrainConfig, rundir: RunDir,
                 device: torch.device, ddp: bool, times: tuple[float, float | None], diagnostics: Diagnostics | None,
                 clock: Clock, tokens_per_step: int):
        self.model, self.optimizer, self.batches, self.eval_fn, self.cfg = model, optimizer, batches, evaluate, cfg
        self.rundir, self.device, self.ddp = rundir, device, ddp
        (self.train_time, self.cpu_time), self.diagnostics = times, diagnostics
        self.tokens_per_step, self.total = tokens_per_step, cfg.max_steps
        self.autocast = (torch.autocast("cuda", dtype=torch.bfloat16) if device.type == "cuda"
                         else contextlib.nullcontext())
        self.clock, self.metrics = clock, dict[str, object]()  # metrics: of the last evaluation
        self.network = model  # what the steps run: compiled and/or wrapped for DDP
        if cfg.compile:
            self.network = torch.compile(self.network)
        if ddp:
            from torch.nn.parallel import DistributedDataParallel

            self.network = DistributedDataParallel(self.network,
                                                   device_ids=[device.index] if device.type == "cuda" else None)

    def backward(self, step: int) -> float:
        self.t0, self.c0 = time.perf_counter(), time.process_time()
        self.lr = lr_at(step, self.cfg)
        for group in self.optimizer.param_groups:
            group["lr"] = self.lr
        self.loss = 0.0
        for micro, (x, y) in enumerate(self.batches.next_step()):
            x, y = x.to(self.device, non_blocking=True), y.to(self.device, non_blocking=True)
            if self.ddp:
                self.network.require_backward_grad_sync = micro == self.cfg.grad_accum - 1
            with self.autocast:
                loss = self.network(x, y)[1] / self.cfg.grad_accum
            loss.backward()
            self.loss += loss.item()
        return self.loss

    def update(self, step: int) -> None:
        params = [p for p in self.network.parameters() if p.grad is not None]
        if self.cfg.grad_clip > 0:
            norm = torch.nn.utils.clip_grad_norm_(params, self.cfg.grad_clip)
        else:
            norm = torch.nn.utils.get_total_norm([p.grad for p in params])
        if self.diagnostics is not None:
            self.diagnostics.observe(self.loss, float(norm))
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        self.train_time += time.perf_counter() - self.t0
        if self.cpu_time is not None:
            self.cpu_time += time.process_time() - self.c0
        if self.rundir.writer and (step % self.cfg.log_interval == 0 or step == self.total):
            self.rundir.log({"kind": "train", "step": step, "tokens": step * self.tokens_per_step, "loss": self.loss,
                             "lr": self.lr, "train_time_s": self.train_time})

    def run_eval(self) -> dict:
        self.model.eval()
        with self.autocast:
            metrics = self.eval_fn(self.model, self.device)
        self.model.train()
        return metrics

    def estimate_loss(self, step: int) -> dict:
        self.metrics = self.run_eval()
        return {"kind": "eval", "step": step, "tokens": step * self.tokens_per_step, **self.metrics}

    def save(self, rundir: RunDir, step: int) -> None:
        extra = {"train_time_s": self.train_time, "cpu_time_s": self.cpu_time,
                 "diagnostics": None if self.diagnostics is None else self.diagnostics.state_dict()}
        rundir.save(step, self.model, self.optimizer, data=self.batches, device=self.device, clock=self.clock,
                    extra=extra)


def _restored_times(extra: dict, diagnostics: Diagnostics) -> tuple[tuple[float, float | None], Diagnostics | None]:
    """The step times (wall, CPU) and diagnostics kept in a checkpoint's ``extra``; CPU time and diagnostics
    None when the checkpoint predates them (not measured over the whole run)."""
    train_time = float(extra["train_time_s"])
    cpu_time = extra.get("cpu_time_s")
    state = extra.get("diagnostics")
    if state is not None:
        diagnostics.load_state_dict(state)
    return (train_time, None if cpu_time is None else float(cpu_time)), None if state is None else diagnostics


def _train(model_cfg: GPTConfig, cfg: TrainConfig, make_batches: Callable, evaluate: Callable, rundir: RunDir,
           rank: int, world: int, ddp: bool, device: torch.device, stop_after: int | None) -> RunRecord | None:
    master = rank == 0
    if device.type == "cpu":
        keep_freed_memory()

    torch.manual_seed(cfg.seed)
    model = GPT(model_cfg).to(device)
    optimizer = make_optimizer(model, cfg, device.type)
    batches = make_batches(cfg.seed, rank, world)
    step, clock = 0, Clock()
    times: tuple[float, float | None] = (0.0, 0.0)
    diagnostics: Diagnostics | None = Diagnostics(cfg.grad_clip)
    restored = rundir.restore(model, optimizer, data=batches, device=device)
    if restored is not None:
        step, clock = restored.step, restored.clock
        try:
            times, diagnostics = _restored_times(restored.extra, Diagnostics(cfg.grad_clip))
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise InputError(f"{rundir.checkpoint} is damaged ({type(exc).__name__}); delete it or use another --out") from None

    trainer = _Steps(model, optimizer, batches, evaluate, cfg, rundir, device, ddp, times, diagnostics, clock,
                     cfg.batch_size * cfg.grad_accum * world * model_cfg.block_size)
    stopped = loop.run(trainer, rundir, step, loop.Intervals(cfg.eval_interval, cfg.ckpt_interval, cfg.eval_at_start),
                       progress=cfg.progress, desc=rundir.path.name, stop_after=stop_after)
    if stopped is None:
        return None
    step = stopped
    metrics, train_time, tokens_per_step, raw_model = trainer.metrics, trainer.train_time, trainer.tokens_per_step, model
    record = None
    if master:
        if not metrics:  # resumed from the final checkpoint: evaluate it again
            metrics = trainer.run_eval()
        tokens = step * tokens_per_step
        record = RunRecord(
            trainer=rundir.config.get("task", "lm"), config=rundir.config, steps=step,
            parameters=sum(p.numel() for p in raw_model.parameters()), train_seconds=clock.totals(),
            final={k: v for k, v in metrics.items() if isinstance(v, (int, float))},
            details={"tokens": tokens, "train_time_s": train_time, "cpu_time_s": trainer.cpu_time,
                     "tokens_per_s": tokens / train_time if train_time else float("nan"),
                     "diagnostics": None if trainer.diagnostics is None else trainer.diagnostics.summary()})
        rundir.write_record(record)
    if ddp:
        import torch.distributed as dist

        dist.barrier()
    return record
