"""Population gradient descent on the full model of the default setting (``Setting()``).

* steps per second of exact population GD (mean-count batch: K rows of V counts) against brute
  force, i.e. evaluating every sequence of the population position by position
  (K C(m+n, m) D^m N^n sequences, ~1e38 for the default setting: timed on a chunk of sequences and
  extrapolated), and against enumerating count vectors (K C(m+D-1, m) C(n+N-1, n), same method);
* wall time of a full 20k-step GD run (FAFO, with its output rows) on one thread;
* ``qkdyn.gd`` (default recording: 200 rows with the reduced state, accuracy and sym_dist) against a
  plain torch loop on the same matrices (``torch.optim.SGD``, the same population batch, no recording),
  per parameterisation: ratio = plain loop's CPU time / qkdyn.gd's (>= 1: qkdyn is at least as fast),
  median over interleaved rounds so that a shared machine's load falls on both alike;
* ``qkdyn.gd`` and ``qkdyn.sgd`` against the lean loop a user would write with the same recording (issue 43,
  item 4): ``torch.autograd.grad`` and in-place parameter updates under ``torch.no_grad``, the same batches
  (the population, or the same seeded sampled stream), and at the same steps the same rows, computed by the
  library's row function (:func:`qkdyn.empirical.synthetic.observe.observer`) on the current matrices. Both
  sides include their set-up (model, test batch). Ratio = qkdyn's CPU time / the lean loop's, median over
  interleaved rounds (target: at most 1, qkdyn not slower), with the rounds' spread; the rows of the two
  are compared (largest difference printed: 0 means the same numbers). Measured with the default 200 points and
  with 2 (three rows: the training loops nearly alone).

``QKDYN_BENCH_QUICK=1``: the trainer comparisons only, fewer steps and rounds.
"""
import math
import os
import statistics
import time

import numpy as np
import torch
from qkdyn.empirical.synthetic import data, experiment, observe, reduced, train
from qkdyn.empirical.synthetic.model import cross_entropy, head
from qkdyn.theory.setting import Setting

CHUNK = 4096
QUICK = os.environ.get("QKDYN_BENCH_QUICK") == "1"
LEAN_TARGET = 1.0  # qkdyn's CPU time / the lean loop's, at most


def seconds_per_step(model, batch_fn, forward, repeats):
    opt = train.make_optimizer(model, "gd", 1e-3, 1.0, 1.0)
    start = time.perf_counter()
    for _ in range(repeats):
        x, labels, weights = batch_fn()
        loss = cross_entropy(forward(x), labels, weights)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    return (time.perf_counter() - start) / repeats


def plain_loop(param: str, setting, step: float, steps: int) -> float:
    """Seconds of the loop a user would write: forward, loss, zero_grad, backward, torch.optim.SGD step."""
    model = reduced.new_model(param, setting)
    opt = torch.optim.SGD([{"params": model.circuit_parameters("QK"), "lr": step * setting.eta_qk},
                           {"params": model.circuit_parameters("OV"), "lr": step * setting.eta_ov}], lr=step)
    counts, labels, weights = data.mean_counts(setting)
    start = time.process_time()
    for _ in range(steps):
        loss = cross_entropy(model(counts)[0], labels, weights)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return time.process_time() - start


def gd_vs_plain(setting, steps: int = 4000, rounds: int = 5) -> dict:
    """param -> median over rounds of plain-loop CPU time / qkdyn.gd CPU time (same steps, same matrices;
    both on this process's one torch thread, so CPU time is what each costs on a shared machine)."""
    import qkdyn

    ratios = {}
    for param in ("CACO", "FAFO"):
        plain_loop(param, setting, 0.01, 10)  # warm-up (first optimiser step imports torch's compiler guard)
        per_round = []
        for _ in range(rounds):
            plain = plain_loop(param, setting, 0.01, steps)
            start = time.process_time()
            rec = qkdyn.gd(setting, param, step=0.01, steps=steps)
            per_round.append(plain / (time.process_time() - start))
        ratios[param] = statistics.median(per_round)
        print(f"qkdyn.gd vs plain torch loop ({param}, {steps} steps, {len(rec.t)} rows recorded): "
              f"ratio {ratios[param]:.2f} (rounds {', '.join(f'{r:.2f}' for r in per_round)}; >= 1: at least as fast)")
    return ratios


def lean_loop(param: str, setting, step: float, steps: int, batch: int | None = None, seed: int = 0,
              points: int = 200) -> tuple[float, list[dict]]:
    """CPU seconds and rows of the lean loop: forward (the model's pure :func:`head` on its matrices), loss,
    ``torch.autograd.grad``, ``p -= h eta_c g`` in place; at every step of :func:`.train.record_steps` the
    observer's row of the current matrices. One torch thread, as ``qkdyn.gd``/``sgd`` use."""
    start = time.process_time()
    model = reduced.new_model(param, setting)
    groups = [(model.circuit_parameters("QK"), step * setting.eta_qk),
              (model.circuit_parameters("OV"), step * setting.eta_ov)]
    params = [p for ps, _ in groups for p in ps]
    rates = [-lr for ps, lr in groups for _ in ps]
    matrices = model.matrices()
    generator = torch.Generator().manual_seed(seed)
    population = data.mean_counts(setting)
    log_population = torch.log(population[0])
    row_of = observe.observer(param, setting)
    record = set(train.record_steps(steps, points).tolist())
    rows = []
    for k in range(steps + 1):
        if batch is None:
            (_, labels, weights), log_counts = population, log_population
        else:
            counts, labels, weights = data.sample(setting, batch, generator)
            log_counts = torch.log(counts)
        if k in record:
            rows.append({"step": k, **row_of(model)})
        if k == steps:
            break
        loss = cross_entropy(head(matrices, log_counts, model.scale, model.query, model.labels)[0], labels, weights)
        grads = torch.autograd.grad(loss, params)
        with torch.no_grad():
            for p, g, rate in zip(params, grads, rates, strict=True):
                p.add_(g, alpha=rate)
    return time.process_time() - start, rows


def _largest_difference(rows: list[dict], rec) -> float:
    """max over columns and rows of |lean - qkdyn| (inf where the rows or columns differ)."""
    keys = [k for k in rows[0] if k != "step"]
    if len(rows) != len(rec.t) or any(k not in rec.columns for k in keys):
        return math.inf
    return max(float(np.max(np.abs(np.array([row[k] for row in rows]) - rec.columns[k]))) for k in keys)


def trainers_vs_lean(setting, steps: int, rounds: int, batch: int = 32, points: int = 200) -> dict:
    """(trainer, param) -> median over rounds of qkdyn CPU time / lean-loop CPU time (target <= 1), both recording
    rows at the steps of ``points`` (200: the default; 2: the loops nearly alone)."""
    import qkdyn

    ratios = {}
    for name, size in (("gd", None), ("sgd", batch)):
        for param in ("CACO", "FAFO"):
            lean_loop(param, setting, 0.01, 20, size)  # warm-up (the first calls load the compiled theory)
            qkdyn.gd(setting, param, step=0.01, steps=20)
            per_round, difference = [], 0.0
            for _ in range(rounds):
                lean_seconds, rows = lean_loop(param, setting, 0.01, steps, size, points=points)
                start = time.process_time()
                rec = (qkdyn.gd(setting, param, step=0.01, steps=steps, points=points) if size is None
                       else qkdyn.sgd(setting, param, step=0.01, steps=steps, batch=size, seed=0, points=points))
                our_seconds = time.process_time() - start
                per_round.append(our_seconds / lean_seconds)
                difference = max(difference, _largest_difference(rows, rec))
            ratio = ratios[name, param] = statistics.median(per_round)
            met = "met" if ratio <= LEAN_TARGET else "NOT met"
            print(f"qkdyn.{name} vs lean loop with the same recording ({param}, {steps} steps"
                  f"{'' if size is None else f', batch {size}'}, {len(rec.t)} rows): ratio {ratio:.3f} "
                  f"(rounds {min(per_round):.3f}-{max(per_round):.3f}; last round qkdyn {our_seconds:.3f} CPU-s, "
                  f"lean {lean_seconds:.3f}); target <= {LEAN_TARGET:g}: {met}; rows differ by at most {difference:.3g}")
    return ratios


def main() -> None:
    torch.set_num_threads(1)
    if QUICK:
        trainers_vs_lean(Setting(), steps=1000, rounds=3)
        trainers_vs_lean(Setting(), steps=1000, rounds=3, points=2)
        return
    setting = Setting()
    model = reduced.new_model("FAFO", setting)
    population = data.mean_counts(setting)
    t_pop = seconds_per_step(model, lambda: population, lambda c: model(c)[0], 2000)
    lay = model.layout
    tokens = torch.randint(len(lay.context), (CHUNK, setting.m + setting.n))
    chunk = (tokens, torch.zeros(CHUNK, dtype=torch.long), torch.full((CHUNK,), 1.0 / CHUNK, dtype=torch.float64))
    t_chunk = seconds_per_step(model, lambda: chunk, lambda t: model.forward_tokens(t)[0], 20)
    n_seq = setting.classes * math.comb(setting.m + setting.n, setting.m) * setting.distinct ** setting.m * setting.commons ** setting.n
    t_brute = t_chunk / CHUNK * n_seq
    counts = data.sample(setting, CHUNK, torch.Generator().manual_seed(0))
    t_counts = seconds_per_step(model, lambda: counts, lambda c: model(c)[0], 20) / CHUNK * data.support_size(setting)
    print(f"population GD (FAFO, default setting): {1 / t_pop:,.0f} steps/s ({t_pop * 1e3:.3f} ms/step)")
    print(f"brute force: {n_seq:.3e} sequences, {t_brute:.3e} s/step (extrapolated from {CHUNK}); "
          f"speed-up ratio {t_brute / t_pop:.3e}")
    print(f"count-vector enumeration: {data.support_size(setting):.3e} count vectors, {t_counts:.3e} s/step; "
          f"speed-up ratio {t_counts / t_pop:.3e}")
    gd_vs_plain(setting)
    trainers_vs_lean(setting, steps=4000, rounds=7)
    trainers_vs_lean(setting, steps=4000, rounds=7, points=2)
    start, cpu = time.perf_counter(), time.process_time()
    rows = experiment.run("FAFO", setting, 0.1, 20_000, points=200)
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
    print(f"20k-step population GD run (FAFO, h = 0.1, {len(rows)} rows): {seconds:.2f} s wall, {cpu:.2f} s CPU "
          f"({'under' if seconds < 30 else 'OVER'} the 30 s budget; CPU < wall means the cores were shared); "
          f"final loss {rows[-1]['loss']:.4g}")


if __name__ == "__main__":
    main()
