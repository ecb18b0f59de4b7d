"""Late-time laws by dominant balance (claim A3), with explicit constants.

As ov -> infinity, alpha -> 1 and L = softplus(log(K-1) - alpha ov) ~ (K-1) e^{-ov}, so the OV
circuit obeys dov/dt ~ eta_OV M_OV(ov) (K-1) e^{-ov}. With M_OV(ov) ~ c_OV ov^j (j = 0 collapsed,
j = 1 factorized) and int^ov e^y / M_OV(y) dy ~ e^ov / M_OV(ov) (M_OV varies slowly):

    e^ov / ov^j = T,     T = eta_OV (K-1) c_OV t e^c
    =>  ov = log T                    (j = 0)
        ov = -W_{-1}(-1/T) = log T + log log T + o(1)      (j = 1, Lambert W, lower branch)

with c the limit of (1 - alpha) ov along the line (z = ov - (1 - alpha) ov enters the loss): 0, except
c = 2A / (rho sqrt(D) (K-1)) for CAFO (:func:`ov_law`).

The QK circuit follows from the line Phi(qk) - rho Psi(ov) = const (:mod:`qkdyn.theory.invariants`):
Phi(qk) ~ (m/n) e^qk / M_QK(qk) with M_QK ~ c_QK qk^i (i = 0 collapsed, i = 1 factorized), so

    e^qk / qk^i = Y,     Y = (n/m) c_QK rho Psi(ov)          (Psi ~ ov^2 collapsed OV, ~ ov factorized)

Hence in terms of log t: ov ~ log t always; e^qk and the attention odds alpha/(1-alpha) = (m/n) e^qk
grow like (log t)^(2 or 1) (collapsed or factorized OV), times qk^i ~ log log t for a factorized QK
circuit; qk itself grows only like log log t. The constants scale linearly with rho.
"""
from __future__ import annotations

import dataclasses
import functools

import sympy as sp
from qkdyn.theory.compiled import growth_in_log_t
from qkdyn.theory.invariants import balanced_metric, line_coordinates
from qkdyn.theory.model import Derivation, K, derive, eta_ov, eta_qk, m, n, ov, qk, t


@dataclasses.dataclass(frozen=True)
class Law:
    """A late-time law e^x / x^power = argument, solved for x."""

    variable: sp.Symbol
    power: int  # 0: x = log(argument); 1: x = -W_{-1}(-1/argument)
    argument: sp.Expr

    @property
    def solution(self) -> sp.Expr:
        if self.power == 0:
            return sp.log(self.argument)
        return -sp.LambertW(-1 / self.argument, -1)

    @property
    def equation(self) -> sp.Eq:
        return sp.Eq(sp.exp(self.variable) / self.variable**self.power, self.argument)


def leading_power(metric: sp.Expr, x: sp.Symbol) -> tuple[int, sp.Expr]:
    """(j, c) with metric ~ c x^j as x -> +infinity, j in {0, 1}."""
    metric = metric.subs(sp.Abs(x), x)
    for power in (0, 1):
        coefficient = sp.limit(metric / x**power, x, sp.oo)
        if coefficient != 0 and not coefficient.has(sp.oo, -sp.oo, sp.zoo, sp.nan):
            return power, sp.simplify(coefficient)
    raise ValueError(f"metric {metric} grows faster than linearly")


@functools.cache
def ov_law(name: str) -> Law:
    """Late-time law of the output margin ov(t), with the constant shift of the margin where it has one:
    for a collapsed QK and a factorized OV circuit (CAFO) z = ov - delta with delta = (1 - alpha) ov ->
    c = 2A / (rho sqrt(D) (K-1)) along the line (:func:`qkdyn.theory.sharpness.ov_shift_limit`), so the
    OV equation reads e^{ov - c} / ov = T, i.e. e^ov / ov = e^c T (docs/sharpness.md); c = 0 elsewhere."""
    from qkdyn.theory.sharpness import ov_shift_limit, rho

    derivation = derive(name)
    power, coefficient = leading_power(balanced_metric(derivation.ov_circuit), ov)
    shift = ov_shift_limit(name).subs(rho, eta_qk / eta_ov)
    return Law(ov, power, eta_ov * (K - 1) * coefficient * t * sp.exp(shift))


@functools.cache
def qk_law(name: str) -> Law:
    """Late-time law of the attention gap qk as a function of the margin ov."""
    derivation = derive(name)
    power, coefficient = leading_power(balanced_metric(derivation.qk_circuit), qk)
    _, psi = line_coordinates(derivation)
    return Law(qk, power, (n / m) * coefficient * (eta_qk / eta_ov) * psi)


def log_t_exponents(name: str) -> dict[str, str]:
    """Growth of each reported quantity in terms of log t, read off the laws (for reports)."""
    return growth_in_log_t(qk_law(name).power, ov_law(name).power, int(sp.degree(qk_law(name).argument, ov)))


def laws(derivation: Derivation) -> dict[str, Law]:
    return {"ov": ov_law(derivation.name), "qk": qk_law(derivation.name)}
