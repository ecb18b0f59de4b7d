"""Many sampled runs (forms x schedules x seeds) trained as one tensor program (:mod:`.sampled`'s recipe).

Run r's head is held as its :class:`~.sampled.Factors`, stacked along a leading run dimension:
A (R, V, r), B (R, r, V), O (R, C, r2), V_v (R, r2, V), that is the factorized head (W_Q, W_K, W_O, W_V) =
(A, B^T, O, V_v) of :mod:`.model` (:func:`matrices`). One step evaluates, for every run on its own batch
(counts c, query q, target y: the batch of its stream at this step), the model's one loss and its gradient
(:func:`.model.head_gradients` on the stack: the score rows formed once per query id, each sample's row selected by
a one-hot product, the gradient written out rather than taped)

    A_x    = s (A[q] B)[x]                       scores
    attn   = softmax_x(A_x + log c_x)            attention mass per id
    logits = attn (O V_v)^T
    L_r    = mean over the batch of CE(logits, y)

and the SGD step theta_r <- theta_r - lr_r(step) grad_{theta_r} sum_r' L_r' (A's rows other than the query ids'
have no gradient: only those move). No parameter is shared
between runs, so the gradient of the sum with respect to run r's parameters is that of L_r alone: every
run follows its own trajectory, and its numbers equal those of the run trained alone to round-off (a
test, against the plain module-and-optimiser loop). A collapsed circuit's identity factor has learning
rate 0 (the products with I are exact). The bookkeeping of :mod:`.sampled` (running loss over the last
``window`` batch losses, matched-loss levels, stopping) is vectorised over the runs; a run that stops or
reaches its horizon is measured and leaves the stack.
"""
from __future__ import annotations

import math
from collections.abc import Iterable

import numpy as np
import torch
from qkdyn.empirical.synthetic.model import head, head_gradients, log_counts
from qkdyn.empirical.synthetic.sampled import CHUNK, Batch, Result, Task, chunks, metrics, test_set
from qkdyn.empirical.synthetic.threads import one_thread


def matrices(factors) -> dict[str, torch.Tensor]:
    """Stacked factors (A, B, O, V_v) as the factorized head's matrices of :mod:`.model` (B is W_K^T)."""
    A, B, O, V = factors
    return {"W_Q": A, "W_K": B.mT, "W_O": O, "W_V": V}


#: the rows of the stacked output factor O that reach the loss: every one (it holds only the C logit rows)
ALL = None


#: float32's unit round-off: the relative size of the seeded perturbation of every gradient (:func:`roundoff`)
UNIT_ROUNDOFF = 2.0**-24


def roundoff(seed: int | None):
    """None, or ``g -> g (1 + u xi)`` with xi standard normal from a generator seeded ``seed`` and u
    :data:`UNIT_ROUNDOFF`: each gradient as if its sums were rounded in another order. Rerun under it, a
    number moves as it does when torch's kernels sum in another order (AVX2, AVX-512, scalar): the size
    of that movement is the number's round-off sensitivity (tests/qkdyn/test_verify.py)."""
    if seed is None:
        return None
    generator = torch.Generator().manual_seed(seed)
    return lambda g: g * (1 + UNIT_ROUNDOFF * torch.randn(g.shape, generator=generator, dtype=g.dtype))


def grid(task: Task, params: Iterable[str], seeds: Iterable[int], test_size: int, perturb: int | None = None) -> dict:
    """(param, schedule, seed) -> Result for every form x schedule of the task x seed, in one program
    (``perturb``: :func:`roundoff`'s seed)."""
    return run(task, [(p, s, seed) for p in params for s in task.qk_factor for seed in seeds], test_size, perturb)


def train(task: Task, param: str, schedule: str, seed: int, test_size: int) -> Result:
    """One run alone (the same program with one row)."""
    return run(task, [(param, schedule, seed)], test_size)[(param, schedule, seed)]


def _stack(batches: list[Batch]) -> Batch:
    return Batch(*(torch.stack(fields) for fields in zip(*batches, strict=True)))


def run(task: Task, arms: list[tuple[str, str, int]], test_size: int, perturb: int | None = None) -> dict:
    """(param, schedule, seed) -> Result for every arm in ``arms``, trained together (module docstring;
    ``perturb``: :func:`roundoff`'s seed)."""
    with one_thread():
        return _run(task, arms, test_size, roundoff(perturb))


def _run(task: Task, arms: list[tuple[str, str, int]], test_size: int, perturbed) -> dict:
    stream_of, streams, tests = {}, [], []
    for param, _, seed in arms:
        key = (task.stream_key(param), seed)
        if key not in stream_of:
            stream_of[key] = len(streams)
            streams.append(chunks(task, param, seed))
            tests.append(test_set(task, param, seed, test_size))
    test = _stack(tests)
    test_log = log_counts(test.counts)
    queries = torch.as_tensor(task.queries)
    slot_of = torch.zeros(int(queries.max()) + 1, dtype=torch.long)
    slot_of[queries] = torch.arange(len(queries))
    arm_stream = torch.as_tensor([stream_of[(task.stream_key(p), seed)] for p, _, seed in arms])

    heads = [task.factors(task.new_model(p, seed, s)) for p, s, seed in arms]
    params = [torch.stack([h[i].detach() for h in heads]) for i in range(4)]
    dtype = params[0].dtype
    horizons = torch.as_tensor([task.horizon(p, s) for p, s, _ in arms])
    steps_max = int(horizons.max())
    qk_lr = torch.zeros(len(arms), steps_max, dtype=dtype)
    for i, (p, s, _) in enumerate(arms):
        frac = np.arange(int(horizons[i])) / int(horizons[i])
        qk_lr[i, : len(frac)] = torch.as_tensor(task.base_lr * np.broadcast_to(task.qk_factor[s](p, frac), frac.shape))
    train_A = torch.as_tensor([h.train_A for h in heads], dtype=dtype)  # a collapsed circuit's I is frozen
    train_V = torch.as_tensor([h.train_V for h in heads], dtype=dtype)
    ramp = torch.as_tensor([s == "ramp" for _, s, _ in arms])
    levels = torch.as_tensor(task.levels, dtype=torch.float64)

    alive = torch.arange(len(arms))  # arm index of each stacked row
    # the last window batch losses and the levels reached, one row per live arm (rows as in ``alive``)
    recent = torch.zeros(len(arms), task.window, dtype=torch.float64)
    reached = torch.zeros(len(arms), len(levels), dtype=torch.bool)
    at_level: list[dict] = [{} for _ in arms]
    results: dict = {}

    def measure(rows: torch.Tensor) -> list[dict[str, np.ndarray]]:
        """Per-sample test metrics of the stacked rows ``rows`` (current parameters)."""
        with torch.no_grad():
            data = Batch(*(f[arm_stream[alive[rows]]] for f in test))
            out = metrics(*head(matrices([p[rows] for p in params]), test_log[arm_stream[alive[rows]]], task.scale,
                                queries, ALL, slot_of[data.query]), data)
        return [{k: v[i].numpy() for k, v in out.items()} for i in range(len(rows))]

    def finish(rows: torch.Tensor, step: int, running: torch.Tensor) -> None:
        for row, final in zip(rows.tolist(), measure(rows), strict=True):
            i = int(alive[row])
            results[arms[i]] = Result(*arms[i], int(horizons[i]), step + 1, float(running[row]), at_level[i], final)

    def live_rows() -> tuple:
        """What every step reads of the live arms, gathered again only when an arm leaves the stack: whether it
        ramps, its horizon, its QK factor's training mask and QK rates, its OV rate with and without the mask."""
        ov = torch.full((len(alive),), task.base_lr, dtype=dtype)
        return ramp[alive], horizons[alive], train_A[alive], qk_lr[alive], ov, ov * train_V[alive]

    ramp_a, horizon_a, train_a, qk_lr_a, ov, ov_v = live_rows()
    for step in range(steps_max):
        if step % CHUNK == 0:  # only the streams of live arms are drawn (a stream, once unread, stays so)
            live = torch.unique(arm_stream[alive])
            chunk = _stack([next(streams[i]) for i in live.tolist()])
            chunk_log, chunk_slot = log_counts(chunk.counts), slot_of[chunk.query]
            chunk_select = torch.nn.functional.one_hot(chunk_slot, len(queries)).to(dtype)
            row_of = torch.zeros(len(streams), dtype=torch.long)
            row_of[live] = torch.arange(len(live))
            where = row_of[arm_stream[alive]]
        j = step % CHUNK
        # each live arm's stream at step j, x[where, j] (index_select: advanced indexing costs several times as much)
        log_c, target, select = (x[:, j].index_select(0, where) for x in (chunk_log, chunk.target, chunk_select))
        A, B, O, V = params
        losses, d_query_rows, d_keys, d_O, d_V = head_gradients(A[:, queries], B.mT, O, V, log_c, target, None,
                                                                task.scale, select)
        value = losses.double()
        if not bool(torch.isfinite(value).all()):
            p, s, seed = arms[int(alive[~torch.isfinite(value)][0])]
            raise RuntimeError(f"{task.name} {p} {s} seed {seed}: SGD diverged at step {step}")
        recent[:, step % task.window] = value
        full = step >= task.window - 1
        running = recent.sum(dim=1) / task.window if full else torch.full_like(value, math.inf)
        new = (running[:, None] <= levels) & ~reached
        if bool(new.any()):
            rows = torch.nonzero(new.any(dim=1))[:, 0]
            for row, values in zip(rows.tolist(), measure(rows), strict=True):
                i = int(alive[row])
                for level in levels[new[row]].tolist():
                    at_level[i][level] = {k: float(np.nanmean(v)) for k, v in values.items()}
            reached |= new
        stop = ~ramp_a & (running <= task.target)
        if bool(stop.any()):
            finish(torch.nonzero(stop)[:, 0], step, running)
        qk = qk_lr_a[:, step]
        grads = (d_query_rows, d_keys.mT, d_O, d_V)
        if perturbed is not None:
            grads = tuple(perturbed(g) for g in grads)
        A.index_add_(1, queries, (-qk * train_a)[:, None, None] * grads[0])  # A's other rows have no gradient
        for p, rate, grad in zip(params[1:], (qk, ov, ov_v), grads[1:], strict=True):
            p.sub_(rate[:, None, None] * grad)
        done = ~stop & (horizon_a == step + 1)
        if bool(done.any()):
            finish(torch.nonzero(done)[:, 0], step, running)
        keep = ~(stop | done)
        if not bool(keep.all()):
            alive, recent, reached = alive[keep], recent[keep], reached[keep]
            params = [p[keep] for p in params]
            ramp_a, horizon_a, train_a, qk_lr_a, ov, ov_v = live_rows()
            where = row_of[arm_stream[alive]]
        if len(alive) == 0:
            break
    return {arm: results[arm] for arm in arms}
