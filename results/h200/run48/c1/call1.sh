# Run 48, call 1 (main at 4a6c9bf: run 45's kernels, 4bcd2d4, and run 47's tables): the four compute-sanitizer
# tools on the GPU tests, every Python test on the GPU (FlashInfer equality included; carry .whl) with the
# gloo rehearsal of --tp, then the end to end: loogle:8 in the engine's synchronous CUDA graphs (CoDec, the
# floor, FlashInfer decode), as run 45's call 3.
set -uo pipefail
V=$OUT/v; mkdir -p $V
ts() { echo "## $(date +%T) ${SECONDS}s $*"; }
ts start
CODEC_GPU_STEPS="build sanitize" timeout 300 bash scripts/gpu_run.sh $V > $V/gpu_run_san.log 2>&1
echo "sanitize rc $?"; grep -E "^== |!!|ERROR SUMMARY|RACECHECK SUMMARY" $V/gpu_run_san.log $V/*check.log | tail -20
ts sanitize
CODEC_GPU_STEPS="python" timeout $((560 - SECONDS)) bash scripts/gpu_run.sh $V > $V/gpu_run_py.log 2>&1
echo "python rc $?"; grep -E "passed|failed|SKIPPED|^!!" $V/gpu_run_py.log | tail -30
ts python
CODEC_GPU_STEPS="e2e" CODEC_E2E_MODES=graphs CODEC_E2E_GRAPH_BACKENDS=codec,noop,fi_decode \
  CODEC_E2E_WORKLOADS=loogle:8 CODEC_E2E_ARGS=--step-profile timeout $((590 - SECONDS)) bash scripts/gpu_run.sh $V > $V/gpu_run_e2e.log 2>&1
echo "e2e rc $?"; tail -8 $V/e2e/graphs/run.log
ts e2e
cd $OUT && tar czf v.tgz v && rm -rf v
