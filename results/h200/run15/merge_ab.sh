#!/usr/bin/env bash
# The merge A/B as run (device calls 4 and 5 of run 15), from the repository
# root with merge_one_round.patch or merge_batch12.patch applied; abtmp/ held
# HEAD's merge.cuh and kernel_traits.cuh. "old" is HEAD's merge, "new" the
# patch, alternating on one machine, three rounds.
set -uo pipefail
o=/tmp/o; mkdir -p $o
CODEC_GPU_STEPS="build test sanitize bench" bash scripts/gpu_run.sh $o > $o/gpu_run.out 2>&1
rm -rf /tmp/old && mkdir /tmp/old && tar --exclude="./build*" --exclude=./.git -cf - . | tar -xf - -C /tmp/old
cp abtmp/merge.cuh abtmp/kernel_traits.cuh /tmp/old/src/engine/cuda/
(cd /tmp/old && cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a-real \
  && cmake --build build -j 16 --target codec_tool) > $o/old_build.log 2>&1 || echo "old build failed"
row() { timeout 120 "$@" 2>&1 | grep -E "^[a-z]+(:[0-9.A-Z]+)? +[0-9.]+ " | head -1; }
for round in 1 2 3; do
  for w in depth:2 depth:3 depth:4 shape:2 shape:3 shape:DT seq:128 seq:512 batch:16 long; do
    for b in old new; do
      bin=./build-gpu/codec; [ $b = old ] && bin=/tmp/old/build/codec
      echo "### $b r$round $(row $bin bench --backend cuda --workload $w)"
    done
  done
done > $o/ab.log 2>&1
