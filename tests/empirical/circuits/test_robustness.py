"""The base-rate robustness table (issue 42, item 5): rows read from compare-circuits reports, never
recomputed; a rate whose preconditions failed reads as inconclusive with its reason."""
from __future__ import annotations

import json

import pytest
from qkdyn.empirical.circuits import robustness


def _claim(verdict: str, effect: float, met: bool = True) -> dict:
    comp = {"effect": effect, "interval": [effect - 0.01, effect + 0.01], "p_value": 0.001, "mde": 0.02, "n": 5}
    return {"id": robustness.CLAIM, "verdict": verdict, "parts": {"sharper attention (non-adjacent items)": verdict},
            "stats": {"attention mass, all items (secondary)": {**comp, "effect": 9.0},
                      "attention mass, non-adjacent items (deciding)": comp},
            "preconditions": [{"name": "the same-lr arm attends away from uniform", "met": met}]}


def _folder(root, name: str, lr: float, claim: dict):
    folder = root / name
    folder.mkdir()
    (folder / "report.json").write_text(json.dumps({"claims": [claim]}))
    (folder / f"{robustness.TASK}.json").write_text(json.dumps({"config": {"lr": lr}}))
    return folder


def test_rows_read_the_deciding_comparison_and_the_factor_from_each_reports_own_rate(tmp_path):
    folders = [_folder(tmp_path, "base", 1e-3, _claim("holds", 0.1)),
               _folder(tmp_path, "half", 5e-4, _claim("holds", 0.08)),
               _folder(tmp_path, "double", 2e-3, _claim("inconclusive", 0.01, met=False))]
    rows = robustness.rows_from(folders)
    assert [r["factor"] for r in rows] == [1.0, 0.5, 2.0] and [r["lr"] for r in rows] == [1e-3, 5e-4, 2e-3]
    assert [r["effect"] for r in rows] == [0.1, 0.08, 0.01]  # the deciding comparison, not the first listed
    assert rows[2]["preconditions_unmet"] == ["the same-lr arm attends away from uniform"]
    table = robustness.markdown(rows)
    assert table.index("x0.5") < table.index("x1)") < table.index("x2")  # ordered by rate
    assert "NOT met: the same-lr arm attends away from uniform" in table and "+0.080 [+0.070, +0.090]" in table
    assert f"Scope: this subset only, the claim that decides paper A's sharpening at transformer scale ({robustness.CLAIM}" in table


def test_a_report_without_the_claim_or_rate_is_one_input_error(tmp_path):
    from qkdyn.errors import InputError

    other = _folder(tmp_path, "other", 1e-3, {**_claim("holds", 0.1), "id": "vader QK x10"})
    with pytest.raises(InputError, match="has no claim"):
        robustness.rows_from([other])
    (other / f"{robustness.TASK}.json").write_text(json.dumps({"config": {}}))
    with pytest.raises(InputError, match="no base learning rate"):
        robustness.base_rate(other)


def test_main_writes_the_table_and_its_json(tmp_path):
    folders = [_folder(tmp_path, "base", 1e-3, _claim("holds", 0.1)), _folder(tmp_path, "half", 5e-4, _claim("fails", -0.05))]
    assert robustness.main([str(tmp_path / "out"), *map(str, folders)]) == 0
    data = json.loads((tmp_path / "out" / "robustness.json").read_text())
    assert [r["verdict"] for r in data["rows"]] == ["holds", "fails"]
    assert "| 0.0005 (x0.5) | fails |" in (tmp_path / "out" / "robustness.md").read_text()
    assert robustness.main([str(tmp_path / "out")]) == 2
