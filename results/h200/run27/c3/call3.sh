# Run 27, call 3: the four cost tables profiled again under the read flush (now the default);
# A/B of the old tables (abtmp/old_*, run 21's and earlier, write flush) against the new on the
# plans they move, both timed under the read flush; every built-in workload on the new tables.
set -uo pipefail
V=$OUT/v; mkdir -p $V/p
ts() { echo "## $(date +%T) $*"; }
ts start
CODEC_GPU_STEPS="build" bash scripts/gpu_run.sh $V/p > $V/build.log 2>&1; tail -2 $V/build.log
ts built
( time ./build-gpu/codec profile ) > $V/p/profile.log 2>&1; tail -2 $V/p/profile.log
( time ./build-gpu/codec profile --model llama3.2-1b ) > $V/p/profile_d64.log 2>&1; tail -2 $V/p/profile_d64.log
( time ./build-gpu/codec profile --dtype fp16 ) > $V/p/profile_fp16.log 2>&1; tail -2 $V/p/profile_fp16.log
( time ./build-gpu/codec profile --model gemma2-9b ) > $V/p/profile_d256.log 2>&1; tail -2 $V/p/profile_d256.log
cp data/cost_tables/*.json $V/p/
ts profiled
A="--workload"
CODEC_AB_ROUNDS=2 CODEC_AB_OLD_ARGS="--cost-table abtmp/old_nvidia_h200_d128_bf16.json" timeout 200 bash scripts/gpu_ab.sh $V/ab128 -- \
  "$A depth:2" "$A depth:3" "$A shape:DT" "$A seq:128" "$A depth:4" "$A batch:64" "$A long" "$A loogle:8" \
  "$A fewshot" "$A sysprompt:512"
ts ab128
CODEC_AB_ROUNDS=2 CODEC_AB_OLD_ARGS="--cost-table abtmp/old_nvidia_h200_d64_bf16.json" timeout 110 bash scripts/gpu_ab.sh $V/ab64 -- \
  "$A depth:2 --model llama3.2-1b" "$A depth:3 --model llama3.2-1b" "$A shape:DT --model llama3.2-1b" "$A seq:128 --model llama3.2-1b" \
  "$A batch:64 --model llama3.2-1b" "$A loogle:8 --model llama3.2-1b" "$A fewshot --model llama3.2-1b" "$A shape:4 --model llama3.2-1b"
ts ab64
CODEC_AB_ROUNDS=1 CODEC_AB_OLD_ARGS="--cost-table abtmp/old_nvidia_h200_d128_fp16.json" timeout 45 bash scripts/gpu_ab.sh $V/abfp16 -- \
  "$A depth:2 --dtype fp16" "$A batch:64 --dtype fp16" "$A loogle:8 --dtype fp16"
CODEC_AB_ROUNDS=1 CODEC_AB_OLD_ARGS="--cost-table abtmp/old_nvidia_h200_d256_bf16.json" timeout 45 bash scripts/gpu_ab.sh $V/ab256 -- \
  "$A depth:2 --model gemma2-9b" "$A batch:64 --model gemma2-9b" "$A loogle:8 --model gemma2-9b"
ts ab
./build-gpu/codec bench --backend cuda --workload all --save $V/bench_all.json > $V/bench_all.log 2>&1; echo "bench rc $?"
ts bench
cd $OUT && tar czf v.tgz v && rm -rf v
