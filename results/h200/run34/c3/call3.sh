# Run 34, call 3 (on a1c3f40: run 33's kernels and plans) checked and measured against the peers:
# scripts/gpu_run.sh's build, every C++ test on the GPU (ctest; the generic sm_90 build), PAT built,
# and bench/peers.py's default workloads beside FlashInfer (decode tc/cc, cascade), cuDNN SDPA, the
# Hydragen-style peer and PAT (carry .whl and .pat).
set -uo pipefail
V=$OUT/v; mkdir -p $V
ts() { echo "## $(date +%T) $*"; }
ts start
CODEC_GPU_STEPS="build test pat peers" CODEC_PEERS=fi_decode,fi_cascade,sdpa,hydragen,pat \
  timeout 560 bash scripts/gpu_run.sh $V > $V/gpu_run.log 2>&1
echo "gpu_run rc $?"
grep -E "^== |!!|tests passed|PASSED|FAILED" $V/gpu_run.log | tail -30
python3 scripts/peers_table.py --best $V/peers/peers.json 2>&1 | tail -30
ts end
cd $OUT && tar czf v.tgz v && rm -rf v
