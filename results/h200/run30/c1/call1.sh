# Run 30, call 1: the wide kernel (uncommitted tree). Build; the wide GPU test first (stop if it fails or
# hangs); every GPU test; memcheck on the wide test; then each workload once with --wide auto,off (wide
# tasks on and off, the same build, one process, one flat run).
set -uo pipefail
V=$OUT/v; mkdir -p $V
ts() { echo "## $(date +%T) $*"; }
ts start
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.limit --format=csv,noheader
cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a-real > $V/configure.log 2>&1
cmake --build build-gpu -j 16 --target codec_tool test_engine_cuda > $V/build.log 2>&1; echo "build rc $?"
grep -E "error|spill" $V/build.log | head; ts built
t=./build-gpu/tests/test_engine_cuda
timeout 90 $t --gtest_filter='CudaEngine.WideTasks*' > $V/wide_test.log 2>&1; rc=$?; echo "wide test rc $rc"
grep -E "OK|FAILED|Failure|Expected|Which|rel_l2|max_abs" $V/wide_test.log | head -40
[ $rc -ne 0 ] && exit 0
ts wide_test
timeout 240 $t > $V/gpu_tests.log 2>&1; echo "gpu tests rc $?"; grep -E "FAILED|PASSED|SKIPPED" $V/gpu_tests.log | head -20
ts tests
for spec in 4:128:8192 2:256:16384; do
  IFS=: read docs reqs tokens <<< "$spec"
  python3 -c "import json,sys; d,r,t=map(int,sys.argv[1:]); print(json.dumps({'name':f'dense_{d}x{r}x{t}',
    'nodes':[{'id':f'doc{i}','parent':None,'tokens':t} for i in range(d)],
    'requests':[{'node':f'doc{i}'} for i in range(d) for _ in range(r)]}))" $docs $reqs $tokens > /tmp/dense_${spec//:/_}.json
done
for w in /tmp/dense_4_128_8192.json /tmp/dense_2_256_16384.json batch:64 long "sysprompt:512" "sysprompt:512 --page-size 1" \
         loogle:8 batch:32; do
  timeout 150 ./build-gpu/codec bench --backend cuda --workload $w --wide auto,off 2>/dev/null | tail -2
done | tee $V/ab_wide.log
ts ab
timeout 100 compute-sanitizer --error-exitcode 1 --tool memcheck $t --gtest_filter='CudaEngine.WideTasks*' \
  > $V/memcheck.log 2>&1; echo "memcheck rc $?"; tail -3 $V/memcheck.log
ts done
