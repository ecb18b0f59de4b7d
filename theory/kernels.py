"""numba decorators for the generated scalar kernels (:mod:`qkdyn.theory.generated`).

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

import os
from pathlib import Path

from numba import cfunc, njit, types


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
