"""``qkdyn compare-circuits``: same-lr vs faster-QK training over seeds, with a table, plots and a
verdict for "sharper attention, same accuracy" (Paper A) at the scale run."""
from __future__ import annotations

import argparse
import dataclasses
import json
import math
from pathlib import Path

from qkdyn.empirical.circuits.cli_common import COMPARE_OWNED, add_config_arguments, config_from_args
from qkdyn.settingflags import non_negative_float

HELP = "compare same-lr and faster-QK training over seeds: table, plots and verdict in figures/circuits/"

HANDCHECK = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "circuits" / "brown_sva_handcheck.tsv"


def _floats(text: str) -> list[float]:
    from qkdyn.errors import InputError

    try:
        values = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise InputError(f"--mults expects comma-separated numbers, got {text!r}")
    if not values or any(not (math.isfinite(v) and v > 0) for v in values):
        raise InputError(f"--mults expects positive finite numbers, got {text!r}")
    return values


def _seeds(text: str) -> list[int]:
    from qkdyn.errors import InputError

    try:
        seeds = sorted({int(x) for x in text.split(",") if x.strip()})
    except ValueError:
        raise InputError(f"--seeds expects comma-separated integers, got {text!r}")
    if not seeds or seeds[0] < 0:
        raise InputError(f"--seeds expects non-negative integers, got {text!r}")
    return seeds


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_config_arguments(parser, skip=COMPARE_OWNED)
    parser.add_argument("--mults", default="1,30", help="QK multipliers; 1 (same lr) is always included")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--runs-dir", default="runs/circuits", help="one sub-directory per run (resumable)")
    parser.add_argument("--out-dir", default="figures/circuits")
    parser.add_argument("--acc-tolerance", type=non_negative_float, default=0.01,
                        help="largest accuracy drop that still counts as 'no accuracy loss' (non-inferiority margin)")
    parser.add_argument("--no-progress", action="store_true")


def task_notes(task: str) -> list[str]:
    """Caveats printed under the task's table; numbers are computed here, not typed in."""
    if task == "brown-sva" and HANDCHECK.exists():
        rows = [line.split("\t") for line in HANDCHECK.read_text().splitlines()[1:] if line]
        wrong = sum(r[3] == "no" for r in rows)
        return [f"Rationales (subject head) come from a heuristic over Brown POS tags; on {len(rows)} hand-checked "
                f"items {wrong} were wrong ({100 * wrong / len(rows):.0f}%; tests/fixtures/circuits/"
                "brown_sva_handcheck.tsv). Labels are the corpus's own verb tags.",
                "The rationale is {subject head, read-out <verb> position}, so attention of the read-out token "
                "to itself counts as rationale mass."]
    if task == "vader":
        return ["Rationales are a PROXY: positions of words in the human-rated VADER lexicon, not human "
                "rationales for these sentences. Labels: mean of ~20 human ratings, |mean| < margin dropped."]
    return []


def run(args: argparse.Namespace) -> int:
    from qkdyn.empirical.circuits import plots, report
    from qkdyn.empirical.circuits.train import train
    from qkdyn import atomic
    from qkdyn.runs import check_run_dir, pin_threads, read_json

    mults = sorted(set([1.0] + _floats(args.mults)))
    seeds = _seeds(args.seeds)
    configs = {(seed, mult): config_from_args(args, qk_lr_mult=mult, seed=seed) for seed in seeds for mult in mults}
    out_dir = check_run_dir(args.out_dir, "--out-dir")
    check_run_dir(args.runs_dir, "--runs-dir")
    run_dir = {(seed, mult): Path(args.runs_dir) / cfg.task / f"qk{mult:g}_s{seed}"
               for (seed, mult), cfg in configs.items()}
    finished = {key: read_json(d / "final.json") for key, d in run_dir.items() if (d / "final.json").exists()}
    pin_threads(args.threads)
    out_dir.mkdir(parents=True, exist_ok=True)
    results: dict[float, list[dict]] = {m: [] for m in mults}
    run_dirs: dict[float, list[Path]] = {m: [] for m in mults}
    for seed in seeds:
        for mult in mults:
            cfg = configs[seed, mult]
            cached = finished.get((seed, mult))
            if not isinstance(cached, dict) or cached.get("config") != dataclasses.asdict(cfg):
                cached = train(cfg, run_dir[seed, mult], progress=not args.no_progress)
            results[mult].append(cached)
            run_dirs[mult].append(run_dir[seed, mult])
    task = args.task
    performance_key = "f1" if task == "squad" else "accuracy"
    summary = report.summarize(results)
    paths = plots.plot_all(task, results, summary, run_dirs, performance_key, out_dir)
    notes = task_notes(task)
    base_cfg = results[1.0][0]["config"]
    wall = sum(r[k]["wall"] for rs in results.values() for r in rs for k in ("train_seconds", "final_eval_seconds"))
    cpu = sum(r[k]["cpu"] for rs in results.values() for r in rs for k in ("train_seconds", "final_eval_seconds"))
    notes.append(f"Scale: {results[1.0][0]['n_train']} training examples, {results[1.0][0]['n_parameters']} "
                 f"parameters, {results[1.0][0]['steps']} steps per run, optimizer {base_cfg['optimizer']} lr "
                 f"{base_cfg['lr']:g}. Summed over the {sum(map(len, results.values()))} runs (training and final "
                 f"evaluation, 1 thread each, on a 2-core machine shared with other jobs): {cpu / 60:.1f} CPU minutes, "
                 f"{wall / 60:.1f} wall-clock minutes.")
    payload = {"task": task, "mults": mults, "seeds": seeds, "config": base_cfg, "performance_key": performance_key,
               "acc_tolerance": args.acc_tolerance, "summary": {f"{m:g}": s for m, s in summary.items()},
               "notes": notes, "plots": [Path(p).name for p in paths]}
    atomic.write_text(out_dir / f"{task}.json", json.dumps(payload, indent=1))
    for claim in write_report(out_dir)[task]:
        print(f"{claim.verdict:>12s}  {claim.id}: {claim.summary}")
    return 0


#: the keys every task summary written by :func:`run` has
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
                raise InputError(f"{path} is not a compare-circuits summary; delete it or use another --out-dir")
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
