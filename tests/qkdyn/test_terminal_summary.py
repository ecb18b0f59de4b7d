"""`qkdyn report` ends with a table for the terminal, one line per claim (qkdyn.report.terminal_summary),
and `qkdyn run` says what it did and how its claims get judged."""
import json

from qkdyn.claims import Claim, Precondition
from qkdyn.cli import main
from qkdyn.report import terminal_summary
from qkdyn.studies import get


def _claims() -> list[Claim]:
    stats = {"fast > slow": {"effect": 0.25, "spread": 0.01, "p_value": 1e-4, "mde": 0.02, "verdict": "holds"}}
    return [
        Claim("T1", "A law holds.", "holds", {}, "Measured."),
        Claim("T2", "Two laws hold.", "partial", {}, "Measured.", parts={"law a": "holds", "law b": "fails"}),
        Claim("E1", "Faster is sharper.", "holds", {}, "Paired.", stats=stats),
        Claim("E2", "Needs a precondition.", "inconclusive", {}, "Not judged.",
              preconditions=[Precondition("loss below chance", 2.0, "<", 1.0, "worst seed")]),
        Claim("E3", "Needs runs.", "inconclusive", {}, "1 of 2 runs have finished; missing: b. Not judged."),
    ]


def test_one_line_per_claim_saying_what_decided_it():
    lines = terminal_summary(_claims(), width=200).splitlines()
    assert len(lines) == 1 + 5 + 1 and lines[0].split()[:2] == ["claim", "verdict"]
    rows = {line.split()[0]: line.split(None, 2)[1:] for line in lines[1:-1]}
    assert rows["T1"] == ["holds", "A law holds."]
    assert rows["T2"] == ["partial", "not holding: law b (fails)"]
    assert rows["E1"][0] == "holds" and "+0.25" in rows["E1"][1] and "p = 0.0001" in rows["E1"][1]
    assert rows["E2"] == ["inconclusive", "precondition not met: loss below chance"]
    assert rows["E3"] == ["inconclusive", "1 of 2 runs have finished; missing: b"]
    assert lines[-1] == "5 claims: 2 holds, 1 partial, 2 inconclusive"


def test_lines_are_cut_to_the_width():
    long = Claim("L", "word " * 100, "holds", {}, "Measured.")
    lines = terminal_summary([long], width=60).splitlines()
    assert len(lines[1]) == 60 and lines[1].endswith("…")


def test_report_prints_the_table_and_run_says_what_it_did(tmp_path, capsys):
    runs = tmp_path / "runs"
    assert main(["report", "fixed-attention", "--budget", "quick", "--runs", str(runs),
                 "--figures", str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split()[:2] == ["claim", "verdict"] and out[1].split()[:2] == ["FA", "inconclusive"]
    assert "0 of 2 runs" in out[1] and out[-1] == "1 claims: 1 inconclusive"
    spec = get("fixed-attention").plan("quick")[0]
    assert main(["run", "fixed-attention", "--spec", json.dumps(spec.to_dict()), "--runs", str(runs)]) == 0
    assert main(["run", "fixed-attention", "--spec", json.dumps(spec.to_dict()), "--runs", str(runs)]) == 0
    first, _, again, _ = capsys.readouterr().out.splitlines()
    assert first.startswith(f"fixed-attention run {spec.name}: computed in ") and first.endswith(f"{spec.name}.json")
    assert again.startswith(f"fixed-attention run {spec.name}: already recorded, kept: ")
