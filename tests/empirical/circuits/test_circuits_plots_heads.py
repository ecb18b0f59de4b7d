"""Per-head figures: head ranking within runs, both figures drawn without layout problems, old runs skipped."""
import json
import warnings

import numpy as np
import pytest
from qkdyn.empirical.circuits import plots_heads

from qkdyn.figures import FigureLayoutWarning


def heads_dict(entropy, previous, rationale=None):
    return {"n": 5, "entropy": entropy, "readout_entropy": entropy, "previous_token": previous,
            "first_token": previous, "rationale": rationale, "induction": previous,
            "uniform": {"entropy": 2.0, "readout_entropy": 2.5, "previous_token": 0.2, "first_token": 0.3,
                        "rationale": None, "induction": 0.1}}


def fake_runs(tmp_path, arms=("same lr", "QK x30"), seeds=2, steps=(100, 200, 300)):
    """Two layers of three heads; head 2 of layer 1 sharpens over training in every run."""
    results, dirs = {}, {}
    for a, arm in enumerate(arms):
        for seed in range(seeds):
            run = tmp_path / f"{a}_{seed}"
            run.mkdir()
            rows = []
            for s, step in enumerate(steps[: len(steps) - seed]):  # seed 1 stopped earlier (its target loss)
                entropy = [[2.0, 2.0 - 0.5 * s, 1.9], [1.5, 1.5, 1.5]]
                rows.append({"step": step, "dev_heads": heads_dict(entropy, [[0.1, 0.9, 0.2], [0.3, 0.3, 0.3]])})
            (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
            dirs.setdefault(arm, []).append(run)
            results.setdefault(arm, []).append({"test": {"heads": rows[-1]["dev_heads"]}})
    return results, dirs


def test_heads_are_ranked_within_each_run_before_averaging(tmp_path):
    results, dirs = fake_runs(tmp_path)
    logs = [[json.loads(line) for line in (d / "metrics.jsonl").read_text().splitlines()] for d in dirs["same lr"]]
    steps, ranked, uniform = plots_heads.entropy_over_training(logs)
    assert steps == [100, 200] and ranked.shape == (2, 2, 2, 3) and np.all(uniform == 2.0)
    # at the last common step (200) layer 1's entropies are 2.0, 1.5, 1.9: the sharpest (head 2) ranks first
    assert ranked[0, :, 0].tolist() == [[2.0, 1.9, 2.0], [1.5, 1.9, 2.0]]
    roles = plots_heads.ranked_roles([r["test"]["heads"] for r in results["same lr"]], "previous_token")
    assert roles[0].tolist() == [[0.9, 0.2, 0.1], [0.3, 0.3, 0.3]]
    assert np.isnan(plots_heads.ranked_roles([r["test"]["heads"] for r in results["same lr"]], "rationale")).all()


def test_both_figures_are_drawn_and_old_runs_are_skipped(tmp_path):
    results, dirs = fake_runs(tmp_path / "runs" if (tmp_path / "runs").mkdir() is None else tmp_path)
    out = tmp_path / "fig"
    out.mkdir()
    with warnings.catch_warnings():
        warnings.simplefilter("error", FigureLayoutWarning)
        paths = plots_heads.plot_heads("brown-qa", results, dirs, out)
    assert [p.split("/")[-1] for p in paths] == ["brown-qa_head_entropy.png", "brown-qa_head_roles.png"]
    assert all((out / p).stat().st_size > 0 for p in paths)
    many = {f"arm {i}": results["same lr"] for i in range(7)}  # panels wrap onto rows
    with warnings.catch_warnings():
        warnings.simplefilter("error", FigureLayoutWarning)
        assert len(plots_heads.plot_heads("brown-sva", many, {a: dirs["same lr"] for a in many}, out)) == 2
    for d in dirs["same lr"]:  # runs made before the per-head measures were logged
        rows = [json.loads(line) for line in (d / "metrics.jsonl").read_text().splitlines()]
        (d / "metrics.jsonl").write_text("".join(json.dumps({"step": r["step"]}) + "\n" for r in rows))
    old = {"same lr": [{"test": {}}] * 2, "QK x30": results["QK x30"]}
    assert plots_heads.plot_heads("vader", old, dirs, out) == []


@pytest.mark.parametrize("n_head", [4, 36])
def test_role_heatmap_of_many_heads(tmp_path, n_head):
    heads = heads_dict([[1.0] * n_head], [list(np.linspace(0, 1, n_head))], [[0.5] * n_head])
    results = {"same lr": [{"test": {"heads": heads}}], "QK x20": [{"test": {"heads": heads}}]}
    with warnings.catch_warnings():
        warnings.simplefilter("error", FigureLayoutWarning)
        path = plots_heads.plot_roles("squad", results, "test", tmp_path)
    assert path.endswith("squad_head_roles.png")
