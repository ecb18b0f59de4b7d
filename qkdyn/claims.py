"""One claim's verdict with its evidence: the unit of every report (theory, synthetic, circuits, coupled).

One vocabulary everywhere (docs/setting.md section 3): ``holds``, ``fails``, ``inconclusive``, and
``partial`` only for a claim with parts, which then names each part's own verdict.
"""
from __future__ import annotations

import dataclasses

VERDICTS = ("holds", "fails", "inconclusive", "partial")


@dataclasses.dataclass
class Claim:
    """A claim under test.

    id:        "A1" ... "A6", or a study's claim id.
    statement: what is claimed, in one or two sentences.
    verdict:   one of :data:`VERDICTS`; computed from the evidence, never typed in.
    evidence:  the numbers behind the verdict (JSON-serialisable).
    summary:   a few sentences saying what was measured and why the verdict follows.
    plots:     figure files (relative to the report) that show it.
    table:     optional rows (dicts with the same keys) shown as a table in the report.
    parts:     part name -> verdict of that part (holds/fails/inconclusive); required when the verdict
               is ``partial``, and when given the verdict must be :func:`combine` of them.
    stats:     for empirical claims, the :class:`qkdyn.stats.Comparison` behind the verdict (as a
               dict: effect, spread over seeds, p-value, ...), shown beside the verdict.
    """

    id: str
    statement: str
    verdict: str
    evidence: dict
    summary: str
    plots: list[str] = dataclasses.field(default_factory=list)
    table: list[dict] = dataclasses.field(default_factory=list)
    parts: dict[str, str] = dataclasses.field(default_factory=dict)
    stats: dict | None = None

    def __post_init__(self) -> None:
        if self.verdict not in VERDICTS:
            raise ValueError(f"verdict must be one of {VERDICTS}, got {self.verdict!r}")
        bad = {name: v for name, v in self.parts.items() if v not in VERDICTS[:3]}
        if bad:
            raise ValueError(f"claim {self.id}: part verdicts must be holds/fails/inconclusive, got {bad}")
        if self.verdict == "partial" and not self.parts:
            raise ValueError(f"claim {self.id}: 'partial' must name its parts")
        if self.parts and combine(self.parts) != self.verdict:
            raise ValueError(f"claim {self.id}: verdict {self.verdict!r} is not that of its parts {self.parts}")


def combine(parts: dict[str, str]) -> str:
    """The verdict of a claim made of ``parts``: the common verdict when all agree, else ``partial``."""
    verdicts = set(parts.values())
    return verdicts.pop() if len(verdicts) == 1 else "partial"


def parts_from_checks(checks: dict[str, bool]) -> dict[str, str]:
    """Parts of a theory claim from pass/fail checks: ``holds`` or ``fails`` each."""
    return {name: "holds" if ok else "fails" for name, ok in checks.items()}
