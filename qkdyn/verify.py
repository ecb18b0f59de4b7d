"""Check every claim: figures, ``report.md`` and ``report.json`` (the top layer: it runs everything).

``verify`` runs the theory claims A1-A5 (:mod:`qkdyn.simulate`) and, unless told not to, the torch
experiments (A6 and the sampled-data claims, :mod:`qkdyn.empirical.synthetic`).
"""
from __future__ import annotations

import dataclasses
import sys
import time
from pathlib import Path


def plan(quick: bool) -> dict:
    """Horizons and grids; the full run follows DESIGN.md (t >= 1e15, rho over [0.01, 100])."""
    import numpy as np

    return {
        "t_max": 1e15,
        "a2_rhos": [1.0] if quick else [0.1, 1.0, 10.0],
        "a3_read_at": [1e6, 1e15, 1e30] if quick else [1e6, 1e15, 1e30, 1e100],
        # log-spaced, always containing rho = 1 exactly (equal rates, claim A5)
        "sweep_rhos": np.unique(np.append(np.geomspace(0.01, 100, 9 if quick else 50), 1.0)),
        "loss_levels": (0.5, 0.1, 1e-2, 1e-3),
        # closed-form phase diagrams of attn at matched loss: rhos x rows points per form and axis
        "phase_rhos": np.geomspace(0.01, 100, 60 if quick else 317),
        "phase_rows": 60 if quick else 316,
        "phase_level": 1e-3,
    }


def verify(quick: bool = False, figures: str | Path = "figures", empirical: bool = True) -> list:
    """Check every claim and write ``figures/report.md`` + ``report.json`` and the plots.

    Returns the list of :class:`qkdyn.claims.Claim` (verdict, evidence, summary, plots). ``quick``
    uses shorter horizons and coarser sweeps (about a minute); ``empirical=False`` skips the torch runs.

    >>> claims = qkdyn.verify(quick=True, figures="out", empirical=False)  # doctest: +SKIP
    >>> {c.id: c.verdict for c in claims}["A2"]  # doctest: +SKIP
    'holds'
    """
    from qkdyn.errors import InputError
    from qkdyn.simulate import claims_sharpness, claims_theory, overview, phase
    from qkdyn.report import write_report
    from qkdyn.theory.setting import Setting

    figures = Path(figures)
    try:
        figures.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(f"cannot create figures directory {figures}: {exc.strerror}")
    setting, cfg, start = Setting(), plan(quick), time.perf_counter()

    def step(name):
        sys.stderr.write(f"[{time.perf_counter() - start:6.1f}s] {name}\n")

    step("A1 rate factors")
    claims = [claims_theory.check_a1(setting, cfg["t_max"], figures)]
    step("A2 first integrals")
    claims.append(claims_theory.check_a2(setting, cfg["t_max"], cfg["a2_rhos"], figures))
    step("A3 growth laws")
    claims.append(claims_theory.check_a3(setting, cfg["a3_read_at"], cfg["a3_read_at"][-1], figures))
    step(f"A4/A5 closed form over {len(cfg['sweep_rhos'])} values of rho, and the A4 proof")
    result = claims_sharpness.closed_form_sweep(setting, cfg["sweep_rhos"], cfg["loss_levels"])
    proofs = claims_sharpness.a4_evidence()
    step("A4/A5 ODE sweep (cross-check of the closed form)")
    ode = claims_sharpness.sweep(setting, cfg["sweep_rhos"], cfg["loss_levels"])
    cross_check = claims_sharpness.agreement(result, ode)
    step(f"A5 phase diagrams ({len(cfg['phase_rhos'])} x {cfg['phase_rows']} points per form and axis)")
    diagrams = [phase.diagram(setting, axis, cfg["phase_rhos"], cfg["phase_rows"], cfg["phase_level"])
                for axis in phase.AXES]
    phase_plot = phase.plot(diagrams, cfg["phase_level"], figures)
    frozen = claims_sharpness.frozen_law_check(setting, cfg["loss_levels"])
    claims += [claims_sharpness.check_a4(result, figures, proofs, cross_check, frozen),
               claims_sharpness.check_a5(result, cross_check, phase_plot, phase.summary(diagrams))]
    step("overview figures")
    extra = [overview.trajectories_plot(setting, cfg["t_max"], figures),
             overview.phase_portrait(setting, (0.1, 1.0, 10.0), 1e6, figures)]
    if empirical:
        step("A6 and sampled-data experiments (torch)")
        claims += _empirical_claims(quick, figures)
    context = {"setting": dataclasses.asdict(setting), "quick": quick,
               "plan": {k: _describe(v) for k, v in cfg.items()},
               "seconds": round(time.perf_counter() - start, 1)}
    write_report(claims, context, figures, extra)
    step(f"wrote {figures / 'report.md'}")
    return claims


def _describe(value):
    """Plan entries for the report: short lists as they are, long grids by their range."""
    if not hasattr(value, "__len__"):
        return value
    values = [float(v) for v in value]
    return values if len(values) <= 8 else f"{len(values)} values log-spaced in [{values[0]:g}, {values[-1]:g}]"


def _empirical_claims(quick: bool, figures: Path):
    from qkdyn.empirical.synthetic.claim_a6 import check_a6

    return check_a6(quick, figures)
