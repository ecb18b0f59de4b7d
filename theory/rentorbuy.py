"""The rent-or-buy rule between an uncompiled path and compiling: run uncompiled, counting its seconds (the rent),
until they reach about one compilation's cost, then compile once and run compiled from then on. Whatever number
of calls follows, a process spends at most about twice what the better choice in hindsight (compiling at once, or
never) would have cost. :mod:`qkdyn.simulate.coldstart` applies it to solves and the closed form,
:mod:`qkdyn.theory.specjit` to a spec's printed field."""
from __future__ import annotations

import dataclasses
from collections.abc import Callable


@dataclasses.dataclass
class RentOrBuy:
    """One process's choice for one kind of work: ``rent_seconds`` (about one compilation), the seconds
    ``rented`` so far, and the work (names) that runs compiled from now on."""

    rent_seconds: float
    rented: float = 0.0  # seconds spent on the uncompiled path for want of compiled code
    ready: set = dataclasses.field(default_factory=set)  # the work that runs compiled from now on

    def choose(self, name: str, cached: Callable[[], bool], estimate: float = 0.0) -> bool:
        """Whether the work ``name`` runs compiled: ``cached()`` (its machine code is in this process or in
        numba's cache), or the rent is paid, or renting ``estimate`` more seconds would pay it; once compiled,
        always."""
        if name not in self.ready and (self.rented + estimate >= self.rent_seconds or cached()):
            self.ready.add(name)
        return name in self.ready

    def rent(self, seconds: float) -> None:
        """Count the seconds of an uncompiled run taken because :meth:`choose` said no."""
        self.rented += seconds
