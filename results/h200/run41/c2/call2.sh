# Run 41, call 2: a plan of wide tasks alone launches no PAC kernel, the merge
# waiting on the wide kernel directly ("new"), against main's f4c1064, where
# 264 PAC blocks with nothing to do wait for the wide grid before the merge
# may launch ("old"), and "new" with one pass everywhere (f303288's producer:
# "onepass"), three builds alternating, three rounds (carry abtmp:
# cuda_engine.cu = main's, onepass.patch). test_engine_cuda runs on "new".
set -uo pipefail
V=$OUT/v; mkdir -p $V
CODEC_AB_ROUNDS=3 CODEC_AB_PATCHES="onepass=abtmp/onepass.patch" \
  bash scripts/gpu_ab.sh $V src/engine/cuda/cuda_engine.cu -- \
  "--workload sysprompt:64" "--workload sysprompt:128" "--workload sysprompt:256" "--workload sysprompt:512" \
  "--workload long" "--workload dense:4" "--workload batch:64" "--workload depth:2" "--workload fewshot"
python3 scripts/ab_summary.py $V/ab.log | tee $V/summary.txt
