"""The programs that train many synthetic runs at once against the same runs one at a time.

Each program evaluates the model's one forward pass and loss (:mod:`qkdyn.empirical.synthetic.model`) on a stack
of runs; it is kept only where it beats running the runs one by one. Three of them:

* claim A6's GD and SGD runs (:mod:`qkdyn.empirical.synthetic.stacked`) against :func:`.experiment.run` per run
  (what the claim ran before): the runs of the ``cpu`` budget (every form at each GD step h, every form by SGD at
  the overlay batch, FAFO by SGD at every batch size and seed) on a shorter horizon (t <= 10 instead of 40: the
  same programs, a quarter of the steps), with the largest relative difference between the two sides' rows;
* the sampled claims' grids (:mod:`qkdyn.empirical.synthetic.batched`, the clean and the authors' generator, every
  form x schedule x 2 seeds on short horizons) against :func:`.batched.train` per run (the program with one row);
* claim FA's grid (:mod:`qkdyn.empirical.synthetic.fixed_attention`, both OV forms x 3 alphas x 2 seeds) against
  :func:`.fixed_attention.train` per run.

Beside them, one step of the stacked evaluation against ``torch.func.vmap`` of the one-run loss (the other way to
obtain it from the model's functions), on claim A6's GD stack; and one step of the authors' grid (48 runs, V = 50,
batch 32, 4 query ids) with the gradient written out (:func:`.model.head_gradients`, what the programs run) against
autograd of the model's loss on the same stack (what they ran before).

CPU time on one torch thread, median of interleaved rounds (a shared machine's load falls on both sides alike);
ratio = one-at-a-time time / stacked time (> 1: the stacked program is faster).
"""
import dataclasses
import statistics
import time
from collections.abc import Callable

import torch
from qkdyn.empirical.synthetic import authors, batched, clean, data, experiment, model, stacked
from qkdyn.empirical.synthetic import fixed_attention as fa
from qkdyn.empirical.synthetic.budgets import A6
from qkdyn.empirical.synthetic.claim_a6 import S6
from qkdyn.empirical.synthetic.model import PARAMS


def interleaved(programs: dict[str, Callable[[], object]], rounds: int) -> tuple[dict[str, float], dict[str, object]]:
    """(name -> median CPU seconds over ``rounds`` rounds, name -> its last result), the programs taking turns."""
    times: dict[str, list[float]] = {name: [] for name in programs}
    results: dict[str, object] = {}
    for _ in range(rounds):
        for name, program in programs.items():
            start = time.process_time()
            results[name] = program()
            times[name].append(time.process_time() - start)
    return {name: statistics.median(t) for name, t in times.items()}, results


def a6_arms(T: float) -> list[stacked.Arm]:
    cfg = A6["cpu"]
    h = cfg.steps[0]
    out = [stacked.Arm(p, step, round(T / step), points=25) for p in PARAMS for step in cfg.steps]
    out += [stacked.Arm(p, h, round(T / h), cfg.overlay_batch, 0, 25) for p in PARAMS]
    return out + [stacked.Arm("FAFO", h, round(T / h), b, s, 30) for b in cfg.sgd_batches for s in range(cfg.sgd_seeds)]


def a6_alone(runs) -> dict:
    return {a: experiment.run(a.param, S6, a.step, a.steps, optimizer="sgd" if a.batch else "gd", batch=a.batch,
                              seed=a.seed, points=a.points) for a in runs}


def a6(T: float = 10.0, rounds: int = 3) -> float:
    runs = a6_arms(T)
    times, rows = interleaved({"stacked": lambda: stacked.run(S6, runs), "alone": lambda: a6_alone(runs)}, rounds)
    together, alone = rows["stacked"], rows["alone"]
    worst = max(abs(g[k] - r[k]) / max(abs(r[k]), 1e-300) for a, rs in alone.items()
                for g, r in zip(together[a], rs, strict=True) for k in r if abs(r[k]) > 1e-12)
    ratio = times["alone"] / times["stacked"]
    print(f"A6 gd_sgd runs ({len(runs)} runs, t <= {T:g}), CPU, median of {rounds} interleaved rounds: one at a time "
          f"{times['alone']:.2f} s, stacked {times['stacked']:.2f} s: ratio {ratio:.2f} (rows equal to {worst:.1e} "
          "relative)")
    return ratio


def sampled_tasks() -> dict[str, tuple]:
    """generator -> (task on a short horizon, schedules)."""
    return {"clean": (clean.task(400), ("equal", "qkfast", "ramp")),
            "authors": (dataclasses.replace(authors.task(500), horizon=lambda param, schedule: 300),
                        ("equal", "qkfast", "ramp"))}


def sampled(rounds: int = 3, test_size: int = 400) -> dict[str, float]:
    ratios = {}
    for name, (task, schedules) in sampled_tasks().items():
        arms = [(p, s, seed) for p in PARAMS for s in schedules for seed in (0, 1)]
        times, _ = interleaved({"stacked": lambda: batched.run(task, arms, test_size),  # noqa: B023
                                "alone": lambda: [batched.train(task, *arm, test_size) for arm in arms]},  # noqa: B023
                               rounds)
        ratios[name] = times["alone"] / times["stacked"]
        print(f"sampled {name} grid ({len(arms)} runs of <= {task.horizon('FAFO', 'equal')} SGD steps), CPU, median of "
              f"{rounds} interleaved rounds: one at a time {times['alone']:.2f} s, batched {times['stacked']:.2f} s: "
              f"ratio {ratios[name]:.2f}")
    return ratios


def fixed_attention(rounds: int = 3, steps: int = 150, eval_size: int = 512, checkpoints: int = 4) -> float:
    keys = [(f, a, s) for f in ("collapsed", "factorized") for a in (0.2, 0.6, 1.0) for s in (0, 1)]
    forms, alphas, seeds = ({k[i]: None for k in keys} for i in range(3))
    times, _ = interleaved({
        "stacked": lambda: fa.grid(tuple(forms), tuple(alphas), tuple(seeds), steps, eval_size, checkpoints),
        "alone": lambda: [fa.train(*key, steps, eval_size, checkpoints) for key in keys]}, rounds)
    ratio = times["alone"] / times["stacked"]
    print(f"fixed-attention grid ({len(keys)} runs of {steps} SGD steps), CPU, median of {rounds} interleaved rounds: "
          f"one at a time {times['alone']:.2f} s, batched {times['stacked']:.2f} s: ratio {ratio:.2f}")
    return ratio


def vmap_step(runs: int = 12, steps: int = 300, rounds: int = 3) -> float:
    """Seconds per GD step (loss and gradient) of ``runs`` random heads of claim A6's shape on its population, the
    model's loss evaluated on the stack against ``torch.func.vmap`` of the one-run loss; returns vmap / stacked."""
    counts, labels, weights = data.mean_counts(S6)
    V, K = counts.shape[1], len(labels)
    generator = torch.Generator().manual_seed(0)
    shapes = {"W_Q": (1, V), "W_K": (V, V), "W_O": (K, V), "W_V": (V, V)}
    matrices = {k: torch.randn(runs, *shape, generator=generator, dtype=torch.float64).requires_grad_()
                for k, shape in shapes.items()}
    batch = tuple(f.expand(runs, *f.shape) for f in (torch.log(counts), labels, weights))

    def one_run(m, log_c, y, w):
        return model.loss(m, log_c, y, w, S6.scale, 0, slice(None))

    mapped = torch.func.vmap(one_run)

    def step(evaluate) -> Callable[[], list[torch.Tensor]]:
        def run():
            for _ in range(steps):
                evaluate(matrices, *batch).sum().backward()
                grads = [p.grad for p in matrices.values()]
                for p in matrices.values():
                    p.grad = None
            return grads
        return run

    times, grads = interleaved({"stacked": step(one_run), "vmap": step(mapped)}, rounds)
    worst = max(float((a - b).abs().max() / b.abs().max()) for a, b in zip(grads["stacked"], grads["vmap"], strict=True))
    print(f"one GD step of {runs} heads (claim A6's setting, population), CPU, median of {rounds} interleaved rounds: "
          f"the loss on the stack {times['stacked'] / steps * 1e6:.0f} us, torch.func.vmap of the one-run loss "
          f"{times['vmap'] / steps * 1e6:.0f} us: vmap / stacked {times['vmap'] / times['stacked']:.2f} (gradients "
          f"equal to {worst:.1e} relative)")
    return times["vmap"] / times["stacked"]


def written_out_step(runs: int = 48, steps: int = 100, rounds: int = 5) -> float:
    """Seconds per SGD step (loss and gradient) of ``runs`` random float32 heads of the authors' shape on batches of
    32 with a query id per sample: :func:`.model.head_gradients` against autograd of :func:`.model.loss`; returns
    autograd / written out."""
    generator = torch.Generator().manual_seed(0)
    V, B, Q = authors.VOCAB, 32, len(authors.QUERY_IDS)
    factors = [0.1 * torch.randn(runs, V, V, generator=generator) for _ in range(4)]  # A, W_K, O, W_V
    log_c = model.log_counts(torch.poisson(torch.full((runs, B, V), 1.2), generator=generator))
    targets, slot = torch.randint(V, (runs, B), generator=generator), torch.randint(Q, (runs, B), generator=generator)
    queries, select = torch.as_tensor(authors.QUERY_IDS), torch.nn.functional.one_hot(slot, Q).float()
    leaves = [f.clone().requires_grad_() for f in factors]

    def taped() -> list[torch.Tensor]:
        for _ in range(steps):
            A, W_K, O, W_V = leaves
            losses = model.loss({"W_Q": A, "W_K": W_K, "W_O": O, "W_V": W_V}, log_c, targets, None, authors.SCALE,
                                queries, None, slot)
            grads = torch.autograd.grad(losses.sum(), leaves)
        return [grads[0][:, queries], *grads[1:]]

    def written() -> list[torch.Tensor]:
        A, W_K, O, W_V = factors
        for _ in range(steps):
            out = model.head_gradients(A[:, queries], W_K, O, W_V, log_c, targets, None, authors.SCALE, select)
        return list(out[1:])

    times, grads = interleaved({"autograd": taped, "written out": written}, rounds)
    worst = max(float((a - b).abs().max() / b.abs().max()) for a, b in zip(grads["written out"], grads["autograd"],
                                                                              strict=True))
    ratio = times["autograd"] / times["written out"]
    print(f"one SGD step of {runs} heads (the authors' shape, float32), CPU, median of {rounds} interleaved rounds: "
          f"autograd of the model's loss {times['autograd'] / steps * 1e6:.0f} us, the gradient written out "
          f"{times['written out'] / steps * 1e6:.0f} us: ratio {ratio:.2f} (gradients equal to {worst:.1e} relative)")
    return ratio


def main() -> None:
    torch.set_num_threads(1)
    a6()
    sampled()
    fixed_attention()
    vmap_step()
    written_out_step()


if __name__ == "__main__":
    main()
