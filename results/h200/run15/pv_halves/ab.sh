#!/usr/bin/env bash
# The P·V-halves A/B as last run (device call 7 of run 15): abtmp/pac.cuh held
# 1f43c5c's pac.cuh (old), the working tree had the change (new). Call 6
# (ab_continue.log) ran the same with two rounds over batch:64 long batch:16
# depth:4 flat:64 loogle:8, and always rebuilt /tmp/old.
set -uo pipefail
{
[ -x /tmp/old/build/codec ] || { rm -rf /tmp/old && mkdir /tmp/old && tar --exclude="./build*" --exclude=./.git -cf - . | tar -xf - -C /tmp/old; }
cp abtmp/pac.cuh /tmp/old/src/engine/cuda/pac.cuh
(cd /tmp/old && cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a-real > /dev/null && cmake --build build -j 8 --target codec_tool > /dev/null) &
cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a-real > /dev/null && cmake --build build-gpu -j 8 --target codec_tool test_engine_cuda > $OUT/build.log 2>&1 || echo "!! new build failed"
wait
echo "== built $(date)"
timeout 120 ./build-gpu/tests/test_engine_cuda 2>&1 | tail -15
row() { timeout 60 "$@" 2>&1 | grep -E "^[a-z]+(:[0-9.A-Z]+)? +[0-9.]+ " | head -1; }
for round in 1; do
  for w in batch:64 long batch:16 loogle:8; do
    for b in old new; do
      bin=./build-gpu/codec; [ $b = old ] && bin=/tmp/old/build/codec
      echo "### $b r$round $(row $bin bench --backend cuda --workload $w)"
    done
  done
done
echo "== done $(date)"
} 2>&1 | tee $OUT/ab.log | grep -E "^(###|==|!!|\[  )"
