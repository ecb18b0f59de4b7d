"""The ``qkdyn`` console command.

Each subcommand lives in its own module, which defines ``HELP`` (one line), ``add_arguments(parser)``
and ``run(args) -> int``. Command modules import heavy libraries (torch, matplotlib, scipy) inside
``run`` only, so ``qkdyn --help`` stays fast.
"""
from __future__ import annotations

import argparse
import errno
import importlib
import os
import signal
import sys
import threading
from typing import NoReturn

from qkdyn.errors import InputError

#: subcommand name -> module implementing it
COMMANDS: dict[str, str] = {
    "derive": "qkdyn.commands.derive",
    "solve": "qkdyn.commands.solve",
    "sharpness": "qkdyn.commands.sharpness",
    "verify": "qkdyn.commands.verify",
    "plan": "qkdyn.commands.plan",
    "run": "qkdyn.commands.run",
    "report": "qkdyn.commands.report",
    "sgd": "qkdyn.commands.sgd",
    "fixed-attention": "qkdyn.commands.fixed_attention",
    "data": "qkdyn.commands.data",
    "train-circuits": "qkdyn.commands.train_circuits",
    "compare-circuits": "qkdyn.commands.compare_circuits",
    "lm": "qkdyn.commands.lm",
    "mqar": "qkdyn.commands.mqar",
    "compare-coupled": "qkdyn.commands.compare_coupled",
    "warm": "qkdyn.commands.warm",
}


#: the end of ``qkdyn --help``: where to read more, naming only what a pip install has (the guides are
#: pages of the project's documentation, kept with its source; the package installs no docs of its own)
EPILOG = ("Each command's flags and defaults: qkdyn COMMAND --help. The Python API: help(qkdyn) in Python. "
          "The guides (The setting, Derivation, Papers, Python API, Command line) are pages of the project's "
          "documentation, kept with its source and not installed with the package; `pip show -v qkdyn` lists "
          "the addresses of the papers it is about.")


class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Every option's help ends with its default, unless the default is nothing (None, False) or the
    help already names it."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if action.default in (None, False, argparse.SUPPRESS) or "default" in text or not action.option_strings:
            return text
        return super()._get_help_string(action) or text


class _OneLineErrorParser(argparse.ArgumentParser):
    """argparse, but a usage error is one line on stderr and exit code 2, an unknown choice or flag
    names the nearest one ("did you mean"), an unknown flag is reported by the subcommand that was
    given it, and a flag is never matched by its prefix (so a removed ``--seed`` is an error, not
    silently ``--seeds``)."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("formatter_class", _HelpFormatter)
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def _check_value(self, action: argparse.Action, value) -> None:
        if action.choices is not None and value not in action.choices:
            from qkdyn.suggest import did_you_mean

            choices = ", ".join(map(repr, action.choices))
            raise argparse.ArgumentError(
                action, f"invalid choice: {value!r}{did_you_mean(value, action.choices)} (choose from {choices})")

    def parse_args(self, args=None, namespace=None):
        """argparse's, but what no parser recognized is reported by the chosen subcommand (``qkdyn solve:
        error: ...``), naming the first unknown flag and the subcommand's nearest one. An unknown long
        flag is reported before anything else is checked: ``qkdyn solve --tmax 1`` is answered with
        ``--t-max``, not with the required flags the typo left out."""
        args = sys.argv[1:] if args is None else list(args)
        parser, unknown = self._first_unknown_flag(args)
        if unknown is not None:
            parser.error(parser._unrecognized([unknown]))
        namespace, extras = self.parse_known_args(args, namespace)
        if extras:
            parser = self._subcommand(namespace) or self
            parser.error(parser._unrecognized(extras))
        return namespace

    def _subcommand(self, namespace: argparse.Namespace) -> argparse.ArgumentParser | None:
        """The subparser chosen in ``namespace`` (None: this parser has no subcommands)."""
        for action in self._actions:
            if isinstance(action, argparse._SubParsersAction):
                return action.choices.get(str(getattr(namespace, action.dest, None)))
        return None

    def _first_unknown_flag(self, args: list[str]) -> tuple[argparse.ArgumentParser, str | None]:
        """The parser that reads the flags of ``args`` (the innermost subcommand named, else this one) and
        the first long flag (``--name`` or ``--name=value``, before a ``--`` alone) it does not define."""
        parser: argparse.ArgumentParser = self
        for arg in args:
            if arg == "--":
                break
            commands = next((action.choices for action in parser._actions
                             if isinstance(action, argparse._SubParsersAction)), {})
            if arg in commands:
                parser = commands[arg]
            elif arg.startswith("--") and arg.split("=", 1)[0] not in parser._option_string_actions:
                return parser, arg
        return parser, None

    def _unrecognized(self, extras: list[str]) -> str:
        """The message for arguments this parser does not know: its first unknown flag and the nearest of
        its own (``--tmax`` -> ``--t-max``, ``--eta_qk`` -> ``--eta-qk``), else argparse's own words."""
        from qkdyn.suggest import closest

        flags = [arg for arg in extras if arg.startswith("-") and len(arg) > 1]
        if not flags:
            return f"unrecognized arguments: {' '.join(extras)}"
        unknown = flags[0].split("=", 1)[0]
        # compared without the dashes, which every long flag shares (else --bogus would be "near" --out)
        near = closest(unknown.lstrip("-"), [s[2:] for s in self._option_string_actions if s.startswith("--")])
        return f"unrecognized argument {unknown}" + (f" (did you mean --{near}?)" if near else "")

    def error(self, message: str) -> NoReturn:  # noqa: D401 - argparse API
        sys.stderr.write(f"{self.prog}: error: {message}\n")
        sys.exit(2)


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser of every subcommand; given ``command`` (one of :data:`COMMANDS`), that one's alone, the others
    named only: their modules, and what they import to define their flags, are not loaded (a command line that
    names its command starts without them)."""
    parser = _OneLineErrorParser(
        prog="qkdyn", description="Derive, simulate and test the training dynamics of attention "
        "(query-key vs output-value circuits).", epilog=EPILOG)
    parser.add_argument("--version", action=_VersionAction)
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_OneLineErrorParser)
    for name, module_name in COMMANDS.items():
        if command is not None and name != command:
            sub.add_parser(name)
            continue
        module = importlib.import_module(module_name)
        p = sub.add_parser(name, help=module.HELP, description=module.HELP)
        module.add_arguments(p)
        p.set_defaults(_module=module)
    return parser


class _VersionAction(argparse._VersionAction):
    """argparse's ``version`` action, the version looked up only when asked for (importlib.metadata costs
    every other command line tens of milliseconds)."""

    def __call__(self, parser, namespace, values, option_string=None) -> NoReturn:
        sys.stdout.write(f"{parser.prog} {_version()}\n")
        parser.exit()


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("qkdyn")
    except PackageNotFoundError:  # a source tree that is not installed
        return "unknown"


def reference() -> str:
    """The command-line reference (docs/cli.md): every subcommand's help, at a fixed width of 100."""
    saved = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = "100"
    try:
        parser = build_parser()
        subparsers = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        parts = ["# Command-line reference", "",
                 "Generated from the parser: `python -c \"from qkdyn.cli import reference; print(reference(), end='')\" "
                 "> docs/cli.md` (a test checks it is current).", "",
                 "Bad input gets one line on stderr (`qkdyn COMMAND: error: ...`) and exit code 2; outputs are "
                 "written atomically.", "", "```", parser.format_help().rstrip(), "```", ""]
        for name, sub in subparsers.choices.items():
            parts += [f"## qkdyn {name}", "", "```", sub.format_help().rstrip(), "```", ""]
        return "\n".join(parts)
    finally:
        if saved is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = saved


#: errno values of an exhausted resource (disk, quota, file-size limit, memory, descriptors): one line, exit 2
LIMITS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.ENOMEM, errno.EMFILE, errno.ENFILE, errno.EROFS})


def _limit_message(exc: BaseException) -> str | None:
    """The one-line report of a resource limit hit while running (None: not a limit, a bug)."""
    if isinstance(exc, OSError) and exc.errno in LIMITS:
        where = f": {exc.filename}" if exc.filename else ""
        return f"{exc.strerror or exc}{where}; the previous output, if any, is unchanged"
    if isinstance(exc, MemoryError) or (isinstance(exc, RuntimeError) and "can't allocate memory" in str(exc)):
        return "out of memory; ask for smaller sizes (the previous output, if any, is unchanged)"
    return None


def one_line(message: str) -> str:
    """``message`` as one line of plain text: line breaks become spaces and every other control
    character its escape (a name read from a data file cannot fake a line or clear the screen)."""
    text = " ".join(message.splitlines())
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text)


def _interrupt(signum, frame) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    """Run one command; the exit status is returned (a usage error: 2), never raised."""
    argv = sys.argv[1:] if argv is None else list(argv)
    named = next((arg for arg in argv if not arg.startswith("-")), None)  # the top level has flags alone
    try:
        args = build_parser(named if named in COMMANDS else None).parse_args(argv)
    except SystemExit as exc:  # --help (0) or a usage error (2, its line already written)
        return exc.code if isinstance(exc.code, int) else 2
    previous = None
    if threading.current_thread() is threading.main_thread():
        # SIGTERM unwinds like Ctrl-C, so atomic writes remove their temporary files; with SIGXFSZ
        # ignored, a write beyond the file-size limit (ulimit -f) fails with EFBIG instead of killing us
        previous = signal.signal(signal.SIGTERM, _interrupt), signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    try:
        return int(args._module.run(args) or 0)
    except InputError as exc:
        sys.stderr.write(f"qkdyn {args.command}: error: {one_line(exc.cli_message())}\n")
        return 2
    except KeyboardInterrupt:
        sys.stderr.write("qkdyn: interrupted\n")
        return 130
    except BrokenPipeError:  # output piped into `head` etc.
        sys.stdout = open(os.devnull, "w")
        return 0
    except (OSError, MemoryError, RuntimeError) as exc:
        message = _limit_message(exc)
        if message is None:
            raise
        sys.stderr.write(f"qkdyn {args.command}: error: {message}\n")
        return 2
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous[0])
            signal.signal(signal.SIGXFSZ, previous[1])


if __name__ == "__main__":
    sys.exit(main())
