"""Frozen circuits: the OV motion at fixed attention (eta_QK = 0, the authors' fixed-attention experiment).

With eta_QK = 0 the gap qk, hence alpha = m e^qk / (m e^qk + n), is constant, and the flow reduces to
the OV feature alone. By the chain rule on eq. (1) of :mod:`qkdyn.theory.model`,

    dov/dt = -eta_OV M_OV(ov) dL/dov,     dL/dov = -alpha (K-1) / (e^{alpha ov} + K - 1)

(M_OV the OV metric of :mod:`qkdyn.theory.invariants`: 1/((K-1)D) collapsed, 2|ov|/((K-1) sqrt D) on the
balanced factorized manifold). In z = alpha ov this separates, dz/dt = g(z), and

    G(z) = int dz / g(z) = t + const.

Collapsed OV (CACO, FACO):   g(z) = eta_OV alpha^2 / (D (e^z + K - 1)), so

    e^z + (K-1) z = e^{z0} + (K-1) z0 + eta_OV alpha^2 t / D,

inverted with the Wright omega function (omega(x) = W(e^x), omega + log omega = x): with
x = C / (K-1) - log(K-1), C the right-hand side, z = x + log(K-1) - omega(x), which by the defining
identity is

    z = log(K-1) + log omega(x)

(no cancellation: the difference form loses all digits once x is large, at t ~ 1e20 and beyond). Factorized OV: G(z) = sqrt(D) (Ei(z) + (K-1) log z) / (2 eta_OV alpha).
Everything here is *derived* by :func:`derive_frozen_qk` from the model's own ODE and metric, not typed in;
the tests compare it with ``solve`` at eta_QK = 0.
"""
from __future__ import annotations

import dataclasses
import functools
import math

import numpy as np
import sympy as sp
from qkdyn.theory.invariants import balanced_metric, metric_is_constant
from qkdyn.theory.model import derive, eta_ov, m, n, ov, qk, reduced_loss
from qkdyn.theory.setting import EXACT_PARAMS

alpha, z = sp.symbols("alpha z", positive=True)


@dataclasses.dataclass(frozen=True)
class FrozenQK:
    """The OV motion at fixed attention for one parameterisation: dz/dt = g(z), G' = 1/g."""

    name: str
    dov_dt: sp.Expr  # in (alpha, ov), from the ODE of the full reduced state
    g: sp.Expr  # dz/dt in (alpha, z)
    G: sp.Expr  # an antiderivative of 1/g in z: G(z(t)) - G(z0) = t


@functools.cache
def derive_frozen_qk(name: str) -> FrozenQK:
    """Derive dov/dt at eta_QK = 0 from ``derive(name)`` (chain rule through the reduced state,
    on the balanced manifold for a factorized OV), then separate variables in z = alpha ov."""
    if name not in EXACT_PARAMS:
        raise ValueError(f"frozen-QK law defined for {EXACT_PARAMS}, not {name!r}")
    d = derive(name)
    if metric_is_constant(d.ov_circuit):
        # chain rule through the OV variables of the derived ODE: the exact flow of the feature ov
        dov = sum(sp.diff(d.ov, v.symbol) * rhs for v, rhs in zip(d.variables, d.rhs, strict=True) if v.circuit == "OV")
        u, w, _ = (v.symbol for v in d.ov_circuit.variables)
        dov = dov.subs(u, ov + w)  # the loss depends on u - w only
    else:  # balanced factors: dov/dt = -eta M_OV(ov) dL/dov with the derived closed-form metric
        dov = -eta_ov * balanced_metric(d.ov_circuit).subs(sp.Abs(ov), ov) * sp.diff(reduced_loss(qk, ov), ov)
    gap = sp.log(alpha / (1 - alpha)) - sp.log(m / n)  # qk at attention alpha
    first = d.qk_circuit.variables[0].symbol  # express the QK state through its feature qk
    dov_alpha = dov.subs(first, sp.solve(sp.Eq(d.qk, qk), first)[0]).subs(qk, gap)
    dov_alpha = sp.simplify(dov_alpha.rewrite(sp.exp))
    g = sp.simplify((alpha * dov_alpha).subs(ov, z / alpha))
    G = sp.simplify(sp.integrate(sp.expand(sp.simplify(1 / g)), z))
    return FrozenQK(name, dov_alpha, g, G)


def caco_ov(t, setting) -> np.ndarray:
    """ov(t) at fixed attention for a collapsed OV circuit, in closed form (module doc), vectorised."""
    from scipy.special import wrightomega

    a = 1.0 / (1.0 + setting.n / (setting.m * math.exp(setting.qk0)))
    k1 = setting.classes - 1
    z0 = a * setting.ov0
    c = math.exp(z0) + k1 * z0 + setting.eta_ov * a * a * np.asarray(t, dtype=float) / setting.distinct
    ov_t: np.ndarray = (math.log(k1) + np.log(np.real(wrightomega(c / k1 - math.log(k1))))) / a
    return ov_t
