"""Specs with a finite minimum, and weight decay on one circuit alone, solved to t = 1e15, against the DOP853
path measured in the same run.

Under weight decay or a square loss a spec's flow settles exponentially; in log time tau = log(1 + t) its
linear rate grows like t, so the DOP853 path (SciPy's DOP853 in log time, ``settle=False``) pays steps in
proportion to t and cannot reach 1e15. Decay on one circuit alone has no finite minimum (the other circuit keeps
growing) but the same stiffness: the decayed circuit tracks a moving balance. ``qkdyn.solve`` hands a stiff
stretch to LSODA and, where the state settles, continues with the equilibrium's exact linear approach
(:mod:`qkdyn.simulate.specsolve`). For each spec (setting K=3, D=2, N=5, rho=3; 200 rows; rtol 1e-11,
atol 1e-14): the solve's warm CPU time to t = 1e15 (median of interleaved rounds), the DOP853 path's to
t = 1e3 and 1e4 (its steps growing ~t), the ratio DOP853-path(1e4) / solve(1e15) (a lower bound on the
speed-up to 1e15: above 1 the solve reaches 1e15 faster than the DOP853 path reaches 1e4), and the solution's
largest error over its rows against SciPy's Radau in log time at rtol 1e-13 with the derived Jacobian (relative
to max(1, |x|)). The targets (issue 39): under 50 ms, error under 1e-8. A spec without a finite minimum and
without decay (examples/specs/coupled_leapfrog.json) is never stiff: its solve is the DOP853 path itself (through
``integrate_flow``), measured to t = 1e15 against the same targets.

Warm means a process that has solved the spec often enough for its right-hand side to run compiled: a spec's
field runs as Python until those calls have cost about its compile time, then compiled by numba
(:mod:`qkdyn.theory.specjit`). So before its rounds each spec is solved to 1e15 until a solve begins with the
right-hand side compiled (at most :data:`WARM_UP` solves); each line says how many solves that took, their median
time with the field as Python, the compile time against its estimate (the rent), and whether the measured solves
ran the right-hand side and the Jacobian compiled (``stats["field"]``, ``stats["jacobian"]``; the Jacobian, called
a few hundred times a solve, pays its larger rent far more slowly and may still run as Python). The DOP853 path's
solves in the same rounds run the same field.
"""
import dataclasses
import functools
import statistics
import time
from collections.abc import Callable
from typing import TypeVar

import numpy as np
from qkdyn.simulate.specsolve import solve_spec
from qkdyn.theory.spec import NAMED, Spec, load
from qkdyn.theory.spec import CircuitSpec as C
from qkdyn.theory.specnumeric import numeric
from scipy.integrate import solve_ivp

import qkdyn

SETTING = qkdyn.Setting(classes=3, distinct=2, commons=5, eta_qk=3.0)
T = TypeVar("T")
ROUNDS, POINTS, TARGET_S, TARGET_ERROR = 5, 200, 0.05, 1e-8
#: the most solves a spec's warm-up runs while its right-hand side pays its rent
WARM_UP = 400
SETTLING = [dataclasses.replace(NAMED["CAFO"], name="CAFO, square loss", loss="square"),
            Spec("CACO, decay 1e-2 on both", qk=C(weight_decay=1e-2), ov=C(weight_decay=1e-2)),
            dataclasses.replace(NAMED["FACO"], name="FACO, decay 1e-3 on both", qk=C("factorized", weight_decay=1e-3),
                                ov=C(weight_decay=1e-3))]


def _cpu(call: Callable[[], T]) -> tuple[float, T]:
    start = time.process_time()
    out = call()
    return time.process_time() - start, out


def _reference_error(spec: Spec, tr) -> float:
    functions, p = numeric(spec), np.asarray(SETTING.numeric(), dtype=float)
    x0 = functions.init(p, SETTING.qk0, SETTING.ov0)
    sol = solve_ivp(lambda tau, x: np.exp(tau) * functions.rhs(x, p), (0.0, np.log1p(tr.t[-1])), x0, method="Radau",
                    jac=lambda tau, x: np.exp(tau) * functions.jac(x, p), rtol=1e-13, atol=1e-16,
                    t_eval=np.log1p(tr.t))
    if sol.status != 0:
        return float("nan")
    return float((np.abs(tr.state - sol.y).max(axis=0) / np.maximum(1.0, np.abs(sol.y).max(axis=0))).max())


def _verdict(seconds: float, error: float) -> str:
    meets = seconds < TARGET_S and error <= TARGET_ERROR
    return f"max error vs Radau rtol 1e-13 {error:.1e}; target (< 50 ms, <= 1e-8): {'met' if meets else 'missed'}"


def _warm(spec: Spec) -> str:
    """Solve ``spec`` to 1e15 until a solve begins with its right-hand side compiled (at most :data:`WARM_UP`
    solves, the first of them deriving and printing it): what it took."""
    python: list[float] = []  # the CPU seconds of the solves that began with the field as Python
    while len(python) < WARM_UP:
        seconds, tr = _cpu(functools.partial(solve_spec, SETTING, spec, t_max=1e15, points=POINTS))
        if tr.stats["field"] == "compiled":
            break
        python.append(seconds)
    else:
        return f"right-hand side still Python after {WARM_UP} warm-up solves"
    jit = numeric(spec).rhs.jit
    # the first solve derived and printed the functions, the last Python one paid the compilation
    median = statistics.median(python[1:-1]) if len(python) > 2 else float("nan")
    return (f"warm-up: {len(python)} solves to compile the right-hand side (field as Python {median * 1e3:.1f} ms a "
            f"solve; compile {jit.compile_time:.2f} s, estimated {jit.choice.rent_seconds:.2f} s)")


def _ran(solves) -> str:
    """Whether the measured solves ran the right-hand side and the Jacobian compiled."""
    said = {name: sorted({tr.stats[name] for tr in solves}) for name in ("field", "jacobian")}
    return f"field {'/'.join(said['field'])}, Jacobian {'/'.join(said['jacobian'])}"


def main() -> None:
    from pathlib import Path

    examples = Path(__file__).resolve().parents[1] / "examples" / "specs"
    one_circuit = [dataclasses.replace(NAMED["FACO"], name="FACO, decay 1e-3 on QK only",
                                       qk=C("factorized", weight_decay=1e-3)), load(examples / "deep_qk_decay.toml")]
    for spec in SETTLING + one_circuit:
        warm = _warm(spec)
        solved, plain3, plain4, solves = [], [], [], []
        for _ in range(ROUNDS):
            seconds, tr = _cpu(functools.partial(solve_spec, SETTING, spec, t_max=1e15, points=POINTS))
            solved.append(seconds)
            seconds, dop3 = _cpu(functools.partial(solve_spec, SETTING, spec, t_max=1e3, points=POINTS, settle=False))
            plain3.append(seconds)
            seconds, dop4 = _cpu(functools.partial(solve_spec, SETTING, spec, t_max=1e4, points=POINTS, settle=False))
            plain4.append(seconds)
            solves += [tr, dop3, dop4]
        fast, slow3, slow4 = (statistics.median(v) for v in (solved, plain3, plain4))
        stiff, settled = tr.stats.get("stiff_t"), tr.stats.get("settled_t")
        how = (f"{tr.stats['steps']} steps, {tr.stats['method']}" + (f" from t = {stiff:.3g}" if stiff else "")
               + (f", settled at t = {settled:.3g}" if settled else ", never settled"))
        print(f"{spec.name}: solve to 1e15 {fast * 1e3:.1f} ms CPU ({how}; rounds {min(solved) * 1e3:.1f}-"
              f"{max(solved) * 1e3:.1f} ms); DOP853 path to 1e3 {slow3 * 1e3:.1f} ms ({dop3.stats['steps']} steps), to "
              f"1e4 {slow4 * 1e3:.1f} ms ({dop4.stats['steps']} steps); ratio DOP853-path(1e4) / solve(1e15) "
              f"{slow4 / fast:.2f}x; {_ran(solves)}; {warm}; {_verdict(fast, _reference_error(spec, tr))}")
    never_stiff = load(examples / "coupled_leapfrog.json")
    warm = _warm(never_stiff)
    rounds = [_cpu(functools.partial(solve_spec, SETTING, never_stiff, t_max=1e15, points=POINTS)) for _ in range(ROUNDS)]
    solved, tr = [seconds for seconds, _ in rounds], rounds[-1][1]
    fast = statistics.median(solved)
    print(f"{never_stiff.name}: solve to 1e15 {fast * 1e3:.1f} ms CPU ({tr.stats['steps']} steps, {tr.stats['method']}; "
          f"rounds {min(solved) * 1e3:.1f}-{max(solved) * 1e3:.1f} ms); {_ran([tr for _, tr in rounds])}; {warm}; "
          f"{_verdict(fast, _reference_error(never_stiff, tr))}")


if __name__ == "__main__":
    main()
