# Run 41, call 3 (call 2's "new" tree): every C++ test (sm_90a, and the GPU
# tests on a generic sm_90 build), every built-in workload, then memcheck and
# racecheck (shared memory) of the wide test, whose plans of wide tasks alone
# that merge check the new launch order against the fp64 reference.
set -uo pipefail
V=$OUT/v; mkdir -p $V
ts() { echo "## $(date +%T) ${SECONDS}s $*"; }
ts start
CODEC_GPU_STEPS="build test bench" timeout 420 bash scripts/gpu_run.sh $V > $V/gpu_run.log 2>&1
echo "gpu_run rc $?"
grep -E "^== |!!|tests passed|PASSED|FAILED" $V/gpu_run.log | tail -30
ts bench
san="compute-sanitizer --error-exitcode 1"
timeout $((585 - SECONDS)) $san --tool memcheck ./build-gpu/tests/test_engine_cuda --gtest_filter=CudaEngine.WideTasksMatchTheReference > $V/memcheck.log 2>&1; echo "memcheck rc $?"; tail -3 $V/memcheck.log
timeout $((590 - SECONDS)) $san --tool racecheck ./build-gpu/tests/test_engine_cuda --gtest_filter=CudaEngine.WideTasksMatchTheReference > $V/racecheck.log 2>&1; echo "racecheck rc $?"; tail -3 $V/racecheck.log
ts end
python3 scripts/results_table.py $V/bench_all.json 2>&1 | head -45
cd $OUT && tar czf v.tgz v && rm -rf v
