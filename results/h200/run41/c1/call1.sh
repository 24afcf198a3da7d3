# Run 41, call 1: the wide producer's copy loops compiled once for each way of
# copying (0b67d30's file: "new") against main's f4c1064 (8a64ae9's branches:
# "old") and one pass everywhere (f303288's file: "onepass"), three builds
# alternating, three rounds (carry abtmp: pac_wide.cuh = main's, onepass.patch).
set -uo pipefail
V=$OUT/v; mkdir -p $V
CODEC_AB_ROUNDS=3 CODEC_AB_PATCHES="onepass=abtmp/onepass.patch" \
  bash scripts/gpu_ab.sh $V src/engine/cuda/kernels/pac_wide.cuh -- \
  "--workload sysprompt:256" "--workload sysprompt:512" "--workload sysprompt:512 --page-size 1" \
  "--workload dense:2" "--workload dense:4" "--workload long" "--workload batch:64" \
  "--workload batch:32" "--workload loogle:8" "--workload fewshot"
python3 scripts/ab_summary.py $V/ab.log | tee $V/summary.txt
