"""The one exception type that means "the input is invalid" (a value outside its domain, a bad path).

It is a :class:`ValueError`, so library users catch it as they would any bad argument. ``field``
names the offending field (a :class:`~qkdyn.Setting` or config field) when there is one; the command
line prints it as its flag (``--eta-qk``) and exits with code 2. Everything else is a bug and keeps
its traceback.
"""
from __future__ import annotations


class InputError(ValueError):
    """Bad input: ``field`` (if any) has a value outside its domain, or a path is unusable.

    ``str(exc)`` reads ``"eta_qk must be ..."`` for Python users; :meth:`cli_message` reads
    ``"--eta-qk must be ..."`` for the command line.
    """

    def __init__(self, problem: str, field: str | None = None) -> None:
        super().__init__(problem if field is None else f"{field} {problem}")
        self.problem, self.field = problem, field

    def cli_message(self) -> str:
        return str(self) if self.field is None else f"--{flag_name(self.field)} {self.problem}"


def flag_name(field: str) -> str:
    """The command-line spelling of a field name: ``eta_qk`` -> ``eta-qk``."""
    return field.replace("_", "-")


def shown_value(value) -> str:
    """``repr(value)`` shortened to one readable line, as an error message quotes a bad value (a 4000-digit
    integer, a long string)."""
    try:
        text = repr(value)
    except ValueError:  # an integer beyond Python's string conversion limit
        return "an integer of more than 4300 digits"
    return text if len(text) <= 60 else text[:57] + "..."
