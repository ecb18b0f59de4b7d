"""Refuse sizes whose memory need is known in advance and exceeds what the machine has.

The estimates are deliberately rough upper bounds of the dominant terms (stated at each call site);
they exist to turn "--d-model 1000000" or "--points 1e12" into one clear line instead of an
out-of-memory kill, not to budget memory precisely.
"""
from __future__ import annotations

import os

from qkdyn.errors import InputError


def available_bytes() -> int:
    """Memory available to a new allocation: ``MemAvailable`` of /proc/meminfo, else physical memory."""
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
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
