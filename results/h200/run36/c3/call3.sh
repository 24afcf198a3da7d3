# Run 36, call 3 (on dcba67e): every Python test on the GPU (the package installed offline as a user
# does), then the end-to-end benchmark: transformers' continuous batching, Qwen3-4B's shape, loogle:8
# in the engine's CUDA graphs, CoDec, the no-attention floor and FlashInfer decode (carry .whl).
set -uo pipefail
V=$OUT/v; mkdir -p $V
ts() { echo "## $(date +%T) ${SECONDS}s $*"; }
ts start
CODEC_GPU_STEPS="python e2e" CODEC_E2E_MODES=graphs CODEC_E2E_GRAPH_BACKENDS=codec,noop,fi_decode \
  CODEC_E2E_WORKLOADS=loogle:8 CODEC_E2E_ARGS=--step-profile timeout 570 bash scripts/gpu_run.sh $V > $V/gpu_run.log 2>&1
echo "gpu_run rc $?"
grep -E "^== |!!|passed|failed" $V/gpu_run.log | tail -8
tail -8 $V/e2e/graphs/run.log
ts end
cd $OUT && tar czf v.tgz v && rm -rf v
