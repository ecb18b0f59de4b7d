"""Rewrite the README's verdict table from the committed reports, so no verdict is ever copied by hand.

    python scripts/readme_verdicts.py            # rewrite the block of README.md
    python scripts/readme_verdicts.py --check    # exit 1 (and say so) when the block is stale

The block is the text between ``<!-- verdicts:begin -->`` and ``<!-- verdicts:end -->``. It holds one
table per report that exists: ``figures/report.json`` (``qkdyn verify``; ``make verify`` runs this script
right after it) and, where they are committed, ``figures/circuits/report.json`` (``qkdyn
compare-circuits``) and ``figures/coupled/report.json`` (``qkdyn compare-coupled``). A row is a claim's
id, its verdict and its statement shortened (asides in parentheses dropped, cut at a word); claims
that differ only in a rate multiplier (``brown-sva QK x10``, ``x30``, ``x100``) share one row, their
verdicts in the order of the multipliers ("holds (each)" where they agree). Nothing but ids, verdicts
and statements is read: the evidence and every number stay in the reports, which the table links.
tests/project/test_readme.py fails when README.md's block is not what this script writes from the
committed reports.
"""
from __future__ import annotations

import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
BEGIN = "<!-- verdicts:begin -->"
END = "<!-- verdicts:end -->"

#: (report.json, the report a reader opens, what produced it), in the order of the tables
REPORTS = (
    ("figures/report.json", "figures/report.md", "`qkdyn verify`: the theory and the synthetic experiments"),
    ("figures/circuits/report.json", "figures/circuits/report.md",
     "`qkdyn compare-circuits`: paper A on real text, CPU scale"),
    ("figures/coupled/report.json", "figures/coupled/report.md",
     "`qkdyn compare-coupled`: paper B's coupled query-key dynamics, CPU scale"),
)
#: the longest shortened statement, in characters (the README stays under 10 KB)
LIMIT = 72

_ASIDE = re.compile(r"(?<=\s)\((?:[^()]|\([^()]*\))*\)(?![\^\w])")  # "(balanced factors)", not "(log t)^2"
_MULTIPLIER = re.compile(r"\bx(\d+)\b")


def shorten(statement: str, limit: int = LIMIT) -> str:
    """The statement without its asides in parentheses, cut at a word before ``limit`` characters."""
    text = _ASIDE.sub("", statement)
    text = re.sub(r"\s+", " ", text)
    text = re.sub(r"\s+([.,;:])", r"\1", text).strip()
    if len(text) <= limit:
        return text
    cut = text[:limit - 1]
    cut = cut[:cut.rfind(" ")] if " " in cut else cut
    if cut.count("`") % 2:  # never leave a code span open
        cut = cut[:cut.rfind("`")]
    return cut.rstrip(" ,;:-") + "…"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;")


def rows(claims: list[dict]) -> list[tuple[str, str, str]]:
    """(claim, verdict, short statement) per row; claims differing only in a multiplier ``xR`` share one."""
    groups: dict[tuple[str, str], list[tuple[str, dict]]] = {}
    for claim in claims:
        found = {match.group(1) for match in _MULTIPLIER.finditer(claim["id"])}
        if len(found) == 1:
            (mult,) = found
            key = (_MULTIPLIER.sub("xR", claim["id"]), claim["statement"].replace(f"{mult}x", "Rx"))
        else:
            mult, key = "", (claim["id"], claim["statement"])
        groups.setdefault(key, []).append((mult, claim))
    out = []
    for (name, statement), members in groups.items():
        if len(members) == 1:
            claim = members[0][1]
            out.append((claim["id"], claim["verdict"], shorten(claim["statement"])))
        else:
            mults = " / ".join(mult for mult, _ in members)
            verdicts = [c["verdict"] for _, c in members]
            said = f"{verdicts[0]} (each)" if len(set(verdicts)) == 1 else " / ".join(verdicts)
            out.append((f"{name} (R = {mults})", said, shorten(statement)))
    return out


def block(root: Path = ROOT) -> str:
    """The text between the markers: one table per report found under ``root``."""
    parts = []
    for data, shown, what in REPORTS:
        path = root / data
        if not path.is_file():
            continue
        claims = json.loads(path.read_text(encoding="utf-8"))["claims"]
        lines = [f"[{shown}]({shown}), {what}:", "", "| claim | verdict | statement, shortened |", "|---|---|---|"]
        lines += [f"| {_cell(name)} | {verdict} | {_cell(text)} |" for name, verdict, text in rows(claims)]
        parts.append("\n".join(lines))
    return "\n\n".join(parts)


def rewrite(text: str, table: str) -> str:
    """``text`` with the block between the markers replaced by ``table``."""
    if text.count(BEGIN) != 1 or text.count(END) != 1 or text.index(BEGIN) > text.index(END):
        raise ValueError(f"README.md needs exactly one {BEGIN} ... {END} block")
    head, rest = text.split(BEGIN)
    _, tail = rest.split(END)
    return f"{head}{BEGIN}\n{table}\n{END}{tail}"


def main(argv: list[str]) -> int:
    check = argv == ["--check"]
    if argv and not check:
        sys.stderr.write("usage: python scripts/readme_verdicts.py [--check]\n")
        return 2
    text = README.read_text(encoding="utf-8")
    new = rewrite(text, block())
    if check:
        if new != text:
            sys.stderr.write("README.md's verdict table is stale: run python scripts/readme_verdicts.py\n")
            return 1
        return 0
    if new != text:
        tmp = README.with_name(README.name + ".tmp")
        tmp.write_text(new, encoding="utf-8")
        tmp.replace(README)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
