"""The docs site builds with warnings as errors, and its API reference is generated from the docstrings."""
import os
import subprocess
import sys

import pytest
from repo_paths import ROOT


@pytest.mark.xdist_group("api-tree")  # both build build/api-tree: one worker runs them in turn
def test_the_docs_site_builds_strictly_with_a_generated_api_reference(tmp_path):
    site = tmp_path / "site"
    out = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)], cwd=ROOT,
                         capture_output=True, text=True, timeout=300, check=False, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert out.returncode == 0, out.stdout + out.stderr
    assert "WARNING" not in out.stderr, out.stderr
    reference = (site / "reference" / "index.html").read_text()
    for name in ("assert_grows_like", "for_each_param", "to_xarray", "to_pandas", "layout_problems", "Setting"):
        assert name in reference, name
