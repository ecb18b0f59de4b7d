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

The matched-loss closed form (:mod:`qkdyn.simulate.closedform`) follows the same rule with its own rent
(:data:`FIRST_CLOSED_FORMS`): compiling it costs about a minute of CPU (58 CPU-s measured for the first
``sharpness`` of a fresh process, on a loaded machine), and its own code run as plain Python (:func:`plain_python`: the same source,
each compiled function it calls replaced by its Python, uncompiled) costs about a millisecond a point with the
time, a few tenths without. Its plain run's arithmetic is the compiled one's, operation by operation (SciPy's own
Wright omega and log-expit by name instead of by address): the same numbers to round-off where it finishes (a
math function may round its last bit otherwise in numba than in CPython: FACO's qk was seen 1 ulp apart;
tests/simulate/test_coldstart.py checks 1e-14 relative on every form); an operation that compiled code would carry on with (IEEE infinities: an overflowing ``math.exp``, a
division by zero, the log of 0) raises in Python, and that call is then taken compiled. A call whose plain cost,
estimated from the points it has (at :data:`PLAIN_SECONDS_PER_POINT`, or the largest rate this process
has measured), would pass the rent compiles at once: a phase diagram of 1e6 points never runs uncompiled.
"""
from __future__ import annotations

import dataclasses
import types
from collections.abc import Callable, Mapping

from numba.core.dispatcher import Dispatcher
from qkdyn.simulate import integrate
from qkdyn.theory import rentorbuy

#: SciPy solve time (seconds) a process spends before it compiles: about one compilation (``make bench``
#: prints the cold and warm first solves)
RENT_SECONDS = 10.0
#: a cold (SciPy) solve's rows against the compiled ones at the default rtol: within this share of each column's
#: largest magnitude, and entry by entry within ENTRY_BOUND * (|entry| + 1e-12)
COLUMN_BOUND, ENTRY_BOUND = 1e-7, 1e-5
#: plain-Python closed-form time (CPU seconds) a process spends before it compiles: about one compilation
#: (58 CPU-s measured for the first ``sharpness`` with an empty cache; ``make bench`` prints it)
CLOSED_FORM_RENT_SECONDS = 60.0
#: a plain closed-form call's CPU seconds per point, with the time and without, before the process has measured
#: its own: about twice the worst form's on the A4/A5 grid (1.25 ms with the time, FAFO; 0.27 ms without, FACO)
PLAIN_SECONDS_PER_POINT = {True: 2.5e-3, False: 5e-4}


@dataclasses.dataclass
class RentOrBuy(rentorbuy.RentOrBuy):
    """The process's choice between an uncompiled path and compiled code (:class:`qkdyn.theory.rentorbuy.RentOrBuy`):
    SciPy's DOP853 or the compiled one (:data:`FIRST_SOLVES`), the closed form as plain Python or compiled
    (:data:`FIRST_CLOSED_FORMS`)."""

    rent_seconds: float = RENT_SECONDS

    def compiled_now(self, compiled) -> bool:
        """Whether a DOP853 solve of the form of ``compiled`` (a :class:`~qkdyn.theory.compiled.Compiled`)
        runs compiled: its machine code is in this process or in the cache, or the rent is paid."""
        return self.choose(compiled.name, lambda: integrate.cached(compiled.rhs_lanes_kernel, compiled.loss_kernel))


#: this process's choice
FIRST_SOLVES = RentOrBuy()
#: this process's choice for the matched-loss closed form (:mod:`qkdyn.simulate.sharpness`)
FIRST_CLOSED_FORMS = RentOrBuy(CLOSED_FORM_RENT_SECONDS)


def plain_python(function: Dispatcher, replace: Mapping[str, Callable]) -> Callable:
    """A numba-compiled ``function`` as plain Python, compiling nothing: its own Python function, run with
    globals in which every compiled function it names (and those name, in turn) is its plain Python too, and
    each name of ``replace`` is the callable given (for what has no Python of its own: an intrinsic)."""
    py_func = function.py_func
    assert isinstance(py_func, types.FunctionType)  # numba compiles Python functions only
    return _plain(py_func, replace, {})


def _plain(py_func: types.FunctionType, replace: Mapping[str, Callable],
           made: dict[types.FunctionType, types.FunctionType]) -> types.FunctionType:
    """:func:`plain_python` of ``py_func``, each function made once (``made``: a function calls itself, or two
    call a third)."""
    if py_func in made:
        return made[py_func]
    namespace = dict(py_func.__globals__)
    plain = made[py_func] = types.FunctionType(py_func.__code__, namespace, py_func.__name__, py_func.__defaults__,
                                               py_func.__closure__)
    for name, value in py_func.__globals__.items():
        if name in replace:
            namespace[name] = replace[name]
        elif isinstance(value, Dispatcher):
            namespace[name] = _plain(value.py_func, replace, made)
    return plain
