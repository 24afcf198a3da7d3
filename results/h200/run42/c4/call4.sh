# Run 42, call 4 (main at 3e60cda, kernels as 0b8f624): PAT built, and the peer set: FlashInfer decode and cascade, cuDNN SDPA,
# Hydragen-style, PAT, beside CoDec (carry .whl and .pat).

set -uo pipefail
V=$OUT/v; mkdir -p $V
ts() { echo "## $(date +%T) ${SECONDS}s $*"; }
ts start
git checkout -q -- data/cost_tables 2>/dev/null || true
CODEC_GPU_STEPS="build pat peers" CODEC_PEERS=fi_decode,fi_cascade,sdpa,hydragen,pat \
  timeout 560 bash scripts/gpu_run.sh $V > $V/gpu_run.log 2>&1
echo "gpu_run rc $?"
grep -E "^== |!!" $V/gpu_run.log | tail -30
python3 scripts/peers_table.py --best $V/peers/peers.json 2>&1 | tail -30
ts end
cd $OUT && tar czf v.tgz v && rm -rf v
