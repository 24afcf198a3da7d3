# Run 28, call 3 (main at bc7d159): every built-in workload and the two dense shapes on the new
# kernel; the bf16 cost tables at head_dim 128 and 64 re-profiled on it and A/B'd against the
# committed ones (same build, alternating, two rounds).
set -uo pipefail
V=$OUT/v; mkdir -p $V
ts() { echo "## $(date +%T) $*"; }
ts start
CODEC_GPU_STEPS="build" bash scripts/gpu_run.sh $V/p > $V/build.log 2>&1; tail -1 $V/build.log; ts built
./build-gpu/codec bench --backend cuda --workload all --save $V/bench_all.json > $V/bench_all.log 2>&1
echo "bench_all rc $?"; ts bench
for spec in 4:128:8192 2:256:16384; do
  IFS=: read docs reqs tokens <<< "$spec"
  python3 -c "import json,sys; d,r,t=map(int,sys.argv[1:]); print(json.dumps({'name':f'dense_{d}x{r}x{t}',
    'nodes':[{'id':f'doc{i}','parent':None,'tokens':t} for i in range(d)],
    'requests':[{'node':f'doc{i}'} for i in range(d) for _ in range(r)]}))" $docs $reqs $tokens > /tmp/dense_${spec//:/_}.json
  timeout 120 ./build-gpu/codec bench --backend cuda --workload /tmp/dense_${spec//:/_}.json \
    --save $V/dense_${spec//:/_}.json > $V/dense_${spec//:/_}.log 2>&1; tail -1 $V/dense_${spec//:/_}.log
done
ts dense
mkdir -p $V/tables
./build-gpu/codec profile --out $V/tables/nvidia_h200_d128_bf16.json > $V/tables/profile_d128.log 2>&1
./build-gpu/codec profile --model llama3.2-1b --out $V/tables/nvidia_h200_d64_bf16.json > $V/tables/profile_d64.log 2>&1
ts profiled
CODEC_AB_ROUNDS=2 CODEC_AB_OLD_ARGS="--cost-table data/cost_tables/nvidia_h200_d128_bf16.json" \
  CODEC_AB_NEW_ARGS="--cost-table $V/tables/nvidia_h200_d128_bf16.json" timeout 300 bash scripts/gpu_ab.sh $V/ab128 -- \
  "--workload depth:2" "--workload shape:DT" "--workload seq:128" "--workload depth:4" "--workload sysprompt:64" \
  "--workload sysprompt:512" "--workload fewshot" "--workload loogle:8" "--workload long" "--workload batch:64" \
  "--workload ratio:0.2" "--workload batch:16" > /dev/null 2>&1
python3 scripts/ab_summary.py $V/ab128/ab.log | tail -14; ts ab128
CODEC_AB_ROUNDS=2 CODEC_AB_OLD_ARGS="--model llama3.2-1b --cost-table data/cost_tables/nvidia_h200_d64_bf16.json" \
  CODEC_AB_NEW_ARGS="--model llama3.2-1b --cost-table $V/tables/nvidia_h200_d64_bf16.json" timeout 200 \
  bash scripts/gpu_ab.sh $V/ab64 -- "--workload depth:2" "--workload seq:128" "--workload fewshot" \
  "--workload sysprompt:512" "--workload loogle:8" "--workload batch:64" > /dev/null 2>&1
python3 scripts/ab_summary.py $V/ab64/ab.log | tail -8; ts ab64
cd $OUT && tar czf v.tgz v && rm -rf v
