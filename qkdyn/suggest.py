""""Did you mean": the nearest known names to a mistyped one (:func:`difflib.get_close_matches`,
the standard library's similarity ratio, so no hand-written edit distance)."""
from __future__ import annotations

import difflib
from typing import Iterable


def did_you_mean(value: str, choices: Iterable[str]) -> str:
    """' (did you mean X?)' for the closest of ``choices`` to ``value``, or '' when none is close."""
    close = difflib.get_close_matches(str(value), [str(c) for c in choices], n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def unknown_choice(what: str, value: str, choices: Iterable[str]) -> str:
    """One line: the unknown ``value``, the nearest choice, and the choices."""
    choices = list(choices)
    return f"unknown {what} {value!r}{did_you_mean(value, choices)}; choose from {', '.join(map(str, choices))}"
