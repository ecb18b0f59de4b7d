"""Which closed forms follow for a spec: the first-integral line, the late-time laws, matched loss.

The closed forms of docs/setting.md (the line Phi(qk) - rho Psi(ov) = const with Phi, Psi explicit,
its normal form, the late-time laws by dominant balance, matched-loss sharpness without an ODE) are
derived and proved for the models of the exact forms. A spec gets them exactly when it *is* one of
those models (:func:`exact_form`: its fields equal a named spec's, up to the name). For any other spec
this module derives what does follow, from the spec's own derivation (:mod:`qkdyn.theory.specflow`),
and says what does not, and why:

1. *Reduction.* A line of the form Phi(qk) - rho Psi(ov) = const needs dL/dqk / dL/dov = (1 - alpha) ov,
   i.e. the population loss must be softplus(log(K-1) - alpha(qk) ov) of the spec's own (qk, ov).
   :func:`reduces` checks the spec's loss against that form at random points to 30 digits (a
   non-identity differs at order one there). Weight decay (its penalty joins the loss in the flow), the
   square loss, self-attention and token weights each break it: the flow then sees the state through
   more than (qk, ov).
2. *Rate of each circuit as a function of its feature.* Along the flow dqk/dt = -eta_QK M_QK(x) dL/dqk
   with the exact M_QK(x) = sum_i (dqk/dx_i)^2 / w_i (every spec: ``qkdyn.derive(spec).flow.metrics``). The
   line needs M_c to be a function of the feature along the flow. It is when M_c is constant, or when
   the circuit's n_c variables are tied by k_c = n_c - 1 functionally independent conserved quantities
   (:func:`degrees_of_freedom`: the Jacobian rank of the conserved polynomials at a random point): the
   state then moves on a curve fixed by the init, along which the feature is monotone, so M_c is a
   function of the feature there. Then the line exists with Phi = int (1 + (m/n) e^y) / M_QK(y) dy,
   Psi = int y / M_OV(y) dy taken along that curve; no closed form of M_c(feature) is derived for it, and
   ``qkdyn.derive(spec).line`` holds Phi and Psi as callables by quadrature along the curve
   (:class:`LineCoordinate`, :func:`line_coordinates`). With more freedom the line is not shown.
3. *Late-time laws* (dominant balance) need M_c(feature) in closed form with its leading power:
   derived for the exact forms; for any other spec the statement says so.
4. *Matched loss:* closed form for the exact forms (:func:`qkdyn.sharpness`); ODE events otherwise
   (:func:`qkdyn.simulate.specsolve.spec_sharpness`, which ``qkdyn.sharpness`` calls for such a spec).
"""
from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable

import mpmath
import numpy as np
import sympy as sp
from qkdyn.theory.model import PARAMS, attention
from qkdyn.theory.spec import NAMED, Spec

from qkdyn.errors import InputError

#: the parameter box the random points are drawn from (K > 2 so that log(K - 1) is not 0)
_BOX = {"K": (2.5, 6.0), "D": (1.5, 5.0), "N": (1.5, 5.0), "m": (1.5, 5.0), "n": (1.5, 5.0), "s": (0.4, 1.6),
        "eta_QK": (0.5, 2.0), "eta_OV": (0.5, 2.0), "b": (1.0, 2.0)}


def exact_form(spec: Spec) -> str | None:
    """The name of the exact form whose model ``spec`` is (its fields equal ``NAMED[name]``'s up to the
    name), else None."""
    return next((name for name, named in NAMED.items() if dataclasses.replace(spec, name=name) == named), None)


def _random_points(symbols, count: int, seed: int):
    rng = np.random.default_rng(seed)
    for _ in range(count):
        point = {x: sp.Float(rng.uniform(*_BOX[str(x)]), 30) for x in PARAMS}
        point.update({x: sp.Float(rng.uniform(-1.0, 1.0), 30) for x in symbols})
        yield point


def _mp_function(args, expr: sp.Expr) -> Callable:
    """``expr`` as an mpmath function of ``args`` (evaluated at the working precision of the caller's
    ``mpmath.workdps``): the stable primitives written out in mpmath. For a large expression (a coupled MLP
    field's loss) this is seconds where sympy's ``subs`` and ``N`` take minutes."""
    primitives = {"expit": lambda x: 1 / (1 + mpmath.exp(-x)), "softplus": lambda x: mpmath.log1p(mpmath.exp(x))}
    function: Callable = sp.lambdify(args, expr, modules=[primitives, "mpmath"])
    return function


@functools.cache
def reduces(spec: Spec) -> tuple[bool, str]:
    """(True, "") when the spec's population loss is softplus(log(K-1) - alpha(qk) ov) of its own qk, ov
    (module docstring, step 1); else (False, why)."""
    from qkdyn.theory.specentries import circuit_spec
    from qkdyn.theory.specflow import derive_spec

    decayed = [c for c in ("QK", "OV") if circuit_spec(spec, c).weight_decay > 0]
    if decayed:
        return False, (f"weight decay on {' and '.join(decayed)} adds the penalty (lambda/2) sum_i w_i x_i^2 to the "
                       "objective the flow descends, which depends on the state beyond (qk, ov)")
    d = derive_spec(spec)
    target = sp.log(1 + (PARAMS[0] - 1) * sp.exp(-attention(d.qk) * d.ov))
    gap_at = _mp_function([list(d.symbols), list(PARAMS)], d.loss - target)
    for point in _random_points(d.symbols, 3, seed=0):
        with mpmath.workdps(30):
            gap = gap_at([point[x] for x in d.symbols], [point[x] for x in PARAMS])
        if abs(complex(gap)) > 1e-20:
            seen = ", ".join(f"{len(d.seen[c])} combination(s) of the {c} entries" for c in ("QK", "OV"))
            return False, (f"the population loss is not softplus(log(K-1) - alpha(qk) ov) of the spec's (qk, ov) "
                           f"(off by {abs(complex(gap)):.2e} at a random point; it sees {seen}), so dL/dqk / dL/dov "
                           "is not (1 - alpha) ov")
    return True, ""


@functools.cache
def degrees_of_freedom(spec: Spec, circuit: str) -> tuple[int | None, str]:
    """(n_c - k_c, description): the circuit's variables n_c less the functional rank k_c of its conserved
    polynomials (module docstring, step 2); (None, why) where they were not searched."""
    from qkdyn.theory.specflow import derive_spec

    d = derive_spec(spec)
    found = d.invariants[circuit]
    symbols = d.circuit_symbols(circuit)
    if isinstance(found, str):
        return None, found
    if not found:
        return len(symbols), f"{len(symbols)} variables and no conserved polynomial up to degree 2"
    jacobian = sp.Matrix(found).jacobian(symbols)
    point = next(_random_points(d.symbols, 1, seed=1))
    rank = int(np.linalg.matrix_rank(np.array(jacobian.subs(point).evalf(), dtype=float), tol=1e-9))
    return len(symbols) - rank, f"{len(symbols)} variables tied by {rank} independent conserved polynomials"


def _slopes(d, circuit: str) -> tuple[list, list]:
    """(the circuit's variables, [(df/dx_i) / w_i]) for f = qk or ov: the direction V every variable of the
    circuit moves along (module docstring, step 2; :class:`LineCoordinate`)."""
    feature = d.qk if circuit == "QK" else d.ov
    chosen = [v for v in d.variables if v.circuit == circuit]
    return chosen, [sp.diff(feature, v.symbol) / v.orbit for v in chosen]


def _metric(d, circuit: str) -> sp.Expr:
    """M_c(x) = sum_i (df/dx_i)^2 / w_i, unsimplified (``flow.metrics`` simplifies it, which takes minutes for
    a coupled circuit)."""
    chosen, slopes = _slopes(d, circuit)
    return sum(slope**2 * v.orbit for v, slope in zip(chosen, slopes, strict=True))


def _metric_is_constant(spec: Spec, circuit: str) -> bool:
    """Whether M_c(x) is free of the state: yes where its unsimplified sum is; no where that sum differs at
    two random states by more than 1e-9 relative (in floats: a dependence shows at order one there); else
    as the simplified M_c says."""
    from qkdyn.theory.specflow import derive_spec
    from qkdyn.theory.specnumeric import lambdify

    d = derive_spec(spec)
    metric = _metric(d, circuit)
    if not metric.free_symbols & set(d.symbols):
        return True
    value = lambdify([list(d.symbols), list(PARAMS)], metric)
    a, b = (float(value([float(point[x]) for x in d.symbols], [float(point[x]) for x in PARAMS]))
            for point in _random_points(d.symbols, 2, seed=3))
    if abs(a - b) > 1e-9 * max(abs(a), abs(b)):
        return False
    return not (d.metrics[circuit]["metric"].free_symbols & set(d.symbols))


@functools.cache
def line(spec: Spec) -> tuple[bool | None, str]:
    """(exists, statement) for the first-integral line of ``spec`` (module docstring): True where it is
    derived or shown to exist, False where the loss does not reduce (no line of that form), None where
    existence is not shown."""
    name = exact_form(spec)
    if name is not None:
        return True, (f"derived: the spec is the model of the exact form {name}; Phi(qk) - rho Psi(ov) = const "
                      f"in closed form (qkdyn derive --param {name})")
    ok, why = reduces(spec)
    if not ok:
        return False, f"no first integral of the form Phi(qk) - rho Psi(ov): {why}"
    reasons = []
    for circuit in ("QK", "OV"):
        if _metric_is_constant(spec, circuit):
            continue
        dof, what = degrees_of_freedom(spec, circuit)
        if dof != 1:
            reasons.append(f"M_{circuit}(x) depends on the state and the {circuit} circuit has {what}, so M_{circuit} "
                           "need not be a function of its feature along the flow")
    if reasons:
        return None, "not shown: " + "; ".join(reasons)
    return True, ("exists: the loss is softplus(log(K-1) - alpha(qk) ov) and each circuit's state lies on a curve "
                  "fixed by its conserved quantities, so Phi(qk) - rho Psi(ov) = const along the flow from this init, "
                  "Phi = int (1 + (m/n) e^y) / M_QK(y) dy, Psi = int y / M_OV(y) dy along that curve; no closed form "
                  "of M_c(feature) is derived for this spec: derive(spec).line holds Phi and Psi by quadrature "
                  "along the curve")


@dataclasses.dataclass(frozen=True)
class LineCoordinate:
    """Phi (``circuit`` "QK") or Psi ("OV") of the first-integral line of a spec that is no exact form's
    model, by quadrature: ``coordinate(value, setting)`` is the float (or array, over an array of values)

        Phi(y) = int_{qk(x0)}^{y} (1 + (m/n) e^u) / M_QK(u) du,   Psi(y) = int_{ov(x0)}^{y} u / M_OV(u) du,

    taken along the circuit's curve from the setting's init x0, so that Phi(qk) - rho Psi(ov) = 0 along
    the flow. Where the loss reduces (module docstring, step 1) every variable of circuit c moves as
    dx_i/dt = -eta_c (dL/df) V_i(x) with V_i = (1/w_i) df/dx_i (f = qk or ov): the state runs along the
    integral curve of V through x0, on which df/dtau = sum_i (df/dx_i) V_i = M_c. With f as the
    parameter, dx/df = V / M_c, and the integral is solved together with that curve (SciPy's DOP853,
    rtol 1e-12). Valid where M_c > 0 between the init and ``value``."""

    spec: Spec
    circuit: str

    def __repr__(self) -> str:
        return f"LineCoordinate({self.spec.name!r}, {self.circuit!r})"

    def __call__(self, value, setting):
        from qkdyn.theory.specnumeric import numeric
        from scipy.integrate import solve_ivp

        rates, metric, indices = _curve(self.spec, self.circuit)
        p = np.asarray(setting.numeric(), dtype=float)
        x0 = numeric(self.spec).init(p, setting.qk0, setting.ov0)
        f0 = float(numeric(self.spec).features(x0, p)[0 if self.circuit == "QK" else 1])
        if not float(metric(x0[indices], p)) > 0:
            raise InputError(f"M_{self.circuit} is 0 at the init of {self.spec.name!r} (a saddle): the line has no "
                             "parameter there", "setting")
        values = np.asarray(value, dtype=float)
        out = np.zeros(values.shape)
        for side in (values > f0, values < f0):
            if side.any():
                end = float(values[side].max() if values[side].max() > f0 else values[side].min())
                run = solve_ivp(lambda f, y: rates(f, y[:-1], p) / float(metric(y[:-1], p)), (f0, end),
                                np.append(x0[indices], 0.0), method="DOP853", rtol=1e-12, atol=1e-14,
                                dense_output=True)
                if run.status < 0:
                    raise RuntimeError(f"{self.spec.name}: the quadrature of the {self.circuit} line failed: "
                                       f"{run.message}")
                out[side] = run.sol(values[side])[-1]
        return out if values.ndim else float(out)


@functools.cache
def _curve(spec: Spec, circuit: str) -> tuple[Callable, Callable, list[int]]:
    """(rates(f, x_c, p) -> (V, g(f)), metric(x_c, p) -> M_c, the indices of the circuit's variables x_c in
    the state) for :class:`LineCoordinate`, with g = 1 + (m/n) e^f (QK) or f (OV): dx_c/df = V / M_c and
    d integral/df = g / M_c."""
    from qkdyn.theory.model import m, n
    from qkdyn.theory.specflow import derive_spec
    from qkdyn.theory.specnumeric import lambdify

    d = derive_spec(spec)
    chosen, slopes = _slopes(d, circuit)
    x = [v.symbol for v in chosen]
    y = sp.Symbol("y", real=True)
    rates = lambdify([y, x, list(PARAMS)], [*slopes, 1 + m / n * sp.exp(y) if circuit == "QK" else y])
    metric = lambdify([x, list(PARAMS)], _metric(d, circuit))
    return rates, metric, [d.variables.index(v) for v in chosen]


def line_coordinates(spec: Spec) -> tuple:
    """``qkdyn.derive(spec).line`` for a spec that is no exact form's model: (Phi, Psi) as
    :class:`LineCoordinate` callables where :func:`line` says the line exists, else ()."""
    return (LineCoordinate(spec, "QK"), LineCoordinate(spec, "OV")) if line(spec)[0] is True else ()


def statements(spec: Spec) -> dict[str, str]:
    """What ``qkdyn derive --spec`` says about the closed forms of ``spec`` (module docstring)."""
    name = exact_form(spec)
    _, line_text = line(spec)
    if name is not None:
        return {"first-integral line": line_text,
                "late-time laws": f"derived by dominant balance (the exact form {name}: qkdyn derive --param {name})",
                "matched loss": f"closed form, no ODE (qkdyn sharpness: the exact form {name})"}
    return {"first-integral line": line_text,
            "late-time laws": ("not derived for this spec: dominant balance needs each M_c as a closed form in its "
                               "feature with its leading power, derived for the exact forms only"),
            "matched loss": "from ODE events, one solve per rho (qkdyn sharpness --spec; no closed form for this spec)"}
