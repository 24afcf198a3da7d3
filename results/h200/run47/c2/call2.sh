# Run 47, call 2 (main: run 45's kernels, 4bcd2d4): PAT built, the peer set (FlashInfer decode and
# cascade, cuDNN SDPA, the Hydragen-style peer, PAT) beside CoDec, then every built-in workload at
# head_dim 128 (bf16) and 64 (llama3.2-1b, call 1's table) (carry .whl and .pat).
set -uo pipefail
V=$OUT/v; mkdir -p $V
ts() { echo "## $(date +%T) ${SECONDS}s $*"; }
ts start
CODEC_GPU_STEPS="build pat peers" CODEC_PEERS=fi_decode,fi_cascade,sdpa,hydragen,pat \
  timeout 420 bash scripts/gpu_run.sh $V > $V/gpu_run.log 2>&1
echo "gpu_run rc $?"
grep -E "^== |!!" $V/gpu_run.log | tail -12
python3 scripts/peers_table.py --best $V/peers/peers.json 2>&1 | tail -32
ts peers
timeout $((585 - SECONDS)) ./build-gpu/codec bench --backend cuda --workload all --save $V/bench_all.json > $V/bench_all.log 2>&1
echo "bench rc $?"
ts bench
[ $SECONDS -lt 540 ] && timeout $((590 - SECONDS)) ./build-gpu/codec bench --backend cuda --model llama3.2-1b --workload all \
  --save $V/bench_all_d64.json > $V/bench_all_d64.log 2>&1; echo "d64 rc $?"
ts end
python3 scripts/results_table.py $V/bench_all.json 2>&1 | head -45
cd $OUT && tar czf v.tgz v && rm -rf v
