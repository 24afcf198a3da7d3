# Run 30, call 7 (5507581, main): the Python package installed offline and every Python test on the GPU.
set -uo pipefail
V=$OUT/v; mkdir -p $V
CODEC_GPU_STEPS="python" timeout 230 bash scripts/gpu_run.sh $V > $V/gpu_run.log 2>&1
echo "gpu_run rc $?"; grep -E "^== |passed|failed|!!" $V/gpu_run.log | tail -6
