# Run 39, call 5 (call 1's build, warm): compute-sanitizer memcheck and racecheck of the wide test,
# which now has a padded-page layout, and memcheck of the layouts test (no carry).
set -uo pipefail
V=$OUT/v; mkdir -p $V
ts() { echo "## $(date +%T) ${SECONDS}s $*"; }
ts start
san="compute-sanitizer --error-exitcode 1"
t=./build-gpu/tests/test_engine_cuda
timeout 200 $san --tool memcheck $t --gtest_filter=CudaEngine.WideTasksMatchTheReference:CudaEngine.LayoutsGiveBitIdenticalResults > $V/memcheck.log 2>&1
echo "memcheck rc $?"; tail -3 $V/memcheck.log
ts memcheck
timeout $((420 - SECONDS)) $san --tool racecheck $t --gtest_filter=CudaEngine.WideTasksMatchTheReference > $V/racecheck_wide.log 2>&1
echo "racecheck rc $?"; tail -3 $V/racecheck_wide.log
ts end
cd $OUT && tar czf v.tgz v && rm -rf v
