"""Numeric functions for one parameterisation, generated from the derivation and cached on disk.

``load(name)`` returns a :class:`Compiled` whose attributes are plain Python functions; solving
never runs sympy. The generated module is cached under ``$QKDYN_CACHE/theory`` (default
``~/.cache/qkdyn/theory``), keyed by a hash of the theory sources and the sympy version, so a
change to the derivation regenerates it. Beside each ``NAME.py`` the cache keeps ``NAME.sha256``, the
sha256 of the generated source, written after it; the file is imported only if its content has that
hash. A file that does not (appended code, an edited right-hand side, a truncated write) is
regenerated, with one warning line on stderr; the imported code is the verified bytes themselves
(compiled from memory, not re-read from disk).

Generated functions (x: the reduced state, p: Setting.numeric(), vector flavour broadcasts):
    rhs(x, p), jac(x, p)                      eq. (1) and its Jacobian            [scalar]
    init(p, qk0, ov0)                         balanced initial state               [scalar]
    features(X, p) -> (qk, ov)                                                     [vector]
    attention(qk, p), loss(qk, ov, p)         alpha and L, eq. (2)                 [vector]
    invariants(X, p) -> tuple                 the named first integrals            [vector]
    metrics(X, p) -> (M_QK, M_OV)             rate of each feature per -eta dL/df  [vector]
    balanced_metrics(qk, ov, kappa, p)        their closed forms on balanced states [vector]
    kappa(X, p)                               the conserved kappa of a factorized QK [vector]
    dphi(qk, kappa, p), psi(ov, p)            the line Phi(qk) - rho Psi(ov)       [vector]
    line_scale(kappa, p) -> (A, beta)         its normal form (qkdyn.theory.sharpness) [vector]
    ov_law(t, p), qk_law(ov, p)               late-time laws (A3)                  [vector]
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import os
import sys
from pathlib import Path
from typing import Callable

import sympy as sp

from qkdyn import atomic
from qkdyn.errors import InputError
from qkdyn.theory import asymptotics, codegen, invariants, model, sharpness

_THEORY_DIR = Path(__file__).parent


@dataclasses.dataclass(frozen=True)
class Compiled:
    name: str
    variables: tuple[str, ...]
    invariant_names: tuple[str, ...]
    invariant_degrees: tuple[int, ...]
    rhs: Callable
    jac: Callable
    init: Callable
    features: Callable
    attention: Callable
    loss: Callable
    invariants: Callable
    metrics: Callable
    balanced_metrics: Callable
    kappa: Callable
    dphi: Callable
    psi: Callable
    line_scale: Callable
    ov_law: Callable
    qk_law: Callable


def generate_source(name: str) -> str:
    """The Python source of the numeric module for parameterisation ``name``."""
    d = model.derive(name)
    x, p = d.symbols, model.PARAMS
    qk, ov, kappa = model.qk, model.ov, invariants.kappa
    named = invariants.first_integrals(d)
    dphi, dpsi = invariants.line_integrands(d)
    _, psi = invariants.line_coordinates(d)
    laws = asymptotics.laws(d)
    src = codegen.HEADER
    src += f"VARIABLES = {tuple(v.name for v in d.variables)!r}\n"
    src += f"INVARIANT_NAMES = {tuple(named)!r}\n"
    degrees = tuple(int(sp.Poly(expr, *x).total_degree()) for expr in named.values())
    src += f"INVARIANT_DEGREES = {degrees!r}\n\n\n"
    src += codegen.function_source("rhs", [x, p], d.rhs, "scalar", "array")
    src += codegen.function_source("jac", [x, p], d.jacobian, "scalar", "matrix")
    init = [d.init[sym] for sym in x]
    src += codegen.function_source("init", [p, model.qk0, model.ov0], init, "scalar", "array")
    src += codegen.function_source("features", [x, p], [d.qk, d.ov], "vector")
    src += codegen.function_source("attention", [qk, p], [model.attention(qk)], "vector")
    src += codegen.function_source("loss", [qk, ov, p], [model.reduced_loss(qk, ov)], "vector")
    src += codegen.function_source("invariants", [x, p], list(named.values()) or [sp.S(0)], "vector")
    metrics = [invariants.metric(d.qk_circuit), invariants.metric(d.ov_circuit)]
    src += codegen.function_source("metrics", [x, p], metrics, "vector")
    closed = [invariants.balanced_metric(d.qk_circuit), invariants.balanced_metric(d.ov_circuit)]
    src += codegen.function_source("balanced_metrics", [qk, ov, kappa, p], closed, "vector")
    src += codegen.function_source("kappa", [x, p], [invariants.kappa_of(d.qk_circuit)], "vector")
    src += codegen.function_source("dphi", [qk, kappa, p], [dphi], "vector")
    src += codegen.function_source("psi", [ov, p], [psi], "vector")
    src += codegen.function_source("line_scale", [kappa, p], list(sharpness.line_normal_form(name)), "vector")
    src += codegen.function_source("ov_law", [model.t, p], [laws["ov"].solution], "vector")
    src += codegen.function_source("qk_law", [ov, p], [laws["qk"].solution], "vector")
    return src


def _cache_key() -> str:
    digest = hashlib.sha256(sp.__version__.encode())
    for path in sorted(_THEORY_DIR.glob("*.py")):
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def cache_dir() -> Path:
    root = Path(os.environ.get("QKDYN_CACHE", Path.home() / ".cache" / "qkdyn"))
    return root / "theory" / _cache_key()


def _verified_source(name: str) -> bytes:
    """The cached source of ``name`` if its sha256 matches the recorded one, else freshly generated
    (and cached). Damage is reported as one warning line."""
    directory = cache_dir()
    path, digest_path = directory / f"{name}.py", directory / f"{name}.sha256"
    try:
        if path.exists() or digest_path.exists():
            try:
                source, recorded = path.read_bytes(), digest_path.read_text().strip()
            except (OSError, UnicodeDecodeError):
                source, recorded = b"", ""
            if hashlib.sha256(source).hexdigest() == recorded:
                return source
            sys.stderr.write(f"qkdyn: warning: generated code {path} does not match its recorded sha256; "
                             "regenerating it\n")
        directory.mkdir(parents=True, exist_ok=True)
        text = generate_source(name)
        source = text.encode()
        atomic.write_text(path, text)
        atomic.write_text(digest_path, hashlib.sha256(source).hexdigest() + "\n")
        return source
    except OSError as exc:
        raise InputError(f"the code cache {directory} (under $QKDYN_CACHE) is unusable: {exc.strerror or exc}")


@functools.lru_cache(maxsize=None)
def load(name: str) -> Compiled:
    """The compiled numeric functions of parameterisation ``name`` (generated once, then cached)."""
    source = _verified_source(name)
    path = cache_dir() / f"{name}.py"
    module = type(sys)(f"qkdyn_generated_{name}")
    module.__file__ = str(path)
    exec(compile(source, str(path), "exec"), module.__dict__)
    functions = {f.name: getattr(module, f.name) for f in dataclasses.fields(Compiled)
                 if f.name not in ("name", "variables", "invariant_names", "invariant_degrees")}
    return Compiled(name, module.VARIABLES, module.INVARIANT_NAMES, module.INVARIANT_DEGREES, **functions)
