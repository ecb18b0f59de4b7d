"""Compile every form's kernels and the log-time integrator once, ahead of the first solve.

    python -m qkdyn.simulate.warm

numba compiles the generated kernels (:mod:`qkdyn.theory.generated`) and the integrator
(:mod:`qkdyn.simulate.integrate`) on first use and caches the machine code in the package's own
``__pycache__/numba`` folders (:class:`qkdyn.theory.kernels.TreeCache`; where they cannot be written it
says so on stderr, and each process compiles again); a fresh install would otherwise solve with SciPy until
compiling pays and then compile in its first busy process (:mod:`qkdyn.simulate.coldstart`; under
``qkdyn verify``'s two workers, twice at once). ``make install`` runs this module once, compiling at
once, so the first solve of a session loads cached code. It solves each form briefly, with a
loss event and the dense output, and evaluates its Jacobian (the LSODA fallback's): every compiled
path ``solve`` takes, a sweep over two settings (``solve_many``'s lockstep lanes), the balanced (qk, ov) kernels of
:func:`~qkdyn.simulate.sweep.sweep` and the matched-loss
closed form with its time (:mod:`qkdyn.simulate.closedform`, one kernel for every form: about 60 CPU-s to
compile, which a process would otherwise pay once its plain-Python calls of ``sharpness`` have cost as much;
one signature serves every shape of ``sharpness``'s arguments, so the scalar call here covers them all).
"""
from __future__ import annotations

import sys
import time


def main() -> int:
    from qkdyn.simulate.coldstart import FIRST_CLOSED_FORMS, FIRST_SOLVES
    from qkdyn.simulate.sharpness import sharpness
    from qkdyn.simulate.solve import solve
    from qkdyn.simulate.sweep import sweep
    from qkdyn.theory.compiled import load
    from qkdyn.theory.setting import ALL_PARAMS, Setting

    start = time.perf_counter()
    FIRST_SOLVES.rent_seconds = 0.0  # compile at once (the solves of a cold start run SciPy's DOP853 first)
    FIRST_CLOSED_FORMS.rent_seconds = 0.0  # and the closed form (a cold start runs its code as plain Python first)
    for param in ALL_PARAMS:
        tr = solve(Setting(), param, t_max=10.0, points=3, record_losses=(0.5,))
        load(param).jac(tr.state[:, 0], tr.setting.numeric())  # the Jacobian of the LSODA fallback
        solve([Setting(), Setting(eta_ov=2.0)], param, t_max=10.0, points=3)
        sweep([Setting(), Setting(eta_ov=2.0)], param, t_max=10.0, points=3)
        sharpness(Setting(), param, 1.0, 0.5)
    sys.stdout.write(f"compiled the kernels of {', '.join(ALL_PARAMS)}, the integrator and the closed form in "
                     f"{time.perf_counter() - start:.1f} s\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
