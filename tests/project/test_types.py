"""The public API's type hints are checked by mypy (so CI runs a type checker on every change).

mypy reads the package laid out as one tree (``build/api-tree``, the same the docs site uses: the
package-dir mapping of pyproject.toml in folders), configured by pyproject.toml's ``[tool.mypy]`` (the
files ``make typecheck`` checks); modules it imports are followed for their types only.
"""
import subprocess
import sys

import pytest
from repo_paths import ROOT


@pytest.mark.xdist_group("api-tree")  # both build build/api-tree: one worker runs them in turn
def test_mypy_passes_on_the_public_api():
    sys.path.insert(0, str(ROOT / "docs" / "_hooks"))
    import package_tree  # builds build/api-tree on import: inside the test, so only its xdist group does

    package_tree.on_config(None)
    # exactly what `make typecheck` checks: pyproject.toml's [tool.mypy] (the public surface, theory/, simulate/
    # and the typed uses of the public verbs in tests/project/typed_api.py)
    out = subprocess.run([sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml")],
                         cwd=package_tree.TREE.parent, capture_output=True, text=True, timeout=600, check=False)
    assert out.returncode == 0, out.stdout + out.stderr
