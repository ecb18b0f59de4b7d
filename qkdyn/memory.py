"""Refuse sizes whose memory need is known in advance and exceeds what the machine has.

What a new allocation can get is the smaller of the machine's available memory (``MemAvailable``)
and the headroom under the address-space limit (``ulimit -v``, ``RLIMIT_AS``, less the address
space already mapped, ``VmSize``). Both are read from the standard library (``resource``) and
``/proc``, so no dependency (psutil) is needed for two numbers.

The estimates are deliberately rough upper bounds of the dominant terms (stated at each call site);
they exist to turn "--d-model 1000000" or "--points 1e12" into one clear line instead of an
out-of-memory kill, not to budget memory precisely.
"""
from __future__ import annotations

import os

from qkdyn.errors import InputError


def available_bytes() -> int:
    """Memory available to a new allocation: min(machine, address-space headroom)."""
    return min(machine_bytes(), address_space_headroom())


def address_space_headroom() -> int:
    """``RLIMIT_AS`` less the mapped address space (``VmSize``); unlimited (or unknown) is 2^62."""
    try:
        import resource

        limit = resource.getrlimit(resource.RLIMIT_AS)[0]
    except (ImportError, OSError, ValueError):
        return 1 << 62
    if limit == resource.RLIM_INFINITY or limit < 0:
        return 1 << 62
    mapped = _proc_kib("/proc/self/status", "VmSize:")
    return max(0, limit - (mapped or 0))


def _proc_kib(path: str, key: str) -> int | None:
    """The ``key`` line of a /proc file (``NAME: N kB``) in bytes; None if absent or unreadable."""
    try:
        with open(path) as fh:
            for line in fh:
                if line.startswith(key):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def machine_bytes() -> int:
    """``MemAvailable`` of /proc/meminfo, else physical memory."""
    available = _proc_kib("/proc/meminfo", "MemAvailable:")
    if available is not None:
        return available
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (OSError, ValueError, AttributeError):
        return 1 << 62  # unknown: do not refuse


def check_memory(need: float, what: str, field: str | None = None) -> None:
    """InputError if ``need`` bytes (an estimate) exceed the available memory."""
    have = available_bytes()
    if need > have:
        raise InputError(f"asks for about {_size(need)} of memory ({what}); {_size(have)} is available", field) \
            if field else InputError(f"{what} needs about {_size(need)} of memory; {_size(have)} is available")


def _size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if n < 1024 or unit == "PiB":
            return f"{n:.3g} {unit}"
        n /= 1024
    return f"{n:.3g} PiB"
