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
every lane's result is the same bits at any number of lanes. ``lane_expit`` is expit through it,
``lane_expit_pair`` expit(x) and expit(-x) through one exponential.

The C-callable kernels are compiled (or loaded from numba's cache) when their ``address`` is first
read, not when their module is imported (:class:`LazyCallback`): a process that never calls them,
or calls them only after a cold start (:mod:`qkdyn.simulate.coldstart`), pays nothing for them, and
:func:`has_machine_code` tells, without compiling or loading anything, whether the cache holds them.

Compiled machine code is cached by numba only *in tree* (:class:`TreeCache`: every function compiled by
:func:`cached_njit` or :func:`c_callback`): in the folder ``__pycache__/numba`` beside the module's source
file (under ``NUMBA_CACHE_DIR`` where that is set), the place and the trust of Python's ``.pyc`` files
(whoever can write there can rewrite the source itself); numba's fallback to a per-user folder is never
used. An entry is current while the module's source and that of every project module whose compiled functions
it links in are unchanged (numba's own stamp covers the one file: :func:`linked_sources`). The folder is created
writable by its owner only, and (on POSIX) an entry is read only where the
folder and the file are owned by this user or root and writable by no one else: a cache others could
have written is ignored (said once, on stderr). Where the folder cannot be written (a read-only install)
its entries are still read and what they lack compiles in memory, in each process (said once). Each data
file (``.nbc``) begins with the sha256 of the rest, checked before it is unpickled: a damaged entry (a
truncated or garbage ``.nbc`` or ``.nbi``) is discarded with one line on stderr and compiled again.
"""
from __future__ import annotations

import contextlib
import decimal
import hashlib
import inspect
import math
import os
import pickle
import stat
import sys
import tempfile

import numpy
from llvmlite import ir
from numba import njit, types
from numba.core import config, sigutils
from numba.core.caching import (
    CompileResultCacheImpl,
    FunctionCache,
    IndexDataCacheFile,
    _CacheLocator,
    _SourceFileBackedLocatorMixin,
)
from numba.core.ccallback import CFunc
from numba.core.dispatcher import Dispatcher
from numba.core.extending import _Intrinsic
from numba.extending import intrinsic
from scipy import special

#: the owners whose cache files numba may read (this user and root); None where there are no POSIX owners
_OWNERS = (os.geteuid(), 0) if hasattr(os, "geteuid") else None
_OTHERS_WRITE = stat.S_IWGRP | stat.S_IWOTH
_DIGEST = hashlib.sha256().digest_size
_said_not_cached: list[str] = []  # the folder named by this process's one "not cached" line, once said


def _untrusted(path: str, is_kind) -> str | None:
    """Why numba's cache must not read ``path`` (its folder, ``is_kind`` ``stat.S_ISDIR``, or one of its
    files, ``stat.S_ISREG``), or None: a link, or (on POSIX) owned by another user than this one or root,
    or writable by group or others. FileNotFoundError where it does not exist."""
    status = os.lstat(path)
    if not is_kind(status.st_mode):
        return "is a link or not a plain " + ("folder" if is_kind is stat.S_ISDIR else "file")
    if _OWNERS is not None and status.st_uid not in _OWNERS:
        return f"is owned by uid {status.st_uid}, neither this user nor root"
    if _OWNERS is not None and status.st_mode & _OTHERS_WRITE:
        return "is writable by group or others"
    return None


def _say_not_cached(folder: str, problem: str) -> None:
    """One line on stderr, once a process: compiled code is not cached (the first folder that failed)."""
    if not _said_not_cached:
        _said_not_cached.append(folder)
        sys.stderr.write(f"qkdyn: warning: numba's cache folder {folder} {problem}: compiled code stays in "
                         "memory (each process compiles what the cache lacks)\n")


def _compiled_function_of(value):
    """The Python function behind ``value`` where numba links it into the machine code of a compiled caller (a
    dispatcher's ``py_func``, an intrinsic's definition), else None (a C callback is called by its address)."""
    if isinstance(value, Dispatcher):
        return value.py_func
    if isinstance(value, _Intrinsic):
        return value._defn
    return None


def linked_sources(py_func) -> tuple[str, ...]:
    """The source files, sorted, of the project's compiled functions (modules named ``qkdyn.*``) that the module
    of ``py_func`` names in its globals, directly or as attributes of a project module it imports, and of those
    they name in turn, its own file left out: what numba may link into the machine code of ``py_func``
    (read at decoration time: every import stands at the top of a module)."""
    own, found, seen = py_func.__code__.co_filename, set(), set()
    pending = [py_func.__globals__]
    while pending:
        namespace = pending.pop()
        values = list(namespace.values())
        values += [v for module in namespace.values() if inspect.ismodule(module) and
                   module.__name__.startswith("qkdyn.") for v in vars(module).values()]
        for value in values:
            function = _compiled_function_of(value)
            if function is None or not getattr(function, "__module__", "").startswith("qkdyn."):
                continue
            path = function.__code__.co_filename
            if path != own:
                found.add(path)
            if id(function.__globals__) not in seen:
                seen.add(id(function.__globals__))
                pending.append(function.__globals__)
    return tuple(sorted(found))


def _file_digest(path: str) -> bytes:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).digest()


class _TreeLocator(_SourceFileBackedLocatorMixin, _CacheLocator):
    """numba's cache locator for the project's functions: ``__pycache__/numba`` beside the module's file, or
    its folder under ``NUMBA_CACHE_DIR`` where that is set; never numba's per-user fallback. Found without
    writing anything (an existing folder is read even where it cannot be written); created on the first save,
    writable by its owner only."""

    def __init__(self, py_func, py_file):
        self._py_file, self._lineno = py_file, py_func.__code__.co_firstlineno
        self._linked = linked_sources(py_func)
        self._cache_path = (os.path.join(config.CACHE_DIR, self.get_suitable_cache_subpath(py_file)) if config.CACHE_DIR
                            else os.path.join(os.path.dirname(py_file), "__pycache__", "numba"))

    def get_cache_path(self):
        return self._cache_path

    def get_source_stamp(self):
        """numba's stamp of the module's source (its sha256) and the sha256 of each file of :func:`linked_sources`:
        an entry compiled against another version of a linked helper is stale, and compiled again."""
        return (super().get_source_stamp(), *(_file_digest(path) for path in self._linked))

    @classmethod
    def from_function(cls, py_func, py_file):
        return cls(py_func, py_file)

    def ensure_cache_path(self):
        """Create the folder (mode 0755 less the umask: never writable by group or others) and check that
        numba may read and write it: OSError otherwise."""
        os.makedirs(os.path.dirname(self._cache_path), exist_ok=True)
        with contextlib.suppress(FileExistsError):
            os.mkdir(self._cache_path, 0o755)
        problem = _untrusted(self._cache_path, stat.S_ISDIR)
        if problem:
            raise PermissionError(problem)
        tempfile.TemporaryFile(dir=self._cache_path).close()


class _TreeCacheImpl(CompileResultCacheImpl):
    """numba's cache of compiled functions, located by :class:`_TreeLocator` only."""

    _locator_classes = [_TreeLocator]


class _CheckedFile(IndexDataCacheFile):
    """numba's index and data files of one function, read only from a trusted folder (:func:`_untrusted`),
    each data file prefixed with the sha256 of the rest (checked before it is unpickled), written never
    writable by group or others; a damaged or untrusted file is discarded (one line on stderr) and read as
    missing, so numba compiles and saves the entry again."""

    def _discard(self, path: str, problem: str) -> None:
        sys.stderr.write(f"qkdyn: warning: numba's cache file {path} {problem}; discarding it (the code is compiled "
                         "again)\n")
        with contextlib.suppress(OSError):
            os.unlink(path)

    def _load_index(self):
        try:
            folder_problem = _untrusted(self._cache_path, stat.S_ISDIR)
        except FileNotFoundError:
            return {}
        if folder_problem:
            _say_not_cached(self._cache_path, folder_problem)
            return {}
        try:
            problem = _untrusted(self._index_path, stat.S_ISREG)
            if problem is None:
                return super()._load_index()
        except FileNotFoundError:
            return {}
        except Exception as error:  # noqa: BLE001 (a truncated or garbage index: whatever unpickling raises)
            problem = f"is unreadable ({type(error).__name__}: {error})"
        self._discard(self._index_path, problem)
        return {}

    def _load_data(self, name):
        path = self._data_path(name)
        try:
            problem = _untrusted(path, stat.S_ISREG)
            if problem is None:
                with open(path, "rb") as f:
                    digest, payload = f.read(_DIGEST), f.read()
                if hashlib.sha256(payload).digest() == digest:
                    return pickle.loads(payload)
                problem = "fails its checksum (truncated or overwritten)"
        except FileNotFoundError:
            return None
        except Exception as error:  # noqa: BLE001 (whatever reading or unpickling raises)
            problem = f"is unreadable ({type(error).__name__}: {error})"
        self._discard(path, problem)
        return None

    def save(self, key, data):
        """numba's save (read the index, add the entry, write the index back, write its data file) under an
        exclusive lock on the folder's :data:`_LOCK_NAME`: two processes saving into one folder at once would each
        write back the index it read, and one entry would be lost (``fcntl``; where it is missing, unlocked)."""
        with _locked(os.path.join(self._cache_path, _LOCK_NAME)):
            super().save(key, data)

    def _save_data(self, name, data):
        payload = self._dump(data)
        with self._open_for_write(self._data_path(name)) as f:
            f.write(hashlib.sha256(payload).digest() + payload)

    @contextlib.contextmanager
    def _open_for_write(self, filepath):
        with super()._open_for_write(filepath) as f:
            yield f
            if _OWNERS is not None:  # whatever the umask: writable by the owner only
                os.fchmod(f.fileno(), stat.S_IMODE(os.fstat(f.fileno()).st_mode) & ~_OTHERS_WRITE)


#: the file in a cache folder whose lock serialises saves (:meth:`_CheckedFile.save`)
_LOCK_NAME = ".qkdyn-save.lock"


@contextlib.contextmanager
def _locked(path: str):
    """Hold an exclusive ``flock`` on ``path`` (created owner-only where missing) for the block; no lock where the
    platform has no ``fcntl``."""
    try:
        import fcntl
    except ImportError:  # Windows: saves are unlocked, as numba's own
        yield
        return
    descriptor = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX)
        yield
    finally:
        os.close(descriptor)  # releases the lock


class TreeCache(FunctionCache):
    """numba's cache of one compiled function, in tree (or under ``NUMBA_CACHE_DIR``: :class:`_TreeLocator`)
    and read only where trusted (:class:`_CheckedFile`); where the folder cannot be written, the machine
    code compiled stays in memory (:func:`_say_not_cached`)."""

    _impl_class = _TreeCacheImpl

    def __init__(self, py_func):
        super().__init__(py_func)
        self._cache_file = _CheckedFile(self._cache_path, self._impl.filename_base,
                                        self._impl.locator.get_source_stamp())

    def save_overload(self, sig, data):
        try:
            super().save_overload(sig, data)
        except OSError as error:
            _say_not_cached(self._cache_path, f"cannot be written ({error.strerror or error})")


def cached_njit(**options):
    """``numba.njit(**options)``, its machine code cached in tree (:class:`TreeCache`)."""
    def decorate(function):
        dispatcher = njit(**options)(function)
        dispatcher._cache = TreeCache(dispatcher.py_func)
        return dispatcher
    return decorate


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
        if cache:  # numba's CFunc has a _cache (its stub in numba/core/ccallback.pyi leaves it out)
            self.callback._cache = TreeCache(function)  # type: ignore[attr-defined]
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
        address = self.callback.address
        assert address is not None  # None only before compile()
        return address

    @property
    def ctypes(self):
        """The C function as a ctypes function object (compiled or loaded first, once)."""
        self._compile()
        return self.callback.ctypes

    def cached(self) -> bool:
        """Whether its machine code is in this process already or in numba's cache (:func:`has_machine_code`)."""
        # numba's CFunc has _cache and _targetdescr (its stub in numba/core/ccallback.pyi leaves them out)
        callback = self.callback
        return self._compiled or has_machine_code(callback._cache,  # type: ignore[attr-defined]
                                                  callback._targetdescr.target_context)  # type: ignore[attr-defined]


def c_callback(signature, cache: bool = True, **options):
    """``numba.cfunc(signature, **options)`` as a :class:`LazyCallback`, cached in tree (:class:`TreeCache`)
    unless ``cache`` is False."""
    return lambda function: LazyCallback(function, signature, cache, options)


def has_machine_code(cache, target_context) -> bool:
    """Whether numba's cache ``cache`` (a function's) holds machine code for this CPU and the function's
    current bytecode, under any signature (each function here is compiled for one): numba's own index
    lookup (a fresh index of the source file, then the key's CPU and code hashes) without loading the
    code (the index is read as numba reads it: :class:`TreeCache`). ``False`` where numba's cache internals
    are not as expected (numba then compiles, as it would)."""
    try:
        magic, code = cache._index_key((), target_context.codegen())[1:]
        return any(key[1:] == (magic, code) for key in cache._cache_file._load_index())
    except Exception:  # noqa: BLE001 (numba's private cache layout changed: treated as not cached)
        return False


jit = cached_njit(error_model="numpy")  # IEEE division (inf, nan) as in the vector functions
scalar_kernel = c_callback(SCALAR)
lanes_kernel = c_callback(LANES, error_model="numpy")  # IEEE division: no checks, so the loop runs in SIMD


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


@cached_njit(error_model="numpy", inline="always")
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


@cached_njit(error_model="numpy", inline="always")
def lane_expit(x):
    e = lane_exp(-abs(x))
    return (1.0 if x >= 0 else e) / (1.0 + e)  # expit's two branches, the numerator chosen: one division


@cached_njit(error_model="numpy", inline="always")
def lane_expit_pair(x):
    """(expit(x), expit(-x)) from one exponential: the same bits as ``lane_expit(x)`` and ``lane_expit(-x)``
    (both take e^-|x|; only the numerator differs)."""
    e = lane_exp(-abs(x))
    return (1.0 if x >= 0 else e) / (1.0 + e), (1.0 if -x >= 0 else e) / (1.0 + e)


def lambertw_lower(x):
    return numpy.real(special.lambertw(x, -1))


def shaped(like, *values):
    """Each value as a new float array of the broadcast shape of the arguments ``like``."""
    shape = numpy.broadcast(*like).shape if like else ()
    out = tuple(numpy.empty(shape) for _ in values)
    for target, value in zip(out, values, strict=True):
        target[...] = value
    return out
