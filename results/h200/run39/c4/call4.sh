# Run 39, call 4 (the tree of calls 1-3, on call 2's machine with its installed package): the
# end-to-end benchmark, loogle:8 in the engine's synchronous CUDA graphs (CoDec, floor, FlashInfer
# decode), then the generic sm_90 build's GPU tests (carry .whl).
set -uo pipefail
V=$OUT/v; mkdir -p $V
ts() { echo "## $(date +%T) ${SECONDS}s $*"; }
ts start
CODEC_GPU_STEPS="e2e" CODEC_E2E_MODES=graphs CODEC_E2E_GRAPH_BACKENDS=codec,noop,fi_decode \
  CODEC_E2E_WORKLOADS=loogle:8 CODEC_E2E_ARGS=--step-profile timeout 330 bash scripts/gpu_run.sh $V > $V/gpu_run.log 2>&1
echo "e2e rc $?"; tail -8 $V/e2e/graphs/run.log
ts e2e
(cmake -S . -B build-sm90 -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90-real -DCODEC_BUILD_BENCH=OFF > /dev/null &&
  cmake --build build-sm90 -j 16 --target test_engine_cuda > $V/build_sm90.log 2>&1) || echo "!! sm90 build failed"
timeout $((560 - SECONDS)) ./build-sm90/tests/test_engine_cuda > $V/test_sm90_generic.log 2>&1; echo "sm90 generic rc $?"
grep -E "PASSED|FAILED" $V/test_sm90_generic.log
ts end
cd $OUT && tar czf v.tgz v && rm -rf v
