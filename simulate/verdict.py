"""One claim's verdict with its evidence: the unit of the verification report."""
from __future__ import annotations

import dataclasses

VERDICTS = ("holds", "fails", "partial")


@dataclasses.dataclass
class Claim:
    """A claim under test (DESIGN.md section 3).

    id:        "A1" ... "A6" (or a transformer-scale claim id).
    statement: what is claimed, in one or two sentences.
    verdict:   "holds", "fails" or "partial"; computed from ``evidence``, never typed in.
    evidence:  the numbers behind the verdict (JSON-serialisable).
    summary:   a few sentences saying what was measured and why the verdict follows.
    plots:     figure files (relative to the report) that show it.
    table:     optional rows (dicts with the same keys) shown as a table in report.md.
    """

    id: str
    statement: str
    verdict: str
    evidence: dict
    summary: str
    plots: list[str] = dataclasses.field(default_factory=list)
    table: list[dict] = dataclasses.field(default_factory=list)

    def __post_init__(self) -> None:
        if self.verdict not in VERDICTS:
            raise ValueError(f"verdict must be one of {VERDICTS}, got {self.verdict!r}")

    def to_json(self) -> dict:
        return dataclasses.asdict(self)
