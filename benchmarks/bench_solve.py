"""Solver speed: log-time LSODA with the analytic Jacobian vs plain ``solve_ivp`` (RK45, no Jacobian,
linear time), both measured here on the same problems.

1. One solve of FAFO (default setting) to t = 1e15, numeric module cached.
2. The A4/A5 sweep: 4 parameterisations x 50 values of rho to the loss-1e-3 event. The plain
   solver is timed on every 10th rho (20 runs) and compared per run.
"""
import time

import numpy as np
from scipy.integrate import solve_ivp

from qkdyn.simulate.solve import solve
from qkdyn.theory.compiled import load
from qkdyn.theory.setting import EXACT_PARAMS, Setting


def plain(setting: Setting, param: str, t_max: float, until_loss: float | None = None):
    compiled, p = load(param), setting.numeric()
    x0 = compiled.init(p, setting.qk0, setting.ov0)
    events = None
    if until_loss is not None:
        def events(t, x):
            return compiled.loss(*compiled.features(x, p), p)[0] - until_loss
        events.terminal = True
    start = time.perf_counter()
    sol = solve_ivp(lambda t, x: compiled.rhs(x, p), (0.0, t_max), x0, rtol=1e-11, atol=1e-14, events=events)
    return time.perf_counter() - start, sol


def main() -> None:
    setting = Setting()
    for param in EXACT_PARAMS:
        load(param)
    solve(setting, "FAFO", t_max=1e15)  # warm caches
    ours = min(solve(setting, "FAFO", t_max=1e15).stats["seconds"] for _ in range(3))
    horizon = 1e7  # plain RK45 in linear time: measured to 1e7, its cost grows with log t thereafter
    seconds, sol = plain(setting, "FAFO", horizon)
    ours_same = min(solve(setting, "FAFO", t_max=horizon).stats["seconds"] for _ in range(3))
    print(f"solve FAFO to t=1e15: {ours:.3f} s solver time ({'under' if ours < 1 else 'OVER'} the 1 s target)")
    print(f"  to t=1e7: ours {ours_same:.3f} s vs plain RK45 {seconds:.3f} s ({sol.t.size} steps): "
          f"ratio {seconds / ours_same:.1f}x")

    rhos = np.geomspace(0.01, 100, 50)
    start = time.perf_counter()
    for param in EXACT_PARAMS:
        for rho in rhos:
            solve(setting.replace(eta_qk=rho), param, until_loss=1e-3, points=2)
    sweep = time.perf_counter() - start
    ours_subset, plain_subset = 0.0, 0.0
    for param in EXACT_PARAMS:
        for rho in rhos[::10]:
            start = time.perf_counter()
            solve(setting.replace(eta_qk=rho), param, until_loss=1e-3, points=2)
            ours_subset += time.perf_counter() - start
            plain_subset += plain(setting.replace(eta_qk=rho), param, 1e12, until_loss=1e-3)[0]
    print(f"sweep 4 x 50 to loss 1e-3: {sweep:.2f} s ({'under' if sweep < 20 else 'OVER'} the 20 s target)")
    print(f"  on 20 of those runs: ours {ours_subset:.2f} s vs plain RK45 {plain_subset:.2f} s: "
          f"ratio {plain_subset / ours_subset:.1f}x")


if __name__ == "__main__":
    main()
