"""Style: `ruff check` (configured in pyproject.toml) passes over the source tree; CI runs it here."""
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from repo_paths import ROOT


def _ruff() -> list[str]:
    beside = Path(sys.executable).with_name("ruff")
    found = str(beside) if beside.exists() else shutil.which("ruff")
    if found is None:
        if os.environ.get("CI") == "true":
            pytest.fail("ruff is not installed (it is in the test extra: pip install -e '.[test]')")
        pytest.skip("ruff is not installed (pip install -e '.[test]')")
    return [found]


def test_ruff_passes():
    result = subprocess.run([*_ruff(), "check", "--no-cache", "--output-format", "concise", "."], cwd=ROOT,
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_ruff_would_catch_an_unused_import(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("import os\n")
    result = subprocess.run([*_ruff(), "check", "--no-cache", "--config", str(ROOT / "pyproject.toml"), str(bad)],
                            capture_output=True, text=True)
    assert result.returncode == 1 and "F401" in result.stdout


#: the source folders the test folders mirror (tests/theory tests theory/, tests/empirical the modules of
#: empirical/ itself, such as the shared loop, ...); tests/project holds the
#: repository-wide checks (docs, examples, notebooks, style, types, metadata)
MIRRORED = ("qkdyn", "theory", "simulate", "empirical", "empirical/synthetic", "empirical/circuits",
            "empirical/coupled")


def test_the_tests_mirror_the_source_tree():
    tests = ROOT / "tests"
    folders = {str(p.parent.relative_to(tests)) for p in tests.rglob("test_*.py")}
    assert folders <= set(MIRRORED) | {"project"}, sorted(folders - set(MIRRORED) - {"project"})
    assert all((ROOT / source).is_dir() for source in MIRRORED)
    assert not list(tests.glob("test_*.py")), "a test file sits at the top of tests/: put it beside its module's folder"
