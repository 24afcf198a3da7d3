# Run 33, call 3 (the tree to be committed: tasks priced by whole tiles, call 1's bf16 tables at
# head_dim 128 and 256): every built-in workload; the fp16 table of call 1 against the committed one
# (two rounds); then the end-to-end benchmark: transformers' continuous batching, Qwen3-4B's shape,
# loogle:8 in the engine's CUDA graphs, CoDec, the no-attention floor and FlashInfer decode (carry .whl, abtmp).
set -uo pipefail
V=$OUT/v; mkdir -p $V
ts() { echo "## $(date +%T) $*"; }
ts start
cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a-real > /dev/null &&
  cmake --build build-gpu -j 16 --target codec_tool > $V/build.log 2>&1 || echo "!! build failed"
ts built
timeout 100 ./build-gpu/codec bench --backend cuda --workload all --save $V/bench_all.json > $V/bench_all.log 2>&1; echo "bench rc $?"
ts bench
row() { grep -E "^[A-Za-z0-9_.:-]+ +[0-9.]+ " | sed "s/^/### $1 | /"; }
W=seq:128,seq:1024,depth:2,depth:3,shape:DT,loogle:8,long,batch:32
for r in 1 2; do
  timeout 40 ./build-gpu/codec bench --backend cuda --dtype fp16 --workload $W 2>/dev/null | row "old r$r" >> $V/ab_fp16.log
  timeout 40 ./build-gpu/codec bench --backend cuda --dtype fp16 --workload $W --cost-table abtmp/tables/nvidia_h200_d128_fp16.json 2>/dev/null | row "tab r$r" >> $V/ab_fp16.log
done
python3 scripts/ab_summary.py $V/ab_fp16.log
ts fp16
CODEC_GPU_STEPS="python e2e" CODEC_PYTESTS=tests/python/test_e2e_check.py CODEC_E2E_MODES=graphs \
  CODEC_E2E_GRAPH_BACKENDS=codec,noop,fi_decode CODEC_E2E_WORKLOADS=loogle:8 CODEC_E2E_ARGS=--step-profile \
  timeout $((490 - SECONDS)) bash scripts/gpu_run.sh $V/g > $V/gpu_run.log 2>&1
echo "gpu_run rc $?"
grep -E "^== |!!|passed|failed" $V/gpu_run.log | tail -8
tail -6 $V/g/e2e/graphs/run.log
mv $V/g/e2e/graphs/run.log $V/e2e_run.log; mv $V/g/e2e/graphs/e2e_loogle_8.json $V/ 2>/dev/null; mv $V/g/pytest.log $V/ 2>/dev/null; rm -rf $V/g
ts end
cd $OUT && tar czf v.tgz v && rm -rf v
