#!/usr/bin/env bash
# Paper A's robustness to the base learning rate (empirical/circuits/robustness.py): the brown-sva claim at
# QK x10 judged again with the preset's base rate halved and doubled (the same-lr arm and the QK x10 arm,
# the cpu budget's seeds, no controls), then one table with a row per base rate, the committed full
# report's (figures/circuits) as the x1 row, written to figures/circuits/robustness/. Resumable: rerun it
# after an interruption. About 30 CPU-minutes (20 runs).
#
#   scripts/circuits_robustness.sh      # RUNS=runs/robustness OUT=figures/circuits/robustness WORKERS=2
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-.venv/bin/python}"
RUNS="${RUNS:-runs/robustness}"
OUT="${OUT:-figures/circuits/robustness}"
WORKERS="${WORKERS:-2}"
read -r task ratio base factors < <("$PYTHON" -c "
from qkdyn.empirical.circuits import robustness as r
from qkdyn.empirical.circuits.presets import PRESETS
print(r.TASK, r.RATIO, PRESETS['cpu-' + r.TASK]['lr'], ','.join(map(str, r.LR_FACTORS)))")
folders=()
for factor in ${factors//,/ }; do
  lr=$("$PYTHON" -c "print($base * $factor)")
  "$PYTHON" -m qkdyn.cli compare-circuits --task "$task" --lr "$lr" --mults "$ratio" --no-controls \
    --runs "$RUNS/lr$lr" --out "$RUNS/report-lr$lr" --workers "$WORKERS" --no-progress
  folders+=("$RUNS/report-lr$lr")
done
"$PYTHON" -m qkdyn.empirical.circuits.robustness "$OUT" figures/circuits "${folders[@]}"
