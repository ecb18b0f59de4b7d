"""The circuits study (Paper A at transformer scale) as a study (:mod:`qkdyn.studies`).

One run per seed x QK multiplier R (R = 1, same learning rate, always included): a training run of
:func:`qkdyn.empirical.circuits.train.train` on ``task`` (resumable: its run directory is the run's
scratch directory). The claims (:func:`qkdyn.empirical.circuits.report.claims`, one per R > 1) are
judged from the records' test metrics; ``render`` draws the figures and writes the task's summary
``TASK.json``, which ``qkdyn compare-circuits`` gathers over tasks into ``report.md``.

Budgets: ``quick`` is the ``tiny`` preset (a few steps of a tiny model: checks the pipeline); ``cpu``
the task's ``cpu-TASK`` preset (else ``paper-TASK``) over 3 seeds; ``gpu`` the same asking one GPU per
run; ``paper`` the ``paper-TASK`` recipe where there is one (else the cpu preset).
"""
from __future__ import annotations

import dataclasses
import json
from importlib import resources
from pathlib import Path

from qkdyn.studies import RunSpec, Study

HANDCHECK = "brown_sva_handcheck.tsv"  # package data: 30 hand-checked Brown SVA items


def handcheck_rows() -> list[list[str]]:
    """The hand-checked Brown SVA items (tab-separated, header dropped)."""
    text = resources.files("qkdyn.empirical.circuits").joinpath(HANDCHECK).read_text()
    return [line.split("\t") for line in text.splitlines()[1:] if line]


def task_notes(task: str) -> list[str]:
    """Caveats printed under the task's table; numbers are computed here, not typed in."""
    if task == "brown-sva":
        rows = handcheck_rows()
        wrong = sum(r[3] == "no" for r in rows)
        return [f"Rationales (subject head) come from a heuristic over Brown POS tags; on {len(rows)} hand-checked "
                f"items {wrong} were wrong ({100 * wrong / len(rows):.0f}%; qkdyn/empirical/circuits/{HANDCHECK}). "
                "Labels are the corpus's own verb tags.",
                "The rationale is {subject head, read-out <verb> position}, so attention of the read-out token "
                "to itself counts as rationale mass."]
    if task == "vader":
        return ["Rationales are a PROXY: positions of words in the human-rated VADER lexicon, not human "
                "rationales for these sentences. Labels: mean of ~20 human ratings, |mean| < margin dropped."]
    return []


@dataclasses.dataclass
class CircuitsStudy(Study):
    """``task`` and ``overrides`` (RunConfig fields) pick the runs; ``mults``/``seeds`` of None take
    the budget's; ``acc_tolerance`` is the non-inferiority margin of accuracy."""

    task: str = "brown-sva"
    preset: str | None = None
    overrides: dict = dataclasses.field(default_factory=dict)
    mults: tuple[float, ...] | None = None
    seeds: tuple[int, ...] | None = None
    acc_tolerance: float = 0.01
    threads: int = 1  # torch threads per run (its CPU request)

    name = "circuits"
    title = "Faster QK learning at transformer scale (Paper A)"
    budgets = {"quick": {"preset": "tiny", "seeds": (0, 1), "mults": (1.0, 30.0), "gpus": 0},
               "cpu": {"preset": None, "seeds": (0, 1, 2), "mults": (1.0, 30.0), "gpus": 0},
               "gpu": {"preset": None, "seeds": (0, 1, 2), "mults": (1.0, 30.0), "gpus": 1},
               "paper": {"preset": "paper", "seeds": (0, 1, 2), "mults": (1.0, 30.0), "gpus": 0}}

    @property
    def performance_key(self) -> str:
        return "f1" if self.task == "squad" else "accuracy"

    def configs(self, budget: str) -> dict:
        """(seed, R) -> RunConfig of the plan."""
        from qkdyn.empirical.circuits.presets import PRESETS, check_sizes, resolve

        b = self.budget(budget)
        paper = f"paper-{self.task}" if f"paper-{self.task}" in PRESETS else None
        preset = self.preset or (paper if b["preset"] == "paper" else b["preset"])
        mults = sorted({1.0, *map(float, self.mults or b["mults"])})
        out = {}
        for seed in sorted(set(self.seeds or b["seeds"])):
            for mult in mults:
                out[seed, mult] = resolve(self.task, preset, {**self.overrides, "qk_lr_mult": mult, "seed": seed})
                check_sizes(out[seed, mult])
        return out

    def claim_ids(self, budget):
        return tuple(f"{self.task} QK x{m:g}" for m in sorted({m for _, m in self.configs(budget)}) if m != 1.0)

    def plan(self, budget):
        gpus = self.budget(budget)["gpus"]
        return [RunSpec.make(self.name, f"{cfg.task}_qk{mult:g}_s{seed}", cpus=self.threads, gpus=gpus,
                             **dataclasses.asdict(cfg))
                for (seed, mult), cfg in self.configs(budget).items()]

    def check(self, spec):
        """Any valid RunConfig (compare-circuits plans from flags, not only from budgets)."""
        from qkdyn.empirical.circuits.presets import RunConfig, check_sizes, validate
        from qkdyn.errors import InputError

        try:
            cfg = RunConfig(**spec.params)
        except TypeError as exc:
            raise InputError(f"the spec is not a circuits run config: {exc}")
        validate(cfg)
        check_sizes(cfg)

    def measure(self, spec, scratch):
        from qkdyn.empirical.circuits.presets import RunConfig
        from qkdyn.empirical.circuits.train import train
        from qkdyn.runs import read_json

        cfg = RunConfig(**spec.params)
        final = scratch / "final.json"
        cached = read_json(final) if final.exists() else None
        if isinstance(cached, dict) and cached.get("config") == dataclasses.asdict(cfg):
            return cached
        return train(cfg, scratch, progress=False)

    def _results(self, records) -> dict:
        results: dict[float, list[dict]] = {}
        for r in sorted(records, key=lambda r: (r.spec.params["qk_lr_mult"], r.spec.params["seed"])):
            results.setdefault(float(r.spec.params["qk_lr_mult"]), []).append(r.result)
        return results

    def claims(self, records, budget):
        from qkdyn.empirical.circuits import report

        summary = report.summarize(self._results(records))
        return report.claims(self.task, summary, self.performance_key, self.acc_tolerance)

    def render(self, records, claims, figures: Path):
        """Figures and ``TASK.json`` (summary, per-seed values, notes) into ``figures``."""
        from qkdyn import atomic
        from qkdyn.empirical.circuits import plots, report

        results = self._results(records)
        run_dirs = {m: [r.scratch for r in records if float(r.spec.params["qk_lr_mult"]) == m] for m in results}
        summary = report.summarize(results)
        paths = plots.plot_all(self.task, results, summary, run_dirs, self.performance_key, Path(figures))
        first = results[1.0][0]
        notes = task_notes(self.task) + [
            f"Scale: {first['n_train']} training examples, {first['n_parameters']} parameters, {first['steps']} steps "
            f"per run, optimizer {first['config']['optimizer']} lr {first['config']['lr']:g}, "
            f"{sum(map(len, results.values()))} runs (1 torch thread each)."]
        payload = {"task": self.task, "mults": sorted(results), "seeds": sorted({r["config"]["seed"] for r in
                                                                                 results[1.0]}),
                   "config": first["config"], "performance_key": self.performance_key,
                   "acc_tolerance": self.acc_tolerance, "summary": {f"{m:g}": s for m, s in summary.items()},
                   "notes": notes, "plots": [Path(p).name for p in paths]}
        atomic.write_text(Path(figures) / f"{self.task}.json", json.dumps(payload, indent=1))
        return []

    @staticmethod
    def seconds(records) -> tuple[float, float]:
        """(CPU, wall) seconds summed over the records' training and final evaluation (for stderr)."""
        keys = ("train_seconds", "final_eval_seconds")
        return (sum(r.result[k]["cpu"] for r in records for k in keys),
                sum(r.result[k]["wall"] for r in records for k in keys))


#: the keys every task summary written by :meth:`CircuitsStudy.render` has
SUMMARY_KEYS = frozenset({"task", "summary", "notes", "plots"})


def write_report(out_dir: Path) -> dict:
    """report.md + report.json (every task's claims, by the one report writer, then its table) and
    README-section.md, all recomputed from the ``*.json`` task summaries in ``out_dir`` (per-seed
    values included), so the verdicts always follow the current rule. Returns {task: claims}."""
    from qkdyn import atomic
    from qkdyn.empirical.circuits import report
    from qkdyn.report import write_claims_report
    from qkdyn.runs import read_json

    from qkdyn.empirical.circuits.presets import TASKS
    from qkdyn.errors import InputError

    payloads = []
    for path in (out_dir / f"{task}.json" for task in TASKS):  # only our summaries; other files are not ours
        if path.exists():
            payload = read_json(path)
            if not isinstance(payload, dict) or not SUMMARY_KEYS <= payload.keys() or payload["task"] not in TASKS:
                raise InputError(f"{path} is not a compare-circuits summary; delete it or use another --out")
            payloads.append(payload)
    task_claims, sections = {}, []
    for p in payloads:
        summary = {float(m): s for m, s in p["summary"].items()}
        key = p.get("performance_key", "f1" if p["task"] == "squad" else "accuracy")
        task_claims[p["task"]] = report.claims(p["task"], summary, key, p.get("acc_tolerance", 0.01))
        sections.append(report.markdown(p["task"], summary, p["notes"], p["plots"]))
    atomic.write_text(out_dir / "README-section.md", report.readme_section(payloads, task_claims))
    write_claims_report(
        out_dir, [c for claims in task_claims.values() for c in claims],
        title="Faster QK learning at transformer scale (Paper A), CPU study",
        intro="Generated by `qkdyn compare-circuits` from the per-task JSON summaries (every number and per-seed "
              "value is there). Verdicts follow the shared rule: paired over seeds, p < 0.05.",
        sections=sections, context={p["task"]: {"seeds": p["seeds"], "mults": p["mults"], "config": p["config"]}
                                    for p in payloads})
    return task_claims
