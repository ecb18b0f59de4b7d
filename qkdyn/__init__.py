"""qkdyn: derive, simulate and test the training dynamics of attention's QK and OV circuits.

The public API (symbols as in ``docs/setting.md``); ``import qkdyn`` is light: each name imports its
module (sympy, scipy, torch) on first use.

* :class:`Setting` - one point of the canonical orthogonal-data setting (K, D, N, m, n, s, rates, init).
* :data:`PARAMS` - the parameterisations: CACO, FACO, CAFO, FAFO and the authors' reduced form ``paper``.
* :func:`derive` - the symbolic result for one form: reduced ODE, invariants, line, laws (sympy).
* :func:`solve` - the reduced gradient flow to ``t_max`` or a loss level: a :class:`Trajectory`.
* :func:`sharpness` - attention, qk, ov and time at matched loss in closed form (no ODE): a :class:`Sharpness`.
* :func:`gd`, :func:`sgd` - training of the full matrix model (torch): a :class:`Recording`.
* :func:`verify` - every claim, with verdicts, figures and a report: a list of :class:`Claim`.
* :mod:`qkdyn.testing` - hypothesis strategies and growth-law assertions for property tests.

Example::

    >>> import qkdyn
    >>> tr = qkdyn.solve(qkdyn.Setting(classes=3, distinct=2, commons=5), "CACO", t_max=1e6)
    >>> float(tr.attn[-1]) > float(tr.attn[0])
    True
"""
from __future__ import annotations

import importlib

__version__ = "0.1.0"

#: public name -> (module, attribute or None for the module itself); imported on first access
_API = {
    "testing": ("qkdyn.testing", None),
    "Setting": ("qkdyn.theory.setting", "Setting"),
    "PARAMS": ("qkdyn.theory.setting", "ALL_PARAMS"),
    "InputError": ("qkdyn.errors", "InputError"),
    "derive": ("qkdyn.theory.derived", "derive"),
    "Derived": ("qkdyn.theory.derived", "Derived"),
    "solve": ("qkdyn.simulate.solve", "solve"),
    "Trajectory": ("qkdyn.simulate.solve", "Trajectory"),
    "sharpness": ("qkdyn.simulate.sharpness", "sharpness"),
    "Sharpness": ("qkdyn.simulate.sharpness", "Sharpness"),
    "gd": ("qkdyn.empirical.synthetic.experiment", "gd"),
    "sgd": ("qkdyn.empirical.synthetic.experiment", "sgd"),
    "Recording": ("qkdyn.empirical.synthetic.experiment", "Recording"),
    "verify": ("qkdyn.verify", "verify"),
    "Claim": ("qkdyn.claims", "Claim"),
}

__all__ = sorted(_API)


def __getattr__(name: str):
    try:
        module, attribute = _API[name]
    except KeyError:
        raise AttributeError(f"module 'qkdyn' has no attribute {name!r}") from None
    value = importlib.import_module(module)
    value = value if attribute is None else getattr(value, attribute)
    globals()[name] = value  # later look-ups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_API))
