"""The pilot that sizes paper B's ``cpu`` budget: standard and coupled Euler attention at ``tiny``
on the coherent corpus, several seeds, at each run length of :data:`LENGTHS`, read back from the
coupled study's run records (``scripts/coupled_pilot.sh`` runs it; ``figures/coupled/pilot/`` holds
the committed table).

Per run length L, from the final validation loss (log perplexity per byte token) of each seed:

* ``d_i = coupled_i - standard_i`` (paired by seed), its mean and sample sd ``s``;
* the smallest effect the paired t-test detects with 80% power at ``s`` over the pilot's seeds
  (:func:`qkdyn.stats.detectable_effect`), and the seeds the paper's 6.6% (``log 1/(1-0.066)``) and
  1% (``log 1/0.99``) gains need at ``s`` (:func:`qkdyn.stats.seeds_needed`);
* the floor: standard attention's perplexity against the bigram count model's (the study's LM
  precondition asks for a model at least :data:`FLOOR_RATIO` x below it);
* stalled seeds: a seed stalls when, at an evaluation from :data:`STALL_FROM` of the run on, its
  paired difference (coupled - standard validation loss at that evaluation) is more than
  :data:`STALL_GAP` nats from the median of the seeds' paired differences there: one variant sits on
  a plateau in that seed while the other descends, the single slow seed that turns into a paired
  spread no number of seeds absorbs. (A seed slow in both variants alike cancels in the pairing; a
  plateau left before the last quarter of the run does not reach the final comparison.)

:func:`choose` picks the regime: the shortest length where no seed stalls and the floor holds, with
the seeds that detect the paper's effect and bring the detectable effect below
:data:`TARGET_MDE` (at least :data:`MIN_SEEDS`).
"""
from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

from qkdyn.recordschema import COUNT, PERPLEXITY, SEED, SIZE_OR_NAN, Number, Text, check
from qkdyn.stats import POWER, detectable_effect, seeds_needed

#: the run lengths (optimiser steps) the pilot compares
LENGTHS = (1200, 3000)
#: the seeds of each length
SEEDS = 5
#: the variants compared (paired by seed)
PAIR = ("standard", "coupled-euler")
#: the paper's 60M gain of coupled over standard (6.6% perplexity), and the 1% the table also sizes
PAPER_EFFECT = math.log(1 / (1 - 0.066))
ONE_PERCENT = math.log(1 / 0.99)
#: standard attention must be this many times below the bigram count model's perplexity
FLOOR_RATIO = 2.0
#: a seed stalls when it sits this many nats above its variant's median ...
STALL_GAP = 0.05
#: ... at an evaluation from this share of the run on: the last quarter, where a plateau reaches the
#: verdict (a transient one in the fast descent that the seed has left by then shows in the curves only)
STALL_FROM = 0.75
#: the design's detectable effect (log ppl) the chosen seeds must reach at the pilot's spread
TARGET_MDE = 0.015
#: never fewer seeds than this (a spread from fewer is itself too noisy to plan on)
MIN_SEEDS = 5


#: what the pilot reads of every record (``spec`` and ``result``) of the runs folder, of a count model's and of an
#: LM run's, checked before it reads them (:mod:`qkdyn.recordschema`; a diverged run's loss may be NaN: its row's
#: spread is then NaN, and the row is not chosen)
KIND = {"spec.config.kind": Text(("count", "train")), "spec.config.task?": Text()}
COUNT_MODEL = {"result.count_model.bigram_ppl": PERPLEXITY}
LM_RUN = {"spec.config.variant": Text(), "spec.config.train.seed": SEED, "spec.config.train.max_steps": COUNT,
          "result.final.val_loss": Number(0, finite=False), "result.details.evals[].step": COUNT,
          "result.details.evals[].val_loss": Number(0, finite=False), "result.details.train_time_s": SIZE_OR_NAN}


def read_records(runs: Path) -> tuple[list[dict], dict]:
    """The LM run records (``spec`` + ``result``) of the coupled study under ``runs`` and the count
    model of the first count record (None if absent). Each record is checked as the study checks its own
    (:func:`qkdyn.studies.check_record`: evidence only, plain file names; :meth:`~qkdyn.studies.Study.check_files`:
    only the study's outputs), then against :data:`KIND` and :data:`COUNT_MODEL` or :data:`LM_RUN`: a bad record
    is one InputError naming its file, read no further."""
    from qkdyn.runs import read_json
    from qkdyn.studies import check_record, get

    study, hint = get("coupled"), "delete it to recompute it"
    records, count = [], None
    for path in sorted((Path(runs) / "coupled").glob("*.json")):
        data = check_record(read_json(path), str(path))
        study.check_files(data["result"], str(path))
        check(KIND, data, {}, str(path), hint)
        config = data["spec"]["config"]
        is_lm = config["kind"] == "train" and config.get("task") == "lm"
        check(COUNT_MODEL if config["kind"] == "count" else LM_RUN if is_lm else {}, data, config, str(path), hint)
        if config["kind"] == "count" and count is None:
            count = data["result"]["count_model"]
        elif is_lm:
            records.append(data)
    return records, count


def stalled(d_curves: dict[int, dict[int, float]], total_steps: int) -> list[int]:
    """The seeds whose paired-difference curve (``d_curves``: seed -> {step: d}) departs from the
    seeds' median by more than :data:`STALL_GAP` at an evaluation from :data:`STALL_FROM` of the run on."""
    steps = sorted({step for curve in d_curves.values() for step in curve if step >= STALL_FROM * total_steps})
    out = set()
    for step in steps:
        here = {seed: curve[step] for seed, curve in d_curves.items() if step in curve}
        if len(here) < 3:
            continue
        median = statistics.median(here.values())
        out |= {seed for seed, d in here.items() if abs(d - median) > STALL_GAP}
    return sorted(out)


def length_row(records: list[dict], steps: int, bigram_ppl: float | None) -> dict:
    """The pilot's evidence at run length ``steps`` (module docstring)."""
    finals: dict[str, dict[int, float]] = {v: {} for v in PAIR}
    curves: dict[str, dict[int, dict[int, float]]] = {v: {} for v in PAIR}
    cpu: dict[str, list[float]] = {v: [] for v in PAIR}
    for data in records:
        config, result = data["spec"]["config"], data["result"]
        if config["train"]["max_steps"] != steps or config["variant"] not in PAIR:
            continue
        seed, variant = config["train"]["seed"], config["variant"]
        finals[variant][seed] = float(result["final"]["val_loss"])
        curves[variant][seed] = {e["step"]: float(e["val_loss"]) for e in result["details"]["evals"]}
        cpu[variant].append(float(result["details"]["train_time_s"]))
    seeds = sorted(set(finals[PAIR[0]]) & set(finals[PAIR[1]]))
    d = [finals[PAIR[1]][s] - finals[PAIR[0]][s] for s in seeds]
    sd = statistics.stdev(d) if len(d) > 1 else math.nan
    d_curves = {s: {step: curves[PAIR[1]][s][step] - loss for step, loss in curves[PAIR[0]][s].items()
                    if step in curves[PAIR[1]][s]} for s in seeds}
    standard_ppl = math.exp(statistics.fmean(finals[PAIR[0]][s] for s in seeds)) if seeds else math.nan
    return {
        "steps": steps, "seeds": seeds,
        "final_loss": {v: [finals[v][s] for s in seeds] for v in PAIR},
        "standard_ppl": standard_ppl,
        "coupled_ppl": math.exp(statistics.fmean(finals[PAIR[1]][s] for s in seeds)) if seeds else math.nan,
        "bigram_ppl": bigram_ppl,
        "floor_ratio": bigram_ppl / standard_ppl if bigram_ppl else math.nan,
        "d": d, "mean_d": statistics.fmean(d) if d else math.nan, "sd_d": sd,
        "mde": detectable_effect("two-sided", sd, len(d)),
        "seeds_for_paper": seeds_needed("two-sided", PAPER_EFFECT, sd),
        "seeds_for_one_percent": seeds_needed("two-sided", ONE_PERCENT, sd),
        "stalled": stalled(d_curves, steps),
        "train_time_s": {v: statistics.fmean(cpu[v]) if cpu[v] else math.nan for v in PAIR},
    }


def seeds_for(sd: float) -> int:
    """The seeds a regime with paired spread ``sd`` needs: the paper's effect detected with 80% power
    and the detectable effect below :data:`TARGET_MDE`, at least :data:`MIN_SEEDS`."""
    n = max(MIN_SEEDS, seeds_needed("two-sided", PAPER_EFFECT, sd) or MIN_SEEDS)
    while detectable_effect("two-sided", sd, n) >= TARGET_MDE:
        n += 1
    return n


def choose(rows: list[dict]) -> dict | None:
    """The regime the ``cpu`` budget runs: the shortest length with no stalled seed and the floor met,
    and its seeds (:func:`seeds_for`); None when no length qualifies."""
    for row in sorted(rows, key=lambda r: r["steps"]):
        if not row["stalled"] and row["floor_ratio"] >= FLOOR_RATIO and row["sd_d"] == row["sd_d"]:
            return {"steps": row["steps"], "seeds": seeds_for(row["sd_d"])}
    return None


def markdown(rows: list[dict], chosen: dict | None) -> str:
    """The committed table and the choice, in words."""
    lines = ["# Paper B's CPU pilot: standard vs coupled Euler attention, `tiny`, byte-level `pydocs`", "",
             f"Paired by seed: d = coupled - standard in final validation log perplexity (nats per byte). "
             f"Power at {POWER:.0%}, two-sided paired t-test at the pilot's sd(d). A seed stalls when, from "
             f"{STALL_FROM:.0%} of the run on, its paired difference at an evaluation is more than {STALL_GAP} nats "
             "from the seeds' median there (one variant on a plateau the other has left).", "",
             "| steps | seeds | standard ppl | coupled ppl | bigram ppl | bigram / standard | mean d | sd(d) "
             "| detectable at these seeds | seeds for 6.6% | seeds for 1% | stalled seeds | train wall s per run (standard / coupled) |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        stalls = ", ".join(map(str, r["stalled"])) or "none"
        times = " / ".join(f"{r['train_time_s'][v]:.0f}" for v in PAIR)
        lines.append(f"| {r['steps']} | {len(r['seeds'])} | {r['standard_ppl']:.3f} | {r['coupled_ppl']:.3f} | "
                     f"{r['bigram_ppl']:.2f} | {r['floor_ratio']:.2f} | {r['mean_d']:+.4f} | {r['sd_d']:.4f} | "
                     f"{r['mde']:.4f} | {r['seeds_for_paper']} | {r['seeds_for_one_percent']} | {stalls} | {times} |")
    lines.append("")
    if chosen is None:
        lines.append("No length qualifies (a seed stalls or standard attention is not "
                     f"{FLOOR_RATIO:g}x below the bigram model): the recipe must change before the `cpu` budget is set.")
    else:
        lines.append(f"Chosen for the `cpu` budget: {chosen['steps']} steps, {chosen['seeds']} seeds (the shortest "
                     f"length with no stalled seed and standard attention at least {FLOOR_RATIO:g}x below the bigram "
                     f"model; seeds enough for the paper's 6.6% at 80% power and a detectable effect below "
                     f"{TARGET_MDE} log ppl, at least {MIN_SEEDS}).")
    return "\n".join(lines) + "\n"


def write(runs: Path, out: Path) -> dict:
    """Read the pilot's records under ``runs``; write ``pilot.json`` and ``pilot.md`` into ``out``."""
    from qkdyn import atomic

    records, count = read_records(runs)
    bigram = count["bigram_ppl"] if count else None
    rows = [length_row(records, n, bigram) for n in LENGTHS]
    chosen = choose(rows)
    out.mkdir(parents=True, exist_ok=True)
    atomic.write_text(out / "pilot.json", json.dumps({"rows": rows, "chosen": chosen}, indent=1) + "\n")
    atomic.write_text(out / "pilot.md", markdown(rows, chosen))
    return {"rows": rows, "chosen": chosen}


if __name__ == "__main__":
    import sys

    print(write(Path(sys.argv[1]), Path(sys.argv[2]))["chosen"])
