"""Solutions of a spec over rate ratios rho, compared at equal qk: the measurements behind claims CQ1 and CQ2.

Symbols as in docs/setting.md; M_QK(x) = sum_i (d qk / d x_i)^2 / w_i over the QK variables x_i (orbit sizes
w_i), M_QK^collapsed = s^2 (1/(KD) + 1/N), M_OV = 1/(KD) + 1/(K(K-1)D) for collapsed OV. A :class:`FlowPath` is
one solution at eta_QK = rho eta_OV with its rate factor R_QK = M_QK / M_QK^collapsed along it (:func:`path`).

"At equal qk" is exact: each run's rows are compared with the reference run's states where it reaches their qk,
located on the solver's dense output (:func:`reach`), so an agreement measured here is the solver's own accuracy.
The line of CQ2 (:mod:`qkdyn.simulate.claims_coupled`): Phi(qk) - rho Psi(ov) is conserved, Psi(ov) = (ov^2 -
ov0^2) / (2 M_OV); Phi is read off the reference run at rho = 1, Phi(qk) = Psi(ov_1(qk)) (:func:`line_error`).
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np
from qkdyn.simulate.specsolve import solve_spec
from qkdyn.theory.setting import Setting
from qkdyn.theory.spec import Spec


def collapsed_metric(setting: Setting) -> tuple[float, float]:
    """(M_QK^collapsed, M_OV) of collapsed circuits (module docstring)."""
    K, D, N = setting.classes, setting.distinct, setting.commons
    return setting.scale**2 * (1 / (K * D) + 1 / N), 1 / (K * D) + 1 / (K * (K - 1) * D)


@dataclasses.dataclass
class FlowPath:
    """One solution of a spec at rate ratio rho: t, qk, ov, attn and R_QK along it; ``at_qk`` (None for an exact
    form solved by name): qk values on the rising prefix of the rows -> (ov, R_QK) at the states where the
    solution reaches them (:func:`reach`)."""

    rho: float
    t: np.ndarray
    qk: np.ndarray
    ov: np.ndarray
    attn: np.ndarray
    rate_factor: np.ndarray
    at_qk: Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]] | None = None


def path(setting: Setting, spec: Spec | str, rho: float, t_max: float, points: int, at=()) -> FlowPath:
    """Solve ``spec`` (or one of the exact forms by name: its compiled solver and closed-form rate
    factor) at eta_QK = rho eta_OV to ``t_max`` and read R_QK along the solution; for a spec, keep its dense
    output to locate the states at given qk (:func:`reach`)."""
    changed = setting.replace(eta_qk=rho * setting.eta_ov)
    if isinstance(spec, str):
        from qkdyn.simulate.claims_theory import closed_rate_factors
        from qkdyn.simulate.solve import solve

        exact = solve(changed, spec, t_max=t_max, points=points, at=at)
        return FlowPath(rho, exact.t, exact.qk, exact.ov, exact.attn, closed_rate_factors(exact)["QK"]["closed"])
    tr = solve_spec(changed, spec, t_max=t_max, points=points, at=at)
    from qkdyn.theory.specnumeric import numeric

    functions, p, m_qk = numeric(spec), np.array(setting.numeric()), collapsed_metric(setting)[0]
    dense = tr.dense  # the solver's own dense output: the states at any t of the integration above
    assert dense is not None
    factor = np.broadcast_to(functions.qk_metric(tr.state, p), tr.t.shape) / m_qk
    n = _rising(tr.qk)

    def at_qk(values):
        x = reach(dense, lambda states: functions.features(states, p)[0], tr.t[:n], tr.qk[:n], values)
        return functions.features(x, p)[1], np.broadcast_to(functions.qk_metric(x, p), np.shape(values)) / m_qk

    return FlowPath(rho, tr.t, tr.qk, tr.ov, tr.attn, factor, at_qk)


def reach(dense: Callable[[np.ndarray], np.ndarray], qk_of: Callable[[np.ndarray], np.ndarray], t: np.ndarray,
          qk: np.ndarray, values) -> np.ndarray:
    """The states (dim, len(values)) where a solution reaches each of ``values``: the roots of qk_of(dense(t)) - value
    (``dense``: the solver's dense output, t -> states; ``qk_of``: states -> qk), each bracketed by the rows (t, qk,
    qk strictly increasing) around it and narrowed in t to the float resolution of its upper end.

    Each bracket [lo, hi] (qk below the value at lo, not below at hi) narrows by the Illinois variant of regula
    falsi: the secant point of the bracket's ends, and the end kept twice in a row has its residual halved, so both
    ends converge (superlinearly) rather than one staying put; where a step leaves the bracket, or two steps did not
    halve it (the residuals at round-off), the midpoint instead. The bracket bisection would give, in a sixth of its
    evaluations of the dense output (52 halvings of a row interval against ~8 steps a value: the dense output of a
    spec's SciPy solution is evaluated piece by piece, and CQ1/CQ2 locate thousands of values)."""
    shape, values = np.shape(values), np.asarray(values, dtype=float).ravel()
    i = np.clip(np.searchsorted(qk, values, side="right"), 1, len(qk) - 1)  # qk[i - 1] <= value < qk[i]
    lo, hi = t[i - 1], t[i]
    below_lo, above_hi = qk[i - 1] - values, qk[i] - values  # the residuals at the ends (signs as the rows say)
    at_lo, at_hi = below_lo == 0, above_hi == 0  # a row at the value itself: the bracket closed on it
    hi[at_lo], lo[at_hi] = lo[at_lo], hi[at_hi]
    resolution = np.finfo(float).eps * hi
    kept = np.zeros(values.shape, dtype=int)  # -1: lo moved last, +1: hi moved last
    before_last = last = np.full(values.shape, np.inf)  # the bracket's widths two and one steps ago
    while np.any(open_ := hi - lo > resolution):
        span = hi - lo
        with np.errstate(divide="ignore", invalid="ignore"):
            secant = hi - above_hi * span / (above_hi - below_lo)
        bisect = ~((secant > lo) & (secant < hi)) | (span > 0.5 * before_last)
        where = np.flatnonzero(open_)
        x = np.where(bisect, 0.5 * (lo + hi), secant)[where]
        residual = qk_of(dense(x)) - values[where]
        below, exact = residual < 0, residual == 0  # the value itself: the bracket closes on it
        above = ~below & ~exact  # (a NaN residual moves hi, as bisection's "not below" did)
        up, down = where[below], where[above]
        above_hi[up[kept[up] == -1]] *= 0.5  # hi kept twice in a row: its residual halved (Illinois)
        below_lo[down[kept[down] == 1]] *= 0.5
        lo[up], below_lo[up], kept[up] = x[below], residual[below], -1
        hi[down], above_hi[down], kept[down] = x[above], residual[above], 1
        lo[where[exact]] = hi[where[exact]] = x[exact]
        before_last, last = last, span
    return dense((0.5 * (lo + hi)).reshape(shape))


def _rising(qk: np.ndarray) -> int:
    """Length of the prefix of the rows ``qk`` on which qk strictly increases (to locate a qk value on it)."""
    falls = np.flatnonzero(np.diff(qk) <= 0)
    return int(falls[0]) + 1 if falls.size else len(qk)


def _at_equal_qk(reference: FlowPath, other: FlowPath):
    """(mask on ``other``'s rows within the qk range of the reference's rising prefix, the reference's (ov, R_QK)
    at the states where it reaches those rows' qk: exact events on its dense output, :func:`reach`). The first 1%
    of the range is left out: there qk has hardly moved while ov grows, so ov at equal qk multiplies qk's own
    integration error (2.6e-10 on CQ2's quick line at rho = 0.1, against 4e-11 beyond it)."""
    assert reference.at_qk is not None, "the reference is a spec's path (one solved by name has no dense output)"
    qk = reference.qk[:_rising(reference.qk)]
    keep = (other.qk >= qk[0] + 0.01 * (qk[-1] - qk[0])) & (other.qk <= qk[-1])
    return keep, reference.at_qk(other.qk[keep])


def rate_factor_difference(reference: FlowPath, other: FlowPath) -> float:
    """Largest relative difference of R_QK at equal qk on two paths: ``other``'s rows against the reference where
    it reaches their qk (:func:`_at_equal_qk`)."""
    keep, (_, predicted) = _at_equal_qk(reference, other)
    values = other.rate_factor[keep]
    return float(np.max(np.abs(values - predicted) / np.maximum(np.abs(values), 1e-300)))


def monotone(reference: FlowPath) -> bool:
    """qk strictly increasing along the whole path ("equal qk" is then one point of each path)."""
    return _rising(reference.qk) == len(reference.qk)


def line_error(setting: Setting, reference: FlowPath, other: FlowPath) -> float:
    """Largest relative error of ov on ``other`` predicted by the line: rho Psi(ov) = Phi(qk) with Phi read
    off ``reference`` (rho = 1: Phi(qk) = Psi(ov_1(qk))), so ov = sqrt(ov0^2 + 2 M_OV Phi(qk) / rho)
    (module docstring); ov_1 at the states where ``reference`` reaches other's qk (:func:`_at_equal_qk`)."""
    m_ov = collapsed_metric(setting)[1]
    keep, (ov_1, _) = _at_equal_qk(reference, other)
    phi = (ov_1**2 - setting.ov0**2) / (2 * m_ov)
    predicted = np.sqrt(np.maximum(setting.ov0**2 + 2 * m_ov * phi / other.rho, 0.0))
    return float(np.max(np.abs(other.ov[keep] - predicted) / np.abs(other.ov[keep])))
