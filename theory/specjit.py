"""A spec's right-hand side and Jacobian compiled by numba in this process, once running them uncompiled has cost
about what compiling them costs.

:class:`qkdyn.theory.specnumeric.OneState` evaluates a spec's derived expressions one state at a time, printed by
``sympy.lambdify`` (common subexpressions eliminated by ``sympy.cse``) with Python's math module: 3-25 us a call,
most of a solve's time where the field is large (about 90% for examples/specs/coupled_leapfrog.json). The same
printed expressions compiled by numba cost about a microsecond a call, but compiling them costs about a second for
a right-hand side and seconds more for a Jacobian, in every process: numba caches only a function that has a
source file, and no generated source is written to disk (it is printed from the derivation in this process, as
lambdify's is). So :class:`Rented` follows the rent-or-buy rule that :mod:`qkdyn.simulate.coldstart` applies to
solves (one :class:`~qkdyn.theory.rentorbuy.RentOrBuy` per function): the caller times its uncompiled calls and rents
them here; once they add up to the estimated compile time (:func:`compile_seconds`, from the printed function's
length), the function compiles once and every later call runs compiled. A process that solves a spec a few times
never compiles it; one that solves it many times spends at most about twice what the better choice in hindsight
(compiling at once, or never) would have cost.

The same expressions: :func:`source` prints the ``sympy.cse`` result the uncompiled function was printed from, with
the code printer ``lambdify`` uses for the math module, each output written into an array; so the compiled
function performs the same operations in the same order (no fast-math; an integer power's exponent printed as a
float, so that numba calls pow as CPython does instead of multiplying), with the same C library's math
functions, and its values agree with the uncompiled ones to the last bit or nearly (tests/theory/test_specjit.py
measures it).

Overflow: Python's math raises where an intermediate overflows (``math.exp``) or is undefined (a log of 0, a
division by zero), and OneState then answers with lambdify's NumPy function (IEEE infinities and NaN). Compiled,
the arithmetic is IEEE's (numba's ``math.exp`` returns inf; ``error_model="numpy"``: a division by zero gives
+-inf or NaN) and the function returns whether every output is finite; where one is not, the caller answers
with that same NumPy function. So the compiled path answers a call with a non-finite value exactly where the
uncompiled one does, with the same values (a finite answer after an overflow, 1 / inf = 0, is the IEEE value
that NumPy's function gives too).
"""
from __future__ import annotations

import keyword
import math
import time
from collections.abc import Callable, Sequence

import numba
import numpy as np
from qkdyn.theory.rentorbuy import RentOrBuy

#: estimated seconds of one compilation: a fixed part, and a part per printed line (a subexpression or an output).
#: Measured (CPU-s, one core, the first compilation of a process / a later one): 19 lines 0.42 / 0.24, 41 lines
#: 0.49, 117 lines 0.69 / 0.55, 343 lines 1.54, 186 lines 0.96 / 0.61 and 1278 lines 5.8 / 5.5 (the right-hand side
#: and the Jacobian of examples/specs/coupled_leapfrog.json); ``make bench``'s bench_specs prints each it compiles
FIXED_SECONDS, SECONDS_PER_LINE = 0.4, 4e-3
#: the names of the printed function's arguments (a spec's names never start with an underscore)
_ARRAYS, _SCALE, _OUT = ("_x", "_p"), "_scale", "_out"


def compile_seconds(lines: int) -> float:
    """The estimated compile time of a printed function of ``lines`` lines (:data:`FIXED_SECONDS`,
    :data:`SECONDS_PER_LINE`): the rent :class:`Rented` pays before it compiles."""
    return FIXED_SECONDS + SECONDS_PER_LINE * lines


def source(args: Sequence[Sequence], cses: Sequence[tuple], outputs: Sequence, shape: tuple[int, ...]) -> str:
    """The Python source of ``f(_x, _p, _scale, _out) -> bool``: the arguments (two lists of sympy symbols, the
    state's and the parameters') read from the arrays ``_x`` and ``_p``, the subexpressions ``cses``
    (``sympy.cse``'s pairs) and the ``outputs`` (its reduced expressions, flat) printed by lambdify's printer for
    the math module (integer exponents as floats, :func:`_printer`), output k times the float ``_scale`` (rounded
    once more, as NumPy's ``scale * outputs``: e^tau for a flow in log time) written to ``_out`` at the k-th index
    of ``shape`` (row-major); True where every output is finite. An array of the wrong length raises ValueError,
    as the uncompiled function does. ValueError where a symbol's name is not a plain Python name (lambdify would
    print a stand-in)."""
    from qkdyn.theory.specnumeric import PRIMITIVES

    printer = _printer()({"fully_qualified_modules": False, "inline": True, "allow_unknown_functions": True,
                          "user_functions": {name: name for name in PRIMITIVES}})
    sizes = " or ".join(f"len({array}) != {len(symbols)}" for array, symbols in zip(_ARRAYS, args, strict=True))
    lines = [f"def f({', '.join(_ARRAYS)}, {_SCALE}, {_OUT}):", f"    if {sizes}:",
             "        raise ValueError('an argument has the wrong number of values')"]
    for array, symbols in zip(_ARRAYS, args, strict=True):
        for i, symbol in enumerate(symbols):
            name = symbol.name
            if not name.isidentifier() or keyword.iskeyword(name) or name.startswith("_"):
                raise ValueError(f"{name!r} is not a plain Python name")
            lines.append(f"    {name} = {array}[{i}]")
    lines += [f"    {printer.doprint(symbol)} = {printer.doprint(value)}" for symbol, value in cses]
    for index, value in zip(np.ndindex(*shape), outputs, strict=True):
        lines.append(f"    {_OUT}[{', '.join(map(str, index))}] = {_SCALE}*({printer.doprint(value)})")
    lines += [f"    for _value in {_OUT}.flat:", "        if not math.isfinite(_value):", "            return False",
              "    return True"]
    return "\n".join(lines) + "\n"


def _printer() -> type:
    """lambdify's code printer for the math module (``PythonCodePrinter``, as lambdify configures it), but for an
    integer power's exponent, printed as a float: ``x**3.0`` is the same number as ``x**3`` in Python (CPython
    converts the exponent and calls the C library's pow), where numba would multiply for an integer exponent
    (x*x*x, rounded twice: up to ~1e3 ulps apart after a Jacobian's cancellations)."""
    from sympy.printing.precedence import precedence
    from sympy.printing.pycode import PythonCodePrinter

    class FloatPowers(PythonCodePrinter):
        def _print_Pow(self, expr, rational=False):
            if expr.exp.is_Integer and expr.exp != -1:  # -1 prints as a division, as lambdify's
                return f"{self.parenthesize(expr.base, precedence(expr), strict=False)}**{float(expr.exp)!r}"
            return super()._print_Pow(expr, rational)

    return FloatPowers


def compile_source(text: str, shape: tuple[int, ...]) -> Callable[..., bool]:
    """:func:`source`'s function compiled by numba for float64 arrays (C order), in memory: its names are the
    math module's, and the stable primitives are the compiled kernels of :mod:`qkdyn.theory.kernels`."""
    from qkdyn.theory.kernels import expit, softplus

    namespace = {name: getattr(math, name) for name in dir(math) if not name.startswith("_")}
    namespace.update(math=math, expit=expit, softplus=softplus)
    exec(compile(text, "<qkdyn.theory.specjit>", "exec"), namespace)  # noqa: S102 - source printed in this process
    array, out = numba.float64[::1], numba.types.Array(numba.float64, len(shape), "C")
    signature = numba.boolean(array, array, numba.float64, out)
    compiled: Callable[..., bool] = numba.njit(signature, error_model="numpy")(namespace["f"])
    return compiled


class Rented:
    """A function printed from ``sympy.cse``'s ``cses`` and ``outputs`` (of two arguments, :func:`source`), run
    uncompiled by its caller until those runs have cost about its compile time, then compiled (module docstring).
    ``compiled`` is None until then, afterwards ``f(x, p, scale, out) -> bool`` (:func:`source`); ``compile_time`` is
    the compilation's measured seconds (printing included). Where numba refuses the function (an expression it
    cannot type: an integer constant beyond 64 bits), ``refused`` is its error and the function stays uncompiled
    for good."""

    def __init__(self, args: Sequence[Sequence], cses: Sequence[tuple], outputs: Sequence,
                 shape: tuple[int, ...]) -> None:
        self.shape = shape
        self.choice = RentOrBuy(compile_seconds(len(cses) + len(outputs)))
        self.compiled: Callable[..., bool] | None = None
        self.compile_time: float | None = None
        self.refused: numba.core.errors.NumbaError | None = None
        self._printed = (args, cses, outputs)

    @property
    def python_seconds(self) -> float:
        """Seconds the uncompiled calls have cost so far (the rent paid)."""
        return self.choice.rented

    def rent(self, seconds: float) -> None:
        """Count ``seconds`` of one uncompiled call; where the rent now reaches the compile time, compile."""
        self.choice.rent(seconds)
        if self.refused is None and self.choice.choose("compiled", _never_cached):
            self.buy()

    def buy(self) -> None:
        """Compile now (the rent paid, or a caller that knows it will pay it)."""
        start = time.perf_counter()
        try:
            self.compiled = compile_source(source(*self._printed, self.shape), self.shape)
        except numba.core.errors.NumbaError as error:
            self.refused = error
        self.compile_time = time.perf_counter() - start


def _never_cached() -> bool:
    """Whether machine code for the function is cached: never (numba caches only functions with a source file)."""
    return False
