"""The one report writer: every study's claims as ``report.md`` for people and ``report.json`` for programs.

``write_claims_report`` is used by ``qkdyn verify`` (theory and synthetic claims), the circuits study
and the coupled study alike: a summary table (claim, verdict, effect and p for empirical claims),
then one section per claim (statement, parts, statistics, evidence, table, plots), then any
study-specific sections (tables, figures) the caller passes as markdown.
"""
from __future__ import annotations

import dataclasses
import json
import platform
import re
from collections.abc import Sequence
from pathlib import Path

from qkdyn.atomic import write_text
from qkdyn.claims import Claim, describe_precondition, unmet
from qkdyn.stats import power_line

_MARK = {"holds": "HOLDS", "fails": "FAILS", "inconclusive": "INCONCLUSIVE", "partial": "PARTIAL"}


#: more parts or comparisons than this go into their own table
_LONG = 4
_LAW_FIXES = ((re.compile(r"\(log t\)\^1(?![0-9.])"), "log t"), (re.compile(r"log\^1 t"), "log t"),
              (re.compile(r"(?<![0-9.])1 log log t"), "log log t"))


def human(text: str) -> str:
    """Laws as a person writes them: ``log t``, not ``log^1 t`` or ``(log t)^1``; ``log log t``, not ``1 log log t``."""
    for pattern, replacement in _LAW_FIXES:
        text = pattern.sub(replacement, text)
    return text


def _value(value) -> str:
    """A scalar or a list on one line: floats to 4 significant digits, every element shown."""
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_value(v) for v in value) + "]"
    return human(str(value))


def evidence_lines(value, key: str, depth: int = 0) -> list[str]:
    """Evidence as a nested markdown list, complete: every key of every dict, every list element."""
    indent = "  " * depth
    if isinstance(value, dict) and value:
        lines = [f"{indent}- `{key}`:"]
        for name, item in value.items():
            lines += evidence_lines(item, str(name), depth + 1)
        return lines
    return [f"{indent}- `{key}`: {_value(value)}"]


def markdown_table(rows: list[dict]) -> list[str]:
    """Rows (dicts with the same keys) as a markdown table; floats to 4 significant digits."""
    header = list(rows[0])
    cell = lambda v: f"{v:.4g}" if isinstance(v, float) else human(str(v))  # noqa: E731
    return (["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
            + ["| " + " | ".join(cell(row[h]) for h in header) + " |" for row in rows])


def stats_line(label: str, comparison: dict) -> str:
    """One comparison (qkdyn.stats.Comparison.as_dict()) in words: effect, spread over seeds, interval, p."""
    lo, hi = comparison["interval"]
    return (f"{label}: claimed {comparison['claimed']}; effect {comparison['effect']:+.4g}, spread (sd over "
            f"{comparison['n']} seeds) {comparison['spread']:.3g}, 95% CI [{lo:+.4g}, {hi:+.4g}]{_target(comparison)}; "
            f"{comparison['test']} p = {comparison['p_value']:.3g} -> {comparison['verdict']}; {power_line(comparison)}")


def _target(comparison: dict) -> str:
    if comparison.get("margin") is not None:
        return f", margin +-{comparison['margin']:g}"
    if comparison.get("smallest_effect") is not None:
        return f", paper's smallest effect {comparison['smallest_effect']:g}"
    return ""


def stats_table(stats: dict) -> list[str]:
    """Many comparisons as one table: a row each."""
    rows = [{"comparison": label, "claimed": c["claimed"], "effect": f"{c['effect']:+.4g}",
             "spread (sd over seeds)": f"{c['spread']:.3g} ({c['n']})",
             "95% CI": f"[{c['interval'][0]:+.4g}, {c['interval'][1]:+.4g}]{_target(c)}",
             "test": c["test"], "p": f"p = {c['p_value']:.3g}", "verdict": f"**{c['verdict']}**", "power": power_line(c)}
            for label, c in stats.items()]
    return markdown_table(rows)


def _headline(claim: Claim) -> str:
    """Effect and p of an empirical claim for the summary table ('' for theory claims); more than a
    few comparisons are counted here and tabulated in the claim's section."""
    if not claim.stats:
        return ""
    missing = unmet(claim.preconditions)
    lead = f"precondition not met: {', '.join(missing)}; " if missing else ""
    if len(claim.stats) > 2:
        counts: dict[str, int] = {}
        for c in claim.stats.values():
            counts[c["verdict"]] = counts.get(c["verdict"], 0) + 1
        return (lead + f"{len(claim.stats)} comparisons: " + ", ".join(f"{n} {verdict}" for verdict, n in counts.items())
                + f" ([table](#{_anchor(claim)}))")
    return lead + "; ".join(f"{label}: {c['effect']:+.3g} (sd {c['spread']:.2g}, p = {c['p_value']:.2g}, "
                            f"detects >= {c.get('mde', float('nan')):.2g})" for label, c in claim.stats.items())


def _anchor(claim: Claim) -> str:
    """The markdown anchor of a claim's section heading."""
    return re.sub(r"[^a-z0-9 -]", "", f"{claim.id}: {_MARK[claim.verdict]}".lower()).replace(" ", "-")


def shared_evidence(claims: Sequence[Claim]) -> dict[str, tuple[object, list[str]]]:
    """Evidence entries (same key, same value) that several claims carry: key -> (value, claim ids)."""
    seen: dict[str, list[tuple[object, list[str]]]] = {}
    for claim in claims:
        for key, value in claim.evidence.items():
            entries = seen.setdefault(key, [])
            for entry in entries:
                if entry[0] == value:
                    entry[1].append(claim.id)
                    break
            else:
                entries.append((value, [claim.id]))
    return {key: entry for key, entries in seen.items() for entry in entries if len(entry[1]) > 1}


def claims_markdown(claims: Sequence[Claim]) -> list[str]:
    """The summary table, facts shared by several claims (once), and one section per claim."""
    lines = ["| claim | verdict | statement | effect (spread, p) |", "|---|---|---|---|"]
    lines += [f"| {c.id} | **{_MARK[c.verdict]}** | {human(c.statement)} | {_headline(c)} |" for c in claims]
    lines.append("")
    shared = shared_evidence(claims)
    if shared:
        lines += ["## Shared by several claims", ""]
        for key, (value, ids) in shared.items():
            block = evidence_lines(value, key)
            block[0] = block[0].replace(f"`{key}`:", f"`{key}` (claims {', '.join(ids)}):", 1)
            lines += block
        lines.append("")
    for claim in claims:
        lines += [f"## {claim.id}: {_MARK[claim.verdict]}", "", f"*Claim.* {human(claim.statement)}", ""]
        if claim.preconditions:
            lines += ["*Preconditions* (measured in the same runs; any unmet makes the claim inconclusive):", ""]
            lines += [f"- {describe_precondition(p)}" for p in claim.preconditions] + [""]
        if claim.parts and len(claim.parts) > _LONG:
            lines += ["*Parts.*", ""] + markdown_table([{"part": name, "verdict": f"**{verdict}**"}
                                                      for name, verdict in claim.parts.items()]) + [""]
        elif claim.parts:
            lines += ["*Parts.* " + "; ".join(f"{human(name)}: **{verdict}**" for name, verdict in claim.parts.items()), ""]
        if claim.stats:
            lines += ["*Statistics* (paired over seeds, `qkdyn.stats`):", ""]
            if len(claim.stats) > _LONG:
                lines += stats_table(claim.stats) + [""]
            else:
                lines += [f"- {stats_line(label, c)}" for label, c in claim.stats.items()] + [""]
        lines += [f"*Evidence.* {human(claim.summary)}", ""]
        if claim.table:
            lines += markdown_table(claim.table) + [""]
        for key, value in claim.evidence.items():
            if key in shared and claim.id in shared[key][1]:
                lines.append(f"- `{key}`: see *Shared by several claims*")
            else:
                lines += evidence_lines(value, key)
        lines.append("")
        lines += [f"![{claim.id}]({plot})" for plot in claim.plots]
        lines.append("")
    return lines


def write_claims_report(out_dir: str | Path, claims: Sequence[Claim], *, title: str, intro: str,
                        context: dict | None = None, sections: Sequence[str] = (), plots: Sequence[str] = (),
                        extra_json: dict | None = None) -> list[str]:
    """Write ``out_dir/report.md`` and ``out_dir/report.json``; return the file names written.

    ``sections``: study-specific markdown appended after the claims; ``plots``: further figures
    (relative to ``out_dir``); ``extra_json``: more top-level entries for report.json.
    """
    out_dir = Path(out_dir)
    lines = [f"# {title}", "", intro, ""] + claims_markdown(claims)
    if context:
        lines += ["## Setting", "", "```", json.dumps(context, indent=2, default=str), "```", ""]
    lines += [section.rstrip() + "\n" for section in sections]
    if plots:
        lines += ["## Further figures", ""] + [f"![{p}]({p})" for p in plots] + [""]
    write_text(out_dir / "report.md", "\n".join(lines))
    payload = {"title": title, "context": context, "python": platform.python_version(),
               "claims": [dataclasses.asdict(c) for c in claims], "plots": list(plots), **(extra_json or {})}
    write_text(out_dir / "report.json", json.dumps(payload, indent=2, default=_json_default))
    return ["report.md", "report.json"]


def _json_default(value):
    try:
        return float(value)
    except (TypeError, ValueError):
        return str(value)


def terminal_summary(claims: Sequence[Claim], width: int | None = None) -> str:
    """The claims as a plain-text table for the terminal, one line per claim, then a count of the verdicts.

    Each line is the claim's id, its verdict and what decided it, in short: the unmet preconditions
    (an ``inconclusive`` verdict's reason), else the parts that do not hold (a ``partial`` or ``fails``
    verdict), else the first sentence of an ``inconclusive`` claim's summary (such as "1 of 2 runs ...
    have finished"), else the effect and p of an empirical claim, else the statement. A line longer than
    ``width`` characters (default: the terminal's width, ``COLUMNS`` honoured, 100 when the output is
    not a terminal) is cut, ending in "…"; the numbers and the full reasons are in the report.
    """
    import shutil

    width = width or shutil.get_terminal_size((100, 24)).columns
    ids = max([len("claim"), *(len(c.id) for c in claims)])

    def note(claim: Claim) -> str:
        missing = unmet(claim.preconditions)
        if missing:
            return f"precondition not met: {', '.join(missing)}"
        others = [f"{part} ({verdict})" for part, verdict in claim.parts.items() if verdict != "holds"]
        if others:
            return "not holding: " + "; ".join(others)
        if claim.verdict == "inconclusive":  # e.g. "1 of 2 runs of study ... have finished"
            return " ".join(claim.summary.split(". ", 1)[0].split())
        if claim.stats:
            return re.sub(r" \(\[table\]\(#[^)]*\)\)", "", _headline(claim))
        return " ".join(claim.statement.split())

    def fit(line: str) -> str:
        return line if len(line) <= width else line[:max(width - 1, 0)].rstrip() + "…"

    lines = [fit(f"{'claim':<{ids}}  {'verdict':<12}  what decided it (the report has the numbers)")]
    lines += [fit(f"{c.id:<{ids}}  {c.verdict:<12}  {note(c)}") for c in claims]
    counts: dict[str, int] = {}
    for claim in claims:
        counts[claim.verdict] = counts.get(claim.verdict, 0) + 1
    lines.append(f"{len(claims)} claims: " + ", ".join(f"{n} {verdict}" for verdict, n in counts.items()))
    return "\n".join(lines)
