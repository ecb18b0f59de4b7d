"""The library face of qkdyn: one installed namespace, a light `import qkdyn`, the public API, and
layers whose imports read one way (theory <- simulate <- empirical <- verify/commands)."""
import ast
import csv
import shutil
import subprocess
import sys
import venv
from pathlib import Path

import numpy as np
import pytest
from repo_paths import ROOT

import qkdyn
from qkdyn.cli import main

LIGHT_IMPORT = ("import sys, time; t = time.perf_counter(); import qkdyn; dt = time.perf_counter() - t; "
                "print(dt, *[m for m in ('torch', 'matplotlib') if m in sys.modules])")


def test_a_plain_install_holds_exactly_one_top_level_package(tmp_path):
    """Build the wheel from a copy of the sources, install it (no deps) into a fresh venv, look inside."""
    source = tmp_path / "src"
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(".venv", ".git", "build", "*.egg-info", "__pycache__",
                                                                 ".hypothesis", "figures", "runs", "*-cache"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
                    "-w", str(tmp_path / "dist"), str(source)], check=True, capture_output=True)
    fresh = tmp_path / "fresh"
    venv.EnvBuilder(with_pip=True).create(fresh)
    python = fresh / "bin" / "python"
    wheel = next((tmp_path / "dist").glob("qkdyn-*.whl"))
    subprocess.run([python, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index", str(wheel)], check=True,
                   capture_output=True)
    site = Path(subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               check=True, capture_output=True, text=True).stdout.strip())
    ours = {p.name for p in site.iterdir()} - {"pip", "setuptools", "_distutils_hack", "distutils-precedence.pth",
                                                "pkg_resources", "__pycache__"}
    ours = {name for name in ours if not name.startswith(("pip-", "setuptools-"))}
    assert ours == {"qkdyn", "qkdyn-0.1.0.dist-info"}
    assert {"theory", "simulate", "empirical", "commands"} <= {p.name for p in (site / "qkdyn").iterdir()}
    # data the code reads at run time is package data (the hand-checked Brown SVA items), not a test fixture
    assert (site / "qkdyn" / "empirical" / "circuits" / "brown_sva_handcheck.tsv").stat().st_size > 1000
    # qkdyn imports in an environment without numpy, sympy or torch: nothing heavy at import time
    out = subprocess.run([python, "-c", LIGHT_IMPORT], check=True, capture_output=True, text=True, cwd=tmp_path)
    assert out.stdout.split()[1:] == []


def test_import_qkdyn_is_light_and_fast():
    out = subprocess.run([sys.executable, "-c", LIGHT_IMPORT], check=True, capture_output=True, text=True,
                         cwd=ROOT).stdout.split()
    assert out[1:] == [], f"import qkdyn pulled in {out[1:]}"
    assert float(out[0]) < 1.0


def test_every_public_name_is_documented():
    for name in qkdyn.__all__:
        obj = getattr(qkdyn, name)
        assert (getattr(obj, "__doc__", None) or "").strip() or name == "PARAMS", name
    with pytest.raises(AttributeError):
        qkdyn.no_such_thing  # noqa: B018


def test_solve_equals_the_csv_of_the_same_cli_run(tmp_path, capsys):
    setting = qkdyn.Setting(classes=3, distinct=2, commons=5)
    tr = qkdyn.solve(setting, "CACO", t_max=1e6)
    out = tmp_path / "run.csv"
    assert main(["solve", "--param", "CACO", "--classes", "3", "--distinct", "2", "--commons", "5",
                 "--t-max", "1e6", "--out", str(out)]) == 0
    with open(out) as fh:
        rows = list(csv.DictReader(fh))
    for column in ("t", "qk", "ov", "attn", "loss"):
        np.testing.assert_array_equal(np.array([float(r[column]) for r in rows]), getattr(tr, column))
    tr.to_csv(tmp_path / "api.csv")
    assert (tmp_path / "api.csv").read_text() == out.read_text()


def test_derive_returns_sympy_objects_consistent_with_the_flow():
    d = qkdyn.derive("CACO")
    assert set(d.ode) == set(d.variables) and d.jacobian.shape == (len(d.variables),) * 2
    phi, psi = d.line
    assert {s.name for s in phi.free_symbols | psi.free_symbols} >= {"qk", "ov"}
    assert set(d.laws) == {"ov(t)", "qk(ov)"}


def test_gd_tracks_the_flow_and_writes_the_sgd_csv(tmp_path, capsys):
    setting = qkdyn.Setting()
    rec = qkdyn.gd(setting, "CACO", step=0.01, steps=200, points=5)
    tr = qkdyn.solve(setting, "CACO", t_max=float(rec.t[-1]), at=list(rec.t), points=1)
    np.testing.assert_allclose(rec.ov, tr.ov[np.searchsorted(tr.t, rec.t)], rtol=2e-3)
    out = tmp_path / "cli.csv"
    assert main(["sgd", "--param", "CACO", "--step", "0.01", "--steps", "200", "--points", "5", "--out", str(out)]) == 0
    rec.to_csv(tmp_path / "api.csv")
    assert (tmp_path / "api.csv").read_text() == out.read_text()
    with pytest.raises(ValueError):
        qkdyn.gd(setting, "CACO", step=-1.0, steps=10)


# --- layers: qkdyn.theory imports nothing above it, qkdyn.simulate nothing of empirical or the CLI,
# qkdyn.empirical nothing of the commands or the driver, and the transformer studies (circuits,
# coupled) nothing of the theory: they test the papers' claims on real models, not the reduced ODE ---

COMMAND_LAYER = ("qkdyn.commands", "qkdyn.cli", "qkdyn.verify", "qkdyn.executors", "qkdyn.settingflags")
LAYERS = {"theory": ROOT / "theory", "simulate": ROOT / "simulate", "empirical": ROOT / "empirical",
          "circuits": ROOT / "empirical" / "circuits", "coupled": ROOT / "empirical" / "coupled"}
FORBIDDEN = {
    "theory": ("qkdyn.simulate", "qkdyn.empirical", *COMMAND_LAYER),
    "simulate": ("qkdyn.empirical", *COMMAND_LAYER),
    "empirical": COMMAND_LAYER,
    "circuits": ("qkdyn.theory", "qkdyn.simulate", *COMMAND_LAYER),
    "coupled": ("qkdyn.theory", "qkdyn.simulate", *COMMAND_LAYER),
}


def imported_modules(path: Path) -> set[str]:
    """Every module a source file imports (absolute names), at any depth of the file."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def layer_violations(layer: str) -> list[str]:
    return [f"{path.relative_to(ROOT)} imports {name}" for path in sorted(LAYERS[layer].rglob("*.py"))
            for name in sorted(imported_modules(path))
            if any(name == bad or name.startswith(bad + ".") for bad in FORBIDDEN[layer])]


@pytest.mark.parametrize("layer", LAYERS)
def test_imports_read_one_way(layer):
    assert layer_violations(layer) == []


def test_the_layer_check_would_catch_a_violation(tmp_path, monkeypatch):
    bad = tmp_path / "theory"
    bad.mkdir()
    (bad / "oops.py").write_text("def f():\n    from qkdyn.simulate.solve import solve\n")
    monkeypatch.setitem(LAYERS, "theory", bad)
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    assert "theory/oops.py imports qkdyn.simulate.solve" in layer_violations("theory")
