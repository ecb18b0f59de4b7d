"""Claims A1-A3: the exact structure of the flow, checked along long numerical solutions.

A1  rate factor: at states of each factorized solution, the rate M_c / M_c^collapsed read off a
    gradient-descent step of the full matrix model (measured in qkdyn.empirical, passed in) equals the
    derived closed form (qkdyn.theory.invariants.balanced_metric) and grows with the magnitude.
A2  line: Phi(qk) - rho Psi(ov) and every named polynomial first integral stay constant.
A3  growth: the drift of log(y / (log t)^p) over a late window, for ov, qk, e^qk and the odds, decides
    each reading against the paper's exponent p and against the derived laws with all their factors
    (qkdyn.theory.asymptotics, log log t included), in units of one log log t factor.

Each claim is measured, judged and drawn apart: ``measure_a1/2/3`` solve, measure and return the evidence (a
JSON-serialisable dict of the raw quantities, which a run record stores, with the arrays its figure is drawn
from; they draw nothing); ``judge_a1/2/3`` decide the :class:`Claim` from that evidence alone (no solving,
no I/O), against the tolerances of this module as they are when called; ``draw_a1/2/3`` draw the claim's
figure (A1_FIGURE ... A3_FIGURE, the names the claims carry) from the evidence alone. A quantity that could not
be measured (NaN) makes its claim or part inconclusive. ``check_a1/2/3`` compose the three for one setting.
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
from qkdyn.simulate import growth
from qkdyn.simulate.plotting import COLOURS, drawn, save, subplots
from qkdyn.simulate.solve import solve
from qkdyn.simulate.trajectory import Trajectory
from qkdyn.theory.compiled import growth_in_log_t, load
from qkdyn.theory.setting import ALL_PARAMS, Setting

from qkdyn.claims import Claim, combine

#: the scope every theorem of the report carries (claim SUB measures where it holds)
SCOPE = ("Scope: exact for the reduced flow on the symmetric subspace; the full matrix model follows it only "
         "where that subspace is stable (claim SUB: its boundary in rho and K, D, N).")
FACTORIZED_CIRCUITS = {"FACO": ("QK",), "CAFO": ("OV",), "FAFO": ("QK", "OV")}


def closed_rate_factors(tr: Trajectory) -> dict[str, dict[str, np.ndarray]]:
    """The derived rate factors R_c = M_c / M_c^collapsed (qkdyn.theory.invariants.balanced_metric)
    along ``tr``, with the magnitude |qk| or |ov|."""
    p = tr.setting.numeric()
    compiled, collapsed = tr.compiled, load("CACO")
    closed = compiled.balanced_metrics(tr.qk, tr.ov, compiled.kappa(tr.state, p), p)
    reference = collapsed.metrics(np.zeros((5, 1)), p)
    return {circuit: {"magnitude": np.abs(feature), "closed": closed[index] / reference[index]}
            for index, (circuit, feature) in enumerate((("QK", tr.qk), ("OV", tr.ov)))}


#: the measured rate factor must match the closed form to this (the measurement is exact up to round-off)
A1_TOLERANCE = 1e-6
#: A1's "increasing with the magnitude" allows each step down to this fraction of the factor (round-off)
A1_MONOTONE_SLACK = 1e-9
#: A1's states run to this loss: below ~1e-10 the full model's float64 gradient q - onehot loses its digits
A1_LOSS = 1e-6
#: A2 holds when every first integral drifts by less than this (relative)
A2_DRIFT_BOUND = 1e-8
#: the figures the claims name, drawn by :func:`draw_a1` ... :func:`draw_a3` from the evidence
A1_FIGURE, A2_FIGURE, A3_FIGURE = "a1_rate_factor.png", "a2_line.png", "a3_growth.png"


def _floats(values) -> list[float]:
    return [float(v) for v in values]


def _nan(values) -> bool:
    """Whether ``values`` (a list of numbers) hold a NaN: a measurement that could not be made."""
    return bool(np.isnan(np.asarray(values, dtype=float)).any())


def measure_a1(setting: Setting, t_max: float, measure=None, points: int = 24) -> dict:
    """Evidence for A1: at ``points`` states of each factorized solution (down to loss A1_LOSS), the
    magnitude |qk| or |ov|, the derived rate factor (:func:`closed_rate_factors`) and the one measured by
    ``measure(setting, param, states) -> {"QK": R, "OV": R}`` (gradient descent on the full matrix model,
    :func:`qkdyn.empirical.synthetic.rates.gd_rate_factors`, passed in by ``qkdyn verify``: this layer does
    not import torch; ``None`` when there is no ``measure``), per "param/circuit". Draws nothing
    (:func:`draw_a1` draws these arrays)."""
    circuits = {}
    for param, names in FACTORIZED_CIRCUITS.items():
        tr = solve(setting, param, t_max=t_max, until_loss=A1_LOSS, points=points)
        factors = closed_rate_factors(tr)
        measured = measure(setting, param, tr.state) if measure else None
        for circuit in names:
            f = factors[circuit]
            m = None if measured is None else measured[circuit]
            circuits[f"{param}/{circuit}"] = {"magnitude": _floats(f["magnitude"]), "closed_factor": _floats(f["closed"]),
                                              "measured_factor": None if m is None else _floats(m)}
    return {"t_max": t_max, "points": points, "loss": A1_LOSS, "circuits": circuits}


def draw_a1(evidence: dict, figures: Path) -> str:
    """A1_FIGURE from :func:`measure_a1`'s evidence: per circuit the derived factor (line) and the measured
    one (dots) against the magnitude, every state but the first (log axes)."""
    fig, axes = subplots(1, 2)
    for key, c in evidence["circuits"].items():
        param, circuit = key.split("/")
        ax = axes[0, 0 if circuit == "QK" else 1]
        ax.loglog(c["magnitude"][1:], c["closed_factor"][1:], "-", lw=1, color="k")
        if c["measured_factor"] is not None:
            ax.loglog(c["magnitude"][1:], c["measured_factor"][1:], "o", ms=3, color=COLOURS[param],
                      label=f"{param} measured (GD)")
    for ax, circuit in zip(axes[0], ("QK", "OV"), strict=True):
        ax.set(xlabel=f"|{circuit.lower()}|", ylabel=f"rate factor R_{circuit}",
               title=f"{circuit}: full-model GD (dots), derived (line)")
        if ax.get_legend_handles_labels()[0]:
            ax.legend()
    return save(fig, figures, A1_FIGURE)


def judge_a1(evidence: dict) -> Claim:
    """A1 from :func:`measure_a1`'s evidence: it holds when, for every factorized circuit, the measured
    factor deviates from the derived one by less than A1_TOLERANCE (relative), increases with the
    magnitude (each step, in order of magnitude, down by at most A1_MONOTONE_SLACK of the factor) and ends
    above where it starts; it fails otherwise. Inconclusive when there is no full-model measurement or a
    factor is NaN (a measurement that could not be made)."""
    statement = ("Factorizing a circuit rescales its learning rate by a state-dependent factor that grows "
                 "with the circuit's magnitude (balanced factors).")
    circuits, plots = evidence["circuits"], [A1_FIGURE]
    if any(c["measured_factor"] is None for c in circuits.values()):
        return Claim("A1", statement, "inconclusive", {"reason": "no full-model measurement (torch runs skipped)"},
                     "Not measured: the rate factor is read off gradient descent on the full matrix model, which this "
                     "run skipped. " + SCOPE, plots)
    nan = [key for key, c in circuits.items() if any(_nan(c[k]) for k in ("magnitude", "closed_factor", "measured_factor"))]
    if nan:
        return Claim("A1", statement, "inconclusive", {"reason": "rate factor not measured (NaN)", "not_measured": nan},
                     f"Not measured: the rate factor of {', '.join(nan)} is NaN (the full-model measurement or the "
                     "derived form could not be evaluated there), so it cannot be compared. " + SCOPE, plots)
    out, ok = {}, True
    for key, c in circuits.items():
        magnitude, closed, m = (np.asarray(c[k], dtype=float) for k in ("magnitude", "closed_factor", "measured_factor"))
        deviation = float(np.max(np.abs(m / closed - 1)))
        order = np.argsort(magnitude)
        increasing = bool(np.all(np.diff(m[order]) >= -A1_MONOTONE_SLACK * m[order][1:]))
        out[key] = {"max_rel_deviation_from_closed_form": deviation, "increasing_with_magnitude": increasing,
                    "factor_at_start": float(m[0]), "factor_at_end": float(m[-1]),
                    "magnitude_at_end": float(magnitude[-1])}
        ok &= deviation < A1_TOLERANCE and increasing and m[-1] > m[0]
    worst = max(v["max_rel_deviation_from_closed_form"] for v in out.values())
    return Claim(
        "A1", statement, "holds" if ok else "fails", out,
        f"At {evidence['points']} states of each factorized solution down to loss {evidence['loss']:g}, embedded in "
        "the full matrices: the rate of each circuit's feature under one gradient-descent step of the full model "
        "(exact: Richardson on steps h and h/2 of a quadratic), divided by -eta dL/df and by the same measurement on the collapsed model, against "
        "the derived R_QK = sqrt(kappa^2 + 4 qk^2/(s^2 c)) and R_OV = 2 sqrt(D) |ov| (qkdyn.theory.invariants; "
        f"c = 1/(KD) + 1/N, kappa conserved): largest relative deviation {worst:.1e} (it fails above "
        f"{A1_TOLERANCE:g}, or if the measured factor does not increase with |qk| or |ov|): small factors learn "
        "slower than the collapsed circuit, large ones faster. " + SCOPE, plots)


def check_a1(setting: Setting, t_max: float, figures: Path, measure=None, points: int = 24) -> Claim:
    """A1 measured (:func:`measure_a1`), drawn into ``figures`` (:func:`draw_a1`) and judged (:func:`judge_a1`)."""
    evidence = measure_a1(setting, t_max, measure, points)
    draw_a1(evidence, figures)
    return judge_a1(evidence)


def measure_a2(setting: Setting, t_max: float, rhos) -> dict:
    """Evidence for A2: for every parameterisation and rho = eta_QK/eta_OV in ``rhos``, the largest
    relative drift of the line Phi(qk) - rho Psi(ov) and of every named polynomial first integral
    (:meth:`Trajectory.drifts`) along the solution to ``t_max``, per "param/rho=..". For :func:`draw_a2`
    (``curves[param]``, one per rho, every output time but the first, :func:`drawn`): t, the line's
    coordinates rho (Psi(ov) - Psi(ov0)) and Phi(qk) - Phi(qk0), and the relative drift of Phi - rho Psi
    (as in Trajectory.drifts, floored at 1e-17 to show on log axes)."""
    per_run: dict[str, dict] = {}
    curves: dict[str, list[dict]] = {}
    for param in ALL_PARAMS:
        curves[param] = []
        for rho in rhos:
            tr = solve(setting.replace(eta_qk=rho * setting.eta_ov), param, t_max=t_max, points=300)
            phi, psi = tr.line()
            per_run[f"{param}/rho={rho:g}"] = tr.drifts()
            line = phi - rho * psi
            scale = np.max(np.maximum(np.abs(phi), rho * np.abs(psi)))
            curves[param].append({"t": drawn(tr.t[1:]), "rho_psi": drawn(rho * (psi[1:] - psi[0])),
                                  "phi": drawn(phi[1:] - phi[0]),
                                  "drift": drawn(np.maximum(np.abs(line[1:] - line[0]) / scale, 1e-17))})
    return {"t_max": t_max, "rhos": _floats(rhos), "per_run": per_run, "curves": curves}


def draw_a2(evidence: dict, figures: Path) -> str:
    """A2_FIGURE from :func:`measure_a2`'s evidence: per parameterisation, the solutions in (rho Psi, Phi)
    coordinates over the line y = x (top) and the line's relative drift against t with the bound (bottom)."""
    curves = evidence["curves"]
    fig, axes = subplots(2, len(curves))
    for col, (param, runs) in enumerate(curves.items()):
        ax, drift_ax = axes[0, col], axes[1, col]
        for rho, run in zip(evidence["rhos"], runs, strict=True):
            ax.loglog(run["rho_psi"], run["phi"], "-", label=f"rho={rho:g}")
            drift_ax.loglog(run["t"], run["drift"], label=f"rho={rho:g}")
        lo, hi = ax.get_xlim()
        ax.plot([lo, hi], [lo, hi], "k:", lw=0.8)
        ax.set(xlabel="rho (Psi(ov) - Psi(ov0))", ylabel="Phi(qk) - Phi(qk0)", title=f"{param}: the line y = x")
        ax.legend()
        drift_ax.axhline(A2_DRIFT_BOUND, color="k", ls=":", lw=0.8)
        drift_ax.set(xlabel="t", ylabel="relative drift of Phi - rho Psi",
                     title=f"{param}: drift (dotted: {A2_DRIFT_BOUND:g} bound)")
    return save(fig, figures, A2_FIGURE)


def judge_a2(evidence: dict) -> Claim:
    """A2 from :func:`measure_a2`'s evidence: it holds when the largest drift of every run is below
    A2_DRIFT_BOUND, fails when one is not, and is inconclusive when a drift is NaN (not measured)."""
    per_run = evidence["per_run"]
    nan = [f"{run} {name}" for run, drifts in per_run.items() for name, value in drifts.items() if math.isnan(value)]
    worst = max([0.0, *(value for drifts in per_run.values() for value in drifts.values() if not math.isnan(value))])
    verdict = "inconclusive" if nan else "holds" if worst < A2_DRIFT_BOUND else "fails"
    summary = ("First integral Phi(qk) - rho Psi(ov) (rho = eta_QK/eta_OV; Phi, Psi derived in qkdyn.theory.invariants) "
               f"and the named polynomial invariants (mean modes, factor balance) drift by at most {worst:.2g} "
               f"(relative) along solutions to t = {evidence['t_max']:g}: in (rho Psi, Phi) coordinates every trajectory "
               "is the line of slope 1.")
    out = {"max_relative_drift": worst, "per_run": per_run}
    if nan:
        out["not_measured"] = nan
        summary += f" Inconclusive: the drift of {', '.join(nan)} is NaN (not measured), so the bound cannot be checked."
    return Claim(
        "A2", "The reduced dynamics have a closed form: QK and OV move along a line in suitable "
        "coordinates, with speed set by eta_QK and eta_OV.", verdict, out, summary, [A2_FIGURE])


def check_a2(setting: Setting, t_max: float, rhos, figures: Path) -> Claim:
    """A2 measured (:func:`measure_a2`), drawn into ``figures`` (:func:`draw_a2`) and judged (:func:`judge_a2`)."""
    evidence = measure_a2(setting, t_max, rhos)
    draw_a2(evidence, figures)
    return judge_a2(evidence)


READINGS = {  # name -> (log y along a trajectory, exponent p of the paper's law y ~ (log t)^p)
    "ov": (lambda tr: np.log(tr.ov), 1.0),
    "qk": (lambda tr: np.log(tr.qk), 2.0),
    "exp(qk)": (lambda tr: tr.qk, 2.0),
    "odds": (lambda tr: tr.log_odds, 2.0),
}
#: the paper's law of each reading as a person writes it ("log t", "(log t)^2"; growth.Law's spelling)
PAPER_LAWS = {name: str(growth.Law.log_power(p)) for name, (_, p) in READINGS.items()}


def derived_log_readings(tr: Trajectory, t: np.ndarray) -> dict[str, np.ndarray]:
    """log y(t) of every reading from the derived late-time laws with all their factors and constants
    (qkdyn.theory.asymptotics: ov(t) from the OV law, Lambert W for a factorized OV; qk = the QK law at
    that ov, which carries the log log t of a factorized QK), no fitting."""
    compiled, p = tr.compiled, tr.setting.numeric()
    ov = compiled.ov_law(t, p)
    qk = compiled.qk_law(ov, p)
    return {"ov": np.log(ov), "qk": np.log(qk), "exp(qk)": qk, "odds": qk + math.log(tr.setting.m / tr.setting.n)}


#: |drift| / (one log log t factor) below this: no log log t factor left over
FACTOR_THRESHOLD = 0.5
#: the measured drift must match the derived law's to this fraction of one log log t factor
LAW_TOLERANCE = 0.5
#: the window on which the solutions decide (late enough for the log-log-rate corrections of the
#: factorized laws to sit well inside LAW_TOLERANCE), and where the derived law's own form is read
#: (its corrections of relative size 1/log t are ~1e-3 there)
WINDOW, FAR = (1e30, 1e100), (1e200, 1e300)


def drift(t1: float, t2: float, log_y: tuple[float, float], p: float) -> float:
    """drift / unit: the change of log(y / (log t)^p) from t1 to t2 in units of one factor log log t,
    unit = log(log log t2 / log log t1). y = (log t)^p (log log t)^k (1 + o(1)) gives k."""
    unit = math.log(math.log(math.log(t2)) / math.log(math.log(t1)))
    return (log_y[1] - log_y[0] - p * math.log(math.log(t2) / math.log(t1))) / unit


def judge_growth(t1: float, t2: float, measured: dict, derived: dict, far: dict, claimed: dict,
                 far_window: tuple[float, float] = FAR) -> dict[str, dict]:
    """Decide each reading (dicts map reading -> (log y at the first time, at the second); ``far`` is read
    at ``far_window``):

    - ``derived_law_confirmed``: the measured drift over [t1, t2] matches the derived law's to
      LAW_TOLERANCE factors of log log t (a law with a log log t factor too many or too few fails);
      ``None`` (not measured) when either drift is NaN;
    - ``holds`` (the paper's y ~ (log t)^p): the derived law, confirmed, has no factor log log t or
      power of log t left over at ``far_window`` (|drift| < FACTOR_THRESHOLD there); ``None``
      (inconclusive) when the derived law is not confirmed by the measurement or its drift there is NaN."""
    out = {}
    for name, p in claimed.items():
        k_meas, k_der = drift(t1, t2, measured[name], p), drift(t1, t2, derived[name], p)
        k_far = drift(*far_window, far[name], p)
        confirmed = None if math.isnan(k_meas - k_der) else abs(k_meas - k_der) <= LAW_TOLERANCE
        out[name] = {"claimed_exponent": p, "extra_factors_measured": k_meas, "extra_factors_derived": k_der,
                     "extra_factors_derived_at_1e300": k_far, "derived_law_confirmed": confirmed,
                     "holds": (abs(k_far) < FACTOR_THRESHOLD) if confirmed and not math.isnan(k_far) else None}
    return out


def _every(values) -> bool | None:
    """Three-valued "all": False when one of ``values`` is False, else None when one is None, else True."""
    values = list(values)
    return False if False in values else None if None in values else True


def measure_a3(setting: Setting, read_at, t_far: float, laws=derived_log_readings) -> dict:
    """Evidence for A3, per parameterisation (solved to max(t_far, WINDOW[1])) and reading of READINGS:
    log y measured at the ends of WINDOW, and by the derived laws (``laws``, no fit; a planted wrong law
    makes A3's "derived laws confirmed" part fail) at WINDOW and at FAR; the local exponent
    d log y / d log log t at the ``read_at`` times; least-squares fits of the growth families on
    1e10 <= t <= 1e15. Per parameterisation also the relative error of the derived laws at ``read_at``
    (law_check), the derived growth in log t and the fitted against the derived constants; and for
    :func:`draw_a3` (``curves``, :func:`drawn`) the local exponent of every reading along the solution
    (t > 1e3) against log10 t."""
    per_param, curves = {}, {}
    t1, t2 = WINDOW
    for param in ALL_PARAMS:
        tr = solve(setting, param, t_max=max(t_far, t2), points=600, at=sorted(set(read_at) | set(WINDOW)))
        late = tr.t > 1e3
        compiled, p = tr.compiled, setting.numeric()
        law_ov = compiled.ov_law(tr.t[late], p)
        law_qk = compiled.qk_law(tr.ov[late], p)
        ends = np.searchsorted(tr.t, [t1, t2])
        derived, far = laws(tr, np.array([t1, t2])), laws(tr, np.array(FAR))
        window = (tr.t >= 1e10) & (tr.t <= 1e15)
        readings, exponent_curves = {}, {}
        for name, (log_y, _) in READINGS.items():
            exponents = growth.local_exponent(tr.t[late], log_y(tr)[late])
            readings[name] = {
                "log_y": _floats(log_y(tr)[ends]), "derived_log_y": _floats(derived[name]),
                "derived_log_y_far": _floats(far[name]),
                "local_exponent": {f"{t:.0e}": float(np.interp(np.log(np.log(t)), np.log(np.log(tr.t[late])), exponents))
                                   for t in read_at},
                "fits": growth.fit_families(tr.t[window], np.exp(log_y(tr)[window]))}
            exponent_curves[name] = drawn(exponents)
        law_check = {
            f"{t:.0e}": {"ov/ov_law - 1": float(np.interp(t, tr.t[late], tr.ov[late] / law_ov - 1)),
                         "exp(qk - qk_law(ov)) - 1": float(np.interp(t, tr.t[late], np.expm1(tr.qk[late] - law_qk)))}
            for t in read_at}
        per_param[param] = {"readings": readings, "law_check": law_check,
                            "derived_growth": growth_in_log_t(*compiled.law_powers),
                            "fitted_vs_derived_constants": _fitted_constants(tr)}
        curves[param] = {"log10_t": drawn(np.log10(tr.t[late])), "local_exponent": exponent_curves}
    return {"window": [t1, t2], "far_window": list(FAR), "read_at": _floats(read_at), "t_far": t_far,
            "per_param": per_param, "curves": curves}


def draw_a3(evidence: dict, figures: Path) -> str:
    """A3_FIGURE from :func:`measure_a3`'s evidence: per parameterisation, the local exponent
    d log y / d log log t of every reading against log10 t, with the paper's exponents 1 and 2 dotted."""
    curves = evidence["curves"]
    fig, axes = subplots(1, len(curves))
    for col, (param, curve) in enumerate(curves.items()):
        ax = axes[0, col]
        for name, exponents in curve["local_exponent"].items():
            # odds = (m/n) e^qk has the same exponent as exp(qk): dashed and wider so neither hides the other
            ax.plot(curve["log10_t"], exponents, label=name + (" (same as exp(qk))" if name == "odds" else ""),
                    ls="--" if name == "odds" else "-", lw=2.4 if name == "exp(qk)" else None)
        for value in (1, 2):
            ax.axhline(value, color="k", lw=0.5, ls=":")
        ax.set(xlabel="log10 t", ylabel="d log y / d log log t", title=param, ylim=(-0.5, 4))
        ax.legend()
    return save(fig, figures, A3_FIGURE)


def judge_a3(evidence: dict) -> Claim:
    """A3 from :func:`measure_a3`'s evidence, each reading of each parameterisation decided by
    :func:`judge_growth` on the evidence's window. One part per reading: it holds when the paper's law
    holds for every parameterisation, fails when it fails for one, and is inconclusive otherwise (a
    derived law not confirmed, or a NaN drift); one part that the derived laws (with all their factors)
    describe the measured growth: holds when confirmed for every parameterisation, fails when one is
    not, inconclusive when a drift is NaN (the summary names them)."""
    t1, t2 = evidence["window"]
    read_at = evidence["read_at"]
    claimed = {name: p for name, (_, p) in READINGS.items()}
    per_param, verdicts, confirmed, nan = {}, {}, {}, []
    for param, measured in evidence["per_param"].items():
        readings = measured["readings"]
        measured_y, derived_y, far_y = ({name: readings[name][key] for name in READINGS}
                                         for key in ("log_y", "derived_log_y", "derived_log_y_far"))
        judged = judge_growth(t1, t2, measured_y, derived_y, far_y, claimed, far_window=tuple(evidence["far_window"]))
        rows = {name: {**judged[name], "local_exponent": readings[name]["local_exponent"],
                       "best_family_on_1e10..1e15": growth.best_family(readings[name]["fits"]),
                       "fits": readings[name]["fits"]} for name in READINGS}
        rows.update({key: measured[key] for key in ("law_check", "derived_growth", "fitted_vs_derived_constants")})
        per_param[param] = rows
        verdicts[param] = {name: rows[name]["holds"] for name in READINGS}  # True, False or None
        confirmed[param] = _every(rows[name]["derived_law_confirmed"] for name in READINGS)
        nan += [f"{param} {name}" for name in READINGS if any(math.isnan(rows[name][key]) for key in (
            "extra_factors_measured", "extra_factors_derived", "extra_factors_derived_at_1e300"))]
    params = list(per_param)
    held = {name: [param for param in params if verdicts[param][name]] for name in READINGS}
    unknown = {name: [param for param in params if verdicts[param][name] is None] for name in READINGS}
    last = f"{read_at[-1]:.0e}"
    law_error = {param: max(abs(v) for v in per_param[param]["law_check"][last].values()) for param in params}
    # one part per reading (it holds when it holds for every parameterisation; which ones do: evidence),
    # and one that the derived laws (with all their factors) describe the measured growth
    parts = {f"{name} ~ {PAPER_LAWS[name]}": "holds" if len(held[name]) == len(params) else
             "fails" if len(held[name]) + len(unknown[name]) < len(params) else "inconclusive" for name in READINGS}
    parts["derived laws (all factors) match the measured late growth"] = {
        True: "holds", False: "fails", None: "inconclusive"}[_every(confirmed.values())]
    not_measured = (f"Not measured (a NaN drift, which decides nothing, so the reading is inconclusive): "
                    f"{', '.join(nan)}. ") if nan else ""
    summary = (
        f"Decided by the solutions between t = {t1:.0e} and {t2:.0e}: k = the drift of log(y / (log t)^p) for the "
        "paper's exponent p, in units of one factor log log t (y = (log t)^p (log log t)^k). The derived law of each "
        f"reading (all its factors and constants, no fit) is confirmed when its k matches the measured k to "
        f"{LAW_TOLERANCE:g} (a law with one log log t too many or too few would fail); the paper's law then holds "
        f"when the confirmed law has |k| < {FACTOR_THRESHOLD:g} at t = 1e200..1e300 (a log log t factor or another "
        "power of log t would make it fail); an unconfirmed law leaves the reading inconclusive. Derived laws confirmed: "
        + ", ".join(f"{param} {({True: 'yes', False: 'NO', None: 'not measured'})[ok]}" for param, ok in confirmed.items())
        + ". Which reading grows like the paper says: "
        + "; ".join(f"{name} ~ {PAPER_LAWS[name]}: {', '.join(held[name]) or 'none'}" for name in READINGS)
        + ". Derived: " + "; ".join(f"{param} e^qk ~ {per_param[param]['derived_growth']['exp(qk)']}" for param in params)
        + f". Largest relative error of the derived laws (with constants) at t = {last}: "
        + ", ".join(f"{param} {err:.2%}" for param, err in law_error.items())
        + "; leading-order laws of factorized circuits converge only at log-log rate (corrections of "
        "relative size 1/qk and 1/ov), see law_check. " + not_measured + SCOPE)
    table = [{"param": param, "reading": name, "claimed p": READINGS[name][1],
              "derived law": per_param[param]["derived_growth"].get(name, "-"),
              "k measured": per_param[param][name]["extra_factors_measured"],
              "k derived": per_param[param][name]["extra_factors_derived"],
              "k derived (1e300)": per_param[param][name]["extra_factors_derived_at_1e300"],
              **{f"p(t={t})": value for t, value in per_param[param][name]["local_exponent"].items()},
              "holds": {True: "yes", False: "no", None: "inconclusive"}[per_param[param][name]["holds"]]}
             for param in params for name in READINGS]
    return Claim("A3", "Under population gradient flow the OV parameter grows like log t and the QK "
                 "parameter like log^2 t, with constants set by rho.", combine(parts),
                 {"held_by_reading": held, "derived_law_confirmed": confirmed, "window": [t1, t2],
                  "law_error_at_last_time": law_error, "per_param": per_param},
                 summary + " Table: k (extra factors of log log t beyond (log t)^p; 0 for the paper's law) measured and "
                 "derived, and the local exponent p = d log y / d log log t.", [A3_FIGURE], table,
                 parts=parts)


def check_a3(setting: Setting, read_at, t_far: float, figures: Path, laws=derived_log_readings) -> Claim:
    """A3 measured (:func:`measure_a3`), drawn into ``figures`` (:func:`draw_a3`) and judged (:func:`judge_a3`)."""
    evidence = measure_a3(setting, read_at, t_far, laws)
    draw_a3(evidence, figures)
    return judge_a3(evidence)


def _fitted_constants(tr: Trajectory) -> dict[str, dict[str, float]]:
    """Least-squares constants on the window 1e10 <= t <= 1e15 against the derived ones:
    the slope of ov in log t (derived: 1) and C in e^qk / qk^i = C ov^j (qkdyn.theory.asymptotics)."""
    window = (tr.t >= 1e10) & (tr.t <= 1e15)
    qk_power, _, power = tr.compiled.law_powers  # e^qk / qk^i = C ov^d (derived once, in the generated module)
    derived_c = float(tr.compiled.qk_law_constant(tr.setting.numeric()))  # derived once, in the generated module
    slope = np.polyfit(np.log(tr.t[window]), tr.ov[window], 1)[0]
    lhs = np.exp(tr.qk[window]) / tr.qk[window] ** qk_power
    fitted_c = float(np.linalg.lstsq(tr.ov[window, None] ** power, lhs, rcond=None)[0][0])
    return {"ov slope in log t": {"fitted": float(slope), "derived": 1.0},
            f"C in e^qk / qk^{qk_power} = C ov^{power}": {"fitted": fitted_c, "derived": derived_c}}
