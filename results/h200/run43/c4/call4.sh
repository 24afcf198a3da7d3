# Run 43, call 4 (main's tree): gpu_run.sh's python step, whose gloo
# rehearsal of --tp (c81858f: the suite again with no GPU visible) had not
# run on a GPU machine yet; every Python test with the FlashInfer wheels.
set -uo pipefail
V=$OUT/v; mkdir -p $V
CODEC_GPU_STEPS="python" timeout 560 bash scripts/gpu_run.sh $V > $V/gpu_run.log 2>&1; echo "python rc $?"
grep -E "passed|failed|SKIPPED|^!!" $V/gpu_run.log | tail -30
ls $V; tail -5 $V/pytest_gloo.log 2>/dev/null
cd $OUT && tar czf v.tgz v
