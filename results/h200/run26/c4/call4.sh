set -uo pipefail
V=$OUT/v; mkdir -p $V
echo "## $(date +%T) start"
CODEC_GPU_STEPS="build test sanitize python" timeout 540 bash scripts/gpu_run.sh $V/g
echo "## $(date +%T) done"
