# Run 47, call 1 (main: run 45's kernels, 4bcd2d4): every C++ test on the GPU and codec fuzz, then the
# three cost tables not profiled on run 44's and 45's kernels (fp16 at head_dim 128, bf16 at 64 and 256)
# re-profiled into $V/tables and each timed against the committed one, scripts/gpu_ab.sh on one build
# (old: the committed table, new: the re-profiled one), two rounds alternating.
set -uo pipefail
V=$OUT/v; mkdir -p $V/tables
ts() { echo "## $(date +%T) ${SECONDS}s $*"; }
ts start
CODEC_GPU_STEPS="build test fuzz" timeout 300 bash scripts/gpu_run.sh $V > $V/gpu_run.log 2>&1
echo "gpu_run rc $?"
grep -E "^== |!!|tests passed|PASSED|FAILED|passed" $V/gpu_run.log | tail -12
ts checked
specs=("d128_fp16|--dtype fp16|seq:128,seq:2048,depth:2,depth:4,shape:DT,batch:16,batch:64,long,loogle:8,fewshot,sysprompt:512,ratio:0.2"
       "d64_bf16|--model llama3.2-1b|seq:128,depth:2,depth:3,shape:2,depth:6,batch:64,long,loogle:8,fewshot,sysprompt:512"
       "d256_bf16|--model gemma2-9b|seq:128,depth:2,shape:DT,batch:16,batch:64,long,loogle:8,fewshot")
for spec in "${specs[@]}"; do
  IFS='|' read -r name args w <<< "$spec"
  # shellcheck disable=SC2086
  timeout 60 ./build-gpu/codec profile $args --out $V/tables/nvidia_h200_$name.json > $V/tables/profile_$name.log 2>&1
  echo "profile $name rc $?"
done
ts profiled
for spec in "${specs[@]}"; do
  IFS='|' read -r name args w <<< "$spec"
  [ $SECONDS -lt 480 ] || { ts "$name skipped"; continue; }
  CODEC_AB_TESTS=0 CODEC_AB_ROUNDS=2 CODEC_AB_OLD_ARGS="--cost-table data/cost_tables/nvidia_h200_$name.json" \
    CODEC_AB_NEW_ARGS="--cost-table $V/tables/nvidia_h200_$name.json" \
    timeout $((585 - SECONDS)) bash scripts/gpu_ab.sh $V/ab_$name -- "$args --workload $w" > /dev/null 2>&1
  echo "== $name"; python3 scripts/ab_summary.py $V/ab_$name/ab.log
  ts "$name timed"
done
cd $OUT && tar czf v.tgz v && rm -rf v
