"""The synthetic torch experiments as studies (:mod:`qkdyn.studies`).

* ``a6`` (:mod:`.claim_a6`): runs ``gd_sgd``, ``nonsymmetric`` and ``adam``; claims A6 and A6-adam are
  judged from their evidence by :func:`.claim_a6.judge`.
* ``stability`` (:mod:`.claim_stability`): claim SUB, one run (where the reduced flow describes the
  full model).
* ``sampled`` (:mod:`.claims_sampled`): one run per sampled generator (``clean``, ``authors``), each
  training its form x schedule x seed grid; claims A4-sampled-GEN and A5-sampled-GEN.
* ``fixed-attention`` (:mod:`.fixed_attention`): one run per OV form, training its alpha x seed grid of
  OV circuits with attention fixed as one tensor program (each run's numbers equal its one-at-a-time
  run: a test); claim FA is judged from the loss curves of the records and the frozen-QK flow
  (deterministic solves, made once for the claim and the figure), the figure drawn by ``render``.

Each study's configuration is a frozen dataclass of :mod:`.budgets` (``config_class``), one instance
per budget: ``quick`` is ``qkdyn verify --quick``; ``cpu``, ``gpu`` and ``paper`` the full run (these
experiments are small: a GPU adds nothing).
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
from qkdyn.empirical.synthetic import budgets as configs
from qkdyn.theory.setting import EXACT_PARAMS as FORMS

from qkdyn.recordschema import COUNT, FINITE, FRACTION, LOSS, SEED, SIZE, SIZE_OR_NAN, Flag, Items, Number, Text
from qkdyn.studies import RunSpec, Study, copy_files


class A6Study(Study[configs.A6Config]):
    name = "a6"
    title = "Claim A6: GD, SGD and Adam on the matrix model follow the ODE"
    claim_names = ("A6", "A6-adam")
    costs = {"gd_sgd": 14.8, "adam": 3.8, "nonsymmetric": 1.9, "long_horizon": 0.9}
    outputs = ("a6_*.png", "a6_*.pdf")  # the runs' figures (:mod:`.claim_a6`), a PNG and a PDF each
    config_class = configs.A6Config
    budgets = configs.A6
    schema = {
        "gd_sgd": {"evidence.t_max": SIZE, "evidence.steps": Items(("steps",)), "evidence.steps[]": SIZE,
                   "evidence.gd_error.*[]": SIZE, "evidence.gd_error_ratio.*[]": FINITE,
                   "evidence.sgd_batches": Items(("sgd_batches",)), "evidence.sgd_batches[]": COUNT,
                   "evidence.sgd_seeds": COUNT, "evidence.sgd_deviation[]": SIZE, "evidence.sgd_max_sym_dist[]": SIZE},
        "nonsymmetric": {"evidence.sigma": SIZE, "evidence.step": SIZE, "evidence.batch": COUNT,
                         **{f"evidence.{form}?.{key}": kind for form in FORMS for key, kind in (
                             ("loss_end", LOSS), ("sym_dist_start", SIZE), ("sym_dist_end", SIZE),
                             ("sym_dist_max", SIZE), ("qk_ov_error_vs_ode_end", SIZE))}},
        "adam": {"evidence[].param": Text(FORMS), "evidence[].rho": SIZE, "evidence[].steps": COUNT,
                 "evidence[].loss": LOSS, "evidence[].attn_adam": FRACTION, "evidence[].attn_ode": FRACTION,
                 "evidence[].t_ode": SIZE, "evidence[].recorded_steps[]": COUNT, "evidence[].adam_distance[]": SIZE,
                 "evidence[].gd_distance[]": SIZE},
        "long_horizon": {"evidence[].rho": SIZE, "evidence[].steps": COUNT, "evidence[].t": SIZE, "evidence[].t_ode": SIZE,
                         "evidence[].distance_from_subspace": SIZE, "evidence[].follows": Flag()},
    }

    def plan(self, budget):
        cfg = dataclasses.asdict(self.budget(budget))
        return [RunSpec.make(self.name, run, **cfg) for run in ("gd_sgd", "nonsymmetric", "adam", "long_horizon")]

    def measure(self, spec, scratch):
        from qkdyn.empirical.synthetic import claim_a6

        if spec.name == "long_horizon":  # its own fixed setting (claim_a6.LONG), the same at every budget
            return {"evidence": claim_a6.long_horizon()}
        measure = {"gd_sgd": claim_a6.gd_and_sgd, "nonsymmetric": claim_a6.nonsymmetric,
                   "adam": claim_a6.adam}[spec.name]
        evidence, _ = measure(spec.params, scratch)
        return {"evidence": evidence}

    def claims(self, records, budget):
        from qkdyn.empirical.synthetic.claim_a6 import judge

        got = {r.spec.name: r.result["evidence"] for r in records}
        return judge(records[0].spec.params, got["gd_sgd"], got["nonsymmetric"], got["adam"], got["long_horizon"])


class StabilityStudy(Study[configs.StabilityConfig]):
    name = "stability"
    title = "Claim SUB: stability of the symmetric subspace"
    claim_names = ("SUB",)
    costs = {"sub": 12.5}
    outputs = ("stability_phase.png", "stability_phase.pdf")
    config_class = configs.StabilityConfig
    budgets = configs.STABILITY
    schema = {"sub": {"evidence.level": LOSS, "evidence.m": COUNT, "evidence.n": COUNT, "evidence.eps": SIZE,
                      "evidence.shapes": Items(("shapes",)), "evidence.shapes[][]": COUNT,
                      "evidence.rhos": Items(("rhos",)), "evidence.rhos[]": SIZE,
                      "evidence.eps_x_linear_gain.*[][]": SIZE_OR_NAN, "evidence.max_growth_rate.*[][]": FINITE,
                      "evidence.log_gain_at_level.*[][]": Number(finite=False), "evidence.validation[].param": Text(FORMS),
                      "evidence.validation[].K": COUNT, "evidence.validation[].D": COUNT, "evidence.validation[].N": COUNT,
                      "evidence.validation[].rho": SIZE, "evidence.validation[].sym_dist": SIZE}}

    def plan(self, budget):
        return [RunSpec.make(self.name, "sub", **dataclasses.asdict(self.budget(budget)))]

    def measure(self, spec, scratch):
        from qkdyn.empirical.synthetic.claim_stability import measure

        return {"evidence": measure(spec.params["shapes"], spec.params["rhos"], scratch)}

    def claims(self, records, budget):
        from qkdyn.empirical.synthetic.claim_stability import judge

        return [judge(r.result["evidence"]) for r in records]


class SampledStudy(Study[configs.SampledConfig]):
    name = "sampled"
    title = "Claims A4/A5 on the sampled generators"
    claim_names = ("A4-sampled-clean", "A5-sampled-clean", "A4-sampled-authors", "A5-sampled-authors")
    costs = {"authors": 26.8, "clean": 16.1}
    outputs = ("sampled_*_attention.png", "sampled_*_attention.pdf", "sampled_*_dtap.png", "sampled_*_dtap.pdf")
    config_class = configs.SampledConfig
    budgets = configs.SAMPLED
    schema = {"*": {"evidence.generator": Text(("clean", "authors")), "evidence.seeds": Items(("seeds",)),
                    "evidence.seeds[]": SEED, "evidence.test_size": COUNT, "evidence.horizon_steps.*": COUNT,
                    "evidence.runs[].form": Text(FORMS), "evidence.runs[].seed": SEED, "evidence.runs[].horizon": COUNT,
                    "evidence.runs[].steps": COUNT, "evidence.runs[].loss": LOSS, "evidence.runs[].at_level[].level": LOSS,
                    "evidence.runs[].at_level[].attn_distinct": FRACTION,
                    "evidence.runs[].at_level[].attn_query_id": FRACTION, "evidence.runs[].at_level[].p_true": FRACTION}}

    def plan(self, budget):
        cfg = dataclasses.asdict(self.budget(budget))
        return [RunSpec.make(self.name, gen, generator=gen, **cfg) for gen in ("clean", "authors")]

    def measure(self, spec, scratch):
        from qkdyn.empirical.synthetic import claims_sampled

        p = spec.params
        task, test_size = claims_sampled.tasks(p)[p["generator"]]
        return {"evidence": claims_sampled.measure(p["generator"], task, test_size, p["seeds"], scratch,
                                                   p.get("perturb"))}

    def claims(self, records, budget):
        from qkdyn.empirical.synthetic.claims_sampled import judge

        return [c for r in records for c in judge(r.result["evidence"])]


class FixedAttentionStudy(Study[configs.FixedAttentionConfig]):
    name = "fixed-attention"
    title = "Claim FA: with attention fixed, the loss falls faster the more attention sits on distinct tokens"
    claim_names = ("FA",)
    costs = {"collapsed": 5.1, "factorized": 3.8}
    outputs = ()  # a run writes no file: render draws the figure from the records
    plot = "fixed_attention.png"
    config_class = configs.FixedAttentionConfig
    budgets = configs.FIXED_ATTENTION
    schema = {"*": {"runs": Items(("alphas", "seeds")), "runs[].alpha": FRACTION, "runs[].seed": SEED,
                    "runs[].t": Items(("checkpoints",)), "runs[].t[]": SIZE, "runs[].loss": Items(("checkpoints",)),
                    "runs[].loss[]": LOSS, "runs[].fall[]": FINITE, "runs[].attn_distinct": FRACTION}}

    def plan(self, budget):
        cfg = dataclasses.asdict(self.budget(budget))
        return [RunSpec.make(self.name, form, form=form, **cfg) for form in configs.FORMS]

    def measure(self, spec, scratch):
        from qkdyn.empirical.synthetic.fixed_attention import grid

        p = spec.params
        runs = grid((p["form"],), p["alphas"], p["seeds"], p["steps"], p["eval_size"], p["checkpoints"],
                    p.get("perturb"))
        return {"runs": [{"alpha": run.alpha, "seed": run.seed, "t": run.t.tolist(), "loss": run.loss.tolist(),
                          "fall": run.fall.tolist(), "attn_distinct": run.attn_distinct} for run in runs.values()]}

    @staticmethod
    def runs(records) -> dict:
        """(form, alpha, seed) -> :class:`.fixed_attention.Run` from the records (one per OV form)."""
        from qkdyn.empirical.synthetic.fixed_attention import Run

        out = {}
        for r in records:
            form = r.spec.params["form"]
            for run in r.result["runs"]:
                out[(form, run["alpha"], run["seed"])] = Run(form, run["alpha"], run["seed"], np.array(run["t"]),
                                                            np.array(run["loss"]), np.array(run["fall"]),
                                                            run["attn_distinct"])
        return out

    def claims(self, records, budget):
        """Claim FA from the records and the frozen-QK flows (deterministic, cached solves: at each alpha for the
        theory's -dL/dalpha at the flow's own weights, at alpha +- DELTA for the one across trajectories)."""
        from qkdyn.empirical.synthetic import fixed_attention as fa

        runs = self.runs(records)
        curves = fa.theory_curves(runs)
        return [fa.claim(runs, curves, fa.summary_table(runs, curves), self.plot)]

    def render(self, records, claims, figures: Path):
        from qkdyn.empirical.synthetic import fixed_attention as fa
        from qkdyn.empirical.synthetic import plots

        copy_files(records, figures)
        runs = self.runs(records)
        plots.fixed_attention(runs, fa.theory_curves(runs), Path(figures) / self.plot)
        return []
