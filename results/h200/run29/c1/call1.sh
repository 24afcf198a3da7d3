# Run 29, call 1: A/B of packed small tasks (old = abtmp/{pac,kernel_traits,kv_loader}.cuh, main's
# 7d5107d), alternating builds, two rounds, after the GPU tests of the new build; then
# compute-sanitizer memcheck, racecheck and synccheck on the pack test.
set -uo pipefail
V=$OUT/v; mkdir -p $V
ts() { echo "## $(date +%T) $*"; }
ts start
CODEC_AB_ROUNDS=2 timeout 480 bash scripts/gpu_ab.sh $V src/engine/cuda/kernels/pac.cuh \
  src/engine/cuda/kernel_traits.cuh src/engine/cuda/tile/kv_loader.cuh -- \
  "--workload depth:2" "--workload shape:DT" "--workload seq:128" "--workload sysprompt:64" \
  "--workload sysprompt:512" "--workload sysprompt:512 --page-size 1" "--workload fewshot" "--workload loogle:8" \
  "--workload long" "--workload batch:64" "--workload flat:64" "--workload flat:8" \
  "--workload fewshot --model llama3.2-1b" "--workload sysprompt:512 --model llama3.2-1b" > $V/ab_driver.log 2>&1
echo "ab rc $?"; grep -E "PASSED|FAILED|SKIPPED" $V/ab_driver.log | tail -5; ts ab
python3 scripts/ab_summary.py $V/ab.log 2>&1 | tail -22
t=./build-gpu/tests/test_engine_cuda
for tool in memcheck racecheck synccheck; do
  timeout 120 compute-sanitizer --error-exitcode 1 --tool $tool $t --gtest_filter=CudaEngine.SmallTasksRunPacked \
    > $V/$tool.log 2>&1; echo "$tool rc $?"; tail -3 $V/$tool.log
done
ts done
cd $OUT && tar czf v.tgz v && rm -rf v
