"""Claim SUB: the reduced flow describes the full matrix model, with its boundary (docs/stability.md).

:func:`measure` computes the evidence (:mod:`.stability`, on one torch thread):

* the phase diagram of every parameterisation: the linearised transverse flow (m = 2, n = 4,
  canonical init, eta_OV = 1; factorized circuits at the inner width K + 1, which has the spectrum of
  every width, :func:`.stability.exact_width`) over (K, D, N) x rho until the loss ``LEVEL``: the
  predicted worst relative size of a transverse perturbation of relative size EPS = 1e-8, its largest
  growth rate and its log gain at the level;
* the boundary checked: per form and shape, the nonlinear full-matrix flow (same width) from the
  canonical init plus EPS along a random transverse direction at the last bounded and the first
  unbounded rho of the grid (the cells are chosen with the diagram's ``TOLERANCE``): its time error to
  LEVEL against the reduced flow, its distance from the symmetric subspace there, and its measured
  transverse size beside the linearisation's prediction for that same direction;
* gradient descent at a small step (exact population gradient) on both sides (rho = 1 and 50,
  K = D = N = 2, CACO): its transverse size beside the linearised flow's;
* FAFO at the default inner width V, perturbed full flows on both sides (rho = 1 and 50, to 1e-4).

A run that does not reach its loss is recorded with NaN for what it would have measured and its error.

:func:`judge` decides from that evidence alone, with the tolerances read when it runs
(:data:`.stability.TOLERANCE`, :data:`FACTOR`, :data:`LINEAR`, :data:`AMPLIFICATION`). A cell is bounded
when its predicted worst relative size is <= TOLERANCE; a run follows the reduced flow when its time error
and subspace distance are <= TOLERANCE. Verdict, by parts: "bounded region" holds when every validation
run inside the boundary follows the reduced flow, fails when one leaves (or no cell is bounded);
"beyond the boundary" is ``fails`` for the unscoped claim when every perturbed flow there confirms the
departure, ``inconclusive`` when the linearisation predicts a departure that a flow does not show, and
holds when no cell is unbounded; "linearisation confirmed" holds when the measured transverse sizes of
flows and GD in the linear regime (predicted below LINEAR) agree with the prediction to a factor FACTOR
and the unstable GD run amplifies at least AMPLIFICATION times more than the stable one, fails when one
of these is off. A number that was not measured (NaN) never decides a part that way: a part that needs
it, and has no measured failure, is inconclusive, and the summary names the runs.
"""
from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np

from qkdyn.claims import Claim, combine
from qkdyn.empirical.synthetic import stability as st
from qkdyn.simulate.plotting import save, subplots
from qkdyn.theory.setting import factorized

PARAMS = ("CACO", "FACO", "CAFO", "FAFO")

LEVEL = 1e-6
GD_LEVEL, GD_STEP, FAFO_LEVEL = 0.1, 0.02, 1e-4
#: rho of the stable and of the unstable side (GD and the FAFO flows at width V; K = D = N = 2)
SIDES = (1.0, 50.0)
#: a measured transverse size within this factor of the linear prediction confirms it
FACTOR = 2.0
#: below this predicted relative size the perturbation is in the linear regime
LINEAR = 1e-2
#: the unstable GD run must amplify its perturbation at least this many times more than the stable one
AMPLIFICATION = 100.0
#: how a validation run reads in the summary: follows (True), leaves (False), not measured (None)
_FOLLOWS = {True: "follows", False: "leaves", None: "not measured"}


def _config(quick: bool) -> dict:
    """(K, D, N): one distinct token per class (D = 1), equal shapes, unequal ones (3, 2, 4) and the most
    classes (5, 2, 2), and rho down to 0.3 (FACO at (5, 2, 2) is unbounded from rho = 1) in the full run; the quick
    run keeps the first three shapes (its numbers are the golden file's)."""
    if quick:
        return dict(shapes=[(2, 1, 2), (2, 2, 2), (3, 3, 3)], rhos=[1.0, 10.0, 30.0, 100.0])
    return dict(shapes=[(2, 1, 2), (2, 2, 2), (3, 3, 3), (3, 2, 4), (5, 2, 2)], rhos=[0.3, 1.0, 3.0, 10.0, 30.0, 100.0])


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


def measure(quick: bool, figures: Path) -> dict:
    """The evidence of claim SUB (module docstring), JSON data: the diagrams' predicted numbers per form
    (``max_relative_transverse_size``, ``max_growth_rate``, ``log_gain_at_level``: shapes x rhos), the
    ``validation`` flows, the ``gd`` runs, the ``fafo_flows_width_V`` and the levels and EPS they ran at.
    Draws the phase diagram into ``figures`` (``plot``: its file name). Runs on one torch thread."""
    cfg = _config(quick)
    with st.one_thread():
        diagrams = [st.diagram(cfg["shapes"], cfg["rhos"], LEVEL, param=param) for param in PARAMS]
        runs = [_validate(d, i, j) for d in diagrams for i, j in _validation_points(d)]
        gd = [_gd(rho) for rho in SIDES]
        fafo = [_fafo(rho) for rho in SIDES]
    d0 = diagrams[0]
    evidence = {"level": d0.level, "m": d0.m, "n": d0.n, "eps": st.EPS,
                "shapes": [list(s) for s in d0.shapes], "rhos": [float(r) for r in d0.rhos],
                "max_relative_transverse_size": {d.param: d.relative.tolist() for d in diagrams},
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
    """The perturbed full-matrix flow of cell (i, j) of ``d`` (the linearisation's width), beside its prediction."""
    K, D, N = d.shapes[i]
    setting = st._setting(K, D, N, d.m, d.n, d.rhos[j])
    cell = {"param": d.param, "K": K, "D": D, "N": N, "rho": float(d.rhos[j]),
            "predicted worst relative size": float(d.relative[i, j])}
    width = st.exact_width(setting) if any(factorized(d.param)) else None
    try:
        run = st.perturbed_flow(setting, d.param, d.level, width=width)
    except st.NotReached as error:
        return _not_reached(("predicted size of this run", "measured size", "sym_dist", "time error"), cell, error)
    lin = d.lines[i][j]
    predicted = st.EPS * lin.size[0] * lin.predicted(run.direction) / lin.size[-1]
    return {**cell, "predicted size of this run": float(predicted), "measured size": run.transverse,
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
    """A measured transverse size within FACTOR of its prediction (either way); None when either is not measured."""
    if not _measured(measured, predicted):
        return None
    return max(measured / predicted, predicted / measured) <= FACTOR


def _amplification(gd: list[dict]) -> float:
    """How many times more the unstable GD run (second) amplified its perturbation than the stable one (first)."""
    stable, unstable = gd
    return (unstable["transverse"] / unstable["eps"]) / (stable["transverse"] / stable["eps"])


def _judged(run: dict) -> dict:
    """A validation run with the judge's decisions: bounded by the linearisation (None: its prediction is NaN)
    and following the reduced flow (None: not measured)."""
    head = ("param", "K", "D", "N", "rho")
    relative = run["predicted worst relative size"]
    return {**{k: run[k] for k in head},
            "bounded (linearisation)": bool(st.bounded(relative)) if _measured(relative) else None,
            **{k: v for k, v in run.items() if k not in head}, "follows": _follows(run["sym_dist"], run["time error"])}


def _parts(runs: list[dict], gd: list[dict]) -> dict[str, str]:
    """The three parts (module docstring) from the judged validation runs and the GD runs (stable side first)."""
    unclassified = [r for r in runs if r["bounded (linearisation)"] is None]
    inside = [r["follows"] for r in runs if r["bounded (linearisation)"] is True]
    beyond = [r["follows"] for r in runs if r["bounded (linearisation)"] is False]
    amplification = _amplification(gd)
    checks = ([_agree(r["measured size"], r["predicted size of this run"]) for r in runs
               if not r["predicted size of this run"] >= LINEAR]  # NaN: linear or not, unknown
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


def judge(evidence: dict) -> Claim:
    """Claim SUB from :func:`measure`'s evidence (as a run record stores it): pure, the tolerances read now."""
    e = evidence
    params = list(e["max_relative_transverse_size"])
    shapes, rhos, level = [tuple(s) for s in e["shapes"]], e["rhos"], e["level"]
    relative = {p: np.array(v, dtype=float) for p, v in e["max_relative_transverse_size"].items()}
    boundaries = {p: st.boundary(rhos, st.bounded(relative[p])) for p in params}
    runs = [_judged(r) for r in e["validation"]]
    gd = e["gd"]
    fafo = [{**f, "time error": st.time_error(f["t"], f["t_reduced"])} for f in e["fafo_flows_width_V"]]
    parts = _parts(runs, gd)
    describe = lambda shape, b: (f"{shape}: every rho <= {rhos[-1]:g}" if b == rhos[-1] else
                                 f"{shape}: up to rho = {b:g}" if b is not None else f"{shape}: at no rho of the grid")
    run_text = lambda r: (f"{_label(r)}: {_FOLLOWS[r['follows']]} (time error {r['time error']:.1e}, sym_dist "
                          f"{r['sym_dist']:.1e}; transverse size {r['measured size']:.2e} measured vs "
                          f"{r['predicted size of this run']:.2e} predicted)")
    summary = (
        f"Linearisation of the full gradient flow (exact population loss, m = {e['m']}, n = {e['n']}, every form; "
        "factorized circuits at inner width K + 1, whose transverse spectrum is that of every width) in the "
        f"symmetry-breaking directions along the reduced trajectory to loss {level:g}: a perturbation of relative "
        f"size {e['eps']:g} stays below {st.TOLERANCE:g} for "
        + "; ".join(f"{p} " + ", ".join(describe(s, b) for s, b in zip(shapes, boundaries[p])) for p in params)
        + f" (K,D,N; grid rho = {', '.join(f'{r:g}' for r in rhos)}). The largest transverse growth rate lambda(t) "
        f"is positive everywhere (max over the grids {max(np.max(v) for v in e['max_growth_rate'].values()):.2g}) "
        "and decays like the loss, so the amplification grows like a power of t late in training: every boundary "
        "moves to smaller rho at smaller losses. Perturbed full-matrix flows at each boundary: "
        + "; ".join(run_text(r) for r in runs)
        + f". GD (CACO, h = {gd[0]['step']}, exact population gradient) to loss {e['gd_level']:g} at K=D=N=2: "
        "transverse size "
        + ", ".join(f"rho={g['rho']:g} {g['transverse']:.2e} (linearised flow {g['predicted']:.2e})" for g in gd)
        + f", {_amplification(gd):.3g}x more amplification at rho = {gd[1]['rho']:g}. FAFO at the default width V "
        f"(perturbed flow to loss {e['fafo_level']:g}): "
        + ", ".join(f"rho={f['rho']:g} {_FOLLOWS[_follows(f['sym_dist'], f['time error'])]} (sym_dist "
                    f"{f['sym_dist']:.1e}, time error {f['time error']:.1e})" for f in fafo)
        + ". Decided by: the perturbed flows inside the boundary (a time error or subspace distance above "
        f"{st.TOLERANCE:g} fails the bounded region), those beyond it (a flow that follows leaves that part "
        f"inconclusive), and the measured transverse sizes against the linear prediction (off by more than {FACTOR:g}x "
        "fails). Scope of every theorem of this report (A1-A5): exact on the symmetric subspace; it describes the full "
        "model only where this diagram says bounded." + _unmeasured(e))
    claim_evidence = {"level": level, "m": e["m"], "n": e["n"], "eps": e["eps"], "tolerance": st.TOLERANCE,
                      "shapes": e["shapes"], "rhos": rhos,
                      **{k: e[k] for k in ("max_relative_transverse_size", "max_growth_rate", "log_gain_at_level")},
                      "boundary_rho": boundaries, "validation": runs, "gd": gd,
                      "fafo_flows_width_V": e["fafo_flows_width_V"]}
    table = [{"form": p, "K,D,N": str(s), **{f"rho={r:g}": f"{relative[p][i, j]:.1e}" for j, r in enumerate(rhos)},
              "boundary rho": boundaries[p][i]} for p in params for i, s in enumerate(shapes)]
    return Claim("SUB", "The reduced flow describes the full matrix model: perturbations off the symmetric "
                 "subspace stay bounded until a given loss, for every rho and (K, D, N).", combine(parts),
                 claim_evidence, summary + " Table: predicted worst relative transverse size at the loss level "
                 f"(bounded: <= {st.TOLERANCE:g}).", [e["plot"]], table, parts=parts)


def _plot(evidence: dict, figures: Path) -> str:
    """The phase diagram of each form from the evidence: predicted worst relative size per shape against rho, the
    validation runs' measured sizes marked by whether they follow the reduced flow, TOLERANCE dotted."""
    params = list(evidence["max_relative_transverse_size"])
    fig, axes = subplots(1, len(params), sharey=True)
    for ax, param in zip(axes[0], params):
        for shape, row in zip(evidence["shapes"], evidence["max_relative_transverse_size"][param]):
            ax.loglog(evidence["rhos"], np.clip(row, 1e-12, 1e12), "o-", label=f"K,D,N={tuple(shape)}")
        for r in (r for r in evidence["validation"] if r["param"] == param):
            ax.loglog(r["rho"], np.clip(r["measured size"], 1e-12, 1e12),
                      "kx" if _follows(r["sym_dist"], r["time error"]) else "r*", ms=7)
        ax.axhline(st.TOLERANCE, color="k", ls=":", lw=0.8)
        ax.set(xlabel="rho = eta_QK / eta_OV", ylabel=f"relative transverse size at loss {evidence['level']:g}",
               title=param)
        ax.label_outer()  # one y label and one column of y ticks for the shared axis
    axes[0, 0].legend(fontsize=7, title=f"from {evidence['eps']:g}; x: flow follows, *: leaves", title_fontsize=7)
    return save(fig, figures, "stability_phase.png")
