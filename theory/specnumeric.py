"""Numeric functions of a spec's derivation (:mod:`qkdyn.theory.specflow`), for solving and checking.

The four exact forms carry committed generated modules (:mod:`qkdyn.theory.compiled`); a spec
written as data gets its functions at run time by ``sympy.lambdify`` of the derived expressions,
with the stable primitives printed as SciPy's expit and NumPy's logaddexp (no code is read from any
file: the source is printed from the derivation in this process). ``p`` is Setting.numeric().
"""
from __future__ import annotations

import dataclasses
import functools
from typing import Callable

import numpy as np
import sympy as sp
from scipy import special

from qkdyn.theory.model import PARAMS, ov0, qk0
from qkdyn.theory.spec import Spec
from qkdyn.theory.specflow import derive_spec

_MODULES = [{"expit": special.expit, "softplus": lambda x: np.logaddexp(0, x)}, "numpy"]


@dataclasses.dataclass(frozen=True)
class SpecNumeric:
    """rhs(x, p), loss(x, p), features(x, p) -> (qk, ov, attn), init(p, qk0, ov0); jac(x, p) is built on
    first use (the symbolic Jacobian costs seconds and only the implicit integrators need it)."""

    spec: Spec
    variables: tuple[str, ...]
    rhs: Callable
    loss: Callable
    features: Callable
    init: Callable

    def jac(self, x, p) -> np.ndarray:
        return _jacobian(self.spec)(x, p)


def lambdify(args, outputs) -> Callable:
    """``sympy.lambdify`` with the stable primitives; the result returns a float array."""
    raw = sp.lambdify(args, outputs, modules=_MODULES, cse=True)
    return lambda *values: np.asarray(raw(*values), dtype=float)


@functools.lru_cache(maxsize=None)
def numeric(spec: Spec) -> SpecNumeric:
    """The numeric functions of ``spec`` (cached per spec)."""
    d = derive_spec(spec)
    x, p = list(d.symbols), list(PARAMS)
    return SpecNumeric(
        spec, tuple(v.name for v in d.variables), lambdify([x, p], list(d.rhs)), lambdify([x, p], d.loss),
        lambdify([x, p], [d.qk, d.ov, d.attn]), lambdify([p, qk0, ov0], [d.init[v] for v in x]))


@functools.lru_cache(maxsize=None)
def _jacobian(spec: Spec) -> Callable:
    d = derive_spec(spec)
    return lambdify([list(d.symbols), list(PARAMS)], d.jacobian)
