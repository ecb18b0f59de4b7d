"""The first solves of a process whose numba cache lacks the compiled integrator: SciPy until compiling pays.

Compiling the integrator of :mod:`qkdyn.simulate.integrate` with a form's kernels costs about 10-15
CPU-s, once: numba caches the machine code in tree, and ``make install`` compiles it ahead
(:mod:`qkdyn.simulate.warm`). A solve with SciPy's DOP853 on the generated right-hand side run as plain
Python compiles nothing and costs tens of milliseconds. So where the cache does not hold the compiled
code, DOP853 solves run on SciPy's (the same method, tolerances and loss events; the numbers agree to
the tolerance, not to the bit: ``Trajectory.stats["compiled"]`` says which ran) and the time they take
adds up; once it reaches :data:`RENT_SECONDS`, about one compilation, the next solve compiles (and fills
the cache for every later process). This is the rent-or-buy rule: whatever number of solves follows,
the process spends at most about twice what the better choice in hindsight would have cost (compiling at
once, or never), and a one-off solve after a fresh ``pip install`` costs about what it costs warm.
"""
from __future__ import annotations

import dataclasses

from qkdyn.simulate import integrate

#: SciPy solve time (seconds) a process spends before it compiles: about one compilation (``make bench``
#: prints the cold and warm first solves)
RENT_SECONDS = 10.0


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
