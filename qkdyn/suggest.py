""""Did you mean": the nearest known names to a mistyped one (:func:`difflib.get_close_matches`,
the standard library's similarity ratio, so no hand-written edit distance). Names are compared
without case and with ``_`` read as ``-`` (``caco`` is nearest ``CACO``, ``--eta_qk`` is ``--eta-qk``)."""
from __future__ import annotations

import difflib
from collections.abc import Iterable


def _key(name) -> str:
    return str(name).casefold().replace("_", "-")


def closest(value: str, choices: Iterable[str]) -> str | None:
    """The one of ``choices`` closest to ``value``, or None when none is close."""
    by_key: dict[str, str] = {}
    for choice in choices:
        by_key.setdefault(_key(choice), str(choice))
    close = difflib.get_close_matches(_key(value), list(by_key), n=1, cutoff=0.6)
    return by_key[close[0]] if close else None


def did_you_mean(value: str, choices: Iterable[str]) -> str:
    """' (did you mean X?)' for the closest of ``choices`` to ``value``, or '' when none is close."""
    close = closest(value, choices)
    return f" (did you mean {close!r}?)" if close else ""


def unknown_choice(what: str, value: str, choices: Iterable[str]) -> str:
    """One line: the unknown ``value``, the nearest choice, and the choices."""
    choices = list(choices)
    return f"unknown {what} {value!r}{did_you_mean(value, choices)}; choose from {', '.join(map(str, choices))}"
