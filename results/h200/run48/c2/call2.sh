# Run 48, call 2 (same machine, main at 4a6c9bf, build-gpu/pysite from call 1): what call 1 ran out of time
# for: the gloo rehearsal of --tp, then the end to end, loogle:8 in the engine's synchronous CUDA graphs.
set -uo pipefail
V=$OUT/v; mkdir -p $V
ts() { echo "## $(date +%T) ${SECONDS}s $*"; }
ts start
CODEC_GPU_STEPS="e2e" CODEC_E2E_MODES=graphs CODEC_E2E_GRAPH_BACKENDS=codec,noop,fi_decode \
  CODEC_E2E_WORKLOADS=loogle:8 CODEC_E2E_ARGS=--step-profile timeout 360 bash scripts/gpu_run.sh $V > $V/gpu_run_e2e.log 2>&1
echo "e2e rc $?"; tail -12 $V/e2e/graphs/run.log
ts e2e
export PYTHONPATH="$PWD/build-gpu/pysite:$PWD/build-gpu/site"
CUDA_VISIBLE_DEVICES= timeout $((580 - SECONDS)) python3 -m pytest -rs -q -p no:cacheprovider tests/python/test_bench_e2e.py \
  -k test_two_tensor_parallel_ranks_decode_as_one_process > $V/pytest_gloo.log 2>&1
echo "gloo rc $?"; tail -3 $V/pytest_gloo.log
ts gloo
cd $OUT && tar czf v.tgz v && rm -rf v
