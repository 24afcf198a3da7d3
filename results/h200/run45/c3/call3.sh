# Run 45, call 3 (main at 4332ec5): every Python test on the GPU, FlashInfer equality included (carry .whl),
# and the gloo rehearsal of --tp on this machine's CPUs; then the end to end, loogle:8 in the engine's
# synchronous CUDA graphs (CoDec, the floor, FlashInfer decode), as run 42's call 3.
set -uo pipefail
V=$OUT/v; mkdir -p $V
ts() { echo "## $(date +%T) ${SECONDS}s $*"; }
ts start
CODEC_GPU_STEPS="build python" timeout 360 bash scripts/gpu_run.sh $V > $V/gpu_run.log 2>&1; echo "python rc $?"
grep -E "passed|failed|SKIPPED|^!!" $V/gpu_run.log | tail -30
ts python
CODEC_GPU_STEPS="e2e" CODEC_E2E_MODES=graphs CODEC_E2E_GRAPH_BACKENDS=codec,noop,fi_decode \
  CODEC_E2E_WORKLOADS=loogle:8 CODEC_E2E_ARGS=--step-profile timeout $((585 - SECONDS)) bash scripts/gpu_run.sh $V > $V/gpu_run_e2e.log 2>&1
echo "e2e rc $?"; tail -8 $V/e2e/graphs/run.log
ts e2e
cd $OUT && tar czf v.tgz v && rm -rf v
