"""A fresh process with an empty numba cache never waits silently (issue 43, item 5): before any compilation
longer than a few CPU-seconds it prints a line on stderr (``qkdyn: compiling ...``).

Each case runs in its own process with ``NUMBA_CACHE_DIR`` set to a private empty folder (the project's
cache, :class:`qkdyn.theory.kernels.TreeCache`, then reads and writes only there), and this test watches
the child's CPU time (``/proc``): the child passes when it prints a ``qkdyn:`` line on stderr before it has
used :data:`SILENT_CPU_SECONDS` (it is then stopped: the compilation itself is not waited for), or when it
exits within that budget (nothing long was compiled). It fails when it spends that budget silently: an
import (about 1-2 CPU-s) and whatever it compiles before saying so.
"""
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads a process's CPU time in /proc")

#: CPU seconds a fresh process may spend (import included) before it says that it compiles
SILENT_CPU_SECONDS = 6.0
_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100

CHILD = """
import sys
from qkdyn.simulate.coldstart import FIRST_SOLVES
from qkdyn.theory.setting import Setting
verb = sys.argv[1]
if verb == "solve":  # a plain first solve: SciPy's DOP853 until compiling pays (qkdyn.simulate.coldstart)
    from qkdyn import solve
    solve(Setting(), "CACO", t_max=1e15, points=200)
elif verb == "solve-compiled":  # the rent paid at once: the integrator compiles on this first solve
    from qkdyn import solve
    FIRST_SOLVES.rent_seconds = 0.0
    solve(Setting(), "FAFO", t_max=1e15, points=200)
elif verb == "sweep-compiled":
    from qkdyn import solve
    FIRST_SOLVES.rent_seconds = 0.0
    solve([Setting(), Setting(eta_ov=2.0)], "CACO", t_max=1e15, points=200)
elif verb == "sharpness":  # a plain first matched-loss call: the closed form's code as plain Python
    from qkdyn import sharpness
    sharpness(Setting(), "FAFO", rho=[0.1, 1.0], loss=1e-3)
elif verb == "sharpness-compiled":  # the closed form's rent paid at once: it compiles on this first call
    from qkdyn import sharpness
    from qkdyn.simulate.coldstart import FIRST_CLOSED_FORMS
    FIRST_CLOSED_FORMS.rent_seconds = 0.0
    sharpness(Setting(), "FAFO", rho=[0.1, 1.0], loss=1e-3)
print("done")
"""


def _cpu_seconds(pid: int) -> float:
    """utime + stime of process ``pid`` (all its threads), in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICKS


def first_note(verb: str, cache: Path, to_the_end: bool = False) -> tuple[str | None, float, int | None]:
    """Run the case ``verb`` in a fresh process whose numba cache is the empty folder ``cache``: (its first
    ``qkdyn:`` stderr line or None, the CPU seconds it had used when that line came or when it exited or was
    stopped, its exit status where it exited on its own, else None). ``to_the_end``: the CPU seconds when it
    exits (or is stopped at the budget), the line notwithstanding."""
    env = {**os.environ, "NUMBA_CACHE_DIR": str(cache)}
    child = subprocess.Popen([sys.executable, "-c", CHILD, verb], env=env, stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, text=True)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(line for line in child.stderr if line.startswith("qkdyn:")),
                              daemon=True)
    reader.start()
    cpu, deadline = 0.0, time.monotonic() + 600
    try:
        while child.poll() is None and (to_the_end or not lines) and time.monotonic() < deadline:
            try:
                cpu = _cpu_seconds(child.pid)
            except (FileNotFoundError, ProcessLookupError):
                break
            if cpu > SILENT_CPU_SECONDS:
                break
            time.sleep(0.05)
        exited = child.poll()
    finally:
        if child.poll() is None:
            child.kill()
        child.wait()
        reader.join(timeout=10)
    return (lines[0] if lines else None), cpu, exited


@pytest.mark.parametrize("verb", ["solve-compiled", "sweep-compiled", "sharpness-compiled"])
def test_a_first_call_that_compiles_says_so_first(verb, tmp_path):
    cache = tmp_path / "numba"
    cache.mkdir(mode=0o700)
    note, cpu, exited = first_note(verb, cache)
    assert note is not None, (f"{verb}: {cpu:.1f} CPU-s in a fresh process with an empty numba cache without a "
                              f"line on stderr ({'still running' if exited is None else 'it exited'})")
    assert note.startswith("qkdyn: compiling "), note
    assert cpu <= SILENT_CPU_SECONDS


def test_a_plain_first_solve_compiles_nothing_long(tmp_path):
    """With the rent unpaid the first solve runs SciPy's DOP853: it ends within the budget, silently."""
    cache = tmp_path / "numba"
    cache.mkdir(mode=0o700)
    note, cpu, exited = first_note("solve", cache)
    assert exited == 0 and note is None, (note, cpu, exited)
    assert cpu <= SILENT_CPU_SECONDS


def test_a_plain_first_sharpness_says_so_and_compiles_nothing_long(tmp_path):
    """With the closed form's rent unpaid the first sharpness runs its code as plain Python: said first, and
    done within the budget."""
    cache = tmp_path / "numba"
    cache.mkdir(mode=0o700)
    note, cpu, exited = first_note("sharpness", cache, to_the_end=True)
    assert exited == 0, (note, cpu, exited)
    assert note is not None and note.startswith("qkdyn: numba's cache lacks the compiled closed form"), note
    assert cpu <= SILENT_CPU_SECONDS
