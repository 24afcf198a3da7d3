# Run 31, call 4 (5df00d7): scripts/gpu_run.sh's build, every C++ GPU test (ctest, the generic
# sm_90 build), the sanitizers, every built-in workload, and the peer set (FlashInfer decode and
# cascade, cuDNN SDPA, Hydragen-style; carry .whl) beside CoDec.
set -uo pipefail
V=$OUT/v; mkdir -p $V
CODEC_GPU_STEPS="build test sanitize bench peers" CODEC_PEERS=fi_decode,fi_cascade,sdpa,hydragen \
  timeout 575 bash scripts/gpu_run.sh $V > $V/gpu_run.log 2>&1
echo "gpu_run rc $?"
grep -E "^== |!!|ERROR SUMMARY|RACECHECK SUMMARY|tests passed|PASSED|FAILED|Geometric" $V/gpu_run.log | tail -30
cd $OUT && tar czf v.tgz v && rm -rf v
