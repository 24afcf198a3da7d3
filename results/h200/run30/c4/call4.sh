# Run 30, call 4 (ab46884's kernels): the peer set (FlashInfer decode and cascade, cuDNN SDPA,
# Hydragen-style) beside CoDec, same KV data (carry .whl; PAT not built here).
set -uo pipefail
V=$OUT/v; mkdir -p $V
CODEC_GPU_STEPS="build peers" CODEC_PEERS=fi_decode,fi_cascade,sdpa,hydragen timeout 570 bash scripts/gpu_run.sh $V \
  > $V/gpu_run.log 2>&1
echo "gpu_run rc $?"; grep -E "^== |Geometric" $V/gpu_run.log $V/peers/*.log 2>/dev/null | tail -12
cd $OUT && tar czf v.tgz v && rm -rf v
