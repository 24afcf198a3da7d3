# Run 36, call 4 (on dcba67e): every built-in workload on run 35's wide kernel (issue 17's item 7: the
# kernel benchmarks re-run), then, in the time left, call 1's fp16 head_dim 128 table (abtmp/fp16_new.json,
# from c1/v.tgz) against the committed one, two rounds alternating, on workloads whose plans it
# changes (carry abtmp).
set -uo pipefail
V=$OUT/v; mkdir -p $V
ts() { echo "## $(date +%T) ${SECONDS}s $*"; }
ts start
cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a-real > /dev/null &&
  cmake --build build-gpu -j 16 --target codec_tool > $V/build.log 2>&1 || echo "!! build failed"
ts built
timeout 110 ./build-gpu/codec bench --backend cuda --workload all --save $V/bench_all.json > $V/bench_all.log 2>&1
echo "bench all rc $?"; tail -3 $V/bench_all.log
ts "bench all"
row() { grep -E "^[A-Za-z0-9_.:-]+ +[0-9.]+ " | sed "s/^/### $1 | /"; }
W=depth:2,seq:1024,long,loogle:8,batch:64
for r in 1 2; do
  timeout $((262 - SECONDS)) ./build-gpu/codec bench --backend cuda --dtype fp16 --workload $W 2>/dev/null | row "old r$r" >> $V/ab_fp16.log
  timeout $((265 - SECONDS)) ./build-gpu/codec bench --backend cuda --dtype fp16 --workload $W --cost-table abtmp/fp16_new.json 2>/dev/null | row "new r$r" >> $V/ab_fp16.log
  ts "round $r"
done
python3 scripts/ab_summary.py $V/ab_fp16.log
ts end
cd $OUT && tar czf v.tgz v && rm -rf v
