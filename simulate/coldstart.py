"""The first solves of a process whose numba cache lacks the compiled integrator: SciPy until compiling pays.

Compiling the integrator of :mod:`qkdyn.simulate.integrate` with a form's kernels costs about 10-15
CPU-s, once: numba caches the machine code in tree, and ``make install`` compiles it ahead
(:mod:`qkdyn.simulate.warm`). A solve with SciPy's DOP853 on the generated right-hand side run as plain
Python compiles nothing and costs tens of milliseconds. So where the cache does not hold the compiled
code, DOP853 solves run on SciPy's (the same method, tolerances and loss events;
``Trajectory.stats["compiled"]`` and ``qkdyn solve``'s stderr line say which ran) and the time they take
adds up; once it reaches :data:`RENT_SECONDS`, about one compilation, the next solve compiles (and fills
the cache for every later process). This is the rent-or-buy rule: whatever number of solves follows,
the process spends at most about twice what the better choice in hindsight would have cost (compiling at
once, or never), and a one-off solve after a fresh ``pip install`` costs about what it costs warm.

The two agree to the integration error, not to the bit: their rounding differs (the right-hand side,
e^tau, the stage sums), so their step sequences part ways, and they differ by about each one's own error
(on a near-worst case each lies 2-5e-7 from a solve at rtol 1e-14). At the default rtol 1e-11 every
row is within 1e-7 of its column's largest magnitude and every entry within 1e-5 of its own magnitude
plus 1e-12 (:data:`COLUMN_BOUND`, :data:`ENTRY_BOUND`; the worst over 4,129 random settings of the five
forms: 5.3e-8, on ``t`` of an until-loss run, which ends at the located event, and 9.7e-7, on a loss
near 1e-12 at t ~ 1e14); tests/simulate/test_coldstart.py checks them on every form.
"""
from __future__ import annotations

import dataclasses

from qkdyn.simulate import integrate

#: SciPy solve time (seconds) a process spends before it compiles: about one compilation (``make bench``
#: prints the cold and warm first solves)
RENT_SECONDS = 10.0
#: a cold (SciPy) solve's rows against the compiled ones at the default rtol: within this share of each column's
#: largest magnitude, and entry by entry within ENTRY_BOUND * (|entry| + 1e-12)
COLUMN_BOUND, ENTRY_BOUND = 1e-7, 1e-5


@dataclasses.dataclass
class RentOrBuy:
    """The process's choice between SciPy's DOP853 and the compiled one (:data:`FIRST_SOLVES`)."""

    rent_seconds: float = RENT_SECONDS
    rented: float = 0.0  # seconds spent in SciPy solves taken for want of compiled code
    ready: set = dataclasses.field(default_factory=set)  # forms whose solves run compiled from now on

    def compiled_now(self, compiled) -> bool:
        """Whether a DOP853 solve of the form of ``compiled`` (a :class:`~qkdyn.theory.compiled.Compiled`)
        runs compiled: its machine code is in this process or in the cache, or the rent is paid."""
        if compiled.name not in self.ready and (
                self.rented >= self.rent_seconds or integrate.cached(compiled.rhs_lanes_kernel, compiled.loss_kernel)):
            self.ready.add(compiled.name)
        return compiled.name in self.ready

    def rent(self, seconds: float) -> None:
        """Count a SciPy solve taken because :meth:`compiled_now` said no."""
        self.rented += seconds


#: this process's choice
FIRST_SOLVES = RentOrBuy()
