"""qkdyn: derive, simulate and test the training dynamics of attention's QK and OV circuits.

The public API (symbols as in ``docs/setting.md``); ``import qkdyn`` is light: each name imports its
module (sympy, scipy, torch) on first use.

* :class:`Setting` - one point of the canonical orthogonal-data setting (K, D, N, m, n, s, rates, init).
* :data:`PARAMS` - the parameterisations: CACO, FACO, CAFO, FAFO and the authors' reduced form ``paper``.
* :func:`derive` - the symbolic result for one form or spec: reduced ODE, invariants, line, laws (sympy).
* :func:`solve` - the reduced gradient flow to ``t_max`` or a loss level: a :class:`Trajectory` (a spec's
  :class:`~qkdyn.simulate.specsolve.SpecTrajectory`; a list of them for a list of settings), the solution
  at any time by ``tr.at(t)`` (or ``tr(t)``), drawn by ``tr.plot()``.
* :func:`sweep` - the features (qk, ov) of many settings at once, from their balanced two-variable flow: a
  :class:`Sweep` of (settings, rows) arrays (``solve`` of a list gives the full state, a Trajectory each).
* :func:`sharpness` - attention, qk, ov and time at matched loss in closed form (no ODE; a spec without
  one: from ODE events): a :class:`Sharpness`.
* :func:`gd`, :func:`sgd` - training of the full matrix model (torch): a :class:`Recording`.
* :func:`~qkdyn.verify.verify` - every claim, with verdicts, figures and a report: a list of :class:`Claim`.
* :mod:`qkdyn.testing` - hypothesis strategies and growth-law assertions for property tests.
* :class:`Spec`, :class:`CircuitSpec`, :data:`SPECS`, :func:`load_spec` - a model written as data (depth, inner
  width, init balance, weight decay, loss, self-attention, token weights); the exact forms as named specs.
  Each verb takes a form's name or a spec through the one path: ``derive(spec)`` (its reduced flow derived
  from its model definition: ``derive(spec).flow``), ``solve(setting, spec)``, ``sharpness(setting, spec, ...)``.
* :func:`check` - a spec's reduced flow against autograd on its full matrices: a :class:`CheckResult`.
* :class:`InputError` - what every verb raises for bad input: a ``ValueError`` whose ``field`` names the
  offending argument or field.

Example::

    >>> import qkdyn
    >>> tr = qkdyn.solve(qkdyn.Setting(classes=3, distinct=2, commons=5), "CACO", t_max=1e6)
    >>> float(tr.attn[-1]) > float(tr.attn[0])
    True
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # for type checkers: what _API (below) imports on first use, one entry each (a test compares)
    from qkdyn import testing as testing
    from qkdyn.claims import Claim as Claim
    from qkdyn.empirical.synthetic.experiment import Recording as Recording
    from qkdyn.empirical.synthetic.experiment import gd as gd
    from qkdyn.empirical.synthetic.experiment import sgd as sgd
    from qkdyn.errors import InputError as InputError
    from qkdyn.simulate.sharpness import Sharpness as Sharpness
    from qkdyn.simulate.sharpness import sharpness as sharpness
    from qkdyn.simulate.solve import solve as solve
    from qkdyn.simulate.sweep import Sweep as Sweep
    from qkdyn.simulate.sweep import sweep as sweep
    from qkdyn.simulate.trajectory import Trajectory as Trajectory
    from qkdyn.speccheck import CheckResult as CheckResult
    from qkdyn.speccheck import check as check
    from qkdyn.theory.derived import Derived as Derived
    from qkdyn.theory.derived import derive as derive
    from qkdyn.theory.setting import ALL_PARAMS as PARAMS  # noqa: F401 (a re-export under its public name)
    from qkdyn.theory.setting import Setting as Setting
    from qkdyn.theory.spec import NAMED as SPECS  # noqa: F401
    from qkdyn.theory.spec import CircuitSpec as CircuitSpec
    from qkdyn.theory.spec import Spec as Spec
    from qkdyn.theory.spec import load as load_spec  # noqa: F401
    from qkdyn.verify import verify as verify

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
    "Trajectory": ("qkdyn.simulate.trajectory", "Trajectory"),
    "sweep": ("qkdyn.simulate.sweep", "sweep"),
    "Sweep": ("qkdyn.simulate.sweep", "Sweep"),
    "sharpness": ("qkdyn.simulate.sharpness", "sharpness"),
    "Sharpness": ("qkdyn.simulate.sharpness", "Sharpness"),
    "gd": ("qkdyn.empirical.synthetic.experiment", "gd"),
    "sgd": ("qkdyn.empirical.synthetic.experiment", "sgd"),
    "Recording": ("qkdyn.empirical.synthetic.experiment", "Recording"),
    "verify": ("qkdyn.verify", "verify"),
    "Spec": ("qkdyn.theory.spec", "Spec"),
    "CircuitSpec": ("qkdyn.theory.spec", "CircuitSpec"),
    "SPECS": ("qkdyn.theory.spec", "NAMED"),
    "load_spec": ("qkdyn.theory.spec", "load"),
    "check": ("qkdyn.speccheck", "check"),
    "CheckResult": ("qkdyn.speccheck", "CheckResult"),
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
