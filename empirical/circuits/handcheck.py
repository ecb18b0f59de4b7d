"""The brown-sva subject-head heuristic's measured error: the hand-checked sample and its rates.

The sample is package data, ``brown_sva_handcheck.tsv`` (how it was drawn and checked:
``empirical/circuits/BROWN_SVA.md``). One row per item; the columns read here, by header name:

- ``uid`` (``doc:line:verb``), ``verb`` and ``subject``: word positions in ``tagged_sentence`` of the
  read-out verb and of the heuristic's subject head (:func:`qkdyn.empirical.data.brown.find_subject`);
- ``correct``: ``yes`` or ``no``, the checker's judgement of the heuristic's subject head;
- ``sample``: which random draw the item came from. Draws in :data:`UNIFORM_SAMPLES` are uniform over
  the heuristic's items, so they alone estimate the overall error; the ``non-adjacent`` draw is uniform
  over the non-adjacent items only, so every subset rate (adjacent, non-adjacent, attractor) pools all
  draws: within the non-adjacent items each draw is uniform, and adjacent items come from the uniform
  draws alone.

Subsets, from the row's own positions and Brown tags (the same for the study's items, which is where
they matter): *adjacent* when the subject is the token just before the read-out (``subject = verb - 1``),
and *attractor* when a noun or subject pronoun of the other number than the subject stands strictly
between the two (:func:`has_attractor`; such an item is never adjacent).

Rates are k / n with the Wilson score interval (level ``1 - alpha``, z the standard normal's
``1 - alpha / 2`` quantile): centre (k + z^2 / 2) / (n + z^2), half-width
z sqrt(k (n - k) / n + z^2 / 4) / (n + z^2).
"""
from __future__ import annotations

import dataclasses
import math
import random
from collections.abc import Iterable
from importlib import resources

from qkdyn.empirical.data import brown

from qkdyn.errors import InputError

HANDCHECK = "brown_sva_handcheck.tsv"
#: draws uniform over all of the heuristic's items: the first 30 (seed 2026, any split) and the
#: 2026-12-06 draw from the test split (:func:`draw_sample`)
UNIFORM_SAMPLES = ("seed-2026", "uniform")
NON_ADJACENT_SAMPLE = "non-adjacent"
#: the 2026-12-06 draw (:func:`draw_sample`): its seed, and how many uniform and non-adjacent items it took
DRAW_SEED = 20261206
DRAW_SIZES = (90, 40)
COLUMNS = ("uid", "verb", "subject", "correct", "sample", "tagged_sentence")


@dataclasses.dataclass(frozen=True)
class CheckedItem:
    """One hand-checked item: its positions in the tagged sentence, the judgement and its draw."""

    uid: str
    verb: int
    subject: int
    correct: bool
    sample: str
    tags: tuple[str, ...]

    @property
    def adjacent(self) -> bool:
        return self.subject == self.verb - 1

    @property
    def attractor(self) -> bool:
        return has_attractor(self.tags, self.subject, self.verb)


def has_attractor(tags: Iterable[str], subject: int, verb: int) -> bool:
    """True when a noun or subject pronoun of the other number than the one at ``subject`` (Brown's
    tags, suffixes stripped by :func:`brown.base_tag`) stands strictly between ``subject`` and ``verb``."""
    tags = [brown.base_tag(t) for t in tags]
    other = brown.PLURAL_SUBJECTS if tags[subject] in brown.SINGULAR_SUBJECTS else brown.SINGULAR_SUBJECTS
    return any(t in other for t in tags[subject + 1:verb])


def parse_rows(text: str, where: str = HANDCHECK) -> list[CheckedItem]:
    """The rows of the hand-check TSV ``text``; a missing column or a malformed row is an InputError."""
    header, *lines = text.splitlines()
    names = header.split("\t")
    if missing := [c for c in COLUMNS if c not in names]:
        raise InputError(f"{where}: missing column(s) {', '.join(missing)}")
    items = []
    for number, line in enumerate(lines, start=2):
        fields = line.split("\t")
        if len(fields) != len(names):
            raise InputError(f"{where}: line {number}: {len(fields)} fields, the header has {len(names)}")
        row = dict(zip(names, fields, strict=True))
        tags = tuple(tag for _, tag in brown.parse_tagged(row["tagged_sentence"]))
        try:
            verb, subject = int(row["verb"]), int(row["subject"])
        except ValueError:
            raise InputError(f"{where}: line {number}: verb and subject must be word positions") from None
        if row["correct"] not in ("yes", "no") or not 0 <= subject < verb < len(tags):
            raise InputError(f"{where}: line {number}: needs correct yes/no and 0 <= subject < verb < {len(tags)}")
        items.append(CheckedItem(row["uid"], verb, subject, row["correct"] == "yes", row["sample"], tags))
    return items


def package_rows() -> list[CheckedItem]:
    """The committed sample (package data)."""
    return parse_rows(resources.files("qkdyn.empirical.circuits").joinpath(HANDCHECK).read_text())


def wilson_interval(k: int, n: int, alpha: float = 0.05) -> tuple[float, float]:
    """The Wilson score interval of a binomial proportion k / n (module docstring)."""
    from scipy.stats import norm

    if not 0 <= k <= n or n == 0:
        raise InputError(f"a rate needs 0 <= k <= n and n > 0, got k = {k}, n = {n}")
    z = float(norm.ppf(1 - alpha / 2))
    centre = (k + z * z / 2) / (n + z * z)
    half = z * math.sqrt(k * (n - k) / n + z * z / 4) / (n + z * z)
    return max(0.0, centre - half), min(1.0, centre + half)


def error_rate(items: list[CheckedItem]) -> dict:
    """Wrong / checked over ``items``, with the Wilson 95% interval (``None`` rate when there are none)."""
    n = len(items)
    wrong = sum(not i.correct for i in items)
    if n == 0:
        return {"wrong": 0, "n": 0, "rate": None, "interval": None}
    return {"wrong": wrong, "n": n, "rate": wrong / n, "interval": wilson_interval(wrong, n)}


def error_summary(items: list[CheckedItem]) -> dict:
    """The heuristic's error overall (the uniform draws only) and on each subset (every draw)."""
    unknown = {i.sample for i in items} - {*UNIFORM_SAMPLES, NON_ADJACENT_SAMPLE}
    if unknown:
        raise InputError(f"{HANDCHECK}: unknown sample name(s) {', '.join(sorted(unknown))}")
    return {"overall": error_rate([i for i in items if i.sample in UNIFORM_SAMPLES]),
            "adjacent": error_rate([i for i in items if i.adjacent]),
            "non-adjacent": error_rate([i for i in items if not i.adjacent]),
            "attractor": error_rate([i for i in items if i.attractor])}


def _rate_text(rate: dict) -> str:
    if rate["n"] == 0:
        return "no items"
    lo, hi = rate["interval"]
    return f"{rate['wrong']}/{rate['n']} = {100 * rate['rate']:.1f}% (Wilson 95% {100 * lo:.1f}-{100 * hi:.1f}%)"


def summary_line(items: list[CheckedItem] | None = None) -> str:
    """One report line: the heuristic's error overall and on the adjacent, non-adjacent and attractor items."""
    items = package_rows() if items is None else items
    summary = error_summary(items)
    return (f"Rationales (subject head) come from a heuristic over Brown POS tags, hand-checked on {len(items)} items "
            f"(qkdyn/empirical/circuits/{HANDCHECK}; empirical/circuits/BROWN_SVA.md): wrong on "
            f"{_rate_text(summary['overall'])} of a uniform sample; adjacent items {_rate_text(summary['adjacent'])}, "
            f"non-adjacent {_rate_text(summary['non-adjacent'])}, attractor {_rate_text(summary['attractor'])}.")


def draw_sample(items: list[dict], exclude: set[str], max_len: int, seed: int, n_uniform: int,
                n_non_adjacent: int) -> dict[str, str]:
    """The draw that extended the sample (BROWN_SVA.md): uid -> draw name.

    ``items`` are the prepared ``items.jsonl`` lines in file order. The population is the test split's
    items that the model sees at ``max_len`` (:func:`brown.split_of`, :func:`brown.to_example`), less the
    uids in ``exclude``. One ``random.Random(seed)`` draws ``n_uniform`` of them (``uniform``), then
    ``n_non_adjacent`` of the remaining non-adjacent ones (``non-adjacent``)."""
    population = [i for i in items if i["uid"] not in exclude and brown.split_of(i["doc"]) == "test"
                  and brown.to_example(i, max_len) is not None]
    rng = random.Random(seed)
    uniform = rng.sample(population, n_uniform)
    taken = {i["uid"] for i in uniform}
    rest = [i for i in population if i["uid"] not in taken and i["subject"] != i["verb"] - 1]
    extra = rng.sample(rest, n_non_adjacent)
    return {**{i["uid"]: "uniform" for i in uniform}, **{i["uid"]: NON_ADJACENT_SAMPLE for i in extra}}


if __name__ == "__main__":
    print(summary_line())
