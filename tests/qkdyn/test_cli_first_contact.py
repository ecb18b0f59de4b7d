"""The first commands a new user types, as issue 44's acceptance writes them: a flag typo with nothing
else given is answered with the nearest flag (not with the required flags it left out), a lower-case
parameterisation runs, and a missing spec file is refused in under a second."""
import json
import subprocess
import sys

import pytest

from qkdyn.cli import main


@pytest.mark.parametrize("argv, said", [
    (["solve", "--tmax", "1"], "qkdyn solve: error: unrecognized argument --tmax (did you mean --t-max?)\n"),
    (["solve", "--eta_qk=2"], "qkdyn solve: error: unrecognized argument --eta_qk (did you mean --eta-qk?)\n"),
    (["data", "fetch", "--forse", "brown"], "qkdyn data fetch: error: unrecognized argument --forse\n"),
    (["--tmax"], "qkdyn: error: unrecognized argument --tmax\n"),
])
def test_a_typo_is_answered_before_the_required_flags_it_left_out(capsys, argv, said):
    assert main(argv) == 2
    assert capsys.readouterr().err == said


def test_known_flags_are_not_typos(capsys):
    assert main(["solve", "--t-max", "1"]) == 2  # only the required flags are missing now
    assert "required" in capsys.readouterr().err


def test_a_lower_case_parameterisation_solves(tmp_path, capsys):
    out = tmp_path / "caco.csv"
    assert main(["solve", "--param", "caco", "--t-max", "10", "--points", "3", "--out", str(out)]) == 0
    assert out.read_text().startswith("t,qk,ov,attn,loss")
    assert capsys.readouterr().err.startswith("CACO: 3 rows")


def test_a_missing_spec_file_fails_in_under_a_second(tmp_path):
    """Timed from the call of ``main`` in a fresh interpreter (its start-up is Python's, not ours)."""
    code = ("import json, sys, time; t = time.perf_counter(); from qkdyn.cli import main; "
            "code = main(['solve', '--spec', 'missing.toml']); print(json.dumps([code, time.perf_counter() - t]))")
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    status, seconds = json.loads(done.stdout)
    assert status == 2 and done.stderr == "qkdyn solve: error: --spec cannot be read: missing.toml: No such file or directory\n"
    assert seconds < 1, f"{seconds:.2f} s"
