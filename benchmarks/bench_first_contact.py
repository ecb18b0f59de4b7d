"""A new user's first minutes (issue 44): the README's quick start, and a second process's ``derive("FAFO")``,
each in a fresh process, against plain Python measured in the same run.

* Quick start: the ``python`` blocks of README.md's "Quick start" section, run in order as one script
  (``python -u``: each line reaches the pipe when printed, as on a terminal) in an empty folder. Timed:
  seconds from the process's start to its first line of output and to its exit, and its CPU seconds (user
  + system) by each (by the first line: from Linux's /proc, NaN elsewhere), against
  ``python -u -c "import numpy; print(...)"`` (the least a numerical script pays before it prints).
  Targets: first line within 2 s, exit within 60 s, on a quiet 2-core machine.
* ``derive("FAFO")`` in a second process: with an empty derive cache (``QKDYN_CACHE``, a new folder) one
  process derives the form (timed, for information) and fills the cache; then each round times a fresh
  process that reads it (``import qkdyn; qkdyn.derive("FAFO")``) against ``python -c "import sympy"``
  (what reading a result made of sympy objects cannot avoid). The reading process reports whether it
  derived (a derivation module imported): the number is only the cache's where it did not. Target: 1 s.

Each figure is the median of :data:`ROUNDS` interleaved rounds. The wall times move with the machine's load,
so the load averages at start and end are printed beside them; the CPU seconds and the ratios against the
baselines move far less.
"""
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"
ROUNDS = 3
FIRST_PRINT_TARGET_S, TOTAL_TARGET_S, DERIVE_TARGET_S = 2.0, 60.0, 1.0
#: the baselines: what plain Python pays before its first line (numpy), and before any sympy result exists
NUMPY_BASELINE = "import numpy; print(numpy.__version__)"
SYMPY_BASELINE = "import sympy; print(sympy.__version__)"
#: a second process's derive; prints whether it derived (the derivation modules are imported only to derive)
DERIVE_PROBE = ("import sys, qkdyn; d = qkdyn.derive('FAFO'); "
                "print('derived' if 'qkdyn.theory.asymptotics' in sys.modules else 'read', len(d.ode))")


def quick_start(readme: Path = README) -> str:
    """The python blocks of the README's "Quick start" section (the heading starting so, up to the next heading
    of its level or above), joined in order; empty where there is none."""
    section = re.search(r"^## Quick start.*?$(.*?)(?=^#{1,2} |\Z)", readme.read_text(), re.MULTILINE | re.DOTALL)
    if section is None:
        return ""
    return "\n".join(re.findall(r"^```python\n(.*?)^```", section.group(1), re.MULTILINE | re.DOTALL))


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _cpu_so_far(pid: int) -> float:
    """The CPU seconds (user + system) the running process ``pid`` has spent, from Linux's /proc (NaN elsewhere):
    on a loaded machine, the share of the wall time that is the process's own work."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime: fields 14, 15


def timed(code: str, cwd: str, env: dict | None = None) -> dict:
    """Run ``python -u -c code`` in ``cwd``: seconds to its first line of output (``first``; its CPU seconds
    by then: ``first_cpu``) and to its exit (``total``), its CPU seconds (``cpu``), its output (``out``) and its
    exit status (``rc``)."""
    cpu, start = _children_cpu(), time.perf_counter()
    with subprocess.Popen([sys.executable, "-u", "-c", code], cwd=cwd, env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True) as proc:
        assert proc.stdout is not None and proc.stderr is not None
        first_line = proc.stdout.readline()
        first, first_cpu = time.perf_counter() - start, _cpu_so_far(proc.pid)
        out, err = proc.communicate()
    total = time.perf_counter() - start
    nan = float("nan")
    return {"first": first if first_line else nan, "first_cpu": first_cpu if first_line else nan, "total": total,
            "cpu": _children_cpu() - cpu, "out": first_line + out, "err": err, "rc": proc.returncode}


def _median(runs: list[dict], key: str) -> float:
    return float(statistics.median(run[key] for run in runs))


def _rounds(runs: list[dict], key: str) -> str:
    return ", ".join(f"{run[key]:.2f}" for run in runs)


def _failed(name: str, run: dict) -> bool:
    if run["rc"] == 0:
        return False
    print(f"{name} failed (exit {run['rc']}): {run['err'].strip().splitlines()[-1:]}")
    return True


def _load() -> str:
    return "load average " + ", ".join(f"{x:.2f}" for x in os.getloadavg()) + f" on {os.cpu_count()} CPUs"


def bench_quick_start() -> None:
    code = quick_start()
    if not code:
        print(f"quick start: {README.name} has no python block under a 'Quick start' heading; nothing timed")
        return
    runs: list[dict] = []
    baselines: list[dict] = []
    for _ in range(ROUNDS):
        with tempfile.TemporaryDirectory() as folder:  # what the quick start writes (a figure) lands here
            runs.append(timed(code, folder))
            baselines.append(timed(NUMPY_BASELINE, folder))
        if _failed("quick start", runs[-1]) or _failed("numpy baseline", baselines[-1]):
            return
    first, first_cpu, total, cpu = (_median(runs, key) for key in ("first", "first_cpu", "total", "cpu"))
    plain_first, plain_first_cpu = _median(baselines, "first"), _median(baselines, "first_cpu")
    plain_cpu = _median(baselines, "cpu")
    meets = first <= FIRST_PRINT_TARGET_S and total < TOTAL_TARGET_S
    print(f"README quick start ({len(code.splitlines())} lines), fresh process, median of {ROUNDS} interleaved rounds: "
          f"first line {first:.2f} s ({first_cpu:.2f} CPU-s; rounds {_rounds(runs, 'first')} s), exit {total:.2f} s "
          f"({cpu:.2f} CPU-s)")
    print(f"  plain python `import numpy; print(...)`: first line {plain_first:.2f} s ({plain_first_cpu:.2f} CPU-s), "
          f"exit {plain_cpu:.2f} CPU-s; ratio quick start / plain: first line {first / plain_first:.1f}x wall, "
          f"{first_cpu / plain_first_cpu:.1f}x CPU; CPU to exit {cpu / plain_cpu:.1f}x")
    print(f"  target (first line <= {FIRST_PRINT_TARGET_S:g} s, exit < {TOTAL_TARGET_S:g} s on a quiet 2-core machine): "
          f"{'met' if meets else 'missed'} here ({_load()})")


def bench_second_derive() -> None:
    with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, "QKDYN_CACHE": cache}
        fill = timed(DERIVE_PROBE, cache, env)
        if _failed("derive('FAFO') with an empty cache", fill):
            return
        runs: list[dict] = []
        baselines: list[dict] = []
        for _ in range(ROUNDS):
            runs.append(timed(DERIVE_PROBE, cache, env))
            baselines.append(timed(SYMPY_BASELINE, cache, env))
            if _failed("derive('FAFO') from the cache", runs[-1]) or _failed("sympy baseline", baselines[-1]):
                return
    how = sorted({run["out"].split()[0] for run in runs})
    total, cpu = _median(runs, "total"), _median(runs, "cpu")
    plain, plain_cpu = _median(baselines, "total"), _median(baselines, "cpu")
    print(f"derive('FAFO') in a second process (the first, deriving into an empty cache: {fill['total']:.1f} s, "
          f"{fill['cpu']:.1f} CPU-s), median of {ROUNDS} interleaved rounds: {total:.2f} s "
          f"(rounds {_rounds(runs, 'total')}), {cpu:.2f} CPU-s; the second process "
          f"{' and '.join(how)} the result")
    print(f"  plain python `import sympy`: {plain:.2f} s, {plain_cpu:.2f} CPU-s; ratio derive / plain: "
          f"{total / plain:.2f}x wall, {cpu / plain_cpu:.2f}x CPU")
    meets = total < DERIVE_TARGET_S and how == ["read"]
    print(f"  target (under {DERIVE_TARGET_S:g} s, read from the cache): {'met' if meets else 'missed'} here ({_load()})")


def main() -> None:
    print(_load())
    bench_quick_start()
    bench_second_derive()


if __name__ == "__main__":
    main()
