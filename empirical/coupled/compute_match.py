"""Compute matched as a reader would: coupled attention against standard attention given the same
measured CPU time, read off standard attention's length ladder (its runs trained to several lengths,
each with its own schedule).

Per seed, standard's CPU per token r = sum of CPU seconds / sum of tokens over that seed's standard
runs (``details.cpu_time_s``: process CPU time of the training steps); in the coupled run's CPU time
C it could have trained T = C / r tokens; its final log ppl at T is interpolated linearly in log
tokens between its runs trained to the two lengths that bracket T (:func:`loss_at_tokens`). The
per-seed difference log ppl(coupled) - log ppl(standard at T) is then exact ("bracketed"); a lower
bound where T lies beyond the longest run ("censored": training longer would only lower standard's
loss); and, where T lies at or below the shortest, that run's loss stands in ("shortest": standard
then trained at least as long as matched, which favours it). Censored seeds are judged by the sign
test of :func:`qkdyn.stats.compare_censored`, the others by the paired t-test of the shared rule.
"""
from __future__ import annotations

import itertools
import math

from qkdyn.empirical.coupled.paper_effects import SMALLEST
from qkdyn.empirical.coupled.selection import Runs, log_ppl

from qkdyn.stats import Comparison, compare_censored


def ladders(R: Runs, corpus: str) -> dict[int, list[dict]]:
    """Per seed, standard attention's runs on ``corpus`` trained to every length (main grid)."""
    out: dict[int, list[dict]] = {}
    for r in R.runs:
        if r["task"] == "lm" and r["data"] == corpus and r["variant"] == "standard" and r["n"] == 1 and R.in_main(r):
            out.setdefault(r["seed"], []).append(r)
    return out


def loss_at_tokens(standard_by_length: list[dict], tokens: float) -> tuple[float, str]:
    """Standard attention's final log ppl had it been trained to ``tokens``, and how it was read
    ("bracketed", "censored", "shortest": module docstring)."""
    ordered = sorted(standard_by_length, key=lambda r: r["tokens"])
    if tokens <= ordered[0]["tokens"]:
        return log_ppl(ordered[0]), "shortest"
    for short, long in itertools.pairwise(ordered):
        if tokens <= long["tokens"]:
            frac = math.log(tokens / short["tokens"]) / math.log(long["tokens"] / short["tokens"])
            return log_ppl(short) + frac * (log_ppl(long) - log_ppl(short)), "bracketed"
    return log_ppl(ordered[-1]), "censored"


def cpu_matched(coupled: dict[int, dict], ladder: dict[int, list[dict]]) -> tuple[Comparison | None, list[dict]]:
    """Coupled vs standard at equal measured CPU time (module docstring), claimed "decrease": the
    comparison and a row per seed; (None, []) where no seed has ``cpu_time_s`` on both sides (records
    written before it was measured)."""
    rows, values, censored = [], [], []
    for seed, run in sorted(coupled.items()):
        runs = [r for r in ladder.get(seed, []) if r.get("cpu_time_s") is not None]
        if run.get("cpu_time_s") is None or not runs:
            continue
        rate = sum(r["cpu_time_s"] for r in runs) / sum(r["tokens"] for r in runs)
        tokens = run["cpu_time_s"] / rate
        loss, how = loss_at_tokens(runs, tokens)
        values.append(log_ppl(run) - loss)
        censored.append(how == "censored")
        rows.append({"seed": seed, "coupled CPU s": run["cpu_time_s"],
                     "CPU per token vs standard": run["cpu_time_s"] / run["tokens"] / rate,
                     "standard tokens at equal CPU": round(tokens), "read": how,
                     "log ppl(coupled) - log ppl(standard)": values[-1]})
    if not rows:
        return None, []
    return compare_censored(values, censored, "decrease", smallest_effect=SMALLEST["standard"]), rows
