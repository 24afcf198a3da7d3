# Run 45, call 1 (main at 4332ec5: run 44's tile step and price): every C++ test (sm_90a, and the GPU
# tests on a generic sm_90 build), codec fuzz, every built-in workload at head_dim 128 (bf16) and 64
# (llama3.2-1b), then compute-sanitizer (memcheck, racecheck, synccheck, initcheck) on the GPU tests.
set -uo pipefail
V=$OUT/v; mkdir -p $V
ts() { echo "## $(date +%T) ${SECONDS}s $*"; }
ts start
CODEC_GPU_STEPS="build test fuzz bench" timeout 400 bash scripts/gpu_run.sh $V > $V/gpu_run.log 2>&1
echo "gpu_run rc $?"
grep -E "^== |!!|tests passed|PASSED|FAILED|passed" $V/gpu_run.log | tail -30
ts bench
timeout 120 ./build-gpu/codec bench --backend cuda --model llama3.2-1b --workload all --save $V/bench_all_d64.json \
  > $V/bench_all_d64.log 2>&1; echo "d64 rc $?"
ts d64
CODEC_GPU_STEPS="sanitize" timeout $((585 - SECONDS)) bash scripts/gpu_run.sh $V > $V/gpu_run_san.log 2>&1
echo "sanitize rc $?"; grep -E "^== |!!|ERROR SUMMARY|RACECHECK SUMMARY" $V/gpu_run_san.log $V/*check.log | tail -20
ts end
python3 scripts/results_table.py $V/bench_all.json 2>&1 | head -45
cd $OUT && tar czf v.tgz v && rm -rf v
