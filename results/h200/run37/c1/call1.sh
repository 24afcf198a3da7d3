# Run 37, call 1 (on b9e7c45): what run 36 owed the committed tree, then the price of PAC tasks beside
# wide tasks measured. Every C++ test on the GPU (ctest) beside every Python test (the package installed
# offline; 48b897e's warm-up waves), then two rounds alternating: --beside-wide 0.8 (the default, `old`)
# against 1, 0.7 and 0.6 on the bf16 workloads whose plans the price moves, and the plans 69ee6f8 changed
# unmeasured (fp16 qwen3-4b and mistral-7b batch:32/64, bf16 llama4-scout sysprompt:512, mqa) against
# --beside-wide 1 (carry .whl).
set -uo pipefail
V=$OUT/v; mkdir -p $V
ts() { echo "## $(date +%T) ${SECONDS}s $*"; }
ts start
git rev-parse HEAD > $V/head.txt 2>/dev/null; nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.limit --format=csv > $V/machine.txt
cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a-real > $V/configure.log 2>&1 &&
  cmake --build build-gpu -j 16 > $V/build.log 2>&1 || { echo "!! build failed"; tail -30 $V/build.log; }
ts built
(CODEC_GPU_STEPS=python timeout 300 bash scripts/gpu_run.sh $V/py > $V/py.log 2>&1; echo "python rc $?" >> $V/py.log) &
timeout 240 ctest --test-dir build-gpu --output-on-failure -j 4 --timeout 200 > $V/ctest.log 2>&1; echo "ctest rc $?"
tail -3 $V/ctest.log
wait
grep -E "!!|passed|failed|python rc" $V/py.log | tail -4
ts tests
python3 -c "import json,sys; d,r,t=map(int,sys.argv[1:]); print(json.dumps({'name':f'dense_{d}x{r}x{t}',
  'nodes':[{'id':f'doc{i}','parent':None,'tokens':t} for i in range(d)],
  'requests':[{'node':f'doc{i}'} for i in range(d) for _ in range(r)]}))" 2 256 16384 > /tmp/dense.json
row() { grep -E "^[A-Za-z0-9_.:/-]+ +[0-9.]+ " | sed "s/^/### $1 | /"; }
b() { timeout $((585 - SECONDS)) ./build-gpu/codec bench --backend cuda --reps 20 "$@" 2>/dev/null; }
W=batch:32,batch:64,long,sysprompt:512,/tmp/dense.json
for r in 1 2; do
  for p in 0.8 1 0.7 0.6; do
    label=$([ $p = 0.8 ] && echo old || echo p${p/./})
    b --workload $W --beside-wide $p | row "$label r$r" >> $V/ab_price.log
  done
  ts "price round $r"
done
python3 scripts/ab_summary.py $V/ab_price.log
for r in 1 2; do
  for p in 0.8 1; do
    label=$([ $p = 0.8 ] && echo old || echo p1)
    b --dtype fp16 --workload batch:32,batch:64 --beside-wide $p | row "$label r$r fp16" >> $V/ab_changed.log
    b --dtype fp16 --model mistral-7b --workload batch:32,batch:64 --beside-wide $p | row "$label r$r fp16-mistral" >> $V/ab_changed.log
    b --model llama4-scout --workload sysprompt:512 --beside-wide $p | row "$label r$r llama4" >> $V/ab_changed.log
    b --dtype fp16 --model mqa --workload seq:512,batch:64,ratio:0.2,loogle:16 --beside-wide $p | row "$label r$r fp16-mqa" >> $V/ab_changed.log
    b --model mqa --workload batch:32,ratio:0.05,ratio:0.5,loogle:8 --beside-wide $p | row "$label r$r mqa" >> $V/ab_changed.log
  done
  ts "changed round $r"
done
python3 scripts/ab_summary.py $V/ab_changed.log
ts end
cd $OUT && tar czf v.tgz v && rm -rf v
