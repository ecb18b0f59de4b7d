"""A paper-B claim assembled from named comparisons (:class:`qkdyn.stats.Comparison`): the verdict by the
project's one rule (one comparison: its verdict; several: the parts combined; any unmet precondition:
``inconclusive``), and the text a reader sees beside it (each comparison with its power, why a failing
directional comparison fails, the ablations of the runs compared, the scope).
"""
from __future__ import annotations

import math

from qkdyn.empirical.coupled.selection import strength

from qkdyn.claims import Claim, combine, gate
from qkdyn.stats import sample_summary


def _ablation_text(table: dict, unit: str) -> str:
    if not table:
        return " Ablations: not measured."
    parts = [f"{name}: {what} {s['mean']:+.4g}" + ("" if math.isnan(s["std"]) else f" (sd {s['std']:.2g})")
             for name, row in table.items() for what, s in row.items()]
    return f" Ablations (same checkpoint, change in {unit}): " + "; ".join(parts) + "."


def why(c) -> str:
    """Why a directional comparison fails although p >= alpha: its interval is short of the paper's effect."""
    opposite = (c.effect > 0) == (c.claimed == "decrease") and c.p_value < 0.05
    if c.verdict == "fails" and c.smallest_effect is not None and not opposite:
        return f" (95% interval short of the paper's smallest effect {c.smallest_effect:.4g})"
    return ""


def claim(cid: str, statement: str, comparisons: dict, evidence: dict, summary: str, plots=(), *,
           preconditions=(), ablation: dict | None = None, unit: str = "val loss, nats/token", scope: str = "",
           table=(), notes: str = "") -> Claim:
    """A claim from named comparisons: one -> its verdict; several -> parts combined; every verdict
    ``inconclusive`` when a precondition is unmet; ``notes`` (what was not measured, the design's power)
    after the comparisons; the ablations shown beside it."""
    preconditions = list(preconditions)
    parts = gate({label: c.verdict for label, c in comparisons.items()}, preconditions)
    verdict = next(iter(parts.values())) if len(parts) == 1 else combine(parts)
    lines = "; ".join(f"{label}: {c.describe()} -> {c.verdict}{why(c)}" for label, c in comparisons.items())
    unmet = [p.name for p in preconditions if not p.met]
    lead = (f"Inconclusive before any effect is read: not met: {'; '.join(unmet)} (numbers above). The test alone "
            "would say: " if unmet else "")
    text = f"{lead}{summary} {lines}.{notes}{_ablation_text(ablation or {}, unit)} {scope}".rstrip()
    return Claim(cid, statement, verdict, {**evidence, "ablation": ablation or {}}, text, list(plots),
                 table=list(table), parts=parts if len(parts) > 1 else {},
                 stats={k: c.as_dict() for k, c in comparisons.items()}, preconditions=preconditions)


def ppl_evidence(**groups: dict[int, dict]) -> dict:
    """Per named group of runs (seed -> run): its validation perplexity over seeds and its coupling strength."""
    return {name: {"val_ppl": sample_summary([r["final"]["val_ppl"] for r in g.values()]), "strength": strength(g)}
            for name, g in groups.items() if g}
