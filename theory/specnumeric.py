"""Numeric functions of a spec's derivation (:mod:`qkdyn.theory.specflow`), for solving and checking.

The four exact forms carry committed generated modules (:mod:`qkdyn.theory.compiled`); so do the specs
of the coupled claims CQ1-CQ4 (:mod:`qkdyn.theory.generated.specs`, written by
:mod:`qkdyn.generate_specs`: the source ``sympy.lambdify`` prints for them, so their numbers are
the same). Any other spec written as data gets its functions at run time by ``sympy.lambdify`` of the
derived expressions (:func:`expressions`), with the stable primitives printed as SciPy's expit and
NumPy's logaddexp (:data:`PRIMITIVES`; no code is read from any file: the source is printed from the
derivation in this process). ``p`` is Setting.numeric().

sympy is imported only where a spec is derived (a spec of the generated module needs none of it).
"""
from __future__ import annotations

import dataclasses
import functools
import time
from collections.abc import Callable
from typing import cast

import numpy as np
from qkdyn.theory.spec import Spec
from scipy import special

#: the stable primitives of :mod:`qkdyn.theory.functions` as NumPy functions (lambdify's first namespace)
PRIMITIVES = {"expit": special.expit, "softplus": lambda x: np.logaddexp(0, x)}


#: the functions of :class:`SpecNumeric` a spec's derivation gives (:func:`expressions`), in order
FUNCTIONS = ("rhs", "loss", "features", "init", "qk_metric")


@dataclasses.dataclass(frozen=True)
class SpecNumeric:
    """rhs(x, p), loss(x, p), features(x, p) -> (qk, ov, attn), init(p, qk0, ov0), qk_metric(x, p) = M_QK(x)
    (the rate factor's numerator, :func:`expressions`); jac(x, p) is built on first use (the symbolic
    Jacobian costs seconds and only the implicit integrators need it)."""

    spec: Spec
    variables: tuple[str, ...]
    rhs: Callable
    loss: Callable
    features: Callable
    init: Callable
    qk_metric: Callable

    def jac(self, x, p) -> np.ndarray:
        return _jacobian(self.spec)(x, p)

    def bound(self, p) -> tuple[Callable[..., np.ndarray], Callable[..., np.ndarray]]:
        """((x, scale=1.0) -> scale * rhs(x, p), (x, scale=1.0) -> scale * jac(x, p)) for one state x and one fixed
        ``p``: what a solver calls at every step (:func:`bind`; ``scale`` e^tau for the flow in log time)."""
        return bind(self.rhs, p), bind(_jacobian(self.spec), p)

    def compiled(self) -> dict[str, bool]:
        """{"rhs": ..., "jac": ...}: whether each runs compiled now (:mod:`qkdyn.theory.specjit`; never a generated
        spec's NumPy right-hand side, nor a Jacobian not printed yet)."""
        functions = {"rhs": self.rhs, "jac": _JACOBIANS.get(self.spec)}
        return {name: isinstance(function, OneState) and function.compiled for name, function in functions.items()}


def floats(raw: Callable) -> Callable[..., np.ndarray]:
    """``raw`` returning a float array."""
    return lambda *values: np.asarray(raw(*values), dtype=float)


def sympy_lambdify(args, outputs) -> Callable:
    """``sympy.lambdify`` with the stable primitives (its printed source is what
    :mod:`qkdyn.generate_specs` commits)."""
    import sympy as sp

    function: Callable = sp.lambdify(args, outputs, modules=[PRIMITIVES, "numpy"], cse=True)
    return function


def lambdify(args, outputs) -> Callable[..., np.ndarray]:
    """:func:`sympy_lambdify` returning a float array."""
    return floats(sympy_lambdify(args, outputs))


class OneState:
    """A function of one state x and the parameters p (a solver's right-hand side or Jacobian), printed by
    :func:`lambdify` with Python's math module on lists of floats: about 3x faster per call than NumPy's
    arithmetic on its scalars, and the same expressions (values within an ulp or so: math's exp against NumPy's).
    The same expressions compiled by numba (:mod:`qkdyn.theory.specjit`) take over once the uncompiled calls have
    cost about the compile time (its rent-or-buy rule; the calls are timed). A call it cannot take (arrays of
    states, an overflow, which math raises where NumPy returns inf, and where compiled an output that is not
    finite) goes to :func:`lambdify`'s NumPy function. A matrix of outputs (the Jacobian) comes back as a 2-d
    array."""

    def __init__(self, args, outputs) -> None:
        import sympy as sp
        from qkdyn.theory.kernels import expit, softplus
        from qkdyn.theory.specjit import Rented

        # the compiled kernels' stable primitives, as the Python functions they are compiled from
        scalar_primitives = {"expit": expit.py_func, "softplus": softplus.py_func}
        # a matrix printed flat (sympy's cse does not look into nested lists), reshaped after the call
        self.shape: tuple[int, ...] | None = outputs.shape if isinstance(outputs, sp.MatrixBase) else None
        flat = list(outputs) if self.shape is not None else outputs
        # lambdify's own cse (cse=True), done once here so that the compiled function prints the same result
        cses, reduced = sp.cse(flat, list=False)
        self.fast: Callable = sp.lambdify(args, flat, modules=[scalar_primitives, "math"], cse=lambda _: (cses, reduced))
        self.jit = Rented(args, cses, reduced, self.shape or (len(flat),))
        self._expressions = (args, outputs)

    @functools.cached_property
    def slow(self) -> Callable[..., np.ndarray]:
        """The NumPy function, printed on first use (a Jacobian's printing costs seconds, and most solves never
        call it)."""
        return lambdify(*self._expressions)

    @property
    def compiled(self) -> bool:
        """Whether its calls run compiled now."""
        return self.jit.compiled is not None

    def __call__(self, x, p) -> np.ndarray:
        state, parameters = np.ascontiguousarray(x, dtype=float), np.ascontiguousarray(p, dtype=float)
        if state.ndim > 1 or parameters.ndim > 1:
            return self.slow(x, p)
        return self._one(state, parameters, None, 1.0)

    def at(self, p) -> Callable[..., np.ndarray]:
        """(x, scale=1.0) -> scale * self(x, p) for one state x (a float array) and ``p`` fixed: ``p`` converted
        once, so a solver's call pays for x alone (the same values as the call with p, times ``scale``: e^tau for a
        flow in log time, the product rounded as NumPy's)."""
        parameters = np.ascontiguousarray(p, dtype=float)
        p_list, one = parameters.tolist(), self._one
        return lambda x, scale=1.0: one(x, parameters, p_list, scale)

    def _one(self, x: np.ndarray, p: np.ndarray, p_list: list | None, scale: float) -> np.ndarray:
        """``scale`` times the outputs at one state ``x`` (a 1-d array) and ``p`` (a 1-d C-ordered float array;
        ``p_list`` its values, or None): compiled where :mod:`qkdyn.theory.specjit` has compiled it, else the math
        function, timed for its rent."""
        compiled = self.jit.compiled
        if compiled is not None:
            out = np.empty(self.jit.shape)
            try:
                finite = compiled(x, p, scale, out)
            except TypeError:  # x not a C-ordered float64 array, the only type it is compiled for
                return scale * self(x, p)
            return out if finite else scale * self.slow(x, p)
        start = time.perf_counter()
        try:
            out = self._shaped(self.fast(x.tolist(), p.tolist() if p_list is None else p_list))
        except (OverflowError, TypeError, ValueError, ZeroDivisionError):
            return scale * self.slow(x, p)
        self.jit.rent(time.perf_counter() - start)
        if scale != 1.0:
            out *= scale
        return out

    def _shaped(self, values) -> np.ndarray:
        out = np.array(values, dtype=float)
        return out if self.shape is None else out.reshape(self.shape)


def bind(function: Callable[..., np.ndarray], p) -> Callable[..., np.ndarray]:
    """(x, scale=1.0) -> scale * function(x, p) for one state x and ``p`` fixed (:meth:`OneState.at` where
    ``function`` is one)."""
    if isinstance(function, OneState):
        return function.at(p)
    return lambda x, scale=1.0: scale * function(x, p)


def expressions(spec: Spec) -> tuple[tuple[str, ...], dict[str, tuple[list, object]]]:
    """(variable names, {name: (arguments, outputs)} for each of :data:`FUNCTIONS`) from the spec's derivation
    (x the reduced state, p the parameters, w_i the orbit sizes): the flow dx/dt (in its floating-point form,
    ``SpecDerivation.stable_rhs``), the loss, (qk, ov, attn), the
    initial state, and M_QK(x) = sum_i (d qk / d x_i)^2 / w_i over the QK variables (docs/setting.md)."""
    import sympy as sp
    from qkdyn.theory.model import PARAMS, ov0, qk0
    from qkdyn.theory.specflow import derive_spec

    d = derive_spec(spec)
    x, p = list(d.symbols), list(PARAMS)
    metric = sum(sp.diff(d.qk, v.symbol) ** 2 / v.orbit for v in d.variables if v.circuit == "QK")
    outputs = {"rhs": ([x, p], list(d.stable_rhs)), "loss": ([x, p], d.loss), "features": ([x, p], [d.qk, d.ov, d.attn]),
               "init": ([p, qk0, ov0], [d.init[v] for v in x]), "qk_metric": ([x, p], metric)}
    return tuple(v.name for v in d.variables), outputs


@functools.cache
def numeric(spec: Spec) -> SpecNumeric:
    """The numeric functions of ``spec`` (cached per spec): the generated ones where
    :mod:`qkdyn.theory.generated.specs` lists the spec, else lambdified from its derivation."""
    from qkdyn.theory.generated.specs import SPECS

    found = SPECS.get(repr(spec))
    if found is not None:
        variables, raw = found
        # the generated table's functions carry no annotations: mypy types its values as `function`, not Callable
        generated = cast("dict[str, Callable]", raw)
        return SpecNumeric(spec, variables, **{name: floats(generated[name]) for name in FUNCTIONS})
    variables, outputs = expressions(spec)
    return SpecNumeric(spec, variables, **{name: (OneState if name == "rhs" else lambdify)(*outputs[name])
                                           for name in FUNCTIONS})


#: each spec's Jacobian as a :class:`OneState`, once printed (:func:`_jacobian`)
_JACOBIANS: dict[Spec, OneState] = {}


def _jacobian(spec: Spec) -> OneState:
    """The Jacobian of ``spec``'s flow for one state, printed on first use (cached per spec)."""
    if spec not in _JACOBIANS:
        from qkdyn.theory.model import PARAMS
        from qkdyn.theory.specflow import derive_spec

        d = derive_spec(spec)
        _JACOBIANS[spec] = OneState([list(d.symbols), list(PARAMS)], d.stable_jacobian)
    return _JACOBIANS[spec]
