"""The symbolic result for one parameterisation, as one object: what ``qkdyn.derive(param)`` returns.

Symbols as in docs/setting.md: the reduced state x (orbit values of the matrix entries), the features
qk(x) and ov(x), attn = m e^qk / (m e^qk + n), the population loss L(qk, ov), the reduced flow
dx_i/dt = -(eta_c / w_i) dL/dx_i, its conserved polynomials, the first-integral line
Phi(qk) - rho Psi(ov) = const, the rate factors M_c and the late-time laws.

``derive`` also takes a :class:`~qkdyn.theory.spec.Spec`: a spec that is the model of an exact form gets
that form's result; any other spec its own reduced flow, conserved polynomials and exact rates M_c(x)
(:mod:`qkdyn.theory.specflow`), with ``laws`` and ``growth`` left empty and ``not_derived`` saying, per
closed form, what follows for it and what does not (:mod:`qkdyn.theory.specclosed`). Its ``line`` is
(Phi, Psi) as :class:`~qkdyn.theory.specclosed.LineCoordinate` callables, ``Phi(qk, setting)`` and
``Psi(ov, setting)`` by quadrature along each circuit's curve from the setting's init (so
Phi(qk) - rho Psi(ov) = 0 along the flow), exactly where ``not_derived`` says the line exists, else ().

For a spec ``loss`` is the data loss L (cross-entropy or square) and ``penalty`` the weight decay
P = sum_c (lambda_c / 2) sum_i w_i x_i^2; the flow descends L + P. With weight decay on a circuit its
conserved polynomials I (homogeneous) obey dI/dt = -eta lambda deg(I) I, so ``invariants`` lists instead
its rational first integrals R_cj = I_j^deg(I_0) / I_0^deg(I_j), and ``balances`` its factor balances
B_cj = |W_j|^2 - |W_{j+1}|^2 (dB/dt = -2 eta lambda B): the balanced manifold, every B_cj = 0, where the
canonical init lies, is invariant (:mod:`qkdyn.theory.specflow`, step 6). ``Derived.flow`` is the spec's
reduced flow as derived from its model definition (variables with their orbits, loss, penalty,
right-hand sides, init, invariants and exact rates per circuit).

Results are cached in each process and on disk for every process (:mod:`qkdyn.theory.derive_cache`:
the expressions as data, checked, keyed by the qkdyn and sympy versions and the sources), so a second
process reads a form's result in well under a second instead of deriving it again.
"""
from __future__ import annotations

import dataclasses
import functools
from typing import TYPE_CHECKING

import sympy as sp
from qkdyn.theory import derive_cache
from qkdyn.theory.setting import factorized
from qkdyn.theory.spec import NAMED, Spec

from qkdyn.errors import InputError

if TYPE_CHECKING:
    from qkdyn.theory.specflow import SpecDerivation


@dataclasses.dataclass(frozen=True)
class Derived:
    """Sympy objects for one parameterisation (see the module docstring for the maths).

    >>> d = qkdyn.derive("CACO")                     # doctest: +SKIP
    >>> d.ode[d.variables[0]]                        # dx_0/dt as a sympy expression  # doctest: +SKIP
    """

    param: str
    variables: tuple[sp.Symbol, ...]        # the reduced state x
    ode: dict                                # x_i -> dx_i/dt
    qk: sp.Expr                              # qk(x)
    ov: sp.Expr                              # ov(x)
    attn: sp.Expr                            # attn(qk)
    loss: sp.Expr                            # L(qk, ov): the data loss (cross-entropy, or a spec's square loss)
    invariants: dict                         # name -> first integral of x: polynomial, rational with weight decay
    line: tuple                              # (Phi, Psi), Phi(qk) - rho Psi(ov) conserved (module doc); () if none
    metric: tuple[sp.Expr, sp.Expr]          # (M_QK, M_OV): dqk/dt = -eta_QK M_QK dL/dqk, likewise ov
    laws: dict                               # "ov(t)", "qk(ov)" -> sympy Eq (leading-order, explicit constants)
    growth: dict                             # quantity -> growth in log t (text)
    not_derived: dict = dataclasses.field(default_factory=dict)  # closed form -> why (a spec without them)
    penalty: sp.Expr = sp.S(0)               # a spec's weight decay P(x), added to the loss in the flow
    balances: dict = dataclasses.field(default_factory=dict)  # name -> factor balance B(x) of a decayed circuit
    spec: Spec | None = dataclasses.field(default=None, compare=False, repr=False)  # what was derived, if a spec

    @functools.cached_property
    def jacobian(self) -> sp.Matrix:
        """d(dx/dt)/dx, the flow's Jacobian (sympy), derived on first use: for a spec with a coupled MLP field it
        takes minutes of sympy, which ``derive`` itself does not spend (a spec's is its flow's, the one the
        implicit solvers lambdify)."""
        if self.spec is not None:
            return self.flow.jacobian
        return sp.Matrix([self.ode[x] for x in self.variables]).jacobian(self.variables)

    @property
    def flow(self) -> SpecDerivation:
        """The spec's reduced flow as derived from its model definition (:mod:`qkdyn.theory.specflow`):
        ``variables`` (with their orbits), ``entries``, ``loss``, ``rhs``, ``init``, ``invariants`` and
        ``metrics`` per circuit (the exact rates M_c(x)). For a named form, that of its spec
        (``qkdyn.SPECS[param]``; ``paper`` is no spec of its own but CACO's model at the setting
        :func:`qkdyn.theory.spec.paper_model` returns). Derived on first use (sympy), then cached per spec.

        >>> qkdyn.derive(qkdyn.Spec("deep", qk=qkdyn.CircuitSpec("factorized", depth=3))).flow.metrics  # doctest: +SKIP
        """
        from qkdyn.theory import specflow

        if self.spec is not None:
            return specflow.derive_spec(self.spec)
        if self.param in NAMED:
            return specflow.derive_spec(NAMED[self.param])
        raise InputError(f"{self.param!r} is not written as a spec: it is CACO's model at the setting "
                         "qkdyn.theory.spec.paper_model(setting) returns (derive(qkdyn.SPECS['CACO']).flow)", "param")


@functools.cache
def derive(param: str | Spec) -> Derived:
    """Derive everything for one parameterisation (the maths: this module's docstring).

    Parameters
    ----------
    param : str or Spec
        A named form (CACO, FACO, CAFO, FAFO, paper) or a circuit spec (a :class:`~qkdyn.theory.spec.Spec`,
        e.g. ``qkdyn.SPECS["FACO"]`` or ``qkdyn.load_spec(path)``). A spec that is an exact form's model
        gets that form's result.

    Returns
    -------
    Derived
        The sympy objects: reduced ODE, Jacobian, features, loss, invariants, the line, rate factors,
        late-time laws (a spec's own reduced flow is ``derive(spec).flow``).

    Raises
    ------
    InputError
        For a name that is no form.

    Notes
    -----
    Cached per process and on disk across processes (:mod:`qkdyn.theory.derive_cache`); the first call
    for a form derives it (seconds of sympy), later calls in any process read it back.
    """
    if isinstance(param, Spec):
        return dataclasses.replace(_derive_spec(param), spec=param)
    factorized(param)  # an InputError for a name that is no form, before the cache is asked
    return Derived(**derive_cache.cached(param, lambda: _form_fields(param)))


def _derive_spec(spec: Spec) -> Derived:
    """:func:`derive` for a spec: its exact form's result where it is that form's model, else its own."""
    from qkdyn.theory.specclosed import exact_form

    name = exact_form(spec)
    if name is not None:
        return derive(name)
    return Derived(**derive_cache.cached(spec, lambda: _spec_fields(spec)))


def _form_fields(param: str) -> dict:
    """:func:`derive`'s fields for a named form, derived."""
    from qkdyn.theory import asymptotics, invariants, model

    d = model.derive(param)
    return dict(
        param=param, variables=d.symbols, ode=dict(zip(d.symbols, d.rhs, strict=True)),
        qk=d.qk, ov=d.ov, attn=model.attention(model.qk), loss=model.reduced_loss(model.qk, model.ov),
        invariants=invariants.first_integrals(d), line=tuple(invariants.line_coordinates(d)),
        metric=(invariants.balanced_metric(d.qk_circuit), invariants.balanced_metric(d.ov_circuit)),
        laws={"ov(t)": asymptotics.ov_law(param).equation, "qk(ov)": asymptotics.qk_law(param).equation},
        growth=asymptotics.log_t_exponents(param))


def _spec_fields(spec: Spec) -> dict:
    """:func:`derive`'s fields for a spec that is no exact form's model, derived (module docstring)."""
    from qkdyn.theory import specclosed, specflow

    d = specflow.derive_spec(spec)
    conserved = {}
    for circuit, found in d.invariants.items():
        if isinstance(found, str):
            conserved[f"{circuit} (none listed)"] = found
        else:
            conserved.update({f"I_{circuit}{i + 1}": e for i, e in enumerate(found)})
    for circuit, found in d.rational_integrals.items():
        conserved.update({f"R_{circuit}{i + 1}": e for i, e in enumerate(found)})
    balances = {f"B_{circuit}{i + 1}": b for circuit, found in d.balances.items()
                if specflow._decay(spec, circuit) for i, b in enumerate(found)}
    return dict(
        param=spec.name, variables=d.symbols, ode=dict(zip(d.symbols, d.rhs, strict=True)), qk=d.qk, ov=d.ov,
        attn=d.attn, loss=d.loss, invariants=conserved, line=specclosed.line_coordinates(spec),
        metric=(d.metrics["QK"]["metric"], d.metrics["OV"]["metric"]), laws={}, growth={},
        not_derived=specclosed.statements(spec), penalty=d.penalty, balances=balances)
