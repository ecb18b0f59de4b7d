"""The setting flags of DESIGN.md section 4, spelled the same for every subcommand."""
from __future__ import annotations

import argparse
import dataclasses
import math
import sys

from qkdyn.errors import InputError, flag_name
from qkdyn.theory.setting import ALL_PARAMS, Setting

_DEFAULTS = Setting()
_HELP = {
    "classes": "K, number of classes", "distinct": "D, distinct tokens per class",
    "commons": "N, common tokens", "m": "distinct tokens in a context",
    "n": "common tokens in a context", "scale": "s, score scale",
    "eta_qk": "learning rate of the QK circuit", "eta_ov": "learning rate of the OV circuit",
    "qk0": "initial attention logit gap qk", "ov0": "initial output margin ov",
    "b": "scale constant b of the authors' reduced form (--param paper)",
    "attn0": "initial attention on the distinct tokens, in (0, 1); sets qk instead of --qk0",
}


def finite_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}")
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"not a finite number: {text!r}")
    return value


def add_setting_flags(parser: argparse.ArgumentParser, params=ALL_PARAMS) -> None:
    parser.add_argument("--param", required=True, choices=params, metavar="P",
                        help=f"parameterisation: {', '.join(params)}")
    for field in dataclasses.fields(Setting):
        if field.name == "b" and "paper" not in params:
            continue  # the authors' scale constant exists only in their reduced form
        kind = int if field.type in ("int", int) else finite_float
        default = getattr(_DEFAULTS, field.name)
        shown = f" (default {default})" if default is not None else ""
        rate = " (0 freezes the circuit)" if field.name.startswith("eta_") else ""
        parser.add_argument(f"--{flag_name(field.name)}", dest=field.name, type=kind, default=default,
                            help=f"{_HELP[field.name]}{rate}{shown}")


def setting_from_args(args: argparse.Namespace) -> Setting:
    """Build (and so validate) the Setting named by the flags; bad values raise InputError."""
    return Setting(**{f.name: getattr(args, f.name, getattr(_DEFAULTS, f.name)) for f in dataclasses.fields(Setting)})


def warn_if_saddle(command: str, param: str, setting: Setting) -> None:
    """Warn (stderr) when a factorized circuit starts at 0: a saddle of the flow, it never moves."""
    for circuit, index, value in (("QK", 0, setting.qk0), ("OV", 2, setting.ov0)):
        if param[index:index + 1] == "F" and value == 0:
            sys.stderr.write(f"qkdyn {command}: warning: factorized {circuit} circuit starts at 0, a saddle "
                             "of the flow: it will not move\n")


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}")
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text}")
    return value


def require_positive(value: float, flag: str) -> float:
    if not (math.isfinite(value) and value > 0):
        raise InputError(f"{flag} must be a positive finite number, got {value!r}")
    return value
