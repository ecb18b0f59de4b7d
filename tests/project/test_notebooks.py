"""The notebooks (jupytext percent files under notebooks/) execute from top to bottom in a kernel."""

import jupytext
import pytest
from nbclient import NotebookClient
from repo_paths import ROOT

NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.py"))


def test_there_are_the_two_notebooks():
    assert [p.name for p in NOTEBOOKS] == ["growth_law_property_test.py", "verify_a_theorem.py"]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_the_notebook_executes(path, tmp_path):
    notebook = jupytext.read(path)
    NotebookClient(notebook, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    errors = [output for cell in notebook.cells if cell.cell_type == "code"
              for output in cell.get("outputs", []) if output.get("output_type") == "error"]
    assert not errors
