"""One training run: data, model, per-circuit optimiser, a resumable loop, evaluation, result files.

Files in ``out_dir`` (:mod:`qkdyn.runs`): ``metrics.jsonl`` (one row per evaluation, with every layer's
and head's attention entropy and roles on the dev examples it scores, :mod:`qkdyn.empirical.circuits.heads`),
``checkpoint.pt`` (model, optimiser, scheduler, RNG states and the step; the data order is a function
of (seed, epoch), so the step is the data-order position), ``result.json`` (the run's
:class:`~qkdyn.runs.RunRecord`: configuration and full dev/test evaluation under ``final``, the per-head
measures under ``heads`` and, for question answering, the attention mass averaged over the greedy
answer's decoding steps under ``generation``, :mod:`qkdyn.empirical.circuits.generation`).
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
is kept. The loop is the shared one (:mod:`qkdyn.empirical.loop`; this module supplies the batches, the
loss, the update, the evaluation row and the target-loss criterion); locking, checkpoint format and
metrics trimming: :mod:`qkdyn.runs`.
"""
from __future__ import annotations

import contextlib
import dataclasses
import math
import random
from pathlib import Path

import numpy as np
import torch
from qkdyn.empirical import loop
from qkdyn.empirical.circuits import evaluate, generation, heads
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
        self.running = (0.0, 0)  # training loss summed over the steps since the last evaluation, and their count
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
        """The task's evaluation (:mod:`qkdyn.empirical.circuits.evaluate`); with ``full`` (the final one)
        also the per-head measures (``heads``) and, for question answering, the attention mass averaged
        over the greedy answer's decoding steps (``generation``)."""
        fn = evaluate.evaluate_qa if self.qa else evaluate.evaluate_classifier
        out = fn(self.model, examples, self.vocab, self.cfg, full)
        if full:
            out["heads"] = self.head_measures(examples)
            if self.qa:
                _, seqs = evaluate.qa_sequences(examples, self.vocab, self.cfg)
                out["generation"] = generation.evaluate_generation(self.model, seqs, self.vocab.stoi["<eos>"],
                                                                   self.cfg.max_answer_len)
        return out

    @torch.no_grad()
    def head_measures(self, examples: list) -> dict:
        """:func:`qkdyn.empirical.circuits.heads.summarise` over ``examples``: every layer's and head's
        attention on each example's ids, read at its read-out position against its rationales (question
        answering: the prompt, read at ``<a>``, against the answer span)."""
        if self.qa:
            _, seqs = evaluate.qa_sequences(examples, self.vocab, self.cfg)
            ids = [s.prompt for s in seqs]
            reads = [len(s.prompt) - 1 for s in seqs]
            rationales = [(s.span_positions,) for s in seqs]
        else:
            ids = [self.vocab.encode(e.tokens) for e in examples]
            reads = self.model.readout_index(torch.tensor([len(s) for s in ids])).tolist()
            rationales = [e.rationales for e in examples]
        maps = evaluate.attention_maps(self.model, ids)
        return heads.summarise(list(zip(maps, ids, reads, rationales, strict=True)))

    # the hooks of the shared loop (qkdyn.empirical.loop) ---------------------------------------
    hint = "try a smaller --lr or --qk-lr-mult"
    shown = ("train_loss", "dev_attention_mass")

    @property
    def done(self) -> bool:
        return self.reached

    def backward(self, step: int) -> float:
        """Forward and backward of step ``step``'s batch (the loss over ``accum_steps``); its loss."""
        self.model.train()
        loss = self.loss(self.batch(step))
        value = loss.item()
        if math.isfinite(value):
            (loss / self.cfg.accum_steps).backward()
            self.running = (self.running[0] + value, self.running[1] + 1)
        return value

    def update(self, step: int) -> None:
        """The optimiser and schedule step once per ``accum_steps`` batches (and at the last)."""
        if step % self.cfg.accum_steps == 0 or step == self.total:
            if self.cfg.grad_clip > 0:
                torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.cfg.grad_clip)
            self.opt.step()
            self.sched.step()
            self.opt.zero_grad(set_to_none=True)

    def estimate_loss(self, step: int) -> dict:
        """The evaluation row: running training loss since the last one, learning rates, dev metrics
        on ``eval_examples`` and their per-head measures (``dev_heads``: :meth:`head_measures`); the target
        loss is met when the running loss is at most ``target_loss``."""
        lr_qk, lr_rest = self.sched.get_last_lr()[:2]
        row = {"step": step, "epoch": step / self.steps_per_epoch, "train_loss": self.running[0] / self.running[1],
               "lr_qk": lr_qk, "lr_rest": lr_rest}
        dev = self.evaluate(self.dev[: self.cfg.eval_examples], full=False)
        row.update({f"dev_{k}": v for k, v in dev.items() if isinstance(v, float)})
        row["dev_heads"] = self.head_measures(self.dev[: self.cfg.eval_examples])
        self.running = (0.0, 0)
        self.reached = self.cfg.target_loss > 0 and row["train_loss"] <= self.cfg.target_loss
        return row

    def save(self, rundir: RunDir, step: int) -> None:
        """The checkpoint of ``step``: the common layout (:meth:`qkdyn.runs.RunDir.save`) with the
        target flag and the running training loss of the steps since the last evaluation."""
        rundir.save(step, self.model, self.opt, self.sched, device=self.device, clock=self.clock,
                    extra={"reached": self.reached,
                           "running_loss": {"sum": float(self.running[0]), "n": int(self.running[1])}})

    def restore(self, rundir: RunDir) -> int:
        """Resume from ``rundir``'s checkpoint if there is one; the step to start at (0: fresh)."""
        restored = rundir.restore(self.model, self.opt, self.sched, device=self.device)
        if restored is None:
            return 0
        try:
            self.reached = bool(restored.extra["reached"])
            running = restored.extra["running_loss"]
            self.running = float(running["sum"]), int(running["n"])
        except (KeyError, TypeError, ValueError) as exc:
            raise InputError(f"{rundir.checkpoint} is damaged ({type(exc).__name__}); delete it or use another --out") from None
        self.clock = restored.clock
        return restored.step


def last_train_loss(rundir: RunDir) -> float:
    """The training loss of the last evaluation row (NaN when none was logged)."""
    rows = rundir.rows()
    return float(rows[-1]["train_loss"]) if rows else math.nan


def train(cfg: RunConfig, out_dir: str | Path, *, stop_after: int | None = None,
          progress: bool = True) -> RunRecord | None:
    """Train (resuming if ``out_dir`` has a checkpoint) and return the run's record; with
    ``stop_after`` return None once that many steps are done (as if killed) without evaluating."""
    rundir = RunDir(out_dir, dataclasses.asdict(cfg))
    run = Run(cfg)
    with rundir:
        return _train(cfg, run, rundir, stop_after, progress)


def _train(cfg: RunConfig, run: Run, rundir: RunDir, stop_after: int | None, progress: bool) -> RunRecord | None:
    start = run.restore(rundir)
    step = loop.run(run, rundir, start, loop.Intervals(cfg.eval_every, cfg.ckpt_every), progress=progress,
                    desc=f"{cfg.task} qk x{cfg.qk_lr_mult:g} s{cfg.seed}", stop_after=stop_after)
    if step is None:
        return None
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
