"""The public API's type hints are checked by mypy (so CI runs a type checker on every change).

mypy reads the package laid out as one tree (``build/api-tree``, the same the docs site uses: the
package-dir mapping of pyproject.toml in folders); modules it imports are followed for their types
but reported only where they are part of the checked surface below.
"""
import subprocess
import sys

import pytest
from repo_paths import ROOT

#: the public surface: the package's entry point, the testing helpers, figures, the result types' exports
CHECKED = ["qkdyn/__init__.py", "qkdyn/testing.py", "qkdyn/figures.py", "qkdyn/report.py",
           "qkdyn/simulate/grid.py", "qkdyn/simulate/growth.py", "qkdyn/simulate/plotting.py",
           "qkdyn/theory/setting.py"]
#: typed uses of the public verbs (``assert_type`` on what each overload returns), read with the surface
USES = [str(ROOT / "tests" / "project" / "typed_api.py")]


@pytest.mark.xdist_group("api-tree")  # both build build/api-tree: one worker runs them in turn
def test_mypy_passes_on_the_public_api():
    sys.path.insert(0, str(ROOT / "docs" / "_hooks"))
    import package_tree  # builds build/api-tree on import: inside the test, so only its xdist group does

    package_tree.on_config(None)
    out = subprocess.run([sys.executable, "-m", "mypy", "--follow-imports=silent", "--ignore-missing-imports",
                          "--cache-dir", str(ROOT / "build" / "mypy-cache"), *CHECKED, *USES],
                         cwd=package_tree.TREE.parent, capture_output=True, text=True, timeout=300, check=False)
    assert out.returncode == 0, out.stdout + out.stderr
