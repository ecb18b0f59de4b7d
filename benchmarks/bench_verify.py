"""The main job: ``qkdyn verify`` with its defaults in a fresh process (what ``make verify`` runs once
installed), against issue 22's one-minute target and issue 43's 100 CPU-s target.

Measured: the process's wall time (import included) and the wall time verify prints itself; its CPU
time (user + system, the process and its study workers) and CPU / wall, the cores it keeps busy (2 on
the 2-core machine is the most it can use), with where verify says the CPU went (per study: its runs in the
workers, its judging and drawing in the driver); and whether its verdicts equal those of the committed
figures/report.json (the same evidence), and its report.md the committed one byte for byte (the report
holds no timing; on another machine round-off-level numbers, 1e-15 means, may differ).
"""
import re
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from qkdyn.jsonio import read_json

TARGET_S = 60.0
TARGET_CPU_S = 100.0
#: verify's line for each study: its runs' CPU seconds and its judging and drawing's (qkdyn.verify)
STUDY_CPU = re.compile(r"\] (\S+): .* runs computed, .*\(CPU: runs ([0-9.]+) s, judged and drawn ([0-9.]+) s\)")
COMMITTED = Path(__file__).resolve().parents[1] / "figures"


def verdicts(report: Path) -> dict:
    return {claim["id"]: claim["verdict"] for claim in read_json(report)["claims"]}


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def main() -> None:
    with tempfile.TemporaryDirectory() as out:
        code = f"import sys; from qkdyn.cli import main; sys.exit(main(['verify', '--figures', {out!r}, '--no-progress']))"
        cpu, start = children_cpu(), time.perf_counter()
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
        wall, cpu = time.perf_counter() - start, children_cpu() - cpu
        if done.returncode != 0:
            print(f"qkdyn verify failed (exit {done.returncode}): {done.stderr.strip().splitlines()[-1:]}")
            return
        printed = re.search(r"wall time ([0-9.]+) s", done.stderr)
        studies = [f"{name} {runs} + {drawn}" for name, runs, drawn in STUDY_CPU.findall(done.stderr)]
        ours, committed = verdicts(Path(out) / "report.json"), verdicts(COMMITTED / "report.json")
        changed = sorted(c for c in ours.keys() | committed.keys() if ours.get(c) != committed.get(c))
        same = (Path(out) / "report.md").read_bytes() == (COMMITTED / "report.md").read_bytes()
    own = f"{float(printed.group(1)):.1f} s as verify prints it" if printed else "verify printed no wall time"
    print(f"qkdyn verify (defaults, fresh process): wall {wall:.1f} s ({own}), CPU {cpu:.1f} s, "
          f"CPU / wall {cpu / wall:.2f} cores ({'under' if wall < TARGET_S else 'OVER'} the {TARGET_S:.0f} s target; "
          f"CPU {'under' if cpu < TARGET_CPU_S else 'OVER'} the {TARGET_CPU_S:.0f} s target; CPU-s per study, runs + "
          f"judged and drawn: {', '.join(studies) or 'not printed'}); "
          f"the {len(ours)} verdicts {'equal' if not changed else 'DIFFER from'} the committed figures/report.json's"
          f"{'' if not changed else ' (' + ', '.join(changed) + ')'}; report.md "
          f"{'identical to the committed one' if same else 'differs from the committed one in some numbers'}")


if __name__ == "__main__":
    main()
