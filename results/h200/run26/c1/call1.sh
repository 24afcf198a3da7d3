# Session 27, call 1: build, GPU C++ tests, contention profile (d128, d64), A/B old vs new tables at d128, ncu of batch:64.
set -uo pipefail
V=$OUT/v; mkdir -p $V
ts() { echo "## $(date +%T) $*"; }
ts start
CODEC_GPU_STEPS="build" bash scripts/gpu_run.sh $V/p
ts built
ctest --test-dir build-gpu --output-on-failure -j 4 --timeout 300 > $V/p/ctest.log 2>&1; echo "ctest rc $?"; tail -3 $V/p/ctest.log
ts tested
( time ./build-gpu/codec profile ) > $V/p/profile.log 2>&1; tail -3 $V/p/profile.log
( time ./build-gpu/codec profile --model llama3.2-1b ) > $V/p/profile_d64.log 2>&1; tail -3 $V/p/profile_d64.log
cp data/cost_tables/nvidia_h200_d128_bf16.json data/cost_tables/nvidia_h200_d64_bf16.json $V/p/
ts profiled
CODEC_AB_ROUNDS=2 CODEC_AB_OLD_ARGS="--cost-table abtmp/old_d128.json" timeout 200 bash scripts/gpu_ab.sh $V/ab128 -- \
  "--workload depth:2" "--workload depth:3" "--workload shape:2" "--workload shape:DT" "--workload seq:128" "--workload depth:4"
CODEC_AB_OLD_ARGS="--cost-table abtmp/old_d128.json" timeout 120 bash scripts/gpu_ab.sh $V/ab128L -- \
  "--workload batch:64" "--workload long" "--workload loogle:8" "--workload fewshot" "--workload sysprompt:512" "--workload ratio:0.05"
ts ab
timeout 100 ncu --set full --nvtx --nvtx-include "codec/" -k regex:pac_kernel --launch-count 1 -o $V/ncu_b64 \
  ./build-gpu/codec bench --backend cuda --workload batch:64 --reps 1 > $V/ncu_b64.log 2>&1; tail -3 $V/ncu_b64.log
ncu --import $V/ncu_b64.ncu-rep --page details --csv > $V/ncu_b64_details.csv 2>&1
ncu --import $V/ncu_b64.ncu-rep --page source --csv --print-source sass > $V/ncu_b64_sass.csv 2>&1 || echo "no source page"
ts done
