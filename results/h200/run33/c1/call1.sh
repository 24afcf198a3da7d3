# Run 33, call 1 (8fa08b8, run 32's kernels): scripts/gpu_run.sh's build, every C++ GPU test
# (ctest, the generic sm_90 build), the Python package installed offline and every Python test on
# the GPU, the GPU fuzz and the sanitizers; then `codec profile` of the four tables on these kernels
# (into $V/tables, not data/), and every built-in workload on the committed table (carry .whl).
set -uo pipefail
V=$OUT/v; mkdir -p $V/tables
ts() { echo "## $(date +%T) $*"; }
ts start
CODEC_GPU_STEPS="build test python fuzz sanitize" timeout 420 bash scripts/gpu_run.sh $V > $V/gpu_run.log 2>&1
echo "gpu_run rc $?"
grep -E "^== |!!|ERROR SUMMARY|RACECHECK SUMMARY|tests passed|PASSED|FAILED|passed|failed" $V/gpu_run.log | tail -40
ts checks
for spec in "d128_bf16:" "d128_fp16:--dtype fp16" "d64_bf16:--model llama3.2-1b" "d256_bf16:--model gemma2-9b"; do
  name=${spec%%:*}; args=${spec#*:}
  timeout 60 ./build-gpu/codec profile $args --out $V/tables/nvidia_h200_$name.json > $V/tables/profile_$name.log 2>&1
  echo "profile $name rc $?"
done
ts profiled
[ $SECONDS -lt 470 ] && timeout $((560 - SECONDS)) ./build-gpu/codec bench --backend cuda --workload all \
  --save $V/bench_all.json > $V/bench_all.log 2>&1; echo "bench rc $?"
ts end
cd $OUT && tar czf v.tgz v && rm -rf v
