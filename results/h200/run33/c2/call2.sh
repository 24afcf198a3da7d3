# Run 33, call 2: the tree (tasks priced by whole KV tiles, --price-tile, default 64; 32 at
# head_dim 256) against itself with --price-tile 0 (8fa08b8's plans), and with call 1's re-profiled
# tables (abtmp/tables), in two alternating rounds on the workloads whose plans change, at head_dim
# 128, 64 and 256, with a few controls; the GPU tests and racecheck of the wide test first (carry abtmp).
set -uo pipefail
V=$OUT/v; mkdir -p $V
ts() { echo "## $(date +%T) $*"; }
ts start
cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a-real > /dev/null &&
  cmake --build build-gpu -j 16 --target codec_tool test_engine_cuda > $V/build.log 2>&1 || echo "!! build failed"
ts built
timeout 120 ./build-gpu/tests/test_engine_cuda > $V/gpu_tests.log 2>&1; echo "gpu tests rc $?"; grep -E "PASSED|FAILED" $V/gpu_tests.log
timeout 100 compute-sanitizer --error-exitcode 1 --tool racecheck ./build-gpu/tests/test_engine_cuda \
  --gtest_filter=CudaEngine.WideTasksMatchTheReference > $V/racecheck.log 2>&1; echo "racecheck rc $?"; tail -2 $V/racecheck.log
ts checks
T=abtmp/tables
row() { grep -E "^[A-Za-z0-9_.:-]+ +[0-9.]+ " | sed "s/^/### $1 | /"; }
bench() { timeout 100 ./build-gpu/codec bench --backend cuda "$@" 2>/dev/null; }
W128=seq:128,seq:1024,depth:2,depth:3,shape:2,shape:DT,loogle:8,loogle:16,ratio:0.1,batch:64,long,batch:32,fewshot,sysprompt:64
W64=seq:128,seq:256,seq:1024,depth:3,shape:3,shape:4,long,loogle:8
W256=seq:128,seq:2048,loogle:4,loogle:16
for r in 1 2; do
  bench --workload $W128 --price-tile 0 | row "old r$r" >> $V/ab.log
  bench --workload $W128 | row "new r$r" >> $V/ab.log
  bench --workload $W128 --cost-table $T/nvidia_h200_d128_bf16.json | row "tab r$r" >> $V/ab.log
  bench --workload $W128 --cost-table $T/nvidia_h200_d128_bf16.json --price-tile 0 | row "tab0 r$r" >> $V/ab.log
  ts "r$r d128"
  for m in llama3.2-1b:d64:$W64 gemma2-9b:d256:$W256; do
    IFS=: read -r model d w <<< "$m"
    bench --workload $w --model $model --price-tile 0 | row "old r$r" | sed "s/| \([^ ]*\)/| \1@$d/" >> $V/ab.log
    bench --workload $w --model $model | row "new r$r" | sed "s/| \([^ ]*\)/| \1@$d/" >> $V/ab.log
    bench --workload $w --model $model --cost-table $T/nvidia_h200_${d}_bf16.json | row "tab r$r" | sed "s/| \([^ ]*\)/| \1@$d/" >> $V/ab.log
  done
  ts "r$r"
done
python3 scripts/ab_summary.py $V/ab.log
ts end
cd $OUT && tar czf v.tgz v && rm -rf v
