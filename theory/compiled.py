"""Numeric functions for one parameterisation, from the modules generated out of the derivation.

``load(name)`` returns a :class:`Compiled`. Its functions come from ``qkdyn.theory.generated.NAME``,
package code written by ``python -m qkdyn.theory.generate`` (the list of functions and their maths is
in :mod:`qkdyn.theory.generate`); loading imports that module and nothing else, so solving never runs
sympy and nothing is executed from a cache or any other data directory.

Vector functions return float arrays broadcast to the shape of their arguments (one array, or a
tuple of arrays for several outputs: ``features``, ``invariants``, ``metrics``, ``balanced_metrics``,
``line_scale``). ``rhs(x, p)``, ``jac(x, p)`` and ``state_loss(x, p)`` are the compiled kernels called
from Python (a new 1-D / 2-D array, or a float, each call); the kernels themselves take ``kernel_parameters(p)``, the
parameters followed by their parameter-only subexpressions (computed once per setting); ``rhs_lanes_kernel`` and ``loss_kernel`` are the C-callable kernels the compiled
integrator (:mod:`qkdyn.simulate.integrate`) takes, ``psi_gain_kernel`` and ``m_ov_kernel`` those of the
compiled matched-loss solver (:mod:`qkdyn.simulate.closedform`), ``balanced_lanes_kernel`` and
``balanced_loss_kernel`` (on ``balanced_kernel_parameters(p, kappa)``) the integrator's of the flow of the
features alone (:mod:`qkdyn.simulate.sweep`).
"""
from __future__ import annotations

import dataclasses
import functools
import importlib
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np
from qkdyn.theory.setting import ALL_PARAMS

if TYPE_CHECKING:  # numba is imported with the generated module, by load(): not by importing this one
    from numba.core.dispatcher import Dispatcher
    from qkdyn.theory.kernels import LazyCallback

_VECTOR = ("features", "attention", "loss", "invariants", "metrics", "balanced_metrics", "kappa", "dphi", "psi",
           "psi_gain", "line_scale", "ov_law", "qk_law", "qk_law_constant", "frozen_time", "balanced_start",
           "balanced_kernel_parameters")


@dataclasses.dataclass(frozen=True)
class Compiled:
    name: str
    variables: tuple[str, ...]
    invariant_names: tuple[str, ...]
    invariant_degrees: tuple[int, ...]
    law_powers: tuple[int, int, int]  # (i, j, d) of the late-time laws e^qk / qk^i = C ov^d, e^ov / ov^j = T
    a4_proof: tuple[tuple[str, bool], ...]  # claim A4's proof steps as sympy decided them at generation
    rhs_into: Dispatcher[Callable[..., None]]
    jac_into: Dispatcher[Callable[..., None]]
    state_loss_into: Dispatcher[Callable[..., float]]
    rhs_lanes_kernel: LazyCallback
    loss_kernel: LazyCallback
    psi_gain_kernel: LazyCallback  # C-callable psi_gain(x = (a, s), p) and balanced M_OV(x = (qk, ov, kappa), p)
    m_ov_kernel: LazyCallback
    balanced_lanes_kernel: LazyCallback  # the balanced flow of (qk, ov) alone (qkdyn.simulate.sweep) and its loss
    balanced_loss_kernel: LazyCallback
    kernel_parameters: Callable
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
    psi_gain: Callable  # Psi(a + s) - Psi(a) in factored form
    line_scale: Callable
    ov_law: Callable
    qk_law: Callable
    qk_law_constant: Callable
    frozen_time: Callable  # t(z, alpha0, z0, p) at frozen attention (rho = 0), z = alpha0 ov
    balanced_start: Callable  # (qk, ov, kappa) of init(p, qk0, ov0)
    balanced_kernel_parameters: Callable  # (p, kappa) -> the balanced kernels' parameter vector (a tuple)

    @property
    def dim(self) -> int:
        return len(self.variables)

    def rhs(self, x, p) -> np.ndarray:
        """dx/dt of eq. (1) at the state ``x`` (the compiled kernel)."""
        out = np.empty(self.dim)
        self.rhs_into(np.asarray(x, dtype=float), self.kernel_parameters(p), out)
        return out

    def state_loss(self, x, p) -> float:
        """L(qk(x), ov(x)) of eq. (2) at the state ``x`` (the compiled kernel)."""
        return self.state_loss_into(np.asarray(x, dtype=float), self.kernel_parameters(p))

    def plain_rhs(self, p) -> Callable:
        """x -> dx/dt of eq. (1) at the setting's parameters ``p``: the generated kernel run as plain Python
        (nothing compiled: the first solves of a cold start, :mod:`qkdyn.simulate.coldstart`)."""
        kernel, parameters = self.rhs_into.py_func, self.kernel_parameters(p)

        def rhs(x) -> np.ndarray:
            out = np.empty(self.dim)
            kernel(x, parameters, out)
            return out
        return rhs

    def jac(self, x, p) -> np.ndarray:
        """Its Jacobian d(dx/dt)/dx (the compiled kernel)."""
        out = np.empty((self.dim, self.dim))
        self.jac_into(np.asarray(x, dtype=float), self.kernel_parameters(p), out)
        return out


@functools.cache
def load(name: str) -> Compiled:
    """The numeric functions of parameterisation ``name`` (one of ALL_PARAMS)."""
    if name not in ALL_PARAMS:
        raise ValueError(f"no generated module for {name!r}: one of {', '.join(ALL_PARAMS)}")
    module = importlib.import_module(f"qkdyn.theory.generated.{name}")
    functions = {key: getattr(module, key) for key in
                 ("rhs_into", "jac_into", "rhs_lanes_kernel", "loss_kernel", "psi_gain_kernel", "m_ov_kernel",
                  "balanced_lanes_kernel", "balanced_loss_kernel", "kernel_parameters", "init") + _VECTOR}
    functions["state_loss_into"] = module.state_loss
    return Compiled(name, module.VARIABLES, module.INVARIANT_NAMES, module.INVARIANT_DEGREES, module.LAW_POWERS,
                    module.A4_PROOF, **functions)


def growth_in_log_t(qk_power: int, ov_power: int, degree: int) -> dict[str, str]:
    """Growth of each reported quantity in terms of log t for the laws e^qk / qk^i = C ov^d (``qk_power``
    i, ``degree`` d) and e^ov / ov^j = T (``ov_power`` j), as :mod:`qkdyn.theory.asymptotics` derives them;
    the generated modules carry (i, j, d) as ``LAW_POWERS`` (:attr:`Compiled.law_powers`), so a report reads
    them without sympy (here, not in asymptotics: importing sympy costs a run ~1 CPU-s)."""
    extra = " * log log t" if qk_power == 1 else ""
    odds = ("log t" if degree == 1 else f"(log t)^{degree}") + extra  # as a person writes it: not (log t)^1
    return {
        "ov": "log t" + (" + log log t" if ov_power == 1 else ""),
        "exp(qk)": odds,
        "odds": odds,
        "qk": ("log log t" if degree == 1 else f"{degree} log log t") + (" + log log log t" if extra else ""),
    }
