# Session 27, call 2: A/B of the tile loop's instruction diet (descriptors advanced, unmasked copies), d64 contention tables, ncu instruction counts.
set -uo pipefail
V=$OUT/v; mkdir -p $V
ts() { echo "## $(date +%T) $*"; }
ts start
F="src/engine/cuda/primitives/wgmma.cuh src/engine/cuda/tile/attend_wgmma.cuh src/engine/cuda/tile/kv_loader.cuh src/engine/cuda/primitives/ptx.cuh"
CODEC_AB_ROUNDS=2 timeout 330 bash scripts/gpu_ab.sh $V/ab $F -- \
  "--workload batch:64" "--workload long" "--workload loogle:8" "--workload fewshot" "--workload sysprompt:512" \
  "--workload sysprompt:512 --page-size 1" "--workload ratio:0.05" "--workload flat:64" "--workload depth:2" "--workload seq:128" \
  "--workload shape:DT" "--workload batch:64 --model llama3.2-1b" "--workload long --model gemma2-9b" "--workload batch:64 --dtype fp16"
ts ab
for r in 1 2; do for w in depth:2 depth:3 shape:2 shape:DT seq:128 loogle:8; do for t in old new; do
  echo "### d64 $t r$r $w | $(timeout 60 ./build-gpu/codec bench --backend cuda --workload $w --model llama3.2-1b --cost-table abtmp/${t}_d64.json 2>&1 | grep -E "^[a-z]+(:[0-9.A-Z]+)? +[0-9.]+ " | head -1)"
done; done; done | tee $V/ab_d64_tables.log
ts d64
for b in new old; do bin=./build-gpu/codec; [ $b = old ] && bin=/tmp/codec_ab_old/build/codec
  timeout 60 ncu --section InstructionStats --section SchedulerStats --section WarpStateStats --section SpeedOfLight --nvtx --nvtx-include "codec/" -k regex:pac_kernel --launch-count 1 --csv \
    $bin bench --backend cuda --workload batch:64 --reps 1 > $V/ncu_$b.csv 2>&1; grep -E "Executed Instructions\"|Duration|Issue Slots|SM Frequency" $V/ncu_$b.csv | cut -c1-20,200-
done
ts done
