# Run 41, call 4 (call 2's "new" tree): every Python test on the GPU (no
# FlashInfer wheels carried: the tests that need FlashInfer skip, visibly).
set -uo pipefail
V=$OUT/v; mkdir -p $V
CODEC_GPU_STEPS="build python" timeout 380 bash scripts/gpu_run.sh $V > $V/gpu_run.log 2>&1; echo "gpu_run rc $?"
grep -E "passed|failed|SKIPPED|^!!" $V/gpu_run.log | tail -40
