# Run 31, call 5 (5df00d7's code): scripts/gpu_run.sh's python step: the package installed offline
# as a user does, then every Python test (torch on the GPU, CUDA graphs, torch.compile, opcheck).
set -uo pipefail
V=$OUT/v; mkdir -p $V
CODEC_GPU_STEPS="python" timeout 330 bash scripts/gpu_run.sh $V > $V/gpu_run.log 2>&1
echo "gpu_run rc $?"; grep -E "^== |!!|passed|failed" $V/gpu_run.log | tail -8
cd $OUT && tar czf v.tgz v && rm -rf v
