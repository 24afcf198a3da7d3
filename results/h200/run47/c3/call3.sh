# Run 47, call 3 (main: run 45's kernels, 4bcd2d4; call 1's tables): PAT linked on the kernels
# scripts/prebuild_pat.sh compiled, the peer set (FlashInfer decode and cascade, cuDNN SDPA, the
# Hydragen-style peer, PAT) beside CoDec, then compute-sanitizer memcheck of the GPU tests in the
# time left (carry .whl and .pat).
set -uo pipefail
V=$OUT/v; mkdir -p $V
ts() { echo "## $(date +%T) ${SECONDS}s $*"; }
ts start
CODEC_GPU_STEPS="build pat peers" CODEC_PEERS=fi_decode,fi_cascade,sdpa,hydragen,pat \
  timeout 400 bash scripts/gpu_run.sh $V > $V/gpu_run.log 2>&1
echo "gpu_run rc $?"
grep -E "^== |!!" $V/gpu_run.log | tail -12
python3 scripts/peers_table.py --best $V/peers/peers.json 2>&1 | tail -32
ts peers
if [ $SECONDS -lt 400 ]; then
  t=./build-gpu/tests/test_engine_cuda
  timeout $((470 - SECONDS)) compute-sanitizer --error-exitcode 1 --tool memcheck $t \
    --gtest_filter='CudaEngine.EdgeCases:CudaEngine.SmallTasksRunPacked:CudaEngine.WideTasksMatchTheReference:CudaEngine.ManyPartialsPerRow:CudaEngine.StridedQueryOutputAndLse:CudaEngine.GraphReplaysEveryPlanAtOneCapacity:CudaEngine.MergeStatesAndCopyPagesMatchTheCpu' \
    > $V/memcheck.log 2>&1
  echo "memcheck rc $?"; grep -E "ERROR SUMMARY|PASSED|FAILED" $V/memcheck.log
fi
ts end
cd $OUT && tar czf v.tgz v && rm -rf v
