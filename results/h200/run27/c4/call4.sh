# Run 27, call 4: the peer set (bench/peers.py defaults: 21 workloads with sysprompt:512 at page
# sizes 16 and 1) under the read flush: FlashInfer decode and cascade, cuDNN SDPA, on main's kernels
# and tables. flex_attention, Hydragen-style and PAT not run (device time).
set -uo pipefail
V=$OUT/v; mkdir -p $V
CODEC_GPU_STEPS="build peers" CODEC_PEERS=fi_decode,fi_cascade,sdpa timeout 480 bash scripts/gpu_run.sh $V
cd $OUT && tar czf v.tgz v && rm -rf v
