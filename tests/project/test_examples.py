"""The examples a researcher starts from run, in their fast variants, so they never rot."""
import os
import subprocess
import sys

import pytest
from repo_paths import ROOT

EXAMPLES = ROOT / "examples"


def run(*args, cwd):
    env = {**os.environ, "QKDYN_EXAMPLES_FAST": "1"}
    return subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def test_the_growth_law_example_is_a_passing_pytest_file(tmp_path):
    out = run("-m", "pytest", "-p", "no:cacheprovider", str(EXAMPLES / "test_my_growth_law.py"), cwd=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "4 passed" in out.stdout


def test_the_overlay_example_writes_a_png_and_pdf_in_the_qkdyn_style(tmp_path):
    out = run(str(EXAMPLES / "overlay_plot.py"), str(tmp_path / "two.png"), cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "FigureLayoutWarning" not in out.stderr, out.stderr  # save_png warns on a missing label or overlap
    assert (tmp_path / "two.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (tmp_path / "two.pdf").read_bytes()[:5] == b"%PDF-"


def test_the_conjecture_example_prints_a_computed_verdict(tmp_path):
    out = run(str(EXAMPLES / "check_conjecture.py"), "--fast", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.strip().splitlines()
    assert len(lines) == 3 and lines[-1].startswith("conjecture 'odds ~ (log t)^2 in CACO': ")
    assert lines[-1].split(": ")[-1] in ("holds", "fails", "partial", "inconclusive")


@pytest.mark.slow
def test_the_spec_growth_law_example_is_a_passing_pytest_file(tmp_path):
    out = run("-m", "pytest", "-p", "no:cacheprovider", str(EXAMPLES / "test_my_spec_growth_law.py"), cwd=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "2 passed" in out.stdout


@pytest.mark.slow
def test_the_example_spec_file_derives(tmp_path):
    out = run("-m", "qkdyn.cli", "derive", "--spec", str(EXAMPLES / "specs" / "deep_qk_decay.toml"), cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "k_query" in out.stdout and "weight decay" in out.stdout
