"""Config dataclasses to command-line flags, with each field's domain enforced at parse time.

A field declares its domain in its metadata::

    lr: float = dataclasses.field(default=1e-3, metadata=positive("learning rate"))

:func:`add_config_flags` adds one flag per declared field (``--lr``; ``flag=`` overrides the spelling)
whose argparse ``type`` parses *and* checks the value, so ``--lr nan`` is one line and exit 2 before
``run`` starts. :func:`config_from_args` builds the config from the parsed flags (nested configs are
built whole by their own call) and :func:`check_config` re-checks every field of a built config,
raising :class:`~qkdyn.errors.InputError` with the field's name (rendered as its flag).

Numbers are doubles and 64-bit integers: a literal that underflows to 0 or to a subnormal double
(``1e-400``, ``1e-310``) is refused (it would silently freeze or distort what it scales), and so is
an integer of magnitude 2^63 or more; a seed must lie in [0, 2^32) (:func:`seed`), the range every
generator the project seeds accepts (NumPy's legacy one is the narrowest).

A field that only matters for some choices of the others declares so with :func:`only_when`; a flag
given explicitly for a configuration it does not apply to (``--momentum`` with ``--optimizer adamw``)
is an error (:func:`check_applicable`), not silently ignored.

Domains: :func:`positive_int`, :func:`non_negative_int`, :func:`int_at_least`, :func:`integer`,
:func:`seed`, :func:`positive` (finite > 0), :func:`non_negative` (finite >= 0), :func:`at_least`,
:func:`finite`, :func:`probability` ([0, 1]),
:func:`fraction` (an interval of [0, 1] with chosen open ends), :func:`choice`, :func:`choice_list`,
:func:`positive_int_list`, :func:`text`,
:func:`existing_path`, :func:`device`, :func:`flag` (a boolean).

For flags that are not config fields: :func:`parser` (a domain as an argparse ``type``), :func:`any_case`
(choices matched without case: ``--param caco`` is ``CACO``) and :class:`ExistingFile` (an input file,
checked when parsed, before any heavy import).
"""
from __future__ import annotations

import argparse
import dataclasses
import math
import os
import re
import stat
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from qkdyn.errors import InputError, flag_name

KEY = "qkdyn_domain"


@dataclasses.dataclass(frozen=True)
class Domain:
    """What a field accepts: ``convert`` turns text into a value, ``problem`` names what is wrong
    with a value (None if nothing)."""

    convert: Callable[[str], Any]
    problem: Callable[[Any], str | None]
    help: str = ""
    flag: str | None = None  # the flag's spelling if not --field-name
    choices: tuple = ()
    boolean: bool = False
    words: str = ""  # what ``convert`` expects, for its error message
    applies: Callable[[Any], bool] | None = None  # given the whole config: does this field matter? (only_when)
    applies_words: str = ""  # when it does, e.g. "with --optimizer sgd"

    def parse(self, text: str) -> Any:
        """argparse ``type``: the value of ``text``, or an ArgumentTypeError naming what is wrong."""
        try:
            value = self.convert(text)
        except (ValueError, TypeError):
            raise argparse.ArgumentTypeError(f"not {self.words or _article(self.convert)}: {text!r}") from None
        problem = self.problem(value)
        if problem:
            raise argparse.ArgumentTypeError(f"{problem}, got {text!r}")
        return value

    def metadata(self) -> dict:
        return {KEY: self}


#: integers are 64-bit: |n| < 2^63
INT_BOUND = 1 << 63
#: seeds lie in [0, 2^32): NumPy's legacy generator, the narrowest the project seeds, takes no more
SEED_BOUND = 1 << 32


def parse_float(text: str) -> float:
    """``float(text)``, refusing a literal that underflows to 0 or to a subnormal double."""
    value = float(text)
    if value != 0 and abs(value) < sys.float_info.min:
        raise argparse.ArgumentTypeError(f"underflows to a subnormal double (below {sys.float_info.min:.3g}): {text!r}")
    if value == 0 and re.search(r"[1-9]", re.split(r"[eE]", text.strip())[0]):
        raise argparse.ArgumentTypeError(f"underflows to 0 in double precision: {text!r}")
    return value


def _article(convert) -> str:
    return {int: "an integer", parse_float: "a number"}.get(convert, "valid")


def _number(kind, test: Callable[[float], bool], words: str):
    def problem(value):
        if isinstance(value, bool) or not isinstance(value, (int, float) if kind is float else int):
            return f"must be {words}"
        if kind is float and not math.isfinite(value):
            return f"must be {words}"
        if kind is float and value != 0 and abs(value) < sys.float_info.min:
            return f"must be {words} (not subnormal)"
        if kind is int and abs(value) >= INT_BOUND:
            return f"must be {words} below 2^63"
        return None if test(value) else f"must be {words}"
    return problem


def _meta(domain: Domain, help: str, flag: str | None) -> dict:
    return dataclasses.replace(domain, help=help, flag=flag).metadata()


def positive_int(help: str = "", flag: str | None = None) -> dict:
    return _meta(Domain(int, _number(int, lambda v: v >= 1, "a positive integer")), help, flag)


def non_negative_int(help: str = "", flag: str | None = None) -> dict:
    return _meta(Domain(int, _number(int, lambda v: v >= 0, "a non-negative integer")), help, flag)


def int_at_least(low: int, help: str = "", flag: str | None = None) -> dict:
    """An integer >= ``low``."""
    return _meta(Domain(int, _number(int, lambda v: v >= low, f"an integer >= {low}")), help, flag)


def integer(help: str = "", flag: str | None = None) -> dict:
    return _meta(Domain(int, _number(int, lambda v: True, "an integer")), help, flag)


def seed(help: str = "", flag: str | None = None) -> dict:
    """A generator seed: an integer in [0, 2^32)."""
    return _meta(Domain(int, _number(int, lambda v: 0 <= v < SEED_BOUND, "an integer in [0, 2^32)")), help, flag)


def positive(help: str = "", flag: str | None = None) -> dict:
    return _meta(Domain(parse_float, _number(float, lambda v: v > 0, "a positive finite number")), help, flag)


def non_negative(help: str = "", flag: str | None = None) -> dict:
    return _meta(Domain(parse_float, _number(float, lambda v: v >= 0, "a finite number >= 0")), help, flag)


def at_least(low: float, help: str = "", flag: str | None = None) -> dict:
    """A finite number >= ``low``."""
    return _meta(Domain(parse_float, _number(float, lambda v: v >= low, f"a finite number >= {low:g}")), help, flag)


def finite(help: str = "", flag: str | None = None) -> dict:
    return _meta(Domain(parse_float, _number(float, lambda v: True, "a finite number")), help, flag)


def probability(help: str = "", flag: str | None = None) -> dict:
    return fraction(help, flag)


def fraction(help: str = "", flag: str | None = None, low_open: bool = False, high_open: bool = False) -> dict:
    """A number in [0, 1], with the ends open as asked."""
    words = f"in {'(' if low_open else '['}0, 1{')' if high_open else ']'}"
    test = lambda v: (v > 0 if low_open else v >= 0) and (v < 1 if high_open else v <= 1)  # noqa: E731
    return _meta(Domain(parse_float, _number(float, test, words)), help, flag)


def choice(options, help: str = "", flag: str | None = None) -> dict:
    options = tuple(options)
    problem = lambda v: None if v in options else f"must be one of {', '.join(options)}"  # noqa: E731
    return _meta(Domain(str, problem, choices=options), help, flag)


def _items(text: str) -> tuple[str, ...]:
    return tuple(item.strip() for item in text.split(",") if item.strip())


def choice_list(options, help: str = "", flag: str | None = None, empty_ok: bool = True) -> dict:
    """Comma-separated names from ``options`` (a tuple; ``""`` is the empty tuple if ``empty_ok``)."""
    options = tuple(options)

    def problem(value):
        if not isinstance(value, tuple) or any(v not in options for v in value) or not (value or empty_ok):
            return f"must be a comma-separated {'' if empty_ok else 'non-empty '}subset of {', '.join(options)}"
        return None
    return _meta(Domain(_items, problem), help, flag)


def int_list(low: int, help: str = "", flag: str | None = None, empty_ok: bool = True) -> dict:
    """Comma-separated integers >= ``low`` (``""`` is the empty tuple, refused unless ``empty_ok``)."""
    words = {0: "non-negative", 1: "positive"}.get(low, f">= {low}")

    def problem(value):
        ok = isinstance(value, tuple) and all(isinstance(v, int) and not isinstance(v, bool) and v >= low for v in value)
        return None if ok and (value or empty_ok) else f"must be {_some(empty_ok)}comma-separated {words} integers"
    return _meta(Domain(lambda text: tuple(int(v) for v in _items(text)), problem,
                        words="comma-separated integers"), help, flag)


def _some(empty_ok: bool) -> str:
    return "" if empty_ok else "one or more "


def positive_int_list(help: str = "", flag: str | None = None) -> dict:
    """Comma-separated positive integers (``""`` is the empty tuple)."""
    return int_list(1, help, flag)


def number_list(above: float, help: str = "", flag: str | None = None, at_most: float = math.inf,
                increasing: bool = False, empty_ok: bool = True) -> dict:
    """Comma-separated finite numbers, each greater than ``above`` and at most ``at_most`` (``""`` is the
    empty tuple, refused unless ``empty_ok``); with ``increasing``, strictly increasing."""
    bounds = f"in ({above:g}, {at_most:g}]" if math.isfinite(at_most) else f"above {above:g}"
    words = f"{'increasing ' if increasing else ''}numbers {bounds}"

    def problem(value):
        ok = isinstance(value, tuple) and all(isinstance(v, float) and math.isfinite(v) and above < v <= at_most
                                              for v in value)
        ok = ok and not (increasing and any(a >= b for a, b in zip(value[:-1], value[1:], strict=True)))
        return None if ok and (value or empty_ok) else f"must be {_some(empty_ok)}comma-separated {words}"
    return _meta(Domain(lambda text: tuple(parse_float(v) for v in _items(text)), problem,
                        words="comma-separated numbers"), help, flag)


def only_when(metadata: dict, applies: Callable[[Any], bool], words: str) -> dict:
    """The same domain, for a field that matters only when ``applies(config)``; ``words`` says when
    ("with --optimizer sgd"). Giving its flag otherwise is an error (:func:`check_applicable`)."""
    return dataclasses.replace(metadata[KEY], applies=applies, applies_words=words).metadata()


def optional(metadata: dict) -> dict:
    """The same domain with None allowed: "not given", a default decided elsewhere (e.g. the preset's)."""
    domain = metadata[KEY]
    return dataclasses.replace(domain, problem=lambda v: None if v is None else domain.problem(v)).metadata()


def text(help: str = "", flag: str | None = None) -> dict:
    return _meta(Domain(str, lambda v: None if isinstance(v, str) else "must be text"), help, flag)


def existing_path(help: str = "", flag: str | None = None, empty_ok: bool = True) -> dict:
    """A path that exists (file or directory); ``""`` means "none given" when ``empty_ok``."""
    def problem(value):
        if not isinstance(value, str):
            return "must be a path"
        if value == "" and empty_ok:
            return None
        return None if Path(value).exists() else "must be an existing file or directory"
    return _meta(Domain(str, problem), help, flag)


_DEVICE = re.compile(r"^(auto|cpu|mps|cuda(:\d+)?)$")


def device_problem(value) -> str | None:
    """Syntax at parse time; for ``cuda`` also that CUDA is available (imports torch only then)."""
    if not isinstance(value, str) or not _DEVICE.match(value):
        return "must be auto, cpu, mps, cuda or cuda:N"
    if value.startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            return "names CUDA, which is not available here"
        if ":" in value and int(value.split(":")[1]) >= torch.cuda.device_count():
            return f"names a GPU that does not exist ({torch.cuda.device_count()} visible)"
    if value == "mps":
        import torch

        if not torch.backends.mps.is_available():
            return "names MPS, which is not available here"
    return None


def device(help: str = "", flag: str | None = None) -> dict:
    return _meta(Domain(str, device_problem), help, flag)


def flag(help: str = "", flag: str | None = None) -> dict:
    return _meta(Domain(bool, lambda v: None if isinstance(v, bool) else "must be true or false", boolean=True),
                 help, flag)


def parser(metadata: dict) -> Callable[[str], Any]:
    """The argparse ``type`` of a domain, for flags that are not config fields: ``parser(positive())``."""
    return metadata[KEY].parse


def any_case(choices) -> Callable[[str], str]:
    """argparse ``type`` for a flag with ``choices``: text equal to a choice but for case is that choice
    (``caco`` -> ``CACO``); other text is left for argparse's check of the choices (and its "did you mean")."""
    by_fold = {str(c).casefold(): c for c in choices}

    def name(text: str) -> str:
        return by_fold.get(text.casefold(), text)
    return name


def file_problem(path: str, suffixes: tuple[str, ...] = ()) -> str | None:
    """What makes ``path`` unusable as an input file (a suffix outside ``suffixes``, missing, unreadable,
    not a regular file), in the words of :func:`qkdyn.theory.spec.load`; None if nothing. Only ``stat``:
    nothing is opened, so a FIFO cannot block."""
    name = Path(path).name
    if suffixes and Path(path).suffix not in suffixes:
        return f"must be a {' or '.join(suffixes)} file, got {name!r}"
    try:
        mode = os.stat(path).st_mode
    except OSError as exc:
        return f"cannot be read: {path}: {exc.strerror or exc}"
    if not stat.S_ISREG(mode):
        from qkdyn.inputs import special_kind

        return f"path {path} is {special_kind(path) or 'a directory'}; give a regular file"
    if not os.access(path, os.R_OK):
        return f"cannot be read: {path}: Permission denied"
    return None


class ExistingFile(argparse.Action):
    """Store an input file's path, checked (:func:`file_problem`) as the flag is parsed, so a missing or
    misspelt file is one line (``--spec cannot be read: ...``) before the command imports anything heavy.
    ``suffixes`` (an ``add_argument`` keyword): the file types accepted."""

    def __init__(self, *args, suffixes: tuple[str, ...] = (), **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.suffixes = tuple(suffixes)

    def __call__(self, parser, namespace, values, option_string=None):
        problem = file_problem(values, self.suffixes)
        if problem:
            parser.error(f"{option_string} {problem}")
        setattr(namespace, self.dest, values)


def domain_of(field: dataclasses.Field) -> Domain | None:
    return field.metadata.get(KEY)


def flag_of(field: dataclasses.Field) -> str:
    domain = domain_of(field)
    return (domain.flag if domain and domain.flag else "--" + flag_name(field.name))


def add_config_flags(parser, cls, *, defaults: dict | None = None, skip=(),
                     unset: Callable[[str], str] | None = None) -> None:
    """One flag per field of dataclass ``cls`` that declares a domain (``skip``: names left out).

    The default is the field's own or ``defaults[name]`` if given; with ``unset``, every flag defaults
    to None (the value is filled in later, from the chosen budget or preset) and ``unset(name)`` says in
    the help what it is then, e.g. each budget's value (:func:`budget_defaults`)."""
    defaults = defaults or {}
    for field in dataclasses.fields(cls):
        domain = domain_of(field)
        if domain is None or field.name in skip:
            continue
        if unset is not None:
            default = None
        elif field.name in defaults:
            default = defaults[field.name]
        else:
            default = field.default if field.default is not dataclasses.MISSING else field.default_factory()
        add_flag(parser, field.name, domain, default, flag_of(field), none_means=unset(field.name) if unset else "")


def shown(value) -> str:
    """A flag value as the help shows it: a tuple comma-separated, None as "none", empty text as ``""``."""
    if value is None:
        return "none"
    if isinstance(value, tuple):
        value = ",".join(map(shown, value))
    if isinstance(value, float):
        return f"{value:g}"
    return str(value) or '""'


def grouped(texts: Mapping[str, str], preposition: str) -> str:
    """``texts`` (name -> a value's text) grouped by text, in order, each with the names that have it:
    ``250 at quick; 1200 at cpu, gpu and paper`` (``preposition`` "at")."""
    groups: dict[str, list[str]] = {}
    for name, text in texts.items():
        groups.setdefault(text, []).append(name)
    return "; ".join(f"{text} {preposition} {_words(names)}" for text, names in groups.items())


def by_budget(texts: Mapping[str, str]) -> str:
    """``texts`` (budget -> a value's text) as :func:`grouped` with "at", or ``5 at every budget`` when
    all agree."""
    values = set(texts.values())
    return f"{values.pop()} at every budget" if len(values) == 1 else grouped(texts, "at")


def _words(names: list[str]) -> str:
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


def budget_defaults(budgets: Mapping[str, Any], name: str) -> str:
    """The value of field ``name`` at each budget (``budgets``: budget -> config), as the help shows it
    (:func:`by_budget`)."""
    return by_budget({budget: shown(getattr(cfg, name)) for budget, cfg in budgets.items()})


def add_flag(parser, dest: str, domain: Domain | dict, default, flag: str | None = None,
             none_means: str = "") -> None:
    """One flag for field ``dest`` of the given domain (a :class:`Domain` or its metadata dict);
    ``none_means`` says in the help what a default of None stands for."""
    domain = domain[KEY] if isinstance(domain, dict) else domain
    flag = flag or "--" + flag_name(dest)
    if default is None:
        shown_default = f" (default: {none_means})" if none_means else ""
    else:
        shown_default = f" (default {shown(default)})"
    help = domain.help + shown_default
    if domain.boolean:
        parser.add_argument(flag, dest=dest, action=_GivenBoolean, default=default, help=help)
    else:
        metavar = "{" + ",".join(domain.choices) + "}" if domain.choices else dest.upper()
        parser.add_argument(flag, dest=dest, type=domain.parse, default=default, metavar=metavar,
                            action=_Given, help=help)


GIVEN = "_given_flags"  # the namespace attribute holding the dests of the flags given explicitly


def _record(namespace, dest: str) -> None:
    setattr(namespace, GIVEN, getattr(namespace, GIVEN, frozenset()) | {dest})


class _Given(argparse._StoreAction):
    """``store``, remembering that the flag was given (for :func:`check_applicable`)."""

    def __call__(self, parser, namespace, values, option_string=None):
        super().__call__(parser, namespace, values, option_string)
        _record(namespace, self.dest)


class _GivenBoolean(argparse.BooleanOptionalAction):
    def __call__(self, parser, namespace, values, option_string=None):
        super().__call__(parser, namespace, values, option_string)
        _record(namespace, self.dest)


def check_applicable(cfg, args: argparse.Namespace) -> None:
    """InputError for a flag given explicitly (in ``args``) for a field of ``cfg`` that does not apply
    to it (its :func:`only_when` test is false)."""
    given = getattr(args, GIVEN, frozenset())
    for field in dataclasses.fields(cfg):
        domain = domain_of(field)
        if domain is not None and domain.applies is not None and field.name in given and not domain.applies(cfg):
            raise InputError(f"applies only {domain.applies_words}; leave it out", flag_of(field)[2:].replace("-", "_"))


def values_from_args(cls, args: argparse.Namespace, **fixed) -> dict:
    """The flag values of ``cls``'s declared fields present in ``args`` (None dropped), then ``fixed``."""
    values = {f.name: getattr(args, f.name) for f in dataclasses.fields(cls)
              if domain_of(f) is not None and getattr(args, f.name, None) is not None}
    return {**values, **fixed}


def config_from_args(cls, args: argparse.Namespace, **fixed):
    """``cls`` built from the parsed flags (``fixed`` values win, e.g. whole nested configs), checked."""
    cfg = cls(**values_from_args(cls, args, **fixed))
    check_config(cfg)
    check_applicable(cfg, args)
    return cfg


def check_config(cfg) -> None:
    """InputError (naming the field) for the first field of ``cfg`` outside its declared domain."""
    for field in dataclasses.fields(cfg):
        domain = domain_of(field)
        if domain is not None:
            value = getattr(cfg, field.name)
            problem = domain.problem(value)
            if problem:
                raise InputError(f"{problem}, got {value!r}", flag_of(field)[2:].replace("-", "_"))
