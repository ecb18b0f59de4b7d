"""Claim A6's GD and SGD runs as one tensor program (:mod:`qkdyn.empirical.synthetic.stacked`) against the
same runs one at a time (:func:`qkdyn.empirical.synthetic.experiment.run`, what the claim ran before).

The runs are those of the ``cpu`` budget's ``gd_sgd`` (every form at h = 0.04, 0.02, 0.01 by GD, every form by
SGD at B = 32, FAFO by SGD at four batch sizes and three seeds) on a shorter horizon (t <= 10 instead of 40:
the same programs, a quarter of the steps). CPU time on one torch thread, median of interleaved rounds;
ratio = one-at-a-time time / stacked time (> 1: the stacked program is faster), with the largest relative
difference between the two sides' rows (round-off).
"""
import statistics
import time

import torch
from qkdyn.empirical.synthetic import experiment, stacked
from qkdyn.empirical.synthetic.budgets import a6 as config
from qkdyn.empirical.synthetic.claim_a6 import S6
from qkdyn.empirical.synthetic.model import PARAMS


def arms(T: float) -> list:
    cfg = config(False)
    h = cfg["steps"][0]
    out = [stacked.Arm(p, step, round(T / step), points=25) for p in PARAMS for step in cfg["steps"]]
    out += [stacked.Arm(p, h, round(T / h), cfg["overlay_batch"], 0, 25) for p in PARAMS]
    return out + [stacked.Arm("FAFO", h, round(T / h), b, s, 30) for b in cfg["sgd_batches"] for s in range(cfg["sgd_seeds"])]


def alone(runs) -> dict:
    return {a: experiment.run(a.param, S6, a.step, a.steps, optimizer="sgd" if a.batch else "gd", batch=a.batch,
                              seed=a.seed, points=a.points) for a in runs}


def main(T: float = 10.0, rounds: int = 3) -> None:
    torch.set_num_threads(1)
    runs = arms(T)
    times = {"stacked": [], "alone": []}
    for _ in range(rounds):
        for name, fn in (("stacked", lambda: stacked.run(S6, runs)), ("alone", lambda: alone(runs))):
            start = time.process_time()
            rows = fn()
            times[name].append(time.process_time() - start)
            if name == "stacked":
                together = rows
    worst = max(abs(g[k] - r[k]) / max(abs(r[k]), 1e-300) for a, rs in rows.items()
                for g, r in zip(together[a], rs, strict=True) for k in r if abs(r[k]) > 1e-12)
    s, a = statistics.median(times["stacked"]), statistics.median(times["alone"])
    print(f"A6 gd_sgd runs ({len(runs)} runs, t <= {T:g}), CPU, median of {rounds} interleaved rounds: one at a time "
          f"{a:.2f} s, stacked {s:.2f} s: ratio {a / s:.2f} (rows equal to {worst:.1e} relative)")


if __name__ == "__main__":
    main()
