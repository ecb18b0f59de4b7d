"""The helpers and numba decorators of the generated modules (:mod:`qkdyn.theory.generated`).

Stable primitives: expit(x) = 1 / (1 + e^-x) and softplus(x) = log(1 + e^x), compiled, without
overflow for any finite x; for the vector functions, the lower branch W_{-1} of Lambert's W and
``shaped`` (outputs broadcast to the shape of the arguments).

``jit`` compiles a function of floats and arrays; ``field_kernel`` and ``scalar_kernel`` compile
C-callable wrappers on raw pointers: ``rhs_kernel(x, p, out)`` (out = f(x), eq. (1)) and
``loss_kernel(x, p) -> L(x)``. The integrator of :mod:`qkdyn.simulate.integrate` takes them as numba
first-class functions, so it is compiled once for every form, not once per form.

Compiled machine code is cached by numba only *in tree*: in the ``__pycache__`` beside the package's
own source files, the same place and the same trust as Python's ``.pyc`` files (whoever can write
there can rewrite the source itself). Where the package directory is not writable nothing is cached
on disk (the kernels compile in each process): numba's fallback to a per-user cache directory is
never used.
"""
from __future__ import annotations

import math
import os
from pathlib import Path

import numpy
from numba import cfunc, njit, types
from scipy import special


def cache_in_tree(source: str) -> bool:
    """Whether numba may cache the functions of the module file ``source`` (its directory is writable)."""
    return os.access(Path(source).parent, os.W_OK)


_CACHE = cache_in_tree(str(Path(__file__).parent / "generated" / "__init__.py"))
_POINTER = types.CPointer(types.float64)
#: signature of ``rhs_kernel``: (x, p, out) -> None
FIELD = types.void(_POINTER, _POINTER, _POINTER)
#: signature of ``loss_kernel``: (x, p) -> float
SCALAR = types.float64(_POINTER, _POINTER)

jit = njit(cache=_CACHE, error_model="numpy")  # IEEE division (inf, nan) as in the vector functions
field_kernel = cfunc(FIELD, cache=_CACHE)
scalar_kernel = cfunc(SCALAR, cache=_CACHE)


@jit
def expit(x):
    if x >= 0:
        return 1.0 / (1.0 + math.exp(-x))
    e = math.exp(x)
    return e / (1.0 + e)


@jit
def softplus(x):
    return x + math.log1p(math.exp(-x)) if x > 0 else math.log1p(math.exp(x))


def lambertw_lower(x):
    return numpy.real(special.lambertw(x, -1))


def shaped(like, *values):
    """Each value as a new float array of the broadcast shape of the arguments ``like``."""
    shape = numpy.broadcast(*like).shape if like else ()
    out = tuple(numpy.empty(shape) for _ in values)
    for target, value in zip(out, values):
        target[...] = value
    return out
