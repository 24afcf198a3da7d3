# Run 43, call 1: batch:64's root split and the wide blocks it uses, swept
# on one build with two experiment-only switches in the planner
# (CODEC_WIDE_K: the root's chunks; CODEC_WIDE_USED: the wide blocks that
# take wide tasks, the other SMs free for the leaves from the start).
# Three rounds, the configurations rotating within each.
set -uo pipefail
V=$OUT/v; mkdir -p $V
cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a-real > $V/configure.log 2>&1
cmake --build build-gpu -j "$(nproc)" --target codec_tool > $V/build.log 2>&1 || { tail -30 $V/build.log; exit 1; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv > $V/gpu.txt
configs=("0 0 0.8" "0 25 0.5" "100 25 0.5" "108 25 0.5" "116 22 0.5" "100 22 0.5" "104 20 0.5" "0 16 0.5" "112 16 0.5" "0 22 0.5" "96 24 0.5" "100 25 0.35")
for r in 1 2 3; do
  for c in "${configs[@]}"; do
    set -- $c
    for w in batch:64; do
      split=adaptive; [ $2 -gt 0 ] && split=exhaustive
      row=$(CODEC_WIDE_USED=$1 CODEC_WIDE_K=$2 ./build-gpu/codec bench --backend cuda --workload $w --beside-wide $3 --split $split 2>&1 | grep "^$w")
      echo "### used=$1 k=$2 p=$3 r$r | $row" | tee -a $V/sweep.log
    done
  done
done
for c in "${configs[@]}"; do set -- $c; echo "used=$1 k=$2 p=$3"; CODEC_WIDE_USED=$1 CODEC_WIDE_K=$2 ./build-gpu/codec plan --workload batch:64 --beside-wide $3 --target h200 --split $([ $2 -gt 0 ] && echo exhaustive || echo adaptive) | tail -1; done > $V/plans.txt 2>&1
cd $OUT && tar czf v.tgz v
