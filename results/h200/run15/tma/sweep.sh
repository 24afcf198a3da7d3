#!/usr/bin/env bash
# The TMA sweep as run (device call 2 of run 15), from the repository root with
# tma.patch applied plus two experiment-only environment knobs, not kept:
# TMAX (TMA only for tasks of at most this many tiles; 0: never) and TL2 (the
# tensor map's CUtensorMapL2promotion). build-old-bin/codec was the HEAD binary
# built elsewhere; its compiled-in cost-table folder did not exist on the
# device, so its rows ("old") were planned with the roofline and compare with
# nothing here.
set -uo pipefail
o=/tmp/o; mkdir -p $o
CODEC_GPU_STEPS="${STEPS:-build}" bash scripts/gpu_run.sh $o > $o/gpu_run.out 2>&1
row() { timeout 120 "$@" 2>&1 | grep -E "^[a-z]+:[0-9.]+ " | head -1; }
for round in 1 2; do
  for w in batch:64 flat:64 long batch:16 depth:2 depth:3 depth:4 shape:2 shape:3; do
    echo "### old $w r$round $(row ./build-old-bin/codec bench --backend cuda --workload $w)"
    for t in 0 2 4 8 1000000000; do
      echo "### T=$t $w r$round $(TMAX=$t row ./build-gpu/codec bench --backend cuda --workload $w)"
    done
  done
  for w in batch:64 flat:64; do for l in 0 2; do
    echo "### L2=$l $w r$round $(TL2=$l row ./build-gpu/codec bench --backend cuda --workload $w)"
  done; done
done > $o/ab.log 2>&1
