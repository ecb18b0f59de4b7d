#!/usr/bin/env bash
# Paper B's CPU pilot (empirical/coupled/pilot.py): standard vs coupled Euler attention at `tiny` on
# byte-level `pydocs` (the `cpu` budget's recipe: lr 6e-3, 10% warm-up, cosine to lr/10), 5 seeds, at
# 1200 and 3000 steps, evaluated every 150 steps; then the table that sizes the `cpu` budget, written to
# figures/coupled/pilot/ (pilot.md, pilot.json). Resumable: rerun it after an interruption.
# About 40 CPU-minutes on 2 free cores (WORKERS=2).
#
#   scripts/coupled_pilot.sh            # RUNS=runs/pilot OUT=figures/coupled/pilot WORKERS=2
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-.venv/bin/python}"
RUNS="${RUNS:-runs/pilot}"
OUT="${OUT:-figures/coupled/pilot}"
WORKERS="${WORKERS:-2}"
lengths=$("$PYTHON" -c "from qkdyn.empirical.coupled.pilot import LENGTHS; print(*LENGTHS)")
seeds=$("$PYTHON" -c "from qkdyn.empirical.coupled.pilot import SEEDS; print(SEEDS)")
for n in $lengths; do
  "$PYTHON" -m qkdyn.cli compare-coupled --train --no-progress --budget cpu --runs "$RUNS" --out "$RUNS/report-$n" \
    --variants standard,coupled-euler --seeds "$seeds" --lm-steps "$n" --evals-per-run $((n / 150)) \
    --sweep-steps '' --mqar-tasks '' --no-match-compute --workers "$WORKERS"
done
"$PYTHON" -m qkdyn.empirical.coupled.pilot "$RUNS" "$OUT"
