# Run 28, call 4 (main at bc7d159): the peer set (bench/peers.py's 21 default workloads, sysprompt:512
# at page sizes 16 and 1) under the read flush: FlashInfer decode and cascade, cuDNN SDPA, the
# Hydragen-style decomposition and PAT (built from .pat/ with scripts/prebuild_pat.sh's kernels).
# flex_attention not run (its per-shape compiles cost device time).
set -uo pipefail
V=$OUT/v; mkdir -p $V
CODEC_GPU_STEPS="build pat peers" CODEC_PEERS=fi_decode,fi_cascade,sdpa,hydragen,pat timeout 500 bash scripts/gpu_run.sh $V
cd $OUT && tar czf v.tgz v && rm -rf v
