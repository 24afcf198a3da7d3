# Run 37, call 3: Python tests on the GPU (the package installed offline, as a user does) on the
# commit with the plan prefetch and the fallback test's CUDA check: test_transformers.py and test_torch.py
# (the device time left was too little for the whole suite; carry .whl).
set -uo pipefail
V=$OUT/v; mkdir -p $V
ts() { echo "## $(date +%T) ${SECONDS}s $*"; }
ts start
git rev-parse HEAD > $V/head.txt 2>/dev/null
CODEC_PYTESTS="tests/python/test_transformers.py tests/python/test_torch.py" CODEC_GPU_STEPS=python timeout 380 bash scripts/gpu_run.sh $V > $V/gpu_run.log 2>&1
echo "gpu_run rc $?"
grep -E "^== |!!|passed|failed" $V/gpu_run.log | tail -6
ts end
cd $OUT && tar czf v.tgz v && rm -rf v
