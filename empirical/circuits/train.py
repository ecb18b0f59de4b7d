"""One training run: data, model, per-circuit optimiser, a resumable loop, evaluation, result files.

Files in ``out_dir``: ``metrics.jsonl`` (one row per evaluation), ``checkpoint.pt`` (model,
optimiser, scheduler, RNG states and the step; the data order is a function of (seed, epoch), so the
step is the data-order position), ``final.json`` (configuration and full dev/test evaluation).
A run that finds a checkpoint resumes from it and continues exactly as the uninterrupted run would.
"""
from __future__ import annotations

import dataclasses
import json
import math
import random
import time
from pathlib import Path

import numpy as np
import torch

from qkdyn.empirical.circuits import evaluate
from qkdyn.empirical.circuits.encode import classification_batch, qa_batch
from qkdyn.empirical.circuits.models import Decoder, ModelConfig, classification_loss, lm_loss
from qkdyn.empirical.circuits.optim import build_optimizer
from qkdyn.empirical.circuits.presets import RunConfig
from qkdyn.empirical.circuits.tasks import is_qa, load_splits
from qkdyn.empirical.circuits.vocab import Vocab
from qkdyn import atomic
from qkdyn.errors import InputError


def epoch_order(n: int, seed: int, epoch: int) -> torch.Tensor:
    """The shuffled example order of one epoch (depends on seed and epoch only)."""
    return torch.randperm(n, generator=torch.Generator().manual_seed(seed * 1_000_003 + epoch))


class Clock:
    """Training time (wall and CPU seconds) summed over the sessions of a run."""

    def __init__(self, wall: float = 0.0, cpu: float = 0.0):
        self.base_wall, self.base_cpu = wall, cpu
        self.start_wall, self.start_cpu = time.time(), time.process_time()

    def totals(self) -> dict:
        return {"wall": self.base_wall + time.time() - self.start_wall,
                "cpu": self.base_cpu + time.process_time() - self.start_cpu}


class Run:
    """Everything a run needs, built deterministically from the configuration."""

    def __init__(self, cfg: RunConfig):
        self.cfg = cfg
        self.clock = Clock()
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
        self.model = Decoder(ModelConfig(
            vocab_size=len(self.vocab), n_out=max(1, len(self.classes)), max_len=cfg.max_len,
            d_model=cfg.d_model, n_head=cfg.n_head, n_layer=cfg.n_layer, d_mlp=cfg.d_mlp,
            layernorm=cfg.layernorm, head="lm" if self.qa else "classify", readout=cfg.readout,
            head_dim=cfg.head_dim, residual=cfg.residual))
        self.steps_per_epoch = math.ceil(len(self.train) / cfg.batch_size)
        self.total = cfg.max_steps if cfg.max_steps > 0 else max(1, round(cfg.epochs * self.steps_per_epoch))
        self.opt, self.sched = build_optimizer(
            self.model, optimizer=cfg.optimizer, lr=cfg.lr, weight_decay=cfg.weight_decay,
            momentum=cfg.momentum, qk_lr_mult=cfg.qk_lr_mult, qk_ramp_steps=cfg.qk_ramp_steps,
            qk_embedding=cfg.qk_embedding, warmup=round(cfg.warmup_frac * self.total), total=self.total,
            qk_params=cfg.qk_params, emb_lr_mult=cfg.emb_lr_mult)

    def batch(self, step: int) -> dict:
        """The training batch of global step ``step``."""
        epoch, i = divmod(step, self.steps_per_epoch)
        idx = epoch_order(len(self.train), self.cfg.seed, epoch)[i * self.cfg.batch_size:(i + 1) * self.cfg.batch_size]
        if self.qa:
            return qa_batch([self.train_seqs[j] for j in idx.tolist()])
        return classification_batch([self.train[j] for j in idx.tolist()], self.vocab)

    def loss(self, batch: dict) -> torch.Tensor:
        logits, _ = self.model(batch["ids"], batch["lengths"])
        return lm_loss(logits, batch["targets"]) if self.qa else classification_loss(logits, batch["labels"])

    def evaluate(self, examples: list, full: bool) -> dict:
        fn = evaluate.evaluate_qa if self.qa else evaluate.evaluate_classifier
        return fn(self.model, examples, self.vocab, self.cfg, full)

    def state(self, step: int) -> dict:
        return {"step": step, "model": self.model.state_dict(), "opt": self.opt.state_dict(),
                "sched": self.sched.state_dict(), "torch_rng": torch.get_rng_state(),
                "numpy_rng": np.random.get_state(), "python_rng": random.getstate(),
                "vocab": self.vocab.itos, "config": dataclasses.asdict(self.cfg), "train_time": self.clock.totals()}

    def restore(self, state: dict) -> int:
        self.model.load_state_dict(state["model"])
        self.opt.load_state_dict(state["opt"])
        self.sched.load_state_dict(state["sched"])
        torch.set_rng_state(state["torch_rng"])
        np.random.set_state(state["numpy_rng"])
        random.setstate(state["python_rng"])
        self.clock = Clock(state["train_time"]["wall"], state["train_time"]["cpu"])
        return int(state["step"])


def _resume(run: Run, out_dir: Path) -> int:
    """Restore the checkpoint if there is one; drop metric rows written after it. Returns the step."""
    ckpt, log = out_dir / "checkpoint.pt", out_dir / "metrics.jsonl"
    if not ckpt.exists():
        if log.exists():
            log.unlink()
        return 0
    state = torch.load(ckpt, weights_only=False)
    if state["config"] != dataclasses.asdict(run.cfg):
        raise InputError(f"{out_dir} holds a checkpoint of a different configuration; use another --out")
    step = run.restore(state)
    if log.exists():
        rows = [line for line in log.read_text().splitlines() if line and json.loads(line)["step"] <= step]
        atomic.write_text(log, "".join(r + "\n" for r in rows))
    return step


def train(cfg: RunConfig, out_dir: str | Path, *, stop_after: int | None = None, progress: bool = True) -> dict | None:
    """Train (resuming if ``out_dir`` has a checkpoint) and return the final results; with
    ``stop_after`` return None once that many steps are done (as if killed) without evaluating."""
    from tqdm import tqdm

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    run = Run(cfg)
    step = _resume(run, out_dir)
    running_loss, n_loss = 0.0, 0
    bar = tqdm(total=run.total, initial=step, disable=not progress, desc=f"{cfg.task} qk x{cfg.qk_lr_mult:g} s{cfg.seed}")
    while step < run.total:
        if stop_after is not None and step >= stop_after:
            bar.close()
            return None
        run.model.train()
        loss = run.loss(run.batch(step))
        run.opt.zero_grad(set_to_none=True)
        loss.backward()
        if cfg.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(run.model.parameters(), cfg.grad_clip)
        run.opt.step()
        run.sched.step()
        step += 1
        running_loss, n_loss = running_loss + loss.item(), n_loss + 1
        bar.update(1)
        if step % cfg.eval_every == 0 or step == run.total:
            row = {"step": step, "epoch": step / run.steps_per_epoch, "train_loss": running_loss / n_loss,
                   "lr_qk": run.sched.get_last_lr()[0], "lr_rest": run.sched.get_last_lr()[1]}
            dev = run.evaluate(run.dev[: cfg.eval_examples], full=False)
            row.update({f"dev_{k}": v for k, v in dev.items() if isinstance(v, float)})
            with open(out_dir / "metrics.jsonl", "a") as fh:
                fh.write(json.dumps(row) + "\n")
            bar.set_postfix(loss=f"{row['train_loss']:.3f}", mass=f"{dev['attention_mass']:.3f}")
            running_loss, n_loss = 0.0, 0
        if step % cfg.ckpt_every == 0 or step == run.total:
            with atomic.atomic_path(out_dir / "checkpoint.pt") as tmp:
                torch.save(run.state(step), tmp)
    bar.close()
    cap = cfg.final_examples or None
    trained = run.clock.totals()
    evaluating = Clock()
    dev, test = run.evaluate(run.dev[:cap], full=True), run.evaluate(run.test[:cap], full=True)
    result = {
        "config": dataclasses.asdict(cfg), "classes": list(run.classes), "vocab_size": len(run.vocab),
        "n_parameters": sum(p.numel() for p in run.model.parameters()), "steps": run.total,
        "n_train": len(run.train), "train_seconds": trained, "final_eval_seconds": evaluating.totals(),
        "dev": dev, "test": test,
    }
    atomic.write_text(out_dir / "final.json", json.dumps(result, indent=1))
    return result
