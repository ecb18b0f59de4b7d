"""The pilot that sizes paper B's cpu budget (empirical/coupled/pilot.py), on hand-written records."""
from __future__ import annotations

import json
import math
import statistics

import pytest
from qkdyn.empirical.coupled import pilot
from repo_paths import ROOT

from qkdyn.stats import detectable_effect


def _record(variant: str, seed: int, steps: int, curve: dict[int, float]) -> dict:
    evals = [{"kind": "eval", "step": s, "val_loss": v} for s, v in sorted(curve.items())]
    return {"spec": {"config": {"kind": "train", "task": "lm", "variant": variant,
                                "train": {"seed": seed, "max_steps": steps}}},
            "result": {"final": {"val_loss": evals[-1]["val_loss"]},
                       "details": {"evals": evals, "train_time_s": 10.0}}}


def _pair(seed: int, steps: int, standard: list[float], coupled: list[float]) -> list[dict]:
    grid = [round(steps * (i + 1) / len(standard)) for i in range(len(standard))]
    return [_record("standard", seed, steps, dict(zip(grid, standard, strict=True))),
            _record("coupled-euler", seed, steps, dict(zip(grid, coupled, strict=True)))]


def test_a_seed_slow_in_both_variants_does_not_stall_but_a_one_sided_plateau_does():
    steps = 1000
    records = []
    for seed, shift in enumerate((0.0, 0.01, -0.01, 0.2)):  # seed 3 is slow in both variants alike
        records += _pair(seed, steps, [3.0 + shift, 2.5 + shift, 2.0 + shift, 1.9 + shift],
                         [3.0 + shift, 2.51 + shift, 2.005 + shift, 1.905 + shift])
    assert pilot.length_row(records, steps, 15.0)["stalled"] == []
    # seed 4's coupled run sits on a plateau from the second evaluation on, while its standard run descends
    records += _pair(4, steps, [3.0, 2.5, 2.0, 1.9], [3.0, 2.9, 2.8, 2.7])
    row = pilot.length_row(records, steps, 15.0)
    assert row["stalled"] == [4]
    assert pilot.choose([row]) is None


def test_the_row_is_the_paired_evidence():
    steps = 100
    finals = {0: (2.0, 2.01), 1: (2.1, 2.1), 2: (1.9, 1.93)}
    records = [r for s, (a, b) in finals.items() for r in _pair(s, steps, [a], [b])]
    row = pilot.length_row(records, steps, 20.0)
    d = [b - a for a, b in finals.values()]
    assert row["d"] == pytest.approx(d)
    assert row["sd_d"] == pytest.approx(statistics.stdev(d))
    assert row["mde"] == pytest.approx(detectable_effect("two-sided", row["sd_d"], 3))
    assert row["floor_ratio"] == pytest.approx(20.0 / math.exp(2.0))
    assert row["seeds"] == [0, 1, 2]


def test_choose_takes_the_shortest_qualifying_length_and_enough_seeds():
    ok = {"steps": 3000, "stalled": [], "floor_ratio": 2.5, "sd_d": 0.01}
    short_floor = {"steps": 1200, "stalled": [], "floor_ratio": 1.5, "sd_d": 0.005}
    assert pilot.choose([ok, short_floor]) == {"steps": 3000, "seeds": pilot.seeds_for(0.01)}
    n = pilot.seeds_for(0.01)
    assert n >= pilot.MIN_SEEDS
    assert detectable_effect("two-sided", 0.01, n) < pilot.TARGET_MDE <= detectable_effect("two-sided", 0.01, n - 1) \
        or n == pilot.MIN_SEEDS
    assert pilot.seeds_for(0.05) > pilot.seeds_for(0.01)


def test_write_reads_a_runs_folder(tmp_path):
    folder = tmp_path / "runs" / "coupled"
    folder.mkdir(parents=True)
    count = {"spec": {"config": {"kind": "count"}, "name": "count", "study": "coupled"},
             "result": {"count_model": {"bigram_ppl": 16.0}}}
    (folder / "count.json").write_text(json.dumps(count))
    for i, r in enumerate(r for s in range(3) for r in _pair(s, 1200, [2.0 + s / 100], [2.01 + s / 90])):
        (folder / f"lm-{i}.json").write_text(json.dumps(r))
    out = pilot.write(tmp_path / "runs", tmp_path / "out")
    assert out["rows"][0]["seeds"] == [0, 1, 2] and out["rows"][0]["bigram_ppl"] == 16.0
    assert out["rows"][1]["seeds"] == []  # no 3000-step runs: an empty row, not an error
    text = (tmp_path / "out" / "pilot.md").read_text()
    assert "| 1200 | 3 |" in text and "Chosen for the `cpu` budget: 1200 steps" in text


def test_the_cpu_budget_is_what_the_committed_pilot_chose():
    from qkdyn.empirical.coupled.study import BUDGETS

    committed = json.loads((ROOT / "figures" / "coupled" / "pilot" / "pilot.json").read_text())
    chosen, cpu = committed["chosen"], BUDGETS["cpu"]
    assert cpu.lm_steps == chosen["steps"] and cpu.seeds >= chosen["seeds"]
    assert cpu.lm_steps // cpu.evals_per_run == 150  # the pilot's evaluation interval
    assert pilot.choose(committed["rows"]) == chosen  # the table still gives its choice under today's rule
