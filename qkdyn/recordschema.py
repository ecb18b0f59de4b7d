"""The types and ranges of a run record's evidence, checked before any judge reads it.

A study declares its records' schema as data (:attr:`qkdyn.studies.Study.schema`): run-name pattern
(:mod:`fnmatch`) -> {field path: kind}. A field path is dot-separated keys of the data checked (a record's
``result``: ``final.dev.accuracy``; a key named in a path has no dot); ``*`` stands for every key of an object,
``[]`` after a key for every item of the list under it (``[][]`` for a list of lists), and ``?`` after a key makes
it optional (absent: nothing to check; a key without it must be there). A kind says what every value at the path must be:

* :class:`Number`: a JSON number (never a boolean) in ``[low, high]``, integral where ``integer``, finite
  unless ``finite`` is False (then NaN, "not measured", passes, and an infinity inside the range);
* :class:`Text` (a string, one of ``choices`` when given), :class:`Flag` (a boolean);
* :class:`Items`: a list, of the length the run's config gives where ``length`` names config keys (the
  product of their lengths, a number counting as itself).

:func:`check` applies a schema to one record: the first value that does not fit is one InputError naming the
record's file, the field and the value (``r.json: evidence.runs[3].loss is -1.0, not a number >= 0; ...``).
Nothing in a record is run or imported: a schema is data, and a record is only compared with it.
"""
from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Iterator, Mapping
from typing import Any

from qkdyn.errors import InputError, shown_value


@dataclasses.dataclass(frozen=True)
class Number:
    """A JSON number in ``[low, high]`` (see the module docstring)."""

    low: float = -math.inf
    high: float = math.inf
    integer: bool = False
    finite: bool = True

    def refuses(self, value, params: Mapping) -> bool:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return True
        if isinstance(value, float):  # an int is exact, and may be too large for a float
            if math.isnan(value):
                return self.finite
            if math.isinf(value) and self.finite or self.integer and math.isfinite(value) and not value.is_integer():
                return True
        return not self.low <= value <= self.high

    def expected(self, params: Mapping) -> str:
        what = "an integer" if self.integer else "a number" if self.finite else "a number (or NaN)"
        if self.low > -math.inf and self.high < math.inf:
            return f"{what} in [{self.low:g}, {self.high:g}]"
        if self.low > -math.inf:
            return f"{what} >= {self.low:g}"
        return f"{what} <= {self.high:g}" if self.high < math.inf else what


@dataclasses.dataclass(frozen=True)
class Text:
    """A string, one of ``choices`` when they are given."""

    choices: tuple[str, ...] = ()

    def refuses(self, value, params: Mapping) -> bool:
        return not isinstance(value, str) or bool(self.choices) and value not in self.choices

    def expected(self, params: Mapping) -> str:
        return f"one of {', '.join(map(repr, self.choices))}" if self.choices else "a string"


@dataclasses.dataclass(frozen=True)
class Flag:
    """A boolean."""

    def refuses(self, value, params: Mapping) -> bool:
        return not isinstance(value, bool)

    def expected(self, params: Mapping) -> str:
        return "a boolean"


@dataclasses.dataclass(frozen=True)
class Items:
    """A list; with ``length``, of the product of the lengths of those config keys (a number counts as itself)."""

    length: tuple[str, ...] = ()

    def size(self, params: Mapping) -> int | None:
        if not self.length:
            return None
        return math.prod(len(params[key]) if isinstance(params[key], list) else int(params[key]) for key in self.length)

    def refuses(self, value, params: Mapping) -> bool:
        size = self.size(params)
        return not isinstance(value, list) or size is not None and len(value) != size

    def expected(self, params: Mapping) -> str:
        size = self.size(params)
        return "a list" if size is None else f"a list of {size} items (config {' x '.join(self.length)})"


Kind = Number | Text | Flag | Items

#: a cross-entropy (nats): finite and >= 0
LOSS = Number(0)
#: a perplexity: exp of a cross-entropy, finite and >= 1
PERPLEXITY = Number(1)
#: a share (recall, accuracy, attention weight, probability): in [0, 1]
FRACTION = Number(0, 1)
#: a count (steps, examples, parameters): an integer >= 0
COUNT = Number(0, integer=True)
#: a seed: an integer
SEED = Number(integer=True)
#: a size (time, magnitude, rate, distance): finite and >= 0
SIZE = Number(0)
#: any finite number
FINITE = Number()
#: a time, a duration or a size a run may leave unmeasured (NaN): >= 0 otherwise
SIZE_OR_NAN = Number(0, finite=False)

#: the fields every trainer's run record has (:class:`qkdyn.runs.RunRecord`; the circuits and coupled studies')
RUN_RECORD: Mapping[str, Kind] = {"trainer": Text(), "steps": COUNT, "parameters": COUNT, "train_seconds.*": SIZE_OR_NAN}

#: a path segment: a key (or ``*``), ``?`` when optional, then one ``[]`` per list level
_SEGMENT = re.compile(r"(\*|[^.\[\]?*]+)(\??)((?:\[\])*)")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class _Refused(Exception):
    """A value that does not fit: the message's ``PATH is VALUE, not EXPECTED``."""


def _parse(path: str) -> list[tuple[str, bool, int]]:
    """``path`` as (key, optional, list levels) segments (a ValueError for a malformed schema: a bug)."""
    segments = []
    for part in path.split("."):
        match = _SEGMENT.fullmatch(part)
        if not match:
            raise ValueError(f"malformed schema path {path!r} at {part!r}")
        segments.append((match[1], bool(match[2]), len(match[3]) // 2))
    return segments


def _join(at: str, key: str) -> str:
    """The path ``at`` extended by ``key`` (a key that is not a plain name shown quoted, control characters escaped)."""
    if _NAME.fullmatch(key):
        return f"{at}.{key}" if at else key
    return f"{at}[{key[:60]!r}]"


def _shown(value) -> str:
    """``value`` as a message shows it: short, one line."""
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return f"a list of {len(value)} items"
    return shown_value(value)


def _elements(at: str, value, depth: int) -> Iterator[tuple[str, Any]]:
    if depth == 0:
        yield at, value
        return
    if not isinstance(value, list):
        raise _Refused(f"{at} is {_shown(value)}, not a list")
    for index, item in enumerate(value):
        yield from _elements(f"{at}[{index}]", item, depth - 1)


def _members(value, segments: list[tuple[str, bool, int]], at: str = "") -> Iterator[tuple[str, Any]]:
    """(path, value) of every value of ``value`` at ``segments``; _Refused where a container is missing or of
    another type."""
    if not segments:
        yield at, value
        return
    (key, optional, depth), rest = segments[0], segments[1:]
    if not isinstance(value, dict):
        raise _Refused(f"{at} is {_shown(value)}, not an object")
    if key == "*":
        found = [(_join(at, k), v) for k, v in value.items()]
    elif key in value:
        found = [(_join(at, key), value[key])]
    elif optional:
        return
    else:
        raise _Refused(f"{_join(at, key)} is missing")
    for path, member in found:
        for item_path, item in _elements(path, member, depth):
            yield from _members(item, rest, item_path)


def check(schema: Mapping[str, Kind], result: dict, params: Mapping, where: str, hint: str) -> None:
    """InputError (one line: ``where``, the field, its value, what it must be, then ``hint``) unless every value
    of ``result`` at each of ``schema``'s paths is of its kind; ``params`` is the run's config (:class:`Items`)."""
    try:
        for path, kind in schema.items():
            for at, value in _members(result, _parse(path)):
                if kind.refuses(value, params):
                    raise _Refused(f"{at} is {_shown(value)}, not {kind.expected(params)}")
    except _Refused as refused:
        raise InputError(f"{where}: {refused}; {hint}") from None
