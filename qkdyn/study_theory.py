"""The theory claims A1-A5 and CQ1-CQ4 as a study (:mod:`qkdyn.studies`): six runs.

It lives in the top layer because A1 is decided by gradient descent on the full matrix model
(:func:`qkdyn.empirical.synthetic.rates.gd_rate_factors`, torch) handed to the theory check; with
``full_model=False`` (``qkdyn verify --skip-empirical``) A1 is inconclusive and nothing imports torch.

Runs: ``a1`` (rate factors), ``a2`` (first integrals), ``a3`` (growth laws), ``a45`` (the closed-form
sweep of attn at matched loss over rho, the A4 proofs, the ODE cross-check, the phase diagrams and
the frozen-attention law), ``coupled`` (CQ1-CQ4: paper B's coupled QK as a circuit spec in this
setting, :mod:`qkdyn.simulate.claims_coupled`) and ``overview`` (trajectories and the phase portrait). Each run's
record holds its evidence only (the measured numbers and the arrays its figures are drawn from: never a verdict,
never a figure); :meth:`TheoryStudy.claims` judges them, so a runs folder reported again is judged under the
current tolerances, and :meth:`TheoryStudy.render` draws every figure from them.

Budgets (:class:`TheoryConfig`): ``quick`` is the coarse grid of ``qkdyn verify --quick``; ``cpu``, ``gpu`` and
``paper`` the full one (t >= 1e15, rho over [0.01, 100], docs/setting.md), one instance.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np

from qkdyn import configflags
from qkdyn.recordschema import COUNT, FINITE, FRACTION, LOSS, SIZE, SIZE_OR_NAN, Flag, Items, Number
from qkdyn.studies import BUDGETS, RunSpec, Study


def log_grid(points: int) -> tuple[float, ...]:
    """``points`` values log-spaced over [0.01, 100], with rho = 1 added where it is not one of them (equal
    rates, claim A5)."""
    return tuple(float(r) for r in np.unique(np.append(np.geomspace(0.01, 100, points), 1.0)))


def _field(default, metadata: dict | None = None):
    """A config field with ``default`` and, where a user may set it, its domain (:mod:`qkdyn.configflags`)."""
    return dataclasses.field(default=default, metadata=metadata or {})


@dataclasses.dataclass(frozen=True)
class TheoryConfig:
    """The theory study's horizons and grids at one budget (plain numbers and tuples, so a run spec carries
    them); the defaults are the full grid (budgets ``cpu``, ``gpu``, ``paper``)."""

    t_max: float = _field(1e15, configflags.positive("horizon of A1, A2 and the overview's trajectories"))
    a2_rhos: tuple[float, ...] = _field((0.1, 1.0, 10.0), configflags.number_list(0, "A2: rho = eta_QK/eta_OV"))
    a3_read_at: tuple[float, ...] = _field((1e6, 1e15, 1e30, 1e100), configflags.number_list(
        1, "A3: times the local exponent is read at (the last: how far the solutions run)", increasing=True))
    #: A4/A5's closed-form sweep over rho (log-spaced, rho = 1 included)
    sweep_rhos: tuple[float, ...] = _field(log_grid(50))
    loss_levels: tuple[float, ...] = _field((0.5, 0.1, 1e-2, 1e-3), configflags.number_list(
        0, "A4/A5: loss levels attention is compared at"))
    #: closed-form phase diagrams of attn at matched loss: phase_rhos x phase_rows points per form and axis
    phase_rhos: tuple[float, ...] = _field(tuple(float(r) for r in np.geomspace(0.01, 100, 317)))
    phase_rows: int = _field(316, configflags.positive_int("A5: rows (m/n or K values) of each phase diagram"))
    phase_level: float = _field(1e-3, configflags.positive("A5: loss level of the phase diagrams"))
    #: CQ1-CQ4 (paper B's coupled QK in this setting): variants (dt, integrator, coupling, coupling_init)
    cq_variants: tuple[tuple[float, str, str, float], ...] = _field((
        (0.05, "euler", "linear", 0.5), (0.2, "euler", "linear", 0.5), (0.5, "euler", "linear", 0.5),
        (0.2, "euler", "linear", 2.0), (0.2, "leapfrog", "linear", 0.5), (0.2, "euler", "mlp", 0.5)))
    cq_rhos: tuple[float, ...] = _field((0.1, 1.0, 10.0), configflags.number_list(
        0, "CQ1/CQ2: rho of the path runs (1 included)"))
    cq_t_path: float = _field(1e15, configflags.positive("CQ1/CQ2: horizon of the path runs"))
    cq_points: int = _field(3000, configflags.positive_int("CQ1/CQ2: output rows of each path run"))
    cq_window: tuple[float, ...] = _field((1e30, 1e100), configflags.number_list(
        1, "CQ3: the late window the growth is read over (two times)", increasing=True))
    cq_sweep_rhos: tuple[float, ...] = _field((0.01, 0.1, 1.0, 10.0, 100.0), configflags.number_list(
        0, "CQ4: rho of the matched-loss comparison"))
    cq_levels: tuple[float, ...] = _field((0.1, 1e-2, 1e-3), configflags.number_list(
        0, "CQ4: loss levels of the matched-loss comparison"))


FULL = TheoryConfig()
QUICK = dataclasses.replace(
    FULL, a2_rhos=(1.0,), a3_read_at=(1e6, 1e15, 1e30), sweep_rhos=log_grid(9),
    phase_rhos=tuple(float(r) for r in np.geomspace(0.01, 100, 60)), phase_rows=60,
    cq_variants=((0.2, "euler", "linear", 0.5),), cq_window=(1e20, 1e50), cq_sweep_rhos=(0.1, 1.0, 10.0),
    cq_levels=(1e-2, 1e-3))


def describe(value):
    """Grid entries for the report: short lists as they are, long grids by their range (a list of
    lists, such as the coupled variants, as it is)."""
    if not hasattr(value, "__len__") or isinstance(value, str):
        return value
    if any(isinstance(v, (list, tuple)) for v in value):
        return [list(v) for v in value]
    values = [float(v) for v in value]
    return values if len(values) <= 8 else f"{len(values)} values log-spaced in [{values[0]:g}, {values[-1]:g}]"


#: run -> the config fields it reads (its spec's config)
_KEYS = {"a1": ("t_max",), "a2": ("t_max", "a2_rhos"), "a3": ("a3_read_at",),
         "a45": ("sweep_rhos", "loss_levels", "phase_rhos", "phase_rows", "phase_level"),
         "coupled": ("cq_variants", "cq_rhos", "cq_t_path", "cq_points", "cq_window", "cq_sweep_rhos", "cq_levels"),
         "overview": ("t_max",)}
#: the overview's phase portrait: its rhos and horizon
PORTRAIT_RHOS, PORTRAIT_T_MAX = (0.1, 1.0, 10.0), 1e6
#: an attention weight at a loss level, NaN where the level is not reached at that rho (the A4/A5 and CQ4 grids)
ATTENTION_OR_UNREACHED = Number(0, 1, finite=False)
#: the figures :meth:`TheoryStudy.render` draws (a PNG and a PDF each); a record made while the measures still
#: drew them lists them as its ``files`` (nothing else is a theory run's output)
FIGURES = ("a1_rate_factor", "a2_line", "a3_growth", "a4_attn_vs_loss", "a4_a5_attn_at_matched_loss",
           "a5_phase_diagrams", "cq4_matched_loss", "trajectories", "phase_portrait")


@dataclasses.dataclass
class TheoryStudy(Study):
    full_model: bool = True  # A1 measured on the full matrix model (torch)

    name = "theory"
    title = "Theory claims A1-A5 and CQ1-CQ4"
    config_class = TheoryConfig
    budgets = {"quick": QUICK, "cpu": FULL, "gpu": FULL, "paper": FULL}
    claim_names = ("A1", "A2", "A3", "A4", "A5", "CQ1", "CQ2", "CQ3", "CQ4")
    costs = {"a45": 9.4, "coupled": 4.8, "a1": 1.9, "overview": 2.3, "a2": 3.4, "a3": 1.7}
    outputs = tuple(f"{figure}.{kind}" for figure in FIGURES for kind in ("png", "pdf"))
    schema = {
        "a1": {"evidence.t_max": SIZE, "evidence.points": COUNT, "evidence.loss": LOSS,
               "evidence.circuits.*.magnitude[]": SIZE, "evidence.circuits.*.closed_factor[]": SIZE},
        "a2": {"evidence.t_max": SIZE, "evidence.rhos": Items(("a2_rhos",)), "evidence.rhos[]": SIZE,
               "evidence.per_run.*.*": FINITE, "evidence.curves.*[].t[]": SIZE, "evidence.curves.*[].drift[]": SIZE},
        "a3": {"evidence.read_at": Items(("a3_read_at",)), "evidence.read_at[]": SIZE, "evidence.t_far": SIZE,
               "evidence.window[]": SIZE, "evidence.per_param.*.readings.*.log_y[]": FINITE,
               "evidence.per_param.*.readings.*.local_exponent.*": FINITE,
               "evidence.per_param.*.readings.*.fits.*.rel_rms": SIZE_OR_NAN},
        "a45": {"evidence.rhos": Items(("sweep_rhos",)), "evidence.rhos[]": SIZE, "evidence.levels": Items(("loss_levels",)),
                "evidence.levels[]": LOSS, "evidence.attn.*[][]": ATTENTION_OR_UNREACHED, "evidence.ode_cross_check.points": COUNT,
                "evidence.ode_cross_check.max_abs_attn_difference": SIZE_OR_NAN, "evidence.proof_steps.*.*": Flag()},
        "coupled": {"evidence.CQ1.rhos": Items(("cq_rhos",)), "evidence.CQ1.rhos[]": SIZE,
                    "evidence.CQ4.rhos": Items(("cq_sweep_rhos",)), "evidence.CQ4.rhos[]": SIZE,
                    "evidence.CQ4.attn.*[][]": ATTENTION_OR_UNREACHED, "evidence.CQ4.attn_closed.*[][]": ATTENTION_OR_UNREACHED},
        "overview": {"evidence.trajectories.*.t[]": SIZE, "evidence.trajectories.*.attn[]": FRACTION,
                     "evidence.trajectories.*.loss[]": LOSS, "evidence.trajectories.*.qk[]": FINITE,
                     "evidence.trajectories.*.ov[]": FINITE, "evidence.phase_portrait.paths.*[].rho": SIZE},
    }

    def plan(self, budget: str) -> list[RunSpec]:
        cfg = self.budget(budget)
        extra = {"a1": {"full_model": self.full_model}}
        return [RunSpec.make(self.name, run, **{k: getattr(cfg, k) for k in keys}, **extra.get(run, {}))
                for run, keys in _KEYS.items()]

    def check(self, spec):
        if not any(spec in TheoryStudy(f).plan(b) for f in (True, False) for b in BUDGETS):
            super().check(spec)

    def measure(self, spec: RunSpec, scratch: Path) -> dict:
        """Evidence of one run, ``{"evidence": ...}``: numbers and the arrays its figures are drawn from; it
        draws nothing and writes nothing into ``scratch`` (:meth:`render` draws)."""
        from qkdyn.simulate import claims_sharpness, claims_theory, overview
        from qkdyn.theory.setting import Setting

        setting, p = Setting(), spec.params
        if spec.name == "a1":
            if p["full_model"]:  # torch, only when A1 is measured on the full model
                from qkdyn.empirical.synthetic.rates import gd_rate_factors
            evidence = claims_theory.measure_a1(setting, p["t_max"], measure=gd_rate_factors if p["full_model"] else None)
        elif spec.name == "a2":
            evidence = claims_theory.measure_a2(setting, p["t_max"], p["a2_rhos"])
        elif spec.name == "a3":
            evidence = claims_theory.measure_a3(setting, p["a3_read_at"], p["a3_read_at"][-1])
        elif spec.name == "a45":
            evidence = claims_sharpness.measure_a45(setting, p["sweep_rhos"], p["loss_levels"], p["phase_rhos"],
                                                    p["phase_rows"], p["phase_level"])
        elif spec.name == "coupled":
            from qkdyn.simulate import claims_coupled

            cfg = {"variants": [dict(zip(claims_coupled.VARIANT_FIELDS, v, strict=True)) for v in p["cq_variants"]],
                   "rhos": p["cq_rhos"], "t_path": p["cq_t_path"], "points": p["cq_points"],
                   "window": p["cq_window"], "sweep_rhos": p["cq_sweep_rhos"], "levels": p["cq_levels"]}
            evidence = claims_coupled.measure(setting, cfg)
        else:
            evidence = {"trajectories": overview.measure_trajectories(setting, p["t_max"]),
                        "phase_portrait": overview.measure_phase_portrait(setting, PORTRAIT_RHOS, PORTRAIT_T_MAX)}
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
        """Every figure, drawn from the runs' evidence alone: the claims' (the names they carry) and the
        overview's, whose names it returns. A record made before measuring and drawing were apart lists the
        figures its run drew (``files``): those are copied instead (:meth:`Study.render`)."""
        from qkdyn.simulate import claims_coupled, claims_sharpness, claims_theory, overview

        drawers = {"a1": claims_theory.draw_a1, "a2": claims_theory.draw_a2, "a3": claims_theory.draw_a3,
                   "a45": claims_sharpness.draw_a45, "coupled": claims_coupled.draw,
                   "overview": lambda e, f: [overview.draw_trajectories(e["trajectories"], f),
                                             overview.draw_phase_portrait(e["phase_portrait"], f)]}
        super().render(records, claims, figures)
        Path(figures).mkdir(parents=True, exist_ok=True)
        for record in records:
            if not record.result.get("files"):
                drawers[record.spec.name](record.result["evidence"], Path(figures))
        return [overview.TRAJECTORIES_FIGURE, overview.PHASE_PORTRAIT_FIGURE]

    def context(self, budget: str) -> dict:
        from qkdyn.theory.setting import Setting

        return {"setting": dataclasses.asdict(Setting()), "quick": budget == "quick",
                "plan": {k: describe(v) for k, v in dataclasses.asdict(self.budget(budget)).items()}}
