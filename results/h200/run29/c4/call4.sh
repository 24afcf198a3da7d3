# Run 29, call 4: the peer set on a4c4b87 (packed small tasks): FlashInfer decode and cascade,
# cuDNN SDPA and the Hydragen-style peer beside CoDec, same KV data (carry .whl; PAT not built here).
set -uo pipefail
V=$OUT/v; mkdir -p $V
CODEC_GPU_STEPS="build peers" CODEC_PEERS=fi_decode,fi_cascade,sdpa,hydragen timeout 560 bash scripts/gpu_run.sh $V \
  > $V/gpu_run.log 2>&1
echo "gpu_run rc $?"; grep -E "^== |Geometric" $V/gpu_run.log $V/peers/*.log 2>/dev/null | tail -12
cd $OUT && tar czf v.tgz v && rm -rf v
