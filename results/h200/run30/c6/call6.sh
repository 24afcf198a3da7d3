# Run 30, call 6 (5355d7a, main's kernels): the build and scripts/gpu_run.sh's sanitizers
# (memcheck, racecheck, synccheck, initcheck; the wide test now in the first three).
set -uo pipefail
V=$OUT/v; mkdir -p $V
CODEC_GPU_STEPS="build sanitize" timeout 500 bash scripts/gpu_run.sh $V > $V/gpu_run.log 2>&1
echo "gpu_run rc $?"; grep -E "^== |!!|ERROR SUMMARY|RACECHECK SUMMARY|PASSED|FAILED" $V/gpu_run.log | tail -20
cd $OUT && tar czf v.tgz v && rm -rf v
