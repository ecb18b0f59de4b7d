#!/usr/bin/env bash
# Paper B's GPU comparison on one H200 in about 8 minutes: the `coupled` study's `gpu` budget
# (standard vs coupled Euler vs MLP-only on q, `4M` models, 3 seeds, 1500 steps of 32 x 512 bytes of
# `pydocs`, bf16 and torch.compile, three runs at a time on the one GPU), reported through the same
# pipeline as every study (report.md, report.json, README-section.md, plots). docs/coupled.md, "GPU plan".
#
#   scripts/coupled_gpu.sh prepare      # here, before the lease: the corpus into .qkdyn-cache/ (git-ignored)
#   scripts/coupled_gpu.sh plan         # the runs it will make, one JSON line each
#   scripts/coupled_gpu.sh run [FLAGS]  # on the device: carry .qkdyn-cache; FLAGS override the budget
#
# The device has no network, so `prepare` fetches the corpus (the Debian package python3.11-doc,
# pinned by sha256) and checks that the cache that travels is at most 48 MiB. The same pipeline at
# toy size on a CPU:  scripts/coupled_gpu.sh run --model tiny --device cpu --lm-steps 2 --block-size 16
set -euo pipefail
cd "$(dirname "$0")/.."
export QKDYN_CACHE="${QKDYN_CACHE:-$PWD/.qkdyn-cache}"
QKDYN=(${PYTHON:-python} -m qkdyn.cli)
RUNS="${RUNS:-runs/h200}"
OUT="${OUT:-figures/coupled/h200}"
mode="${1:-}"
shift || true
case "$mode" in
  prepare)
    "${QKDYN[@]}" data fetch pydocs
    size=$(du -sm "$QKDYN_CACHE/pydocs" | cut -f1)
    echo "corpus shard: $QKDYN_CACHE/pydocs, ${size} MiB (limit 48)"
    [ "$size" -le 48 ] ;;
  plan)
    "${QKDYN[@]}" plan coupled --budget gpu --runs "$RUNS" ;;
  run)
    "${QKDYN[@]}" compare-coupled --train --budget gpu --workers "${WORKERS:-3}" --runs "$RUNS" --out "$OUT" "$@" ;;
  *)
    echo "usage: scripts/coupled_gpu.sh prepare | plan | run [compare-coupled flags]" >&2
    exit 2 ;;
esac
