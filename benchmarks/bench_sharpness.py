"""Matched-loss sharpness: the closed form (qkdyn.simulate.sharpness: the first-integral line meets the
loss level, time by quadrature) vs the ODE sweep (one LSODA solve per (form, rho) to the lowest level,
the event finder recording the other levels), both measured here.

1. The A4/A5 grid: 4 forms x 51 values of rho x 4 loss levels; closed form with and without the time.
2. A phase diagram of 317 x 316 ~ 1e5 points (rho x m/n, CACO and FAFO; attention only) against the
   ODE cost per (form, rho) run of part 1 scaled to the same number of runs (one run per rho per row).
"""
import time

import numpy as np

from qkdyn.simulate.claims_sharpness import sweep
from qkdyn.simulate.sharpness import sharpness
from qkdyn.theory.setting import EXACT_PARAMS, Setting

LEVELS = (0.5, 0.1, 1e-2, 1e-3)


def best_of(repeats, fn):
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    setting = Setting()
    rhos = np.unique(np.append(np.geomspace(0.01, 100, 50), 1.0))
    levels = np.array(LEVELS)

    def grid(with_time):
        for param in EXACT_PARAMS:
            sharpness(setting, param, rhos[:, None], levels[None, :], time=with_time)

    grid(True)  # warm the numeric modules
    closed_attn, closed_full = best_of(3, lambda: grid(False)), best_of(3, lambda: grid(True))
    start = time.perf_counter()
    sweep(setting, rhos, LEVELS, curve_rhos=(), progress=False)
    ode = time.perf_counter() - start
    points = len(EXACT_PARAMS) * len(rhos) * len(LEVELS)
    print(f"A4/A5 grid {len(EXACT_PARAMS)} x {len(rhos)} x {len(LEVELS)} = {points} points: ODE sweep {ode:.2f} s")
    print(f"  closed form, attn/qk/ov: {closed_attn * 1e3:.1f} ms: ratio {ode / closed_attn:.0f}x "
          f"({'meets' if ode / closed_attn >= 100 else 'BELOW'} the 100x target)")
    print(f"  closed form with the time quadrature: {closed_full * 1e3:.1f} ms: ratio {ode / closed_full:.0f}x")

    phase_rhos, rows = np.geomspace(0.01, 100, 317), 316
    per_run = ode / (len(EXACT_PARAMS) * len(rhos))
    for param in ("CACO", "FAFO"):
        fields = {"m": np.arange(1, rows + 1)[:, None], "n": setting.n}
        start = time.perf_counter()
        attn = sharpness(fields, param, phase_rhos[None, :], 1e-3, time=False).attn
        seconds = time.perf_counter() - start
        ode_estimate = per_run * attn.size
        print(f"phase diagram {param} rho x m/n, {attn.size} points: {seconds:.2f} s "
              f"({'under' if seconds < 10 else 'OVER'} the 10 s target); ODE at {per_run * 1e3:.1f} ms per run "
              f"would take ~{ode_estimate:.0f} s: ratio {ode_estimate / seconds:.0f}x")


if __name__ == "__main__":
    main()
