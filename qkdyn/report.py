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
from pathlib import Path
from typing import Sequence

from qkdyn.atomic import write_text
from qkdyn.claims import Claim, describe_precondition, unmet
from qkdyn.stats import power_line

_MARK = {"holds": "HOLDS", "fails": "FAILS", "inconclusive": "INCONCLUSIVE", "partial": "PARTIAL"}


def _compact(value, depth=0, max_depth=2):
    """Evidence for the markdown: nested dicts to a bounded depth, floats to 4 significant digits."""
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, dict):
        if depth >= max_depth:
            return "{...}"
        return "{" + ", ".join(f"{k}: {_compact(v, depth + 1, max_depth)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(_compact(v, depth + 1, max_depth) for v in value[:8]) + (", ..." if len(value) > 8 else "") + "]"
    return str(value)


def markdown_table(rows: list[dict]) -> list[str]:
    """Rows (dicts with the same keys) as a markdown table; floats to 4 significant digits."""
    header = list(rows[0])
    cell = lambda v: f"{v:.4g}" if isinstance(v, float) else str(v)  # noqa: E731
    return (["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
            + ["| " + " | ".join(cell(row[h]) for h in header) + " |" for row in rows])


def stats_line(label: str, comparison: dict) -> str:
    """One comparison (qkdyn.stats.Comparison.as_dict()) in words: effect, spread over seeds, interval, p."""
    lo, hi = comparison["interval"]
    target = (f", margin +-{comparison['margin']:g}" if comparison.get("margin") is not None
              else f", paper's smallest effect {comparison['smallest_effect']:g}" if comparison.get("smallest_effect") is not None
              else "")
    return (f"{label}: claimed {comparison['claimed']}; effect {comparison['effect']:+.4g}, spread (sd over "
            f"{comparison['n']} seeds) {comparison['spread']:.3g}, 95% CI [{lo:+.4g}, {hi:+.4g}]{target}; "
            f"{comparison['test']} p = {comparison['p_value']:.3g} -> {comparison['verdict']}; {power_line(comparison)}")


def _headline(claim: Claim) -> str:
    """Effect and p of an empirical claim for the summary table ('' for theory claims)."""
    if not claim.stats:
        return ""
    missing = unmet(claim.preconditions)
    lead = f"precondition not met: {', '.join(missing)}; " if missing else ""
    return lead + "; ".join(f"{label}: {c['effect']:+.3g} (sd {c['spread']:.2g}, p = {c['p_value']:.2g}, "
                            f"detects >= {c.get('mde', float('nan')):.2g})" for label, c in claim.stats.items())


def claims_markdown(claims: Sequence[Claim]) -> list[str]:
    """The summary table and one section per claim."""
    lines = ["| claim | verdict | statement | effect (spread, p) |", "|---|---|---|---|"]
    lines += [f"| {c.id} | **{_MARK[c.verdict]}** | {c.statement} | {_headline(c)} |" for c in claims]
    lines.append("")
    for claim in claims:
        lines += [f"## {claim.id}: {_MARK[claim.verdict]}", "", f"*Claim.* {claim.statement}", ""]
        if claim.preconditions:
            lines += ["*Preconditions* (measured in the same runs; any unmet makes the claim inconclusive):", ""]
            lines += [f"- {describe_precondition(p)}" for p in claim.preconditions] + [""]
        if claim.parts:
            lines += ["*Parts.* " + "; ".join(f"{name}: **{verdict}**" for name, verdict in claim.parts.items()), ""]
        if claim.stats:
            lines += ["*Statistics* (paired over seeds, `qkdyn.stats`):", ""]
            lines += [f"- {stats_line(label, c)}" for label, c in claim.stats.items()] + [""]
        lines += [f"*Evidence.* {claim.summary}", ""]
        if claim.table:
            lines += markdown_table(claim.table) + [""]
        lines += [f"- `{key}`: {_compact(value)}" for key, value in claim.evidence.items()]
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
