"""The helpers and numba decorators of the generated modules (:mod:`qkdyn.theory.generated`).

Stable primitives: expit(x) = 1 / (1 + e^-x) and softplus(x) = log(1 + e^x), compiled, without
overflow for any finite x; for the vector functions, the lower branch W_{-1} of Lambert's W and
``shaped`` (outputs broadcast to the shape of the arguments).

``jit`` compiles a function of floats and arrays; ``lanes_kernel`` and ``scalar_kernel`` compile
C-callable functions on raw pointers: ``rhs_lanes_kernel(x, p, scale, out, lanes)`` (out = scale f(x),
eq. (1), at ``lanes`` states at once, arrays stored (component, lane)) and ``loss_kernel(x, p) -> L(x)``. The integrator of
:mod:`qkdyn.simulate.integrate` calls them through their addresses, so it is compiled once for every
form, not once per form.

Lanes: ``lane_exp`` is e^x without a library call: x = (256 k' + j) log(2)/256 + r with |r| <= log(2)/512
(the reduction in two parts, Cody and Waite), e^x = 2^k' 2^(j/256) (1 + q(r)), the 256 values 2^(j/256)
a table of the nearest doubles, q(r) = e^r - 1 by its Taylor polynomial to degree 5 (remainder
r^6/6! < 1e-20), multiply-adds fused (one rounding each), 2^k' built from its bits in two halves so
that subnormal results round once. Within one ulp of ``math.exp`` on the normal range (a test
measures it), 0 below -745.2, inf above 709.8, NaN for NaN. Being straight-line arithmetic (and a
table read), a loop over lanes of it compiles to SIMD instructions (the libm call would not), and
every lane's result is the same bits at any number of lanes. ``lane_expit`` is expit through it.

The C-callable kernels are compiled (or loaded from numba's cache) when their ``address`` is first
read, not when their module is imported (:class:`LazyCallback`): a process that never calls them,
or calls them only after a cold start (:mod:`qkdyn.simulate.coldstart`), pays nothing for them, and
:func:`has_machine_code` tells, without compiling or loading anything, whether the cache holds them.

Compiled machine code is cached by numba only *in tree*: in the ``__pycache__`` beside the package's
own source files, the same place and the same trust as Python's ``.pyc`` files (whoever can write
there can rewrite the source itself). Where the package directory is not writable nothing is cached
on disk (the kernels compile in each process): numba's fallback to a per-user cache directory is
never used.
"""
from __future__ import annotations

import decimal
import math
import os
from pathlib import Path

import numpy
from llvmlite import ir
from numba import njit, types
from numba.core import sigutils
from numba.core.ccallback import CFunc
from numba.extending import intrinsic
from scipy import special


def cache_in_tree(source: str) -> bool:
    """Whether numba may cache the functions of the module file ``source`` (its directory is writable)."""
    return os.access(Path(source).parent, os.W_OK)


_CACHE = cache_in_tree(str(Path(__file__).parent / "generated" / "__init__.py"))
_POINTER = types.CPointer(types.float64)
#: signature of ``loss_kernel``: (x, p) -> float
SCALAR = types.float64(_POINTER, _POINTER)
#: signature of ``rhs_lanes_kernel``: (x, p, scale, out, lanes) -> None, arrays (component, lane) row-major
LANES = types.void(_POINTER, _POINTER, _POINTER, _POINTER, types.int64)


class LazyCallback:
    """A numba C callback (``numba.cfunc``) compiled, or loaded from numba's cache, on the first read of
    its :attr:`address` (``numba.cfunc`` does so when the decorated module is imported)."""

    def __init__(self, function, signature, cache: bool, options: dict):
        self.callback = CFunc(function, sigutils.normalize_signature(signature), locals={}, options=options)
        if cache:
            self.callback.enable_caching()
        self.__name__, self.__doc__ = function.__name__, function.__doc__
        self._compiled = False

    def _compile(self) -> None:
        if not self._compiled:
            self.callback.compile()
            self._compiled = True

    @property
    def address(self) -> int:
        """The C function's address (compiled or loaded first, once)."""
        self._compile()
        return self.callback.address

    @property
    def ctypes(self):
        """The C function as a ctypes function object (compiled or loaded first, once)."""
        self._compile()
        return self.callback.ctypes

    def cached(self) -> bool:
        """Whether its machine code is in this process already or in numba's cache (:func:`has_machine_code`)."""
        return self._compiled or has_machine_code(self.callback._cache, self.callback._targetdescr.target_context)


def c_callback(signature, cache: bool, **options):
    """``numba.cfunc(signature, cache=cache, **options)`` as a :class:`LazyCallback`."""
    return lambda function: LazyCallback(function, signature, cache, options)


def has_machine_code(cache, target_context) -> bool:
    """Whether numba's cache ``cache`` (a function's) holds machine code for this CPU and the function's
    current bytecode, under any signature (each function here is compiled for one): numba's own index
    lookup (a fresh index of the source file, then the key's CPU and code hashes) without loading the
    code (the index is numba's own in-tree file, trusted as it is when numba loads it). ``False`` where
    numba's cache internals are not as expected (numba then compiles, as it would)."""
    try:
        magic, code = cache._index_key((), target_context.codegen())[1:]
        return any(key[1:] == (magic, code) for key in cache._cache_file._load_index())
    except Exception:  # noqa: BLE001 (numba's private cache layout changed: treated as not cached)
        return False


jit = njit(cache=_CACHE, error_model="numpy")  # IEEE division (inf, nan) as in the vector functions
scalar_kernel = c_callback(SCALAR, cache=_CACHE)
lanes_kernel = c_callback(LANES, cache=_CACHE, error_model="numpy")  # IEEE division: no checks, so the loop runs in SIMD


@jit
def expit(x):
    if x >= 0:
        return 1.0 / (1.0 + math.exp(-x))
    e = math.exp(x)
    return e / (1.0 + e)


@jit
def softplus(x):
    return x + math.log1p(math.exp(-x)) if x > 0 else math.log1p(math.exp(x))


@intrinsic
def _double_of_bits(typingctx, bits):
    """The double whose IEEE bits are the int64 ``bits``."""
    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.DoubleType())
    return types.float64(types.int64), codegen


@intrinsic
def _bits_of_double(typingctx, x):
    """The IEEE bits of the double ``x`` as an int64."""
    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.IntType(64))
    return types.int64(types.float64), codegen


@intrinsic
def _fma(typingctx, a, b, c):
    """a b + c rounded once (IEEE fused multiply-add: one instruction where the CPU has it, the same
    bits in a SIMD lane as alone)."""
    def codegen(context, builder, signature, args):
        double = ir.DoubleType()
        fma = builder.module.declare_intrinsic("llvm.fma", [double], ir.FunctionType(double, [double] * 3))
        return builder.call(fma, args)
    return types.float64(types.float64, types.float64, types.float64), codegen


def _exp2_table(size: int) -> numpy.ndarray:
    """2^(j / size) for j = 0..size-1, each the double nearest to it (decided in integers: m / 2^52 is
    nearest to 2^(j/size) where (m -+ 1/2)^size brackets 2^(j + 52 size))."""
    out = []
    for j in range(size):
        power = j + 52 * size
        m = round(math.exp2(j / size) * 2.0**52)
        while (2 * m - 1) ** size > 1 << (power + size):
            m -= 1
        while (2 * m + 1) ** size < 1 << (power + size):
            m += 1
        out.append(m / 2.0**52)
    return numpy.array(out)


_TABLE_BITS = 8
_EXP2_TABLE = _exp2_table(1 << _TABLE_BITS)
_STEP = decimal.Context(prec=40).divide(decimal.Context(prec=40).ln(decimal.Decimal(2)), 1 << _TABLE_BITS)
_STEP_HI = math.floor(_STEP * 2**41) / 2.0**41  # log(2)/256 to 32 bits: k _STEP_HI is exact for |k| < 2^21
_STEP_LO, _INV_STEP = float(_STEP - decimal.Decimal(_STEP_HI)), float(1 / _STEP)
_ROUNDER = 1.5 * 2.0**52  # x + _ROUNDER - _ROUNDER rounds x (|x| < 2^51) to an integer, kept in the low bits


@njit(cache=_CACHE, error_model="numpy", inline="always")
def lane_exp(x):
    shifted = _fma(x, _INV_STEP, _ROUNDER)
    k = shifted - _ROUNDER
    r = _fma(-k, _STEP_LO, _fma(-k, _STEP_HI, x))
    bits = _bits_of_double(shifted) - _bits_of_double(_ROUNDER)  # k as an integer
    r2 = r * r
    tail = _fma(r2, _fma(r2, _fma(r, 1.0 / 120.0, 1.0 / 24.0), _fma(r, 1.0 / 6.0, 0.5)), r)  # e^r - 1
    power = bits >> _TABLE_BITS
    half = power >> 1
    # 2^(j/256) 2^half is exact (a normal double) and off the polynomial's path: one multiply less on it
    t = _EXP2_TABLE[bits & ((1 << _TABLE_BITS) - 1)] * _double_of_bits((half + 1023) << 52)
    value = _fma(t, tail, t) * _double_of_bits((power - half + 1023) << 52)
    # past the ends the reduction is meaningless: e^x is inf or 0 there (NaN compares false: stays NaN)
    return math.inf if x > 710.0 else (0.0 if x < -746.0 else value)


@njit(cache=_CACHE, error_model="numpy", inline="always")
def lane_expit(x):
    e = lane_exp(-abs(x))
    return (1.0 if x >= 0 else e) / (1.0 + e)  # expit's two branches, the numerator chosen: one division


def lambertw_lower(x):
    return numpy.real(special.lambertw(x, -1))


def shaped(like, *values):
    """Each value as a new float array of the broadcast shape of the arguments ``like``."""
    shape = numpy.broadcast(*like).shape if like else ()
    out = tuple(numpy.empty(shape) for _ in values)
    for target, value in zip(out, values):
        target[...] = value
    return out
