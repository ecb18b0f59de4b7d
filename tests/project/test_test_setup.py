"""The test suite's own machinery: what ``make test`` relies on to run tests that share state in turn."""
import subprocess
import sys
import textwrap


def test_xdist_loadgroup_sends_a_group_to_one_worker(tmp_path):
    """``make test`` runs ``-n auto --dist loadgroup``: the tests of one ``xdist_group`` (those that build
    build/api-tree, those that read one ``verify --quick`` run) must run on one worker, in turn. pytest 9.2 with
    pytest-xdist 3.8 silently stopped grouping (pytest-xdist issue 1386): pyproject's test extra keeps a pytest
    with which it works."""
    (tmp_path / "test_grouped.py").write_text(textwrap.dedent("""
        import os
        import pytest

        @pytest.mark.parametrize("i", range(6))
        @pytest.mark.xdist_group("shared")
        def test_grouped(i):
            with open(f"worker-{i}", "w") as out:
                out.write(os.environ["PYTEST_XDIST_WORKER"])

        @pytest.mark.parametrize("i", range(6))
        def test_free(i):
            pass
    """))
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "2", "--dist",
                           "loadgroup", "test_grouped.py"], cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    workers = {(tmp_path / f"worker-{i}").read_text() for i in range(6)}
    assert len(workers) == 1, f"the group ran on {sorted(workers)}"
