"""Claim SUB: the reduced flow describes the full matrix model, with its boundary (docs/stability.md).

:func:`measure` computes the evidence (:mod:`.stability`, on one torch thread):

* the phase diagram of every parameterisation: the linearised transverse flow (m = 2, n = 4,
  canonical init, eta_OV = 1; factorized circuits at the inner width K + 1, which has the spectrum of
  every width, :func:`.stability.exact_width`) over (K, D, N) x rho until the loss ``LEVEL``: EPS = 1e-8
  times its worst linear gain of the relative transverse size (what a transverse perturbation of relative
  size EPS would reach if the flow stayed linear: a gain, not a size; the nonlinear flow saturates far below
  it where it is large), its largest growth rate and its log gain at the level;
* the boundary checked: per form and shape, the nonlinear full-matrix flow (same width) from the
  canonical init plus EPS along a random transverse direction at the last bounded and the first
  unbounded rho of the grid (the cells are chosen with the diagram's ``TOLERANCE``): its time error to
  LEVEL against the reduced flow, its distance from the symmetric subspace there, and its nonlinear
  relative transverse size there beside EPS x the linear gain of that same direction;
* gradient descent at a small step (exact population gradient) on both sides (rho = 1 and 50,
  K = D = N = 2, CACO): its transverse size beside the linearised flow's;
* FAFO at the default inner width V, perturbed full flows on both sides (rho = 1 and 50, to 1e-4).

A run that does not reach its loss is recorded with NaN for what it would have measured and its error.

:func:`judge` decides from that evidence alone, with the tolerances read when it runs
(:data:`.stability.TOLERANCE`, :data:`FACTOR`, :data:`LINEAR`, :data:`AMPLIFICATION`). A cell is bounded
when EPS x its worst linear gain is <= TOLERANCE; a run follows the reduced flow when its time error
and subspace distance are <= TOLERANCE. Verdict, by parts: "bounded region" holds when every validation
run inside the boundary follows the reduced flow, fails when one leaves (or no cell is bounded);
"beyond the boundary" is ``fails`` for the unscoped claim when every perturbed flow there confirms the
departure, ``inconclusive`` when the linearisation predicts a departure that a flow does not show, and
holds when no cell is unbounded; "linearisation confirmed" holds when the nonlinear transverse sizes of
flows and GD in the linear regime (EPS x linear gain below LINEAR) agree with it to a factor FACTOR
and the unstable GD run amplifies at least AMPLIFICATION times more than the stable one, fails when one
of these is off. A number that was not measured (NaN) never decides a part that way: a part that needs
it, and has no measured failure, is inconclusive, and the summary names the runs.
"""
from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from qkdyn.empirical.synthetic import stability as st
from qkdyn.empirical.synthetic.threads import one_thread
from qkdyn.simulate.plotting import save, subplots
from qkdyn.theory.setting import factorized

from qkdyn.claims import Claim, combine

PARAMS = ("CACO", "FACO", "CAFO", "FAFO")

LEVEL = 1e-6
GD_LEVEL, GD_STEP, FAFO_LEVEL = 0.1, 0.02, 1e-4
#: rho of the stable and of the unstable side (GD and the FAFO flows at width V; K = D = N = 2)
SIDES = (1.0, 50.0)
#: a measured transverse size within this factor of the linear prediction confirms it
FACTOR = 2.0
#: below this EPS x linear gain the perturbation is in the linear regime (above it, where the nonlinear size is
#: below it by more than FACTOR, the summary says the nonlinear flow saturates there)
LINEAR = 1e-2
#: the unstable GD run must amplify its perturbation at least this many times more than the stable one
AMPLIFICATION = 100.0
#: how a validation run reads in the summary: follows (True), leaves (False), not measured (None)
_FOLLOWS = {True: "follows", False: "leaves", None: "not measured"}


def _validation_points(d: st.Diagram) -> list[tuple[int, int]]:
    """Per shape: the last bounded and the first unbounded rho (or the largest rho when all are bounded)."""
    out = []
    for i, row in enumerate(d.bounded):
        if row.all():
            out.append((i, len(row) - 1))
            continue
        first_bad = int(np.argmin(row))
        if first_bad > 0:
            out.append((i, first_bad - 1))
        out.append((i, first_bad))
    return out


def measure(shapes: Sequence[Sequence[int]], rhos: Sequence[float], figures: Path) -> dict:
    """The evidence of claim SUB (module docstring) over the grid ``shapes`` (K, D, N) x ``rhos`` (the budget's
    :class:`~.budgets.StabilityConfig`), JSON data: the diagrams' linear numbers per form
    (``eps_x_linear_gain``: EPS x the worst linear gain of the relative transverse size, ``max_growth_rate``,
    ``log_gain_at_level``: shapes x rhos), the
    ``validation`` flows, the ``gd`` runs, the ``fafo_flows_width_V`` and the levels and EPS they ran at.
    Draws the phase diagram into ``figures`` (``plot``: its file name). Runs on one torch thread."""
    with one_thread():
        diagrams = [st.diagram(shapes, rhos, LEVEL, param=param) for param in PARAMS]
        runs = [_validate(d, i, j) for d in diagrams for i, j in _validation_points(d)]
        gd = [_gd(rho) for rho in SIDES]
        fafo = [_fafo(rho) for rho in SIDES]
    d0 = diagrams[0]
    evidence = {"level": d0.level, "m": d0.m, "n": d0.n, "eps": st.EPS,
                "shapes": [list(s) for s in d0.shapes], "rhos": [float(r) for r in d0.rhos],
                "eps_x_linear_gain": {d.param: d.eps_gain.tolist() for d in diagrams},
                "max_growth_rate": {d.param: d.growth_rate_max.tolist() for d in diagrams},
                "log_gain_at_level": {d.param: d.log_gain.tolist() for d in diagrams},
                "validation": runs, "gd_level": GD_LEVEL, "gd": gd, "fafo_level": FAFO_LEVEL,
                "fafo_flows_width_V": fafo}
    evidence["plot"] = _plot(evidence, Path(figures))
    return evidence


def _not_reached(measured, known: dict, error: st.NotReached) -> dict:
    """The record of a run that did not reach its loss: NaN for each ``measured`` key, the ``known`` ones, the error."""
    return {**dict.fromkeys(measured, math.nan), **known, "error": str(error)}


def _validate(d: st.Diagram, i: int, j: int) -> dict:
    """The perturbed full-matrix flow of cell (i, j) of ``d`` (the linearisation's width): its nonlinear relative
    transverse size at the loss level beside EPS x the linear gain of its direction (and the cell's worst)."""
    K, D, N = d.shapes[i]
    setting = st._setting(K, D, N, d.m, d.n, d.rhos[j])
    cell = {"param": d.param, "K": K, "D": D, "N": N, "rho": float(d.rhos[j]),
            "eps x worst linear gain": float(d.eps_gain[i, j])}
    width = st.exact_width(setting) if any(factorized(d.param)) else None
    try:
        run = st.perturbed_flow(setting, d.param, d.level, width=width)
    except st.NotReached as error:
        return _not_reached(("eps x linear gain (this run)", "nonlinear size", "sym_dist", "time error"), cell, error)
    lin = d.lines[i][j]
    linear = st.EPS * lin.size[0] * lin.predicted(run.direction) / lin.size[-1]
    return {**cell, "eps x linear gain (this run)": float(linear), "nonlinear size": run.transverse,
            "sym_dist": run.sym_dist, "time error": run.time_error}


def _gd(rho: float) -> dict:
    """GD (CACO, K = D = N = 2) to GD_LEVEL at step GD_STEP: the fields of :class:`.stability.GDRun`."""
    try:
        return vars(st.perturbed_gd(st._setting(2, 2, 2, 2, 4, rho), GD_LEVEL, GD_STEP))
    except st.NotReached as error:
        return _not_reached([f.name for f in dataclasses.fields(st.GDRun)],
                            {"rho": rho, "step": GD_STEP, "eps": st.EPS}, error)


def _fafo(rho: float) -> dict:
    """The perturbed FAFO flow (K = D = N = 2, width V) to FAFO_LEVEL. Not its initial direction: its coordinates
    are in an SVD basis of T that its repeated singular value leaves arbitrary (another CPU's BLAS returns another),
    so they speak for nothing."""
    known = {"param": "FAFO", "rho": rho, "eps": st.EPS}
    try:
        f = st.perturbed_flow(st._setting(2, 2, 2, 2, 4, rho), "FAFO", FAFO_LEVEL)
    except st.NotReached as error:
        return _not_reached(("t", "t_reduced", "sym_dist", "transverse"), known, error)
    return {**known, "t": f.t, "t_reduced": f.t_reduced, "sym_dist": f.sym_dist, "transverse": f.transverse}


def _measured(*values) -> bool:
    """Whether every one of ``values`` was measured (no None, no NaN)."""
    return all(v is not None and not math.isnan(v) for v in values)


def _follows(sym_dist: float, time_err: float) -> bool | None:
    """:func:`.stability.follows`, None when either number was not measured."""
    return st.follows(sym_dist, time_err) if _measured(sym_dist, time_err) else None


def _agree(measured: float, predicted: float) -> bool | None:
    """A nonlinear transverse size within FACTOR of its linear prediction (either way); None when either is not
    measured."""
    if not _measured(measured, predicted):
        return None
    return max(measured / predicted, predicted / measured) <= FACTOR


def _amplification(gd: list[dict]) -> float:
    """How many times more the unstable GD run (second) amplified its perturbation than the stable one (first)."""
    stable, unstable = gd
    return (unstable["transverse"] / unstable["eps"]) / (stable["transverse"] / stable["eps"])


def _judged(run: dict) -> dict:
    """A validation run with the judge's decisions: bounded by the linearisation (None: its gain is NaN)
    and following the reduced flow (None: not measured)."""
    head = ("param", "K", "D", "N", "rho")
    eps_gain = run["eps x worst linear gain"]
    return {**{k: run[k] for k in head},
            "bounded (linearisation)": bool(st.bounded(eps_gain)) if _measured(eps_gain) else None,
            **{k: v for k, v in run.items() if k not in head}, "follows": _follows(run["sym_dist"], run["time error"])}


def _parts(runs: list[dict], gd: list[dict]) -> dict[str, str]:
    """The three parts (module docstring) from the judged validation runs and the GD runs (stable side first)."""
    unclassified = [r for r in runs if r["bounded (linearisation)"] is None]
    inside = [r["follows"] for r in runs if r["bounded (linearisation)"] is True]
    beyond = [r["follows"] for r in runs if r["bounded (linearisation)"] is False]
    amplification = _amplification(gd)
    checks = ([_agree(r["nonlinear size"], r["eps x linear gain (this run)"]) for r in runs
               if not r["eps x linear gain (this run)"] >= LINEAR]  # NaN: linear or not, unknown
              + [_agree(g["transverse"], g["predicted"]) for g in gd]
              + [amplification >= AMPLIFICATION if _measured(amplification) else None])
    return {
        "bounded region: the full model follows the reduced flow":
            "fails" if False in inside or not (inside or unclassified) else
            "inconclusive" if None in inside or unclassified else "holds",
        "beyond the boundary: the full model leaves the reduced flow":
            "inconclusive" if True in beyond or None in beyond or unclassified else "fails" if beyond else "holds",
        "linearisation confirmed by perturbed flows and GD":
            "fails" if False in checks else "inconclusive" if None in checks else "holds",
    }


def _label(run: dict) -> str:
    return f"{run['param']} K,D,N=({run['K']},{run['D']},{run['N']}) rho={run['rho']:g}"


def _unmeasured(evidence: dict) -> str:
    """A sentence naming every run with a number that was not measured (NaN; with its error), or ''."""
    named = ([(_label(r), r) for r in evidence["validation"]] + [(f"GD rho={g['rho']:g}", g) for g in evidence["gd"]]
             + [(f"FAFO width V rho={f['rho']:g}", f) for f in evidence["fafo_flows_width_V"]])
    missing = [name + (f" ({r['error']})" if "error" in r else "") for name, r in named
               if not _measured(*(v for v in r.values() if isinstance(v, float)))]
    return (" Not measured (NaN): " + "; ".join(missing) + "; each part that needs them and shows no measured "
            "failure is inconclusive.") if missing else ""


def _saturates(run: dict) -> bool:
    """Whether a validation run's linear number is a gain the nonlinear flow does not reach: EPS x its linear gain at
    or above LINEAR, its nonlinear size below that by more than FACTOR (False when either is not measured)."""
    linear, size = run["eps x linear gain (this run)"], run["nonlinear size"]
    return _measured(linear, size) and linear >= LINEAR and size * FACTOR < linear


def _run_text(run: dict) -> str:
    """A validation run in the summary: follows or leaves, and its nonlinear size beside EPS x its linear gain."""
    size = run["nonlinear size"]
    return (f"{_label(run)}: {_FOLLOWS[run['follows']]} (time error {run['time error']:.1e}, sym_dist "
            f"{run['sym_dist']:.1e}; relative transverse size {size:.2e} nonlinear vs EPS x linear gain "
            f"{run['eps x linear gain (this run)']:.2e}" + (f": the nonlinear flow saturates at {size:.2e})"
                                                           if _saturates(run) else ")"))


def _saturation(runs: list[dict]) -> str:
    """The summary's sentence on the runs whose linear number is a gain the nonlinear flow does not reach, or ''."""
    saturated = [r for r in runs if _saturates(r)]
    if not saturated:
        return ""
    gains = [r["eps x linear gain (this run)"] for r in saturated]
    sizes = [r["nonlinear size"] for r in saturated]
    return (f" Beyond the linear regime (EPS x linear gain >= {LINEAR:g}) these numbers are linear gains, not sizes: "
            f"where EPS x the linear gain reaches {min(gains):.2g} to {max(gains):.2g} ({len(saturated)} runs), the "
            f"nonlinear flow saturates at a relative transverse size of {min(sizes):.2g} to {max(sizes):.2g}.")


def _cell(eps_gain: float, run: dict | None) -> str:
    """A table cell: EPS x the worst linear gain; where a validation run ran, EPS x the linear gain of its direction
    beside its nonlinear size (both at the loss level)."""
    return f"{eps_gain:.1e}" + ("" if run is None else f" (run: {run['eps x linear gain (this run)']:.1e} linear, "
                                                       f"{run['nonlinear size']:.1e} nonlinear)")


def judge(evidence: dict) -> Claim:
    """Claim SUB from :func:`measure`'s evidence (as a run record stores it): pure, the tolerances read now."""
    e = evidence
    params = list(e["eps_x_linear_gain"])
    shapes, rhos, level = [tuple(s) for s in e["shapes"]], e["rhos"], e["level"]
    eps_gain = {p: np.array(v, dtype=float) for p, v in e["eps_x_linear_gain"].items()}
    boundaries = {p: st.boundary(rhos, st.bounded(eps_gain[p])) for p in params}
    runs = [_judged(r) for r in e["validation"]]
    gd = e["gd"]
    fafo = [{**f, "time error": st.time_error(f["t"], f["t_reduced"])} for f in e["fafo_flows_width_V"]]
    parts = _parts(runs, gd)
    describe = lambda shape, b: (f"{shape}: every rho <= {rhos[-1]:g}" if b == rhos[-1] else
                                 f"{shape}: up to rho = {b:g}" if b is not None else f"{shape}: at no rho of the grid")
    summary = (
        f"Linearisation of the full gradient flow (exact population loss, m = {e['m']}, n = {e['n']}, every form; "
        "factorized circuits at inner width K + 1, whose transverse spectrum is that of every width) in the "
        f"symmetry-breaking directions along the reduced trajectory to loss {level:g}: EPS = {e['eps']:g} times the "
        "worst linear gain of the relative transverse size (the size a perturbation of relative size EPS would reach "
        f"if the flow stayed linear) stays below {st.TOLERANCE:g} for "
        + "; ".join(f"{p} " + ", ".join(describe(s, b) for s, b in zip(shapes, boundaries[p], strict=True)) for p in params)
        + f" (K,D,N; grid rho = {', '.join(f'{r:g}' for r in rhos)}). The largest transverse growth rate lambda(t) "
        f"is positive everywhere (max over the grids {max(np.max(v) for v in e['max_growth_rate'].values()):.2g}) "
        "and decays like the loss, so the linear gain grows like a power of t late in training: every boundary "
        "moves to smaller rho at smaller losses. Perturbed full-matrix flows at each boundary: "
        + "; ".join(_run_text(r) for r in runs) + "." + _saturation(runs)
        + f" GD (CACO, h = {gd[0]['step']}, exact population gradient) to loss {e['gd_level']:g} at K=D=N=2: "
        "relative transverse size "
        + ", ".join(f"rho={g['rho']:g} {g['transverse']:.2e} (EPS x linear gain {g['predicted']:.2e})" for g in gd)
        + f", {_amplification(gd):.3g}x more amplification at rho = {gd[1]['rho']:g}. FAFO at the default width V "
        f"(perturbed flow to loss {e['fafo_level']:g}): "
        + ", ".join(f"rho={f['rho']:g} {_FOLLOWS[_follows(f['sym_dist'], f['time error'])]} (sym_dist "
                    f"{f['sym_dist']:.1e}, time error {f['time error']:.1e})" for f in fafo)
        + ". Decided by: the perturbed flows inside the boundary (a time error or subspace distance above "
        f"{st.TOLERANCE:g} fails the bounded region), those beyond it (a flow that follows leaves that part "
        "inconclusive), and the nonlinear transverse sizes against EPS x the linear gain where it is below "
        f"{LINEAR:g} (off by more than {FACTOR:g}x fails). Scope of every theorem of this report (A1-A5): exact on "
        "the symmetric subspace; it describes the full model only where this diagram says bounded." + _unmeasured(e))
    claim_evidence = {"level": level, "m": e["m"], "n": e["n"], "eps": e["eps"], "tolerance": st.TOLERANCE,
                      "shapes": e["shapes"], "rhos": rhos,
                      **{k: e[k] for k in ("eps_x_linear_gain", "max_growth_rate", "log_gain_at_level")},
                      "boundary_rho": boundaries, "validation": runs, "gd": gd,
                      "fafo_flows_width_V": e["fafo_flows_width_V"]}
    validated = {(r["param"], (r["K"], r["D"], r["N"]), r["rho"]): r for r in runs}
    table = [{"form": p, "K,D,N": str(s),
              **{f"EPS x gain, rho={r:g}": _cell(eps_gain[p][i, j], validated.get((p, s, r)))
                 for j, r in enumerate(rhos)}, "boundary rho": boundaries[p][i]}
             for p in params for i, s in enumerate(shapes)]
    return Claim("SUB", "The reduced flow describes the full matrix model: perturbations off the symmetric "
                 "subspace stay bounded until a given loss, for every rho and (K, D, N).", combine(parts),
                 claim_evidence, summary + " Table: EPS x the worst linear gain of the relative transverse size until "
                 f"the loss level (bounded: <= {st.TOLERANCE:g}; a gain, not a size the flow reaches); in brackets, "
                 "where a perturbed flow ran, EPS x the linear gain of its direction beside its nonlinear relative "
                 "transverse size, both at the loss level.", [e["plot"]], table, parts=parts)


def _plot(evidence: dict, figures: Path) -> str:
    """The phase diagram of each form from the evidence: EPS x the worst linear gain per shape against rho (lines),
    the validation runs' nonlinear sizes (markers: whether they follow the reduced flow), TOLERANCE dotted."""
    params = list(evidence["eps_x_linear_gain"])
    fig, axes = subplots(1, len(params), sharey=True)
    for ax, param in zip(axes[0], params, strict=True):
        for shape, row in zip(evidence["shapes"], evidence["eps_x_linear_gain"][param], strict=True):
            ax.loglog(evidence["rhos"], np.clip(row, 1e-12, 1e12), "o-", label=f"K,D,N={tuple(shape)}")
        for r in (r for r in evidence["validation"] if r["param"] == param):
            ax.loglog(r["rho"], np.clip(r["nonlinear size"], 1e-12, 1e12),
                      "kx" if _follows(r["sym_dist"], r["time error"]) else "r*", ms=7)
        ax.axhline(st.TOLERANCE, color="k", ls=":", lw=0.8)
        ax.set(xlabel="rho = eta_QK / eta_OV", ylabel=f"EPS x linear gain (lines, clipped at 1e12),\nnonlinear size "
               f"(markers), loss {evidence['level']:g}", title=param)
        ax.label_outer()  # one y label and one column of y ticks for the shared axis
    axes[0, 0].legend(fontsize=7, title=f"EPS = {evidence['eps']:g}; nonlinear flow x: follows, *: leaves",
                      title_fontsize=7)
    return save(fig, figures, "stability_phase.png")
