"""Solver speed against what a user would write instead, measured side by side in this process.

The problem: the default setting's CACO flow to t = 1e15, 200 log-spaced rows. qkdyn solves its
5-variable reduced state (``qkdyn.solve``: compiled DOP853 in log-time, rows from its dense output,
the Trajectory built). The peers solve the same flow written by hand in its two features,

    dqk/dt = -eta_QK s^2 (1/(KD) + 1/N) dL/dqk,   dov/dt = -eta_OV / ((K-1) D) dL/dov,
    L = softplus(log(K-1) - alpha ov),   alpha = expit(qk + log(m/n)),

in log-time too (tau = log(1 + t); in linear time none of them reaches 1e15):
plain SciPy LSODA and DOP853 (``solve_ivp`` with ``t_eval``) on a Python RHS, and diffrax Tsit5
jit-compiled (the optional ``bench`` extra; skipped with a note where jax/diffrax are missing).
All at rtol 1e-11, atol 1e-14; the accuracy of each side is its largest relative error in (qk, ov)
over the rows against a SciPy DOP853 reference at rtol 1e-14. Times are CPU seconds (all threads),
rounds interleaved, the ratio reported is the median over rounds of (peer's time / qkdyn's time):
above 1 means qkdyn is faster.

Then a sweep over 64 values of eta_QK (``qkdyn.solve`` given the list of settings: one compiled call over
all of them, in lockstep SIMD lanes) against a diffrax ``vmap`` of the same solve and a loop of SciPy LSODA solves, per
trajectory, each side's accuracy measured against per-setting references, and the ratio at equal
accuracy; and the cost of a first call in a fresh process with numba's cache empty (cold) and filled (warm).
"""
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np
from qkdyn.simulate.logtime import output_times
from qkdyn.simulate.solve import solve
from qkdyn.theory.setting import Setting
from scipy.integrate import solve_ivp

T_MAX, POINTS, RTOL, ATOL, ROUNDS = 1e15, 200, 1e-11, 1e-14, 7
# qkdyn at tighter tolerances, to compare at equal accuracy: steps of 2-2.5x in rtol, so that the loosest one
# as accurate as a peer is within that factor of the peer's error (a decade would ask up to 10x more accuracy)
TIGHTER = (5e-12, 2e-12, 1e-12, 1e-13)
SWEEP_ROUNDS = 5
SWEEP = np.geomspace(0.1, 10.0, 64)


def _expit(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x)) if x >= 0 else math.exp(x) / (1.0 + math.exp(x))


def hand_field(setting: Setting):
    """The log-time (qk, ov) field of CACO, written by hand in plain Python floats."""
    K, D, N, m, n, s = setting.classes, setting.distinct, setting.commons, setting.m, setting.n, setting.scale
    c_qk, c_ov = setting.eta_qk * s * s * (1 / (K * D) + 1 / N), setting.eta_ov / ((K - 1) * D)
    log_k1, log_mn = math.log(K - 1), math.log(m / n)

    def field(tau, y):
        qk, ov = y
        alpha = _expit(qk + log_mn)
        g = _expit(log_k1 - alpha * ov)  # -dL/dz at z = alpha ov
        e = math.exp(tau)
        return [e * c_qk * g * ov * alpha * (1 - alpha), e * c_ov * g * alpha]

    return field


def cpu(fn):
    start = time.process_time()
    out = fn()
    return time.process_time() - start, out


def rel_error(qk_ov: np.ndarray, reference: np.ndarray) -> float:
    return float(np.max(np.abs(qk_ov - reference) / np.maximum(np.abs(reference), 1e-300)))


def diffrax_solvers(setting: Setting, taus: np.ndarray):
    """(one solve, vmapped sweep over eta_QK), both jitted, or None where diffrax is not installed."""
    try:
        import diffrax
        import jax
        import jax.numpy as jnp
    except ImportError:
        return None
    jax.config.update("jax_enable_x64", True)
    K, D, N, m, n, s = setting.classes, setting.distinct, setting.commons, setting.m, setting.n, setting.scale
    log_k1, log_mn = math.log(K - 1), math.log(m / n)

    def field(tau, y, eta_qk):
        qk, ov = y[0], y[1]
        alpha = jax.nn.sigmoid(qk + log_mn)
        g = jax.nn.sigmoid(log_k1 - alpha * ov)
        e = jnp.exp(tau)
        return jnp.stack([e * eta_qk * s * s * (1 / (K * D) + 1 / N) * g * ov * alpha * (1 - alpha),
                          e * setting.eta_ov / ((K - 1) * D) * g * alpha])

    def one(eta_qk):
        sol = diffrax.diffeqsolve(diffrax.ODETerm(field), diffrax.Tsit5(), 0.0, float(taus[-1]), None,
                                  jnp.array([setting.qk0, setting.ov0]), args=eta_qk,
                                  saveat=diffrax.SaveAt(ts=jnp.asarray(taus)),
                                  stepsize_controller=diffrax.PIDController(rtol=RTOL, atol=ATOL), max_steps=200_000)
        return sol.ys

    single, sweep = jax.jit(one), jax.jit(jax.vmap(one))
    return (lambda eta: np.asarray(single(eta).block_until_ready()).T,
            lambda etas: np.asarray(sweep(jnp.asarray(etas)).block_until_ready()))


def sweep(setting: Setting, taus: np.ndarray, y0: list, jitted) -> None:
    """The 64-setting sweep: per-trajectory CPU time and the largest relative error over all of its
    trajectories against per-setting SciPy DOP853 references at rtol 1e-14; qkdyn also at the tighter
    tolerances, so that the ratio at equal accuracy compares qkdyn's loosest rtol whose error is at most
    diffrax's."""
    settings = [setting.replace(eta_qk=float(eta)) for eta in SWEEP]
    references = [solve_ivp(hand_field(s), (0.0, taus[-1]), y0, method="DOP853", rtol=1e-14, atol=1e-16, t_eval=taus).y
                  for s in settings]

    def ours(rtol):
        return lambda: [np.array([tr.qk, tr.ov]) for tr in solve(settings, "CACO", t_max=T_MAX, points=POINTS, rtol=rtol)]

    names = ["qkdyn.solve(list)", *(f"qkdyn(list) rtol {rtol:.0e}" for rtol in TIGHTER)]
    sides = dict(zip(names, (ours(rtol) for rtol in (RTOL, *TIGHTER)), strict=True))
    sides["scipy LSODA loop"] = lambda: [solve_ivp(hand_field(s), (0.0, taus[-1]), y0, method="LSODA", rtol=RTOL,
                                                   atol=ATOL, t_eval=taus).y for s in settings]
    if jitted is not None:
        sides["diffrax Tsit5 vmap"] = lambda: list(jitted[1](SWEEP).transpose(0, 2, 1))
    errors = {name: max(rel_error(out, ref) for out, ref in zip(fn(), references, strict=True)) for name, fn in sides.items()}
    times = {name: [] for name in sides}
    for _ in range(SWEEP_ROUNDS):
        for name, fn in sides.items():
            seconds, _ = cpu(fn)
            times[name].append(seconds)
    print(f"sweep over {len(SWEEP)} values of eta_QK, per trajectory, CPU (median of {SWEEP_ROUNDS} interleaved rounds; "
          f"error: the largest over the {len(SWEEP)} trajectories):")
    for name in sides:
        ratio = statistics.median(a / b for a, b in zip(times[name], times[names[0]], strict=True))
        tail = "" if name == names[0] else f"  peer/qkdyn = {ratio:.2f}x"
        print(f"  {name:22s} {statistics.median(times[name]) / len(SWEEP) * 1e3:8.3f} ms  max rel. error "
              f"{errors[name]:.1e}{tail}")
    if jitted is not None:
        equal_accuracy(times, errors, "diffrax Tsit5 vmap", names)


def equal_accuracy(times: dict, errors: dict, peer: str, ours: list[str]) -> None:
    """Print the peer's time / qkdyn's at qkdyn's loosest tolerance (``ours``: loosest first) whose
    error is at most the peer's (median over the rounds of the per-round ratio)."""
    target = errors[peer]
    matched = [name for name in ours if errors[name] <= target]
    if not matched:
        print(f"  at equal accuracy: no qkdyn tolerance tried reaches {peer}'s error {target:.1e}")
        return
    ratio = statistics.median(a / b for a, b in zip(times[peer], times[matched[0]], strict=True))
    print(f"  at equal accuracy (qkdyn's loosest rtol with an error <= {peer}'s {target:.1e}: {matched[0]}): "
          f"{peer}/qkdyn = {ratio:.2f}x ({'at least as fast' if ratio >= 1 else 'BELOW the 1x target'})")


FIRST_SOLVE = ("import time; t = time.process_time(); from qkdyn.simulate.solve import solve; "
               "from qkdyn.theory.setting import Setting; solve(Setting(), 'CACO', t_max=1e15); "
               "u = time.process_time(); solve(Setting(), 'CACO', t_max=1e15); print(u - t, time.process_time() - u)")
#: the same, compiling at once (no SciPy solves first: qkdyn.simulate.coldstart): the price of compiling
FIRST_SOLVE_COMPILED = FIRST_SOLVE.replace("from qkdyn.simulate.solve import solve; ",
                                           "from qkdyn.simulate.solve import solve; from qkdyn.simulate.coldstart "
                                           "import FIRST_SOLVES; FIRST_SOLVES.rent_seconds = 0.0; ")


def first_call(cold: bool, code: str = FIRST_SOLVE) -> tuple[float, float, str]:
    """(import + first solve, one more solve) CPU seconds in a fresh process (``code`` prints both), and its
    stderr (where a compilation is announced); cold: numba's cache empty."""
    with tempfile.TemporaryDirectory() as empty:
        env = {**os.environ, **({"NUMBA_CACHE_DIR": empty} if cold else {})}
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    first, again = map(float, out.stdout.split())
    return first, again, out.stderr


def main() -> None:
    setting = Setting()
    taus = np.log1p(output_times(T_MAX, POINTS))
    y0 = [setting.qk0, setting.ov0]
    reference = solve_ivp(hand_field(setting), (0.0, taus[-1]), y0, method="DOP853", rtol=1e-14, atol=1e-16,
                          t_eval=taus).y
    def ours(rtol):
        return lambda: (lambda tr: np.array([tr.qk, tr.ov]))(solve(setting, "CACO", t_max=T_MAX, points=POINTS,
                                                                   rtol=rtol))

    sides = {
        "qkdyn.solve": ours(RTOL),
        **{f"qkdyn rtol {rtol:.0e}": ours(rtol) for rtol in TIGHTER},
        "scipy LSODA": lambda: solve_ivp(hand_field(setting), (0.0, taus[-1]), y0, method="LSODA", rtol=RTOL,
                                         atol=ATOL, t_eval=taus).y,
        "scipy DOP853": lambda: solve_ivp(hand_field(setting), (0.0, taus[-1]), y0, method="DOP853", rtol=RTOL,
                                          atol=ATOL, t_eval=taus).y,
    }
    jitted = diffrax_solvers(setting, taus)
    if jitted is not None:
        single = jitted[0]
        sides["diffrax Tsit5 jit"] = lambda: single(setting.eta_qk)
        compile_s, _ = cpu(lambda: single(setting.eta_qk))
    else:
        print("  (diffrax/jax not installed: `pip install -e '.[bench]'` adds the diffrax peers)")
    for fn in sides.values():
        fn()  # warm every side (numba and XLA caches, imports)
    times = {name: [] for name in sides}
    errors = {}
    for _ in range(ROUNDS):
        for name, fn in sides.items():
            seconds, out = cpu(fn)
            times[name].append(seconds)
            errors[name] = rel_error(out, reference)
    ours = times["qkdyn.solve"]
    print(f"one solve, CACO to t=1e15 ({POINTS} rows), CPU time, median of {ROUNDS} interleaved rounds:")
    for name in sides:
        ratio = statistics.median(a / b for a, b in zip(times[name], ours, strict=True))
        tail = "" if name == "qkdyn.solve" else f"  peer/qkdyn = {ratio:.2f}x"
        print(f"  {name:18s} {statistics.median(times[name]) * 1e3:8.2f} ms  max rel. error {errors[name]:.1e}{tail}")
    if jitted is not None:
        print(f"  (diffrax's one-off jit compile: {compile_s:.2f} CPU-s, not counted above)")
        equal_accuracy(times, errors, "diffrax Tsit5 jit", ["qkdyn.solve", *(f"qkdyn rtol {r:.0e}" for r in TIGHTER)])

    sweep(setting, taus, y0, jitted)

    warm_first, warm_again, _ = first_call(cold=False)
    cold_first, cold_again, _ = first_call(cold=True)
    compiling, _, said = first_call(cold=True, code=FIRST_SOLVE_COMPILED)
    print(f"first call in a fresh process (import + solve), CPU: numba cache filled {warm_first:.2f} s, "
          f"empty {cold_first:.2f} s (cold/warm = {cold_first / warm_first:.1f}x: SciPy's DOP853 until compiling "
          f"pays, qkdyn.simulate.coldstart; {'within' if cold_first <= 2 * warm_first else 'OVER'} the 2x target); "
          f"the next call {warm_again * 1e3:.1f} ms warm, {cold_again * 1e3:.1f} ms cold; compiling at once "
          f"instead: {compiling:.2f} s ({'announced on stderr before compiling' if said.startswith('qkdyn: compiling') else 'SILENT: no line on stderr before compiling'})")


if __name__ == "__main__":
    main()
