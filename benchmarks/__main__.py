"""Run every benchmark: ``python -m benchmarks`` (``make bench``).

Each ``benchmarks/bench_*.py`` module defines ``main()`` which prints its measurements, always as a
ratio against the plain approach measured in the same run.
"""
import importlib
import pkgutil
import sys
from pathlib import Path


def main() -> int:
    here = Path(__file__).parent
    names = sorted(m.name for m in pkgutil.iter_modules([str(here)]) if m.name.startswith("bench_"))
    only = sys.argv[1:]
    for name in names:
        if only and not any(o in name for o in only):
            continue
        print(f"== {name}")
        importlib.import_module(f"benchmarks.{name}").main()
    return 0


if __name__ == "__main__":
    sys.exit(main())
