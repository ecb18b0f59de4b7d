"""numba's cache of the project's functions (qkdyn.theory.kernels.TreeCache), out of process, each test in a
private copy of the package tree: a damaged entry is discarded with one warning line and compiled again, a
read-only ``__pycache__`` writes nothing under the home folder, and a cache folder others can write is ignored.

The copy takes the shared tree's cache (``make install`` fills it), and the module's fixture fills whatever
it lacks (the integrator and CACO's kernels: 10-15 CPU-s once, where the shared tree was never warmed), so
each test loads the integrator from the cache and compiles at most one small kernel.
"""
import json
import os
import pickle
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import qkdyn.simulate
import qkdyn.theory

import qkdyn

pytestmark = pytest.mark.skipif(not hasattr(os, "geteuid"), reason="POSIX owners and modes")

#: a solve in the copy: ``FIRST_SOLVES.rent_seconds`` from argv (0: compiled at once, whatever the cache holds)
CHILD = """
import json, sys
import qkdyn
from qkdyn.simulate.coldstart import FIRST_SOLVES
from qkdyn.simulate.solve import solve
from qkdyn.theory.setting import Setting
FIRST_SOLVES.rent_seconds = float(sys.argv[1])
tr = solve(Setting(), "CACO", t_max=100.0, points=5, record_losses=(0.5,))
print(json.dumps({"package": qkdyn.__file__, "compiled": tr.stats["compiled"], "state": tr.state.tolist()}))
"""
GENERATED_CACHE = Path("qkdyn", "theory", "generated", "__pycache__", "numba")


def _copy_package(target: Path) -> None:
    """The package as installed (its top folder, ``theory`` and ``simulate``, which a solve imports), with
    every ``__pycache__`` (numba's cache included), under ``target/qkdyn``."""
    shutil.copytree(Path(qkdyn.__file__).parent, target / "qkdyn", ignore=shutil.ignore_patterns("*.tmp.*"))
    for package in (qkdyn.theory, qkdyn.simulate):
        shutil.copytree(Path(package.__file__).parent, target / "qkdyn" / package.__name__.split(".")[-1],
                        ignore=shutil.ignore_patterns("*.tmp.*"))


def _unprivileged() -> list[str]:
    """A command prefix under which permission bits bind (root: without the capabilities that override
    them, by ``setpriv``); the test is skipped where that is not possible."""
    if os.geteuid() != 0:
        return []
    prefix = ["setpriv", "--bounding-set=-dac_override,-dac_read_search,-fowner"]
    if shutil.which("setpriv") is None or subprocess.run([*prefix, "true"]).returncode != 0:
        pytest.skip("running as root without setpriv: a read-only folder would not be read-only")
    return prefix


def run_solve(tree: Path, rent: float, prefix: tuple = ()) -> tuple[dict, list[str]]:
    """Solve in the copy ``tree`` (a fresh process, an empty home folder, no NUMBA_CACHE_DIR): the solve
    (JSON) and the stderr lines. Asserts a clean exit and that nothing was written under the home folder."""
    home = tree / "home"
    home.mkdir(exist_ok=True)
    env = {key: value for key, value in os.environ.items() if key not in ("NUMBA_CACHE_DIR", "XDG_CACHE_HOME")}
    env.update(PYTHONPATH=str(tree), HOME=str(home))
    done = subprocess.run([*prefix, sys.executable, "-c", CHILD, str(rent)], cwd=tree, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert not list(home.rglob("*")), "numba wrote under the home folder"
    result = json.loads(done.stdout)
    assert result["package"].startswith(str(tree))  # the copy ran, not the shared tree
    return result, done.stderr.splitlines()


@pytest.fixture(scope="module")
def warm_tree(tmp_path_factory):
    """A private copy of the package whose cache holds the integrator and CACO's kernels, and the
    compiled solve's state there."""
    tree = tmp_path_factory.mktemp("warm")
    _copy_package(tree)
    reference, _ = run_solve(tree, rent=0.0)
    assert reference["compiled"]
    assert run_solve(tree, rent=0.0) == (reference, [])  # loaded from the cache: no compile, no warning
    return tree, reference["state"]


@pytest.fixture
def tree(warm_tree, tmp_path):
    """A copy of the warm copy, for one test to damage."""
    shutil.copytree(warm_tree[0] / "qkdyn", tmp_path / "qkdyn")
    return tmp_path


def _entry(tree: Path, suffix: str) -> Path:
    """The cache file of CACO's ``loss_kernel`` ending in ``suffix`` (``.nbi``, ``.nbc``)."""
    (path,) = (tree / GENERATED_CACHE).glob(f"CACO.loss_kernel-*{suffix}")
    return path


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[:100])


def _garbage(path: Path) -> None:
    path.write_bytes((b"\0garbage" * path.stat().st_size)[:path.stat().st_size])


@pytest.mark.parametrize("suffix, damage", [(".nbc", _truncate), (".nbc", _garbage), (".nbi", _truncate),
                                            (".nbi", _garbage)])
def test_a_damaged_entry_is_compiled_again_with_one_warning(warm_tree, tree, suffix, damage):
    damaged = _entry(tree, suffix)
    damage(damaged)
    result, err = run_solve(tree, rent=0.0)
    assert result["compiled"] and result["state"] == warm_tree[1]  # the compiled solve's numbers, to the bit
    assert len(err) == 1 and err[0].startswith("qkdyn: warning: numba's cache file ") and damaged.name in err[0]
    assert "discarding it" in err[0]
    assert run_solve(tree, rent=0.0) == (result, [])  # saved again: the next process loads it


def test_a_read_only_pycache_compiles_in_memory_and_writes_nothing_elsewhere(warm_tree, tree):
    """numba's fallback (a per-user folder under the home folder) is never used: the kernel the cache
    lacks compiles in memory, said once, and the copy's cache is left as it was."""
    for path in (_entry(tree, ".nbi"), _entry(tree, ".nbc")):
        path.unlink()
    folders = [*tree.rglob("__pycache__"), *(path for path in tree.rglob("numba") if path.is_dir())]
    before = sorted(path.name for path in (tree / GENERATED_CACHE).iterdir())
    for folder in folders:
        folder.chmod(0o555)
    try:
        result, err = run_solve(tree, rent=0.0, prefix=tuple(_unprivileged()))
    finally:
        for folder in folders:
            folder.chmod(0o755)
    assert result["compiled"] and result["state"] == warm_tree[1]
    assert len(err) == 1 and str(tree / GENERATED_CACHE) in err[0] and "cannot be written" in err[0]
    assert sorted(path.name for path in (tree / GENERATED_CACHE).iterdir()) == before


class _Planted:
    """A pickle that creates the file ``marker`` when it is loaded."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_a_cache_folder_others_can_write_is_never_read(warm_tree, tree):
    """A folder writable by group or others could hold anyone's pickles: ignored (said once), so the
    cold start solves with SciPy, and a payload planted there never runs."""
    marker = tree / "ran"
    index = _entry(tree, ".nbi")
    index.write_bytes(pickle.dumps(_Planted(marker)))
    folder = tree / GENERATED_CACHE
    folder.chmod(folder.stat().st_mode | stat.S_IWGRP)
    result, err = run_solve(tree, rent=10.0)
    assert not marker.exists()
    assert not result["compiled"]  # the cache counts as empty: SciPy's DOP853, the same numbers to the tolerance
    np.testing.assert_allclose(result["state"], warm_tree[1], rtol=1e-8, atol=1e-12)
    assert len(err) == 1 and str(folder) in err[0] and "writable by group or others" in err[0]


def test_two_saves_at_once_into_one_folder_keep_both_entries(tmp_path, monkeypatch):
    """numba's save reads the index, adds its entry and writes the index back: a second process saving in
    between would write back an index without the first's entry. Here the first save pauses after reading the
    index while a second one saves; with the folder's lock the second waits, and both entries stay."""
    import threading
    import time

    from qkdyn.theory.kernels import _CheckedFile

    def cache_file() -> _CheckedFile:
        return _CheckedFile(str(tmp_path), "f-1.py", ("stamp", 1))

    first, second, read = cache_file(), cache_file(), threading.Event()
    load_index = first._load_index

    def read_then_pause():
        index = load_index()
        read.set()
        time.sleep(0.5)  # the second save runs now, unless the lock holds it
        return index

    monkeypatch.setattr(first, "_load_index", read_then_pause)
    saving = threading.Thread(target=first.save, args=(("sig", "a"), b"first"))
    saving.start()
    assert read.wait(10)
    second.save(("sig", "b"), b"second")
    saving.join()
    assert cache_file().load(("sig", "a")) == b"first" and cache_file().load(("sig", "b")) == b"second"
