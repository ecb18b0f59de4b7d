"""Population gradient descent on the full model of the default setting (``Setting()``).

* steps per second of exact population GD (mean-count batch: K rows of V counts) against brute
  force, i.e. evaluating every sequence of the population position by position
  (K C(m+n, m) D^m N^n sequences, ~1e38 for the default setting: timed on a chunk of sequences and
  extrapolated), and against enumerating count vectors (K C(m+D-1, m) C(n+N-1, n), same method);
* wall time of a full 20k-step GD run (FAFO, with its output rows) on one thread;
* ``qkdyn.gd`` (default recording: 200 rows with the reduced state, accuracy and sym_dist) against a
  plain torch loop on the same matrices (``torch.optim.SGD``, the same population batch, no recording),
  per parameterisation: ratio = plain loop's CPU time / qkdyn.gd's (>= 1: qkdyn is at least as fast),
  median over interleaved rounds so that a shared machine's load falls on both alike.
"""
import math
import statistics
import time

import torch
from qkdyn.empirical.synthetic import data, experiment, reduced, train
from qkdyn.empirical.synthetic.model import cross_entropy
from qkdyn.theory.setting import Setting

CHUNK = 4096


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


def main() -> None:
    torch.set_num_threads(1)
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
    start, cpu = time.perf_counter(), time.process_time()
    rows = experiment.run("FAFO", setting, 0.1, 20_000, points=200)
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
    print(f"20k-step population GD run (FAFO, h = 0.1, {len(rows)} rows): {seconds:.2f} s wall, {cpu:.2f} s CPU "
          f"({'under' if seconds < 30 else 'OVER'} the 30 s budget; CPU < wall means the cores were shared); "
          f"final loss {rows[-1]['loss']:.4g}")


if __name__ == "__main__":
    main()
