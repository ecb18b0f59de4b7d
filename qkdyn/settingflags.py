"""The setting flags of docs/setting.md section 4, spelled the same for every subcommand."""
from __future__ import annotations

import argparse
import dataclasses
import sys

from qkdyn import configflags
from qkdyn.theory.setting import ALL_PARAMS, Setting, factorized

_DEFAULTS = Setting()
_HELP = {
    "classes": "K, number of classes", "distinct": "D, distinct tokens per class",
    "commons": "N, common tokens", "m": "distinct tokens in a context",
    "n": "common tokens in a context", "scale": "s, score scale",
    "eta_qk": "learning rate of the QK circuit", "eta_ov": "learning rate of the OV circuit",
    "qk0": "initial attention logit gap qk", "ov0": "initial output margin ov",
    "b": "scale constant b of the authors' reduced form (--param paper)",
    "attn0": "initial attention on the distinct tokens, in (0, 1); sets qk instead of --qk0 (default: from --qk0)",
}


#: argparse types that parse and check one value (the domains of :mod:`qkdyn.configflags`)
finite_float = configflags.parser(configflags.finite())
positive_float = configflags.parser(configflags.positive())
non_negative_float = configflags.parser(configflags.non_negative())
positive_int = configflags.parser(configflags.positive_int())
non_negative_int = configflags.parser(configflags.non_negative_int())
seed = configflags.parser(configflags.seed())

#: the shortest ``--t-max``: every solver (LSODA, Radau, BDF, DOP853) resolves horizons down to about
#: 1e-140 and stalls below about 1e-150, where its step can get no smaller; 1e-100 keeps a wide margin
MIN_HORIZON = 1e-100
horizon = configflags.parser(configflags.at_least(MIN_HORIZON))


def add_setting_flags(parser: argparse.ArgumentParser, params=ALL_PARAMS, spec: bool = False) -> None:
    """The setting flags and --param; with ``spec``, --spec FILE (a circuit spec) instead of --param."""
    where = parser.add_mutually_exclusive_group(required=True) if spec else parser
    either = " (default: none; give --param or --spec)" if spec else ""
    where.add_argument("--param", required=not spec, choices=params, type=configflags.any_case(params), metavar="P",
                       help=f"parameterisation: {', '.join(params)}{either}")
    if spec:
        add_spec_flag(where)
    for field in dataclasses.fields(Setting):
        if field.name == "b" and "paper" not in params:
            continue  # the authors' scale constant exists only in their reduced form
        # parse-time: a number of the field's type; the domain itself is Setting's own check
        rate = " (0 freezes the circuit)" if field.name.startswith("eta_") else ""
        domain = (configflags.integer if field.type in ("int", int) else configflags.finite)(_HELP[field.name] + rate)
        configflags.add_flag(parser, field.name, domain, getattr(_DEFAULTS, field.name))


def add_spec_flag(parser) -> None:
    # the file is checked as the flag is parsed: a missing one is refused before sympy or numba is imported
    parser.add_argument("--spec", metavar="FILE", action=configflags.ExistingFile, suffixes=(".toml", ".json"),
                        help="a circuit spec as a .toml or .json file (the guide 'Derivation', section 6): its reduced "
                        "flow is derived from the model definition (default: none; give --spec or --param)")


def setting_from_args(args: argparse.Namespace) -> Setting:
    """Build (and so validate) the Setting named by the flags; bad values raise InputError."""
    return Setting(**{f.name: getattr(args, f.name, getattr(_DEFAULTS, f.name)) for f in dataclasses.fields(Setting)})


def warn_if_saddle(command: str, param: str, setting: Setting) -> None:
    """Warn (stderr) when a factorized circuit starts at 0: a saddle of the flow, it never moves."""
    for circuit, is_factorized, value in zip(("QK", "OV"), factorized(param), (setting.qk0, setting.ov0), strict=True):
        if is_factorized and value == 0:
            sys.stderr.write(f"qkdyn {command}: warning: factorized {circuit} circuit starts at 0, a saddle "
                             "of the flow: it will not move\n")
