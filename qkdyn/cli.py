"""The ``qkdyn`` console command.

Each subcommand lives in its own module, which defines ``HELP`` (one line), ``add_arguments(parser)``
and ``run(args) -> int``. Command modules import heavy libraries (torch, matplotlib, scipy) inside
``run`` only, so ``qkdyn --help`` stays fast.
"""
from __future__ import annotations

import argparse
import importlib
import os
import sys

from qkdyn.errors import InputError

#: subcommand name -> module implementing it
COMMANDS: dict[str, str] = {
    "derive": "qkdyn.commands.derive",
    "solve": "qkdyn.commands.solve",
    "sharpness": "qkdyn.commands.sharpness",
    "verify": "qkdyn.commands.verify",
    "sgd": "qkdyn.empirical.synthetic.cli",
    "data": "qkdyn.empirical.data.cli",
    "train-circuits": "qkdyn.empirical.circuits.cli_train",
    "compare-circuits": "qkdyn.empirical.circuits.cli_compare",
    "lm": "qkdyn.empirical.coupled.cli_lm",
    "mqar": "qkdyn.empirical.coupled.cli_mqar",
    "compare-coupled": "qkdyn.empirical.coupled.cli_compare",
}


class _OneLineErrorParser(argparse.ArgumentParser):
    """argparse, but a usage error is one line on stderr and exit code 2."""

    def error(self, message: str) -> None:  # noqa: D401 - argparse API
        sys.stderr.write(f"{self.prog}: error: {message}\n")
        sys.exit(2)


def build_parser() -> argparse.ArgumentParser:
    parser = _OneLineErrorParser(
        prog="qkdyn", description="Derive, simulate and test the training dynamics of attention "
        "(query-key vs output-value circuits). See README.md and figures/report.md.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_OneLineErrorParser)
    for name, module_name in COMMANDS.items():
        module = importlib.import_module(module_name)
        p = sub.add_parser(name, help=module.HELP, description=module.HELP)
        module.add_arguments(p)
        p.set_defaults(_module=module)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args._module.run(args) or 0)
    except InputError as exc:
        sys.stderr.write(f"qkdyn {args.command}: error: {exc.cli_message()}\n")
        return 2
    except KeyboardInterrupt:
        sys.stderr.write("qkdyn: interrupted\n")
        return 130
    except BrokenPipeError:  # output piped into `head` etc.
        sys.stdout = open(os.devnull, "w")
        return 0


if __name__ == "__main__":
    sys.exit(main())
