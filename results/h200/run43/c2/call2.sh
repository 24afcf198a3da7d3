# Run 43, call 2: batch:64's root chunks of two lengths. The planner's plan
# as it is, then its wide tasks' KV ranges re-cut by an experiment-only
# switch (CODEC_WIDE_RATIO = r): a chunk whose tasks run on wide blocks of
# one task each is r times as long as one on a block of two (those SMs
# stream the leaves after it), each node's chunks still covering it, in
# 128-token steps. Three rounds, the ratios rotating within each.
set -uo pipefail
V=$OUT/v; mkdir -p $V
cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a-real > $V/configure.log 2>&1
cmake --build build-gpu -j "$(nproc)" --target codec_tool > $V/build.log 2>&1 || { tail -30 $V/build.log; exit 1; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv > $V/gpu.txt
for r in 1 2 3; do
  for ratio in none 1 1.15 1.3 1.45 1.6 1.8; do
    for w in batch:64; do
      if [ $ratio = none ]; then row=$(./build-gpu/codec bench --backend cuda --workload $w 2>&1 | grep "^$w")
      else row=$(CODEC_WIDE_RATIO=$ratio ./build-gpu/codec bench --backend cuda --workload $w 2>&1 | grep "^$w"); fi
      echo "### ratio=$ratio r$r | $row" | tee -a $V/sweep.log
    done
  done
done
cd $OUT && tar czf v.tgz v
