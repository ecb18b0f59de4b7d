"""``qkdyn warm``: compile every form's kernels, the integrator and the closed form once, into the
package's own cache, so that the first ``solve`` or ``sharpness`` of later processes loads machine code
instead of compiling (what ``make install`` runs; a library user who installed with pip runs this
once). :mod:`qkdyn.simulate.warm` says what it compiles and where the code is kept."""
from __future__ import annotations

import argparse

HELP = "compile the numeric kernels once (what make install does), so later processes start fast"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """No flags: it compiles every form."""


def run(args: argparse.Namespace) -> int:
    import sys

    from qkdyn.simulate.warm import main

    sys.stderr.write("qkdyn: compiling the kernels of every form (a few minutes of CPU on a fresh install)...\n")
    return main()
