"""benchmarks/bench_coupled.py measures each process of its whole-process comparison alone: the peak
memory it reports is that child's, neither the largest of all children so far nor the resident size of the
(torch-sized) process that started it, and a failed child is an error rather than a number (the timings themselves are the benchmark's, not a test's)."""
import subprocess
import sys

import pytest

from benchmarks.bench_coupled import child_usage

MIB = 1 << 20


def _touching(mib: int) -> list[str]:
    return [sys.executable, "-c", f"b = bytearray({mib * MIB}); b[::4096] = b'x' * len(b[::4096])"]


def test_peak_memory_is_each_childs_own():
    big = child_usage(_touching(200))
    small = child_usage(_touching(1))  # after the big one: RUSAGE_CHILDREN's maxrss would still say 200 MiB
    assert big[2] - small[2] > 150 * MIB
    assert small[2] < 100 * MIB  # this test's process, which imported torch, is larger
    assert all(x >= 0 for x in (*big[:2], *small[:2]))


def test_a_failed_child_raises():
    with pytest.raises(subprocess.CalledProcessError):
        child_usage([sys.executable, "-c", "raise SystemExit(3)"])
