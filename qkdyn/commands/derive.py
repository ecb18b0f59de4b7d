"""``qkdyn derive``: the reduced ODE, conserved quantities and asymptotic laws of one parameterisation."""
from __future__ import annotations

import argparse
import json

HELP = "print the derived reduced ODE, conserved quantities and late-time laws (text, LaTeX or JSON)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from qkdyn.configflags import any_case
    from qkdyn.settingflags import add_spec_flag
    from qkdyn.theory.setting import ALL_PARAMS

    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--param", choices=ALL_PARAMS, type=any_case(ALL_PARAMS), metavar="P",
                       help=f"parameterisation: {', '.join(ALL_PARAMS)} (default: none; give --param or --spec)")
    add_spec_flag(which)
    parser.add_argument("--format", default="text", choices=("text", "latex", "json"))


def _render(value, printer):
    if isinstance(value, dict):
        return {str(k): _render(v, printer) for k, v in value.items()}
    if isinstance(value, list):
        return [_render(v, printer) for v in value]
    if isinstance(value, str):
        return value
    return printer(value)


def _text(record, indent=0) -> list[str]:
    lines = []
    pad = "  " * indent
    for key, value in record.items():
        if isinstance(value, dict):
            lines.append(f"{pad}{key}:")
            lines.extend(_text(value, indent + 1))
        elif isinstance(value, list):
            lines.append(f"{pad}{key}:")
            for item in value:
                lines.append(f"{pad}  - " + ", ".join(f"{k}={v}" for k, v in item.items()))
        else:
            lines.append(f"{pad}{key}: {value}")
    return lines


def run(args: argparse.Namespace) -> int:
    import sympy as sp

    from qkdyn.theory.summary import summarise, summarise_spec

    if args.spec is not None:
        from qkdyn.theory.spec import load

        record = summarise_spec(load(args.spec))
    else:
        record = summarise(args.param)
    if args.format == "json":
        print(json.dumps(_render(record, sp.sstr), indent=2))
    elif args.format == "latex":
        rendered = _render(record, sp.latex)
        print("\n".join(_text(rendered)))
    else:
        print("\n".join(_text(_render(record, sp.sstr))))
    return 0
