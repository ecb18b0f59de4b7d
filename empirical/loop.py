"""The one training loop of the checkpointed trainers (``train-circuits``, ``lm``, ``mqar``).

nanoGPT's flat loop is the model: one ``while`` over the step ``s`` (the updates done so far), and
in each pass, in this order,

1. the evaluation, when due: at every ``eval_every``-th step and at ``total`` (and at step 0 with
   ``eval_at_start``); the trainer's row goes to ``metrics.jsonl``;
2. the checkpoint, when due: at every ``ckpt_every``-th step, at ``total`` and when the trainer is
   ``done`` (its own stopping criterion, e.g. a target training loss met at this evaluation);
   before either, every parameter must be finite;
3. stop at ``total`` or when the trainer is done;
4. the trainer's step: forward and backward of step ``s``'s batch (``backward``, which returns the
   loss; the learning rate of step ``s`` is the trainer's, e.g. nanoGPT's ``get_lr``), a non-finite loss stops
   the run *before* the update, so the parameters and the last checkpoint stay finite; then the
   update (``update``: clip, optimiser step, schedule) and ``s <- s + 1``.

A resumed run starts at its checkpoint's step, whose evaluation and checkpoint were written before
the kill, so they are not repeated there; it says so first, on stderr ("resuming from step N of T").
Only the writer of the run directory (rank 0 of a data-parallel run) evaluates, logs, checkpoints and
shows progress. A divergence is one :class:`~qkdyn.errors.InputError` naming the step, the checkpoint
kept and the trainer's ``hint``.

What the trainers supply is only what differs between them: the model, the batches and the loss
(``backward``), the update rule (``update``), the evaluation row (``estimate_loss``, nanoGPT's name), the checkpoint's
extra state (``save``) and the stopping criterion (``done``). The synthetic trainer
(:func:`qkdyn.empirical.synthetic.train.train`) genuinely differs and keeps its own loop: it
observes the model at log-spaced steps *before* the update, stops on the loss of the very batch it
is about to step on (``stop_below``), and runs in memory without a run directory (a run takes
seconds; its study record is the unit of resumption).
"""
from __future__ import annotations

import dataclasses
import math
import sys
from typing import Protocol

import torch

from qkdyn.errors import InputError
from qkdyn.runs import RunDir


class Trainer(Protocol):
    """What the loop asks of a trainer (see the module docstring)."""

    model: torch.nn.Module
    #: the step the run ends at; the trainer's own stopping criterion has been met
    total: int
    done: bool
    #: what to try after a divergence, e.g. "try a smaller --lr"
    hint: str
    #: the keys of an evaluation row the progress bar shows
    shown: tuple[str, ...]

    def backward(self, step: int) -> float: ...

    def update(self, step: int) -> None: ...

    def estimate_loss(self, step: int) -> dict: ...

    def save(self, rundir: RunDir, step: int) -> None: ...


@dataclasses.dataclass(frozen=True)
class Intervals:
    """When the loop evaluates and checkpoints (steps; see the module docstring)."""

    eval_every: int
    ckpt_every: int
    eval_at_start: bool = False


def finite(model: torch.nn.Module) -> bool:
    """Whether every parameter of ``model`` is finite."""
    return all(bool(torch.isfinite(p).all()) for p in model.parameters())


def run(trainer: Trainer, rundir: RunDir, start: int, intervals: Intervals, *, progress: bool = False,
        desc: str = "", stop_after: int | None = None) -> int | None:
    """Train from step ``start`` to the end; the step it stopped at. With ``stop_after``, None
    once that many steps are done (as if killed there: a test's kill)."""
    from tqdm import tqdm

    writer, total = rundir.writer, trainer.total
    saved = start if start > 0 else None
    if writer and start > 0:
        sys.stderr.write(f"{desc + ': ' if desc else ''}resuming from step {start} of {total} (the checkpoint in "
                         f"{rundir.path})\n")
    bar = tqdm(total=total, initial=start, disable=not (progress and writer), desc=desc, unit="step",
               dynamic_ncols=True)

    def diverged(step: int, what: str) -> InputError:
        bar.close()
        kept = f"the checkpoint of step {saved} is kept" if saved is not None else "no checkpoint was written"
        return InputError(f"training diverged at step {step}: {what} ({kept}); {trainer.hint}")

    step = start
    while True:
        evaluate = writer and ((step > start and (step % intervals.eval_every == 0 or step == total))
                               or (step == 0 and intervals.eval_at_start))
        checkpoint = writer and step > start and (step % intervals.ckpt_every == 0 or step == total)
        if (evaluate or checkpoint) and not finite(trainer.model):  # before anything is logged or saved
            raise diverged(step, "parameters are not finite")
        if evaluate:
            row = trainer.estimate_loss(step)
            rundir.log(row)
            bar.set_postfix({k: f"{v:.4g}" for k, v in row.items() if k in trainer.shown}, refresh=False)
        if checkpoint or (writer and step > start and trainer.done):  # done: met at this evaluation
            trainer.save(rundir, step)
            saved = step
        if step >= total or trainer.done:
            break
        if stop_after is not None and step >= stop_after:
            bar.close()
            return None
        loss = trainer.backward(step)
        if not math.isfinite(loss):
            raise diverged(step + 1, f"the training loss is {loss}")
        step += 1
        trainer.update(step)
        bar.update(1)
    bar.close()
    return step
