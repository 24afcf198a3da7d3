# Session 27, call 3: A/B of the wgmma descriptors advanced in place (the loader as on main), ncu instruction counts.
set -uo pipefail
V=$OUT/v; mkdir -p $V
ts() { echo "## $(date +%T) $*"; }
ts start
CODEC_AB_ROUNDS=2 timeout 300 bash scripts/gpu_ab.sh $V/ab src/engine/cuda/primitives/wgmma.cuh src/engine/cuda/tile/attend_wgmma.cuh -- \
  "--workload batch:64" "--workload long" "--workload loogle:8" "--workload fewshot" "--workload sysprompt:512" \
  "--workload ratio:0.05" "--workload depth:4" "--workload batch:64 --model llama3.2-1b" "--workload loogle:8 --model llama3.2-1b" \
  "--workload long --model gemma2-9b" "--workload batch:64 --dtype fp16"
ts ab
for b in new old; do bin=./build-gpu/codec; [ $b = old ] && bin=/tmp/codec_ab_old/build/codec
  timeout 60 ncu --section InstructionStats --section SpeedOfLight --nvtx --nvtx-include "codec/" -k regex:pac_kernel --launch-count 1 --csv \
    $bin bench --backend cuda --workload batch:64 --reps 1 > $V/ncu_$b.csv 2>&1; grep -E "Executed Instructions\"|Duration" $V/ncu_$b.csv | cut -c1-20,200-
done
ts done
