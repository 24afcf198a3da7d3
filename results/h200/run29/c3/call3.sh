# Run 29, call 3: f3f0a40 (packed small tasks) through scripts/gpu_run.sh: the build, every GPU
# test (C++ and Python, FlashInfer from .whl/), the sanitizers and the benchmark suite.
set -uo pipefail
V=$OUT/v; mkdir -p $V
CODEC_GPU_STEPS="build test python sanitize bench" timeout 570 bash scripts/gpu_run.sh $V > $V/gpu_run.log 2>&1
echo "gpu_run rc $?"; grep -E "^== |FAIL|passed|failed|PASSED" $V/gpu_run.log | tail -30
cd $OUT && tar czf v.tgz v && rm -rf v
