"""`qkdyn verify` ends with the terminal summary `qkdyn report` prints (qkdyn.report.terminal_summary): one line
per claim of what verify returned, then the count of verdicts (verify itself stubbed: its claims are hand-written)."""
import importlib

import pytest

from qkdyn.claims import Claim, Precondition
from qkdyn.cli import main
from qkdyn.report import terminal_summary

CLAIMS = [
    Claim("A1", "A law holds.", "holds", {}, "Measured."),
    Claim("A2", "Two laws hold.", "partial", {}, "Measured.", parts={"law a": "holds", "law b": "fails"}),
    Claim("A3", "Needs a precondition.", "inconclusive", {}, "Not judged.",
          preconditions=[Precondition("loss below chance", 2.0, "<", 1.0, "worst seed").as_dict()]),
]


@pytest.fixture
def stub_verify(monkeypatch):
    """verify replaced by one returning CLAIMS; the arguments it got, recorded."""
    calls: list[dict] = []

    def verify(**kwargs):
        calls.append(kwargs)
        return CLAIMS

    monkeypatch.setattr(importlib.import_module("qkdyn.verify"), "verify", verify)  # the module, not qkdyn.verify()
    return calls


def test_verify_ends_with_the_terminal_summary(stub_verify, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    assert main(["verify", "--skip-empirical", "--no-progress", "--figures", str(tmp_path / "figures")]) == 0
    out = capsys.readouterr().out
    assert len(stub_verify) == 1 and stub_verify[0]["empirical"] is False
    assert out.endswith(terminal_summary(CLAIMS) + "\n")
    lines = out.splitlines()[-5:]
    assert lines[0].split()[:2] == ["claim", "verdict"]
    assert lines[2].split(None, 2) == ["A2", "partial", "not holding: law b (fails)"]
    assert lines[3].split(None, 2) == ["A3", "inconclusive", "precondition not met: loss below chance"]
    assert lines[-1] == "3 claims: 1 holds, 1 partial, 1 inconclusive"
