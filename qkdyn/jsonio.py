"""The one JSON reader: every JSON and JSON Lines file the project reads goes through here.

:func:`read_json` reads a regular file (never a device node or FIFO; :mod:`qkdyn.inputs`) of at most
``limit`` bytes, decodes UTF-8, parses it with the standard library and bounds its nesting to
``depth`` levels (a scalar has depth 0, ``[1]`` depth 1). :func:`loads` does the same for one text
(a line of ``metrics.jsonl``). Whatever is wrong (too large, not UTF-8, not JSON, nested so deep
that the parser would recurse without end) becomes one :class:`~qkdyn.errors.InputError` naming
the file, and the line for JSON Lines, with what to do about it (``hint``).

``NaN`` and ``Infinity`` are accepted: the project's own result files use them for undefined
statistics (a standard deviation of one seed). Whether a value is allowed is the caller's check.
"""
from __future__ import annotations

import json
import os
from typing import Any

from qkdyn.errors import InputError
from qkdyn.inputs import MAX_BYTES, read_text

#: deepest nesting accepted; the project's files nest at most ~8 levels (SQuAD)
MAX_DEPTH = 64


def depth_of(value: Any, limit: int = MAX_DEPTH) -> int:
    """Nesting depth of a parsed JSON value (iterative; stops counting once past ``limit``)."""
    deepest, stack = 0, [(value, 0)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, (dict, list)):
            level += 1
            deepest = max(deepest, level)
            if deepest > limit:
                return deepest
            stack.extend((child, level) for child in (item.values() if isinstance(item, dict) else item))
    return deepest


def _where(source: str, line: int | None) -> str:
    return source if line is None else f"{source}: line {line}"


def _fail(source: str, line: int | None, problem: str, hint: str) -> InputError:
    return InputError(f"{_where(source, line)} {problem}" + (f"; {hint}" if hint else ""))


def loads(text: str, source: str, line: int | None = None, depth: int = MAX_DEPTH, hint: str = "") -> Any:
    """The JSON value of ``text`` (from ``source``, line ``line``); damage is one InputError."""
    try:
        value = json.loads(text)
    except RecursionError:
        raise _fail(source, line, f"nests deeper than {depth} levels", hint) from None
    except json.JSONDecodeError as exc:
        raise _fail(source, line, f"is not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})",
                    hint) from None
    except ValueError as exc:  # e.g. an integer of more digits than Python converts
        raise _fail(source, line, f"is not valid JSON ({str(exc).splitlines()[0][:80]})", hint) from None
    if depth_of(value, depth) > depth:
        raise _fail(source, line, f"nests deeper than {depth} levels", hint)
    return value


def read_json(path: str | os.PathLike, hint: str = "", limit: int = MAX_BYTES, depth: int = MAX_DEPTH,
              what: str = "JSON") -> Any:
    """The JSON document in the regular file ``path`` (at most ``limit`` bytes, ``depth`` levels)."""
    return loads(read_text(path, limit, what), str(path), depth=depth, hint=hint)


def read_lines(path: str | os.PathLike, hint: str = "", limit: int = MAX_BYTES) -> list[tuple[int, str]]:
    """The non-blank lines of the JSON Lines file ``path`` as (line number, text), unparsed."""
    text = read_text(path, limit, "JSON Lines")
    return [(number, line) for number, line in enumerate(text.splitlines(), 1) if line.strip()]
