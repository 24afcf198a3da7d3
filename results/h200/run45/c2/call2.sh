# Run 45, call 2 (main at 4332ec5): PAT built, and the peer set: FlashInfer decode and cascade, cuDNN SDPA,
# Hydragen-style, PAT, beside CoDec (carry .whl and .pat).
set -uo pipefail
V=$OUT/v; mkdir -p $V
ts() { echo "## $(date +%T) ${SECONDS}s $*"; }
ts start
CODEC_GPU_STEPS="build pat peers" CODEC_PEERS=fi_decode,fi_cascade,sdpa,hydragen,pat \
  timeout 570 bash scripts/gpu_run.sh $V > $V/gpu_run.log 2>&1
echo "gpu_run rc $?"
grep -E "^== |!!" $V/gpu_run.log | tail -30
python3 scripts/peers_table.py --best $V/peers/peers.json 2>&1 | tail -32
ts end
cd $OUT && tar czf v.tgz v && rm -rf v
