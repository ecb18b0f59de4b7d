"""Numerically stable primitives as sympy functions.

The derivation keeps the logistic sigmoid and softplus as opaque functions with exact derivative
rules, so differentiation never produces ``exp(qk)/(1 + exp(qk))`` style expressions that overflow;
code generation prints them as stable numeric calls (see :mod:`qkdyn.theory.codegen`).

    expit(x)    = 1 / (1 + e^-x),          expit'(x)    = expit(x) expit(-x)
    softplus(x) = log(1 + e^x),            softplus'(x) = expit(x)
"""
from __future__ import annotations

import sympy as sp


class expit(sp.Function):  # noqa: N801 - mathematical name
    """Logistic sigmoid 1/(1+e^-x)."""

    def fdiff(self, argindex: int = 1) -> sp.Expr:
        x = self.args[0]
        return expit(x) * expit(-x)

    def _eval_rewrite_as_exp(self, x, **kwargs):
        return 1 / (1 + sp.exp(-x))

    def _latex(self, printer, exp=None):
        tex = rf"\sigma\left({printer._print(self.args[0])}\right)"
        return tex if exp is None else f"{tex}^{{{exp}}}"


class softplus(sp.Function):  # noqa: N801 - mathematical name
    """log(1 + e^x)."""

    def fdiff(self, argindex: int = 1) -> sp.Expr:
        return expit(self.args[0])

    def _eval_rewrite_as_exp(self, x, **kwargs):
        return sp.log(1 + sp.exp(x))

    def _latex(self, printer, exp=None):
        tex = rf"\operatorname{{softplus}}\left({printer._print(self.args[0])}\right)"
        return tex if exp is None else f"{tex}^{{{exp}}}"
