"""One claim's verdict with its evidence: the unit of every report (theory, synthetic, circuits, coupled).

One vocabulary everywhere (docs/setting.md section 3): ``holds``, ``fails``, ``inconclusive``, and
``partial`` only for a claim with parts, which then names each part's own verdict.

Validity before verdict: a claim names the preconditions it needs before it can be judged
(:class:`Precondition`: a quantity measured in the same runs, a bound, met or not), and
:func:`gate` turns every verdict of a claim with an unmet one into ``inconclusive``. Reports print
the preconditions first, with their numbers; a claim whose precondition is unmet cannot hold or fail
(checked when it is built).
"""
from __future__ import annotations

import dataclasses
import math

VERDICTS = ("holds", "fails", "inconclusive", "partial")
RELATIONS = {"<": lambda v, b: v < b, ">": lambda v, b: v > b}


@dataclasses.dataclass(frozen=True)
class Precondition:
    """What a claim needs before it can be judged: ``value`` (measured in the claim's own runs) must
    stand in ``relation`` ("<" or ">") to ``bound``. ``name`` says what is needed, ``detail`` how the
    numbers were measured. A value that could not be measured (NaN) is unmet."""

    name: str
    value: float
    relation: str
    bound: float
    detail: str = ""

    def __post_init__(self):
        if self.relation not in RELATIONS:
            raise ValueError(f"relation must be one of {tuple(RELATIONS)}, got {self.relation!r}")

    @property
    def met(self) -> bool:
        return not math.isnan(self.value) and not math.isnan(self.bound) and RELATIONS[self.relation](self.value, self.bound)

    def as_dict(self) -> dict:
        return {**dataclasses.asdict(self), "met": self.met}


def describe_precondition(p: dict) -> str:
    """One precondition (:meth:`Precondition.as_dict`) in words: value against bound, met or NOT MET."""
    value = "not measured" if p["value"] != p["value"] else f"{p['value']:.4g}"
    detail = f" ({p['detail']})" if p.get("detail") else ""
    return f"{p['name']}: {value} {p['relation']} {p['bound']:.4g}: {'met' if p['met'] else 'NOT MET'}{detail}"


def gate(verdicts: dict[str, str], preconditions: list[Precondition]) -> dict[str, str]:
    """``verdicts`` (part name -> verdict) as they may be reported: all ``inconclusive`` when any of
    ``preconditions`` is unmet, unchanged otherwise."""
    if all(p.met for p in preconditions):
        return dict(verdicts)
    return {name: "inconclusive" for name in verdicts}


def unmet(preconditions: list) -> list[str]:
    """Names of the unmet preconditions (as :class:`Precondition` or their ``as_dict``)."""
    return [p["name"] if isinstance(p, dict) else p.name for p in preconditions
            if not (p["met"] if isinstance(p, dict) else p.met)]


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
    preconditions: the :class:`Precondition` s (as dicts) the verdict needs; when any is unmet the
               verdict (and every part) must be ``inconclusive`` (see :func:`gate`).
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
    preconditions: list[dict] = dataclasses.field(default_factory=list)

    def __post_init__(self) -> None:
        self.preconditions = [p.as_dict() if isinstance(p, Precondition) else p for p in self.preconditions]
        if unmet(self.preconditions) and (self.verdict != "inconclusive"
                                          or any(v != "inconclusive" for v in self.parts.values())):
            raise ValueError(f"claim {self.id}: preconditions {unmet(self.preconditions)} are unmet, so it is "
                             f"inconclusive, not {self.verdict!r}")
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
