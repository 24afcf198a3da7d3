# Run 28, call 5 (main at bc7d159): compute-sanitizer memcheck, racecheck, synccheck and initcheck
# (gpu_run.sh's sanitize step) on the new kernel, in what device time was left.
set -uo pipefail
V=$OUT/v; mkdir -p $V
CODEC_GPU_STEPS="build sanitize" timeout 115 bash scripts/gpu_run.sh $V > $V/driver.log 2>&1
echo "rc $?"; grep -E "ERROR SUMMARY|failed|status" $V/*.log | tail -8
cd $OUT && tar czf v.tgz v && rm -rf v
