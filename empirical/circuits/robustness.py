"""Robustness of the circuits verdicts to the base learning rate: the same claim judged again with every
rate of the plan scaled by a factor (half and double the preset's), one row per base rate.

The rows are read from reports ``qkdyn compare-circuits`` wrote (``report.json``), never recomputed here:
the base rate's row from the committed full report, the others from reports of the stated subset
(:data:`TASK`, the same-lr arm and the QK arm at :data:`RATIO`, the cpu budget's seeds, no controls) run
at ``--lr`` = factor x the preset's rate by ``scripts/circuits_robustness.sh``. A row carries the claim's
verdict, its parts, the deciding comparison (effect, 95% interval, p, the smallest effect the design
detects) and whether its preconditions were met, so a rate at which the baseline did not learn reads
as inconclusive with its reason rather than as a changed verdict.

    python -m qkdyn.empirical.circuits.robustness OUT BASE_DIR DIR [DIR ...]

(each DIR a ``compare-circuits --out`` folder: its ``report.json`` and ``TASK.json``, whose run config
states the base rate; the factor of a row is its base rate over BASE_DIR's).
"""
from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from pathlib import Path

from qkdyn import atomic
from qkdyn.errors import InputError

#: the task, rate ratio and base-rate factors of the robustness subset
TASK = "brown-sva"
RATIO = 10
LR_FACTORS = (0.5, 2.0)
#: the claim repeated at each base rate
CLAIM = f"{TASK} QK x{RATIO}"


def _deciding(claim: dict) -> tuple[str, dict]:
    """(name, comparison) of the claim's deciding comparison: the first marked "(deciding)", else its first."""
    stats = claim.get("stats") or {}
    if not stats:
        raise InputError(f"claim {claim.get('id')!r} carries no comparison")
    name = next((k for k in stats if "(deciding)" in k), next(iter(stats)))
    return name, stats[name]


def claim_row(report: Mapping, lr: float, factor: float, claim_id: str = CLAIM) -> dict:
    """The row of ``claim_id`` in ``report`` (a ``compare-circuits`` report.json) at base rate ``lr``
    (``factor`` x the preset's)."""
    claim = next((c for c in report.get("claims", ()) if c.get("id") == claim_id), None)
    if claim is None:
        raise InputError(f"the report has no claim {claim_id!r} (claims: "
                         f"{', '.join(c.get('id', '?') for c in report.get('claims', ()))})")
    name, comp = _deciding(claim)
    unmet = [p["name"] for p in claim.get("preconditions", ()) if not p.get("met")]
    return {"lr": lr, "factor": factor, "verdict": claim["verdict"], "parts": dict(claim.get("parts") or {}),
            "deciding": name, "effect": comp["effect"], "interval": list(comp["interval"]),
            "p_value": comp["p_value"], "mde": comp.get("mde"), "n": comp["n"], "preconditions_unmet": unmet}


def markdown(rows: list[dict]) -> str:
    """The table, one row per base rate, in the order of the factors."""
    lines = [f"# Robustness of `{CLAIM}` to the base learning rate",
             "",
             "The claim judged again with every rate of the plan scaled by a factor: the same-lr arm and the "
             f"QK x{RATIO} arm over the same seeds; the x1 row is the committed full report's "
             "(figures/circuits/report.md). Deciding comparison: paired by seed; detectable: the smallest effect "
             "the design detects with 80% power.",
             "",
             f"Scope: this subset only, the claim that decides paper A's sharpening at transformer scale ({CLAIM}, "
             "decided on the items where positional heads fail). The report's other verdicts (the higher QK "
             "ratios, brown-qa, the vader negative control, the controls) are not repeated at other base rates; "
             "each costs as many runs again.",
             "",
             "| base rate (factor) | verdict | parts | deciding comparison | effect [95% CI] | p | detectable | seeds | "
             "preconditions |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in sorted(rows, key=lambda r: r["factor"]):
        parts = "; ".join(f"{k}: {v}" for k, v in r["parts"].items()) or "-"
        low, high = r["interval"]
        mde = f"{r['mde']:.3f}" if r["mde"] is not None else "-"
        pre = "met" if not r["preconditions_unmet"] else "NOT met: " + "; ".join(r["preconditions_unmet"])
        lines.append(f"| {r['lr']:g} (x{r['factor']:g}) | {r['verdict']} | {parts} | {r['deciding']} | {r['effect']:+.3f} "
                     f"[{low:+.3f}, {high:+.3f}] | {r['p_value']:.2g} | {mde} | {r['n']} | {pre} |")
    return "\n".join(lines) + "\n"


def _read(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise InputError(f"cannot read {path}: {exc}") from None


def base_rate(folder: Path) -> float:
    """The base learning rate of :data:`TASK`'s runs in a ``compare-circuits --out`` folder (its same-lr arm)."""
    summary = _read(folder / f"{TASK}.json")
    try:
        return float(summary["config"]["lr"])
    except (KeyError, TypeError, ValueError):
        raise InputError(f"{folder / f'{TASK}.json'} states no base learning rate (config.lr)") from None


def rows_from(folders: list[Path]) -> list[dict]:
    """One row per folder; the first is the base whose rate the factors divide."""
    base = base_rate(folders[0])
    return [claim_row(_read(f / "report.json"), lr, lr / base) for f in folders for lr in [base_rate(f)]]


def main(argv: list[str]) -> int:
    if len(argv) < 3:
        print("usage: " + __doc__.split("    python -m ", 1)[1].splitlines()[0], file=sys.stderr)
        return 2
    out, folders = Path(argv[0]), [Path(a) for a in argv[1:]]
    rows = rows_from(folders)
    out.mkdir(parents=True, exist_ok=True)
    atomic.write_text(out / "robustness.json", json.dumps({"claim": CLAIM, "rows": rows}, indent=1) + "\n")
    atomic.write_text(out / "robustness.md", markdown(rows))
    print(f"wrote {out / 'robustness.md'}")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except InputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
