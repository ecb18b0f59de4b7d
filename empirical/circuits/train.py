"""One training run: data, model, per-circuit optimiser, a resumable loop, evaluation, result files.

Files in ``out_dir`` (:mod:`qkdyn.runs`): ``metrics.jsonl`` (one row per evaluation),
``checkpoint.pt`` (model, optimiser, scheduler, RNG states and the step; the data order is a function
of (seed, epoch), so the step is the data-order position), ``result.json`` (the run's
:class:`~qkdyn.runs.RunRecord`: configuration and full dev/test evaluation under ``final``).
A run that finds a checkpoint resumes from it and continues exactly as the uninterrupted run would:
every metrics line is the same, because the checkpoint also holds every RNG state (torch, NumPy's
and Python's global generators, all seeded from ``seed`` at the start) and the running training
loss of the steps since the last evaluation (a checkpoint need not fall on an evaluation step).

One step of the loop is one batch; the optimiser steps once per ``accum_steps`` batches (the losses
of those batches averaged), so the schedule counts optimiser steps. With ``target_loss`` > 0 the run
stops at the first evaluation whose running training loss is at most ``target_loss`` (training to a
stated criterion: matched training loss); the record's ``steps`` is the step it stopped at and its
``details`` say whether the target was reached.

Device: ``device`` (cpu, cuda, cuda:N or auto = CUDA when there is one), with bfloat16 autocast on
CUDA as in the LM trainer (:mod:`qkdyn.empirical.coupled.train`); losses are taken in float32.
Evaluation runs on the same device in float32 (:mod:`qkdyn.empirical.circuits.evaluate`).

A run that diverges (a non-finite loss, or non-finite parameters when an evaluation or a checkpoint is due) stops
with an :class:`~qkdyn.errors.InputError` naming the step; the last checkpoint written, all finite,
is kept. Locking, checkpoint format and metrics trimming: :mod:`qkdyn.runs`.
"""
from __future__ import annotations

import contextlib
import dataclasses
import math
import random
from pathlib import Path

import numpy as np
import torch

from qkdyn.empirical.circuits import evaluate
from qkdyn.empirical.circuits.encode import classification_batch, qa_batch
from qkdyn.empirical.circuits.models import Decoder, ModelConfig, answer_positions, classification_loss, lm_loss
from qkdyn.empirical.circuits.optim import build_optimizer
from qkdyn.empirical.circuits.presets import RunConfig
from qkdyn.empirical.circuits.tasks import is_qa, load_splits
from qkdyn.empirical.circuits.vocab import Vocab
from qkdyn.errors import InputError
from qkdyn.runs import Clock, RunDir, RunRecord


def resolve_device(name: str) -> torch.device:
    """``auto``: CUDA when available, else the CPU; otherwise the named device."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def epoch_order(n: int, seed: int, epoch: int) -> torch.Tensor:
    """The shuffled example order of one epoch (depends on seed and epoch only)."""
    return torch.randperm(n, generator=torch.Generator().manual_seed(seed * 1_000_003 + epoch))


class Run:
    """Everything a run needs, built deterministically from the configuration."""

    def __init__(self, cfg: RunConfig):
        self.cfg = cfg
        self.device = resolve_device(cfg.device)
        self.autocast = (torch.autocast("cuda", dtype=torch.bfloat16) if self.device.type == "cuda"
                         else contextlib.nullcontext())
        self.clock = Clock()
        self.reached = False  # the training loss has come down to cfg.target_loss (when that is > 0)
        self.qa = is_qa(cfg.task)
        splits = load_splits(cfg)
        self.classes = splits.classes
        if self.qa:
            token_lists = [e.question + e.context for e in splits.train]
        else:
            token_lists = [e.tokens for e in splits.train]
        self.vocab = Vocab.build(token_lists, cfg.vocab_size, cfg.min_count)
        if self.qa:
            train, self.train_seqs = evaluate.qa_sequences(splits.train, self.vocab, cfg)
        else:
            train = splits.train
        self.train, self.dev, self.test = train, splits.dev or splits.test, splits.test
        torch.manual_seed(cfg.seed)
        np.random.seed(cfg.seed)  # unused by training today; seeded so the checkpointed states are reproducible
        random.seed(cfg.seed)
        self.model = Decoder(ModelConfig(
            vocab_size=len(self.vocab), n_out=max(1, len(self.classes)), max_len=cfg.max_len,
            d_model=cfg.d_model, n_head=cfg.n_head, n_layer=cfg.n_layer, d_mlp=cfg.d_mlp,
            layernorm=cfg.layernorm, head="lm" if self.qa else "classify", readout=cfg.readout,
            head_dim=cfg.head_dim, residual=cfg.residual, dropout=cfg.dropout, tie_embeddings=cfg.tie_embeddings,
            init=cfg.init)).to(self.device)
        self.steps_per_epoch = math.ceil(len(self.train) / cfg.batch_size)
        self.total = cfg.max_steps if cfg.max_steps > 0 else max(1, round(cfg.epochs * self.steps_per_epoch))
        updates = math.ceil(self.total / cfg.accum_steps)
        self.opt, self.sched = build_optimizer(
            self.model, optimizer=cfg.optimizer, lr=cfg.lr, weight_decay=cfg.weight_decay,
            momentum=cfg.momentum, qk_lr_mult=cfg.qk_lr_mult, qk_ramp_steps=cfg.qk_ramp_steps,
            qk_embedding=cfg.qk_embedding, warmup=round(cfg.warmup_frac * cfg.schedule_span * updates),
            total=updates, qk_params=cfg.qk_params, emb_lr_mult=cfg.emb_lr_mult, frozen=cfg.frozen,
            schedule=cfg.schedule, span=cfg.schedule_span)

    def batch(self, step: int) -> dict:
        """The training batch of global step ``step``."""
        epoch, i = divmod(step, self.steps_per_epoch)
        idx = epoch_order(len(self.train), self.cfg.seed, epoch)[i * self.cfg.batch_size:(i + 1) * self.cfg.batch_size]
        if self.qa:
            return qa_batch([self.train_seqs[j] for j in idx.tolist()])
        return classification_batch([self.train[j] for j in idx.tolist()], self.vocab)

    def loss(self, batch: dict) -> torch.Tensor:
        batch = {k: v.to(self.device) for k, v in batch.items()}
        at = answer_positions(batch["targets"]) if self.qa else None  # QA: the head only where a loss is taken
        with self.autocast:
            logits, _ = self.model(batch["ids"], batch["lengths"], at)
        smooth = self.cfg.label_smoothing
        return (lm_loss(logits, batch["targets"], smooth, at) if self.qa
                else classification_loss(logits, batch["labels"], smooth))

    def evaluate(self, examples: list, full: bool) -> dict:
        fn = evaluate.evaluate_qa if self.qa else evaluate.evaluate_classifier
        return fn(self.model, examples, self.vocab, self.cfg, full)

    def save(self, rundir: RunDir, step: int, running: tuple[float, int]) -> None:
        """The checkpoint of ``step``: the common layout (:meth:`qkdyn.runs.RunDir.save`) with the
        target flag and the running training loss of the steps since the last evaluation."""
        rundir.save(step, self.model, self.opt, self.sched, device=self.device, clock=self.clock,
                    extra={"reached": self.reached, "running_loss": {"sum": float(running[0]), "n": int(running[1])}})

    def restore(self, rundir: RunDir) -> tuple[int | None, tuple[float, int]]:
        """Resume from ``rundir``'s checkpoint if there is one: (its step or None, (running loss sum, steps in it))."""
        restored = rundir.restore(self.model, self.opt, self.sched, device=self.device)
        if restored is None:
            return None, (0.0, 0)
        try:
            self.reached = bool(restored.extra["reached"])
            running = restored.extra["running_loss"]
            running = float(running["sum"]), int(running["n"])
        except (KeyError, TypeError, ValueError) as exc:
            raise InputError(f"{rundir.checkpoint} is damaged ({type(exc).__name__}); delete it or use another --out")
        self.clock = restored.clock
        return restored.step, running

    def finite(self) -> bool:
        """Whether every parameter is finite."""
        return all(bool(torch.isfinite(p).all()) for p in self.model.parameters())


def last_train_loss(rundir: RunDir) -> float:
    """The training loss of the last evaluation row (NaN when none was logged)."""
    rows = rundir.rows()
    return float(rows[-1]["train_loss"]) if rows else math.nan


def _diverged(step: int, what: str, saved: int | None) -> InputError:
    kept = f"the checkpoint of step {saved} is kept" if saved is not None else "no checkpoint was written"
    return InputError(f"training diverged at step {step}: {what} ({kept}); try a smaller --lr or --qk-lr-mult")


def train(cfg: RunConfig, out_dir: str | Path, *, stop_after: int | None = None,
          progress: bool = True) -> RunRecord | None:
    """Train (resuming if ``out_dir`` has a checkpoint) and return the run's record; with
    ``stop_after`` return None once that many steps are done (as if killed) without evaluating."""
    rundir = RunDir(out_dir, dataclasses.asdict(cfg))
    run = Run(cfg)
    with rundir:
        return _train(cfg, run, rundir, stop_after, progress)


def _train(cfg: RunConfig, run: Run, rundir: RunDir, stop_after: int | None, progress: bool) -> RunRecord | None:
    from tqdm import tqdm

    saved, (running_loss, n_loss) = run.restore(rundir)
    step = saved or 0
    bar = tqdm(total=run.total, initial=step, disable=not progress, desc=f"{cfg.task} qk x{cfg.qk_lr_mult:g} s{cfg.seed}")
    while step < run.total and not run.reached:
        if stop_after is not None and step >= stop_after:
            bar.close()
            return None
        run.model.train()
        loss = run.loss(run.batch(step))
        value = loss.item()
        if not math.isfinite(value):
            bar.close()
            raise _diverged(step + 1, f"the training loss is {value}", saved)
        (loss / cfg.accum_steps).backward()
        step += 1
        if step % cfg.accum_steps == 0 or step == run.total:
            if cfg.grad_clip > 0:
                torch.nn.utils.clip_grad_norm_(run.model.parameters(), cfg.grad_clip)
            run.opt.step()
            run.sched.step()
            run.opt.zero_grad(set_to_none=True)
        running_loss, n_loss = running_loss + value, n_loss + 1
        bar.update(1)
        due = step % cfg.eval_every == 0 or step % cfg.ckpt_every == 0 or step == run.total
        if due and not run.finite():  # before anything is logged or saved
            bar.close()
            raise _diverged(step, "parameters are not finite", saved)
        if step % cfg.eval_every == 0 or step == run.total:
            row = {"step": step, "epoch": step / run.steps_per_epoch, "train_loss": running_loss / n_loss,
                   "lr_qk": run.sched.get_last_lr()[0], "lr_rest": run.sched.get_last_lr()[1]}
            dev = run.evaluate(run.dev[: cfg.eval_examples], full=False)
            row.update({f"dev_{k}": v for k, v in dev.items() if isinstance(v, float)})
            rundir.log(row)
            bar.set_postfix(loss=f"{row['train_loss']:.3f}", mass=f"{dev['attention_mass']:.3f}")
            running_loss, n_loss = 0.0, 0
            run.reached = cfg.target_loss > 0 and row["train_loss"] <= cfg.target_loss
        if step % cfg.ckpt_every == 0 or step == run.total or run.reached:
            run.save(rundir, step, (running_loss, n_loss))
            saved = step
    bar.close()
    cap = cfg.final_examples or None
    trained = run.clock.totals()
    evaluating = Clock()
    dev, test = run.evaluate(run.dev[:cap], full=True), run.evaluate(run.test[:cap], full=True)
    record = RunRecord(
        trainer="circuits", config=rundir.config, steps=step,
        parameters=sum(p.numel() for p in run.model.parameters()), train_seconds=trained,
        final={"dev": dev, "test": test},
        details={"classes": list(run.classes), "vocab_size": len(run.vocab), "planned_steps": run.total,
                 "target_reached": run.reached, "final_train_loss": last_train_loss(rundir), "n_train": len(run.train),
                 "final_eval_seconds": evaluating.totals()})
    rundir.write_record(record)
    return record
