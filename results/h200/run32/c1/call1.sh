# Run 32, call 1 (b1a41af): scripts/gpu_run.sh's build, PAT built from .pat/ (scripts/fetch_pat.sh,
# its kernels prebuilt by scripts/prebuild_pat.sh), and the peer set with PAT beside FlashInfer decode
# and cascade, cuDNN SDPA and Hydragen-style (carry .whl and .pat).
set -uo pipefail
V=$OUT/v; mkdir -p $V
CODEC_GPU_STEPS="build pat peers" CODEC_PEERS=fi_decode,fi_cascade,sdpa,hydragen,pat \
  timeout 575 bash scripts/gpu_run.sh $V > $V/gpu_run.log 2>&1
echo "gpu_run rc $?"
grep -E "^== |!!|Geometric" $V/gpu_run.log | tail -30
cd $OUT && tar czf v.tgz v && rm -rf v
