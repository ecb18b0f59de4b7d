"""The theory claims A1-A5 and CQ1-CQ4 as a study (:mod:`qkdyn.studies`): six runs.

It lives in the top layer because A1 is decided by gradient descent on the full matrix model
(:func:`qkdyn.empirical.synthetic.rates.gd_rate_factors`, torch) handed to the theory check; with
``full_model=False`` (``qkdyn verify --skip-empirical``) A1 is inconclusive and nothing imports torch.

Runs: ``a1`` (rate factors), ``a2`` (first integrals), ``a3`` (growth laws), ``a45`` (the closed-form
sweep of attn at matched loss over rho, the A4 proofs, the ODE cross-check, the phase diagrams and
the frozen-attention law), ``coupled`` (CQ1-CQ4: paper B's coupled QK as a circuit spec in this
setting, :mod:`qkdyn.simulate.claims_coupled`) and ``overview`` (trajectory and phase-portrait figures). Each run's record
holds its evidence (the measured numbers, never a verdict); :meth:`TheoryStudy.claims` judges them, so a
runs folder reported again is judged under the current tolerances.

Budgets: ``quick`` is the coarse grid of ``qkdyn verify --quick``; ``cpu``, ``gpu`` and ``paper`` the
full one (t >= 1e15, rho over [0.01, 100], docs/setting.md).
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np

from qkdyn.studies import BUDGETS, RunSpec, Study


def grid(quick: bool) -> dict:
    """Horizons and grids (plain floats and lists, so a run spec carries them)."""
    return {
        "t_max": 1e15,
        "a2_rhos": [1.0] if quick else [0.1, 1.0, 10.0],
        "a3_read_at": [1e6, 1e15, 1e30] if quick else [1e6, 1e15, 1e30, 1e100],
        # log-spaced, always containing rho = 1 exactly (equal rates, claim A5)
        "sweep_rhos": [float(r) for r in np.unique(np.append(np.geomspace(0.01, 100, 9 if quick else 50), 1.0))],
        "loss_levels": [0.5, 0.1, 1e-2, 1e-3],
        # closed-form phase diagrams of attn at matched loss: rhos x rows points per form and axis
        "phase_rhos": [float(r) for r in np.geomspace(0.01, 100, 60 if quick else 317)],
        "phase_rows": 60 if quick else 316,
        "phase_level": 1e-3,
        # CQ1-CQ4 (paper B's coupled QK in this setting): variants [dt, integrator, coupling, coupling_init]
        "cq_variants": [[0.2, "euler", "linear", 0.5]] if quick else [
            [0.05, "euler", "linear", 0.5], [0.2, "euler", "linear", 0.5], [0.5, "euler", "linear", 0.5],
            [0.2, "euler", "linear", 2.0], [0.2, "leapfrog", "linear", 0.5], [0.2, "euler", "mlp", 0.5]],
        "cq_rhos": [0.1, 1.0, 10.0],
        "cq_t_path": 1e15,
        "cq_points": 3000,
        "cq_window": [1e20, 1e50] if quick else [1e30, 1e100],
        "cq_sweep_rhos": [0.1, 1.0, 10.0] if quick else [0.01, 0.1, 1.0, 10.0, 100.0],
        "cq_levels": [1e-2, 1e-3] if quick else [0.1, 1e-2, 1e-3],
    }


def describe(value):
    """Grid entries for the report: short lists as they are, long grids by their range (a list of
    lists, such as the coupled variants, as it is)."""
    if not hasattr(value, "__len__") or isinstance(value, str):
        return value
    if any(isinstance(v, (list, tuple)) for v in value):
        return [list(v) for v in value]
    values = [float(v) for v in value]
    return values if len(values) <= 8 else f"{len(values)} values log-spaced in [{values[0]:g}, {values[-1]:g}]"


_KEYS = {"a1": ("t_max",), "a2": ("t_max", "a2_rhos"), "a3": ("a3_read_at",),
         "a45": ("sweep_rhos", "loss_levels", "phase_rhos", "phase_rows", "phase_level"),
         "coupled": ("cq_variants", "cq_rhos", "cq_t_path", "cq_points", "cq_window", "cq_sweep_rhos", "cq_levels"),
         "overview": ("t_max",)}


@dataclasses.dataclass
class TheoryStudy(Study):
    full_model: bool = True  # A1 measured on the full matrix model (torch)

    name = "theory"
    title = "Theory claims A1-A5 and CQ1-CQ4"
    budgets = {"quick": grid(True), "cpu": grid(False), "gpu": grid(False), "paper": grid(False)}
    claim_names = ("A1", "A2", "A3", "A4", "A5", "CQ1", "CQ2", "CQ3", "CQ4")
    costs = {"a45": 9.4, "coupled": 4.8, "a1": 1.9, "overview": 2.3, "a2": 3.4, "a3": 1.7}

    def plan(self, budget: str) -> list[RunSpec]:
        cfg = self.budget(budget)
        extra = {"a1": {"full_model": self.full_model}}
        return [RunSpec.make(self.name, run, **{k: cfg[k] for k in keys}, **extra.get(run, {}))
                for run, keys in _KEYS.items()]

    def check(self, spec):
        if not any(spec in TheoryStudy(f).plan(b) for f in (True, False) for b in BUDGETS):
            super().check(spec)

    def measure(self, spec: RunSpec, scratch: Path) -> dict:
        """Evidence of one run (``{"evidence": ...}``; ``overview`` only draws, ``{"plots": [...]}``)."""
        from qkdyn.simulate import claims_sharpness, claims_theory, overview
        from qkdyn.theory.setting import Setting

        setting, p = Setting(), spec.params
        if spec.name == "a1":
            measure = None
            if p["full_model"]:
                from qkdyn.empirical.synthetic.rates import gd_rate_factors as measure
            evidence = claims_theory.measure_a1(setting, p["t_max"], scratch, measure=measure)
        elif spec.name == "a2":
            evidence = claims_theory.measure_a2(setting, p["t_max"], p["a2_rhos"], scratch)
        elif spec.name == "a3":
            evidence = claims_theory.measure_a3(setting, p["a3_read_at"], p["a3_read_at"][-1], scratch)
        elif spec.name == "a45":
            evidence = claims_sharpness.measure_a45(setting, p["sweep_rhos"], p["loss_levels"], p["phase_rhos"],
                                                    p["phase_rows"], p["phase_level"], scratch)
        elif spec.name == "coupled":
            from qkdyn.simulate import claims_coupled

            cfg = {"variants": [dict(zip(claims_coupled.VARIANT_FIELDS, v, strict=True)) for v in p["cq_variants"]],
                   "rhos": p["cq_rhos"], "t_path": p["cq_t_path"], "points": p["cq_points"],
                   "window": p["cq_window"], "sweep_rhos": p["cq_sweep_rhos"], "levels": p["cq_levels"]}
            evidence = claims_coupled.measure(setting, cfg, scratch)
        else:
            return {"plots": [overview.trajectories_plot(setting, p["t_max"], scratch),
                              overview.phase_portrait(setting, (0.1, 1.0, 10.0), 1e6, scratch)]}
        return {"evidence": evidence}

    def claims(self, records, budget):
        """A1-A5 and CQ1-CQ4, judged from the runs' evidence by the pure judges of
        :mod:`qkdyn.simulate.claims_theory`, :mod:`~qkdyn.simulate.claims_sharpness` and
        :mod:`~qkdyn.simulate.claims_coupled` (their tolerances as they are now, whenever the runs were made)."""
        from qkdyn.simulate import claims_coupled, claims_sharpness, claims_theory

        judges = {"a1": lambda e: [claims_theory.judge_a1(e)], "a2": lambda e: [claims_theory.judge_a2(e)],
                  "a3": lambda e: [claims_theory.judge_a3(e)],
                  "a45": lambda e: [claims_sharpness.judge_a4(e), claims_sharpness.judge_a5(e)],
                  "coupled": claims_coupled.judge}
        evidence = {r.spec.name: r.result.get("evidence") for r in records}
        return [claim for run, judge in judges.items() for claim in judge(evidence[run])]

    def render(self, records, claims, figures):
        super().render(records, claims, figures)
        return [p for r in records for p in r.result.get("plots", [])]

    def context(self, budget: str) -> dict:
        from qkdyn.theory.setting import Setting

        return {"setting": dataclasses.asdict(Setting()), "quick": budget == "quick",
                "plan": {k: describe(v) for k, v in self.budget(budget).items()}}
