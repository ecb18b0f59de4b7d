"""Claim A6 (GD and SGD on the full matrix model follow the ODE), with Adam and a non-symmetric
init (the sampled claims are in :mod:`.claims_sampled`, claim FA in :mod:`.fixed_attention`).
The study :class:`qkdyn.empirical.synthetic.study.A6Study` runs the measurements and judges them here.

Measurements (setting S6 = Setting(qk0=0.5, ov0=0.5), other fields default: the loss falls from
1.26 to 0.08 by t = 40 for FAFO, so the runs cover the whole transition):
* GD from the canonical init at steps h, 2h, ...: err(h) = max relative error of (qk, ov) against
  ``qkdyn.simulate.solve.solve`` at the same times; order = log2(err(h) / err(h/2)) (Euler: 1).
* SGD (FAFO) at batch sizes B, seeds averaged: dev = max sqrt(err^2 + sym_dist^2)
  (:func:`qkdyn.empirical.synthetic.experiment.sgd_deviation`); slope of log dev vs log B (noise: -1/2).
* Adam (lr h eta_c per circuit, population batch) to a loss target, for rho in a sweep, and GD over the
  same steps, both from the canonical init plus the same seeded transverse perturbation of relative size
  ``ADAM["eps"]`` = 1e-6 (:func:`.stability.perturbed_model`; the exact init would leave only round-off off
  the subspace, whose amplification depends on the CPU's kernels): attn at that loss against the ODE's attn
  at the same loss (solve ``until_loss``), and sym_dist over each run against its start.
* Non-symmetric init: canonical init plus N(0, sigma^2) on every entry, SGD (B = 32): sym_dist over t.
* Long horizon and large rho (:func:`long_horizon`): GD (h = 0.02) on the *exact* population loss
  (every count vector: the mean-count batch above is exact only on the symmetric subspace, so it
  cannot leave it), K = D = N = 2, m = 2, n = 4, from the canonical init plus a transverse perturbation
  of relative size 1e-4, to loss 1e-2 (t ~ 200), at rho = 1 (stable subspace, claim SUB) and rho = 50
  (unstable): deviation = max(relative distance from the subspace, relative error of the time to that
  loss) against the same 2e-3 as the short runs. It can fail, and at rho = 50 it does.
"""
from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import torch
from qkdyn.empirical.synthetic import experiment, observe, plots, reduced, stability, stacked, train
from qkdyn.empirical.synthetic.model import PARAMS
from qkdyn.simulate.solve import solve
from qkdyn.theory.setting import Setting

from qkdyn.claims import Claim, Precondition, combine, gate, parts_from_checks

S6 = Setting(qk0=0.5, ov0=0.5)


def _curve(rows, keys=("t", "qk", "ov")):
    return tuple(np.array([r[k] for r in rows]) for k in keys)


def gd_and_sgd(cfg: dict, figures_dir: Path) -> tuple[dict, list[str]]:
    """GD convergence order per parameterisation, SGD deviation vs batch, overlay plots. Every GD and SGD
    run is trained in one tensor program per batch size (:mod:`.stacked`: each run's rows equal its run
    alone, :func:`.experiment.run`, to round-off)."""
    T, steps = cfg["T"], cfg["steps"]
    h = steps[0]
    gd = {(param, step): stacked.Arm(param, step, round(T / step), points=25) for param in PARAMS for step in steps}
    overlay_sgd = {param: stacked.Arm(param, h, round(T / h), cfg["overlay_batch"], 0, 25) for param in PARAMS}
    sweep = {(batch, s): stacked.Arm("FAFO", h, round(T / h), batch, s, 30)
             for batch in cfg["sgd_batches"] for s in range(cfg["sgd_seeds"])}
    rows = stacked.run(S6, [*gd.values(), *overlay_sgd.values(), *sweep.values()])
    errors, overlay, sgd_sym = {}, {}, {}
    for param in PARAMS:
        errors[param] = [experiment.flow_error(rows[gd[param, step]], param, S6) for step in steps]
        sgd = rows[overlay_sgd[param]]
        ode = solve(S6, param, t_max=T, points=200)
        sgd_sym[param] = sgd[-1]["sym_dist"]
        overlay[param] = {"ode": (ode.t, ode.qk, ode.ov), "gd": _curve(rows[gd[param, h]]), "sgd": _curve(sgd),
                          "h": h, "batch": cfg["overlay_batch"]}
    ratios = {p: [e[i] / e[i + 1] for i in range(len(e) - 1)] for p, e in errors.items()}
    deviations, sym_parts = [], []
    for batch in cfg["sgd_batches"]:
        runs = [rows[sweep[batch, s]] for s in range(cfg["sgd_seeds"])]
        deviations.append(float(np.mean([experiment.sgd_deviation(r, "FAFO", S6) for r in runs])))
        sym_parts.append(float(np.mean([max(row["sym_dist"] for row in r) for r in runs])))
    slope = float(np.polyfit(np.log(cfg["sgd_batches"]), np.log(deviations), 1)[0])
    plots.overlay(overlay, figures_dir / "a6_overlay.png")
    plots.convergence(errors, steps, figures_dir / "a6_convergence.png")
    plots.sgd_batch(cfg["sgd_batches"], deviations, figures_dir / "a6_sgd_batch.png", "FAFO")
    evidence = {"setting": "Setting(qk0=0.5, ov0=0.5), defaults otherwise", "t_max": T, "steps": steps,
                "gd_error": errors, "gd_error_ratio": ratios, "sgd_param": "FAFO", "sgd_step": h,
                "sgd_batches": cfg["sgd_batches"], "sgd_seeds": cfg["sgd_seeds"], "sgd_deviation": deviations,
                "sgd_max_sym_dist": sym_parts, "sgd_slope_vs_log_batch": slope,
                "sgd_b32_final_sym_dist_from_design_init": sgd_sym}
    return evidence, ["a6_overlay.png", "a6_convergence.png", "a6_sgd_batch.png"]


#: Adam's runs (:func:`adam`): step h, the relative size and seed of the transverse perturbation of the start,
#: the first steps recorded one by one (where the perturbation grows or decays fastest)
ADAM = dict(step=0.01, eps=1e-6, seed=0, first_steps=8)


def adam(cfg: dict, figures_dir: Path) -> tuple[list[dict], list[str]]:
    """Adam to a loss target, per rho, and GD over the same steps, both from the canonical init plus the same
    seeded transverse perturbation of relative size ``ADAM["eps"]`` (:func:`.stability.perturbed_model`), on
    the same population (mean-count) batch: attn at the target vs the ODE's attn at the same loss, and the
    distance from the symmetric subspace over each run (:func:`.reduced.symmetric_distance`)."""
    rows = []
    h, start = ADAM["step"], dict(perturb=ADAM["eps"], perturb_seed=ADAM["seed"])
    for param in cfg["adam_params"]:
        for rho in cfg["adam_rhos"]:
            setting = S6.replace(eta_qk=rho, eta_ov=1.0)
            run = experiment.run(param, setting, h, cfg["adam_cap"], optimizer="adam", points=10,
                                 extra_steps=range(1, ADAM["first_steps"] + 1), stop_below=cfg["adam_loss"], **start)
            last = run[-1]
            gd = experiment.run(param, setting, h, last["step"], optimizer="gd", points=1,
                                extra_steps=[r["step"] for r in run], **start)
            ode = solve(setting, param, until_loss=last["loss"], points=2)
            adam_d, gd_d = (np.array([r["sym_dist"] for r in rs]) for rs in (run, gd))
            left = [r["step"] for r in run if r["sym_dist"] > stability.TOLERANCE]
            rows.append({"param": param, "rho": rho, "steps": last["step"], "loss": last["loss"],
                         "attn_adam": last["attn"], "attn_ode": float(ode.attn[-1]), "t_ode": ode.event_t,
                         "start_distance": float(adam_d[0]), "adam_max_distance": float(adam_d.max()),
                         "adam_end_distance": float(adam_d[-1]), "adam_leaves_at_step": left[0] if left else None,
                         "gd_max_distance": float(gd_d.max()), "gd_end_distance": float(gd_d[-1]),
                         "recorded_steps": [r["step"] for r in run], "adam_distance": adam_d.tolist(),
                         "gd_distance": gd_d.tolist()})
    plots.adam(rows, figures_dir / "a6_adam.png")
    return rows, ["a6_adam.png"]


def nonsymmetric(cfg: dict, figures_dir: Path, sigma: float = 0.05) -> tuple[dict, list[str]]:
    """SGD (B = 32, h = 0.04, to t = T) from the canonical init plus N(0, sigma^2) noise on every entry:
    sym_dist over t (compare: the same SGD from the exact canonical init, in the A6 evidence)."""
    h, curves, evidence = 0.04, {}, {}
    steps = round(cfg["T"] / h)
    for param in ("CACO", "FAFO"):
        model = reduced.new_model(param, S6)
        generator = torch.Generator().manual_seed(7)
        with torch.no_grad():
            for p in model.parameters():
                p.add_(sigma * torch.randn(p.shape, generator=generator, dtype=p.dtype))
        opt = train.make_optimizer(model, "sgd", h, S6.eta_qk, S6.eta_ov)
        rows = train.train(model, opt, train.batch_source(S6, 32, 0), steps, train.record_steps(steps, 30),
                           observe.observer(param, S6))
        for row in rows:
            row["t"] = row["step"] * h
        t, dist, loss = _curve(rows, ("t", "sym_dist", "loss"))
        curves[param] = (t, dist)
        evidence[param] = {"sym_dist_start": float(dist[0]), "sym_dist_end": float(dist[-1]),
                           "sym_dist_max": float(dist.max()), "loss_end": float(loss[-1]),
                           "qk_ov_error_vs_ode_end": float(experiment.relative_errors(rows, param, S6)[-1])}
    plots.symmetric_distance(curves, figures_dir / "a6_nonsymmetric.png")
    return {"sigma": sigma, "step": h, "batch": 32, **evidence}, ["a6_nonsymmetric.png"]


LONG = dict(shape=(2, 2, 2), m=2, n=4, rhos=(1.0, 50.0), level=1e-2, step=0.02, eps=1e-4, tolerance=2e-3)


def long_horizon() -> list[dict]:
    """GD on the exact population loss at rho = 1 and 50 (module docstring): one row per rho."""
    rows = []
    for rho in LONG["rhos"]:
        run = stability.perturbed_gd(stability._setting(*LONG["shape"], LONG["m"], LONG["n"], rho), LONG["level"],
                                     LONG["step"], eps=LONG["eps"])
        deviation = float(np.max([run.transverse, run.time_error]))  # NaN if either is (Python's max drops it)
        rows.append({"rho": rho, "steps": run.steps, "t": run.t, "t_ode": run.t_reduced, "time_error": run.time_error,
                     "distance_from_subspace": run.transverse, "linearised_prediction": float(run.predicted),
                     "deviation": float(deviation), "follows": bool(deviation < LONG["tolerance"])})
    return rows


def judge(cfg: dict, gd_sgd: dict, nonsym: dict, adam_rows: list[dict], long_rows: list[dict]) -> list[Claim]:
    """Claims A6 and A6-adam from the measured evidence (pure: no training, no plotting).

    ``gd_sgd``: the evidence of :func:`gd_and_sgd`; ``nonsym``: of :func:`nonsymmetric`; ``adam_rows``:
    the rows of :func:`adam`; ``long_rows``: of :func:`long_horizon`; the plots are the files those
    functions wrote."""
    a6_plots = ["a6_overlay.png", "a6_convergence.png", "a6_sgd_batch.png"]
    nonsym_plots, adam_plots = ["a6_nonsymmetric.png"], ["a6_adam.png"]
    ev = dict(gd_sgd)
    ev["nonsymmetric_init"] = nonsym
    ratios = [r for rs in ev["gd_error_ratio"].values() for r in rs]
    order_ok = bool(ratios) and all(abs(r - 2) <= 0.3 for r in ratios)  # no ratio (one step size): not shown
    small_ok = all(e[-1] < 2e-3 for e in ev["gd_error"].values())
    sgd_ok = len(ev["sgd_deviation"]) > 1 and all(a > b for a, b in itertools.pairwise(ev["sgd_deviation"]))
    finest = {p: e[-1] for p, e in ev["gd_error"].items()}
    ev["long_horizon"] = {"setting": LONG, "rows": long_rows}
    a6_parts = parts_from_checks({"GD error is first order in the step": order_ok,
                                  "GD error < 2e-3 at the finest step": small_ok,
                                  "SGD deviation shrinks with the batch": sgd_ok,
                                  **{f"long horizon, rho = {r['rho']:g}: GD on the exact population follows the ODE":
                                     r["follows"] for r in long_rows}})
    a6 = Claim(
        "A6", "Gradient descent and SGD on the full matrix model follow the ODE (error shrinking with step "
        "size and with batch size).", combine(a6_parts), ev,
        f"GD from the canonical init vs the ODE over t <= {cfg['T']:g}: max relative error of (qk, ov) at the finest "
        f"step h = {cfg['steps'][-1]} is {', '.join(f'{p} {e:.2e}' for p, e in finest.items())}; halving h divides "
        f"it by {', '.join(f'{p} ' + '/'.join(f'{r:.3f}' for r in rs) for p, rs in ev['gd_error_ratio'].items())} "
        f"(first order: 2). SGD (FAFO, h = {ev['sgd_step']}) deviation from the flow at B = {ev['sgd_batches']}: "
        f"{', '.join(f'{d:.3g}' for d in ev['sgd_deviation'])} (log-log slope {ev['sgd_slope_vs_log_batch']:.2f}; "
        "the noise lives off the symmetric subspace: its symmetric part equals the population step). From a "
        f"randomly perturbed init the distance from the symmetric subspace goes "
        f"{nonsym['CACO']['sym_dist_start']:.3g} -> {nonsym['CACO']['sym_dist_end']:.3g} (CACO), "
        f"{nonsym['FAFO']['sym_dist_start']:.3g} -> {nonsym['FAFO']['sym_dist_end']:.3g} (FAFO) under SGD "
        f"(B = 32); the same SGD from the exact canonical init ends at "
        f"{ev['sgd_b32_final_sym_dist_from_design_init']['CACO']:.3g} (CACO), "
        f"{ev['sgd_b32_final_sym_dist_from_design_init']['FAFO']:.3g} (FAFO). Long horizon (GD h = {LONG['step']} on "
        f"the exact population loss, K = D = N = 2, m = 2, n = 4, canonical init plus a {LONG['eps']:g} transverse "
        f"perturbation, to loss {LONG['level']:g}): "
        + "; ".join(f"rho = {r['rho']:g}: t = {r['t']:.4g} (ODE {r['t_ode']:.4g}), distance from the subspace "
                    f"{r['distance_from_subspace']:.2e} (linearised prediction {r['linearised_prediction']:.2e}): "
                    f"{'follows' if r['follows'] else 'does NOT follow'} the ODE" for r in long_rows)
        + ". Where it does not, the symmetric subspace is unstable (claim SUB): the ODE describes GD only inside SUB's "
        "boundary. The short runs above use the mean-count batch, exact only on the subspace, so they cannot see this.",
        a6_plots + nonsym_plots, parts=a6_parts)
    return [a6, adam_claim(cfg, adam_rows, adam_plots)]


def adam_claim(cfg: dict, rows: list[dict], figure_files: list[str]) -> Claim:
    """Claim A6-adam from the rows of :func:`adam`: two parts, Adam stays within TOLERANCE of the symmetric
    subspace, and its attn at the loss target is the ODE's (within 0.02), gated by what they speak for:
    GD from the same start stays within TOLERANCE over the same steps (else the subspace itself is unstable
    there, claim SUB, and a departure says nothing about Adam), and the start is off the subspace by far more
    than round-off (else the run measures the amplification of round-off, which depends on the CPU's kernels)."""
    tol = stability.TOLERANCE
    gaps = [abs(r["attn_adam"] - r["attn_ode"]) for r in rows]
    max_gap = float(np.max(gaps))  # NaN when any gap is (Python's max skips a NaN after the first entry)
    by_param = {p: [r for r in rows if r["param"] == p] for p in cfg["adam_params"]}
    monotone = {p: all(b["attn_adam"] > a["attn_adam"] for a, b in itertools.pairwise(rs)) for p, rs in by_param.items()}
    lower = sum(r["attn_adam"] < r["attn_ode"] - 0.02 for r in rows)
    start = float(np.min([r["start_distance"] for r in rows]))  # NaN propagates: the precondition is then unmet
    preconditions = [
        Precondition(f"GD from the same start stays within {tol:g} of the symmetric subspace over the same steps",
                     float(np.max([r["gd_max_distance"] for r in rows])), "<", tol, "largest distance over every run"),
        Precondition("the start is off the subspace by far more than round-off (start distance / float64 eps)",
                     start / float(np.finfo(float).eps), ">", 1e6, f"smallest start distance {start:.3g}")]
    parts = gate(parts_from_checks({
        f"Adam stays within {tol:g} of the symmetric subspace": all(r["adam_max_distance"] < tol for r in rows),
        "Adam's attn at the loss target is the ODE's at the same loss (within 0.02)": all(g < 0.02 for g in gaps)}),
        preconditions)

    def departure(r):
        leaves = f"leaves ({tol:g}) at step {r['adam_leaves_at_step']}" if r["adam_leaves_at_step"] else "stays"
        return (f"{r['param']} rho={r['rho']:g} ({r['steps']} steps): Adam {leaves}, distance up to "
                f"{r['adam_max_distance']:.2g} ({r['adam_max_distance'] / r['start_distance']:.2g}x the start), "
                f"{r['adam_end_distance']:.2g} at the end; GD up to {r['gd_max_distance'] / r['start_distance']:.3g}x, "
                f"{r['gd_end_distance'] / r['start_distance']:.3g}x at the end; attn Adam {r['attn_adam']:.3f} vs "
                f"ODE {r['attn_ode']:.3f}")
    return Claim(
        "A6-adam", "Adam with the same per-circuit learning rates follows the same gradient-flow ODE: from a start "
        "slightly off the symmetric subspace it stays near it, as GD does, and it reaches the loss target with the "
        "ODE's attn at that loss.", combine(parts),
        {"rows": rows, **ADAM, "tolerance": tol, "max_attn_gap": max_gap, "adam_attn_increases_with_rho": monotone},
        f"Adam and GD (lr = {ADAM['step']:g} eta_c per circuit, population batch) from the canonical init plus a "
        f"seeded transverse perturbation of relative size {ADAM['eps']:g} (distance from the subspace at the start "
        f"{start:.3g} to {max(r['start_distance'] for r in rows):.3g}), Adam to the loss target, GD over the same "
        "steps: " + "; ".join(departure(r) for r in rows) +
        f". Largest attn gap {max_gap:.3f}; Adam is less sharp than the flow in {lower} of {len(rows)} runs. Under "
        f"Adam attn at matched loss still rises with rho for {', '.join(p for p, ok in monotone.items() if ok) or 'none'} "
        f"(not for {', '.join(p for p, ok in monotone.items() if not ok) or 'none'}). Adam's step is ~lr sign(grad) "
        "per entry, so each circuit moves at its learning rate whatever its gradient size, and the symmetry-breaking "
        "part of a step is not proportional to the perturbation as under GD: the perturbation grows towards the size "
        "of a step within the first steps, where GD keeps it at its size. It leaves the symmetric subspace and the reduced ODE "
        "does not describe it. (From the exact canonical init the same departure starts from round-off, and how much "
        "it grows depends on the CPU's floating-point kernels; the stated perturbation makes it a measurement.)",
        figure_files, parts=parts, preconditions=preconditions)
