# Run 36, call 1 (on dcba67e: run 35's three-stage wide kernel, run 33's tables): the checks run 35 owed
# the committed tree (every C++ test on the GPU, the generic sm_90 build, memcheck and racecheck of the
# wide test), then the d128 tables re-profiled on this kernel (bf16 and fp16) and each measured against
# the committed one, two rounds alternating (no carry).
set -uo pipefail
V=$OUT/v; mkdir -p $V
ts() { echo "## $(date +%T) ${SECONDS}s $*"; }
ts start
git rev-parse HEAD > $V/head.txt 2>/dev/null; nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.limit --format=csv > $V/machine.txt
cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a-real > $V/configure.log 2>&1 &&
  cmake --build build-gpu -j 16 > $V/build.log 2>&1 || { echo "!! build failed"; tail -30 $V/build.log; }
ts built
# The generic sm_90 build (no wgmma: every task on the mma.sync path) compiles beside the ctest run.
(cmake -S . -B build-sm90 -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90-real -DCODEC_BUILD_BENCH=OFF > /dev/null &&
  cmake --build build-sm90 -j 8 --target test_engine_cuda > $V/build_sm90.log 2>&1) &
timeout 200 ctest --test-dir build-gpu --output-on-failure -j 4 --timeout 150 > $V/ctest.log 2>&1; echo "ctest rc $?"
tail -4 $V/ctest.log
wait
timeout 60 ./build-sm90/tests/test_engine_cuda > $V/test_sm90_generic.log 2>&1; echo "sm90 generic rc $?"
grep -E "PASSED|FAILED" $V/test_sm90_generic.log
ts tests
mkdir -p $V/tables/old && cp data/cost_tables/nvidia_h200_d128_*.json $V/tables/old/
timeout 60 ./build-gpu/codec profile > $V/profile.log 2>&1; echo "profile rc $?"
timeout 60 ./build-gpu/codec profile --dtype fp16 > $V/profile_fp16.log 2>&1; echo "profile fp16 rc $?"
cp data/cost_tables/nvidia_h200_d128_*.json $V/tables/
ts profiled
for spec in 4:128:8192 2:256:16384; do
  IFS=: read docs reqs tokens <<< "$spec"
  python3 -c "import json,sys; d,r,t=map(int,sys.argv[1:]); print(json.dumps({'name':f'dense_{d}x{r}x{t}',
    'nodes':[{'id':f'doc{i}','parent':None,'tokens':t} for i in range(d)],
    'requests':[{'node':f'doc{i}'} for i in range(d) for _ in range(r)]}))" $docs $reqs $tokens > /tmp/dense_${spec//:/_}.json
done
row() { grep -E "^[A-Za-z0-9_.:-]+ +[0-9.]+ " | sed "s/^/### $1 | /"; }
W=seq:128,seq:2048,depth:2,depth:4,shape:DT,shape:5,batch:16,batch:32,batch:64,long,loogle:8,loogle:16,fewshot,sysprompt:512,ratio:0.2,/tmp/dense_2_256_16384.json
WH=seq:128,depth:2,batch:64,long,loogle:8,fewshot
for r in 1 2; do
  timeout 70 ./build-gpu/codec bench --backend cuda --workload $W --cost-table $V/tables/old/nvidia_h200_d128_bf16.json 2>/dev/null | row "old r$r" >> $V/ab.log
  timeout 70 ./build-gpu/codec bench --backend cuda --workload $W 2>/dev/null | row "new r$r" >> $V/ab.log
  timeout 30 ./build-gpu/codec bench --backend cuda --dtype fp16 --workload $WH --cost-table $V/tables/old/nvidia_h200_d128_fp16.json 2>/dev/null | row "old r$r" >> $V/ab_fp16.log
  timeout 30 ./build-gpu/codec bench --backend cuda --dtype fp16 --workload $WH 2>/dev/null | row "new r$r" >> $V/ab_fp16.log
  ts "round $r"
done
python3 scripts/ab_summary.py $V/ab.log
python3 scripts/ab_summary.py $V/ab_fp16.log
san="compute-sanitizer --error-exitcode 1"
timeout $((560 - SECONDS)) $san --tool memcheck ./build-gpu/tests/test_engine_cuda --gtest_filter=CudaEngine.WideTasksMatchTheReference > $V/memcheck_wide.log 2>&1
echo "memcheck rc $?"; tail -3 $V/memcheck_wide.log
ts memcheck
timeout $((575 - SECONDS)) $san --tool racecheck ./build-gpu/tests/test_engine_cuda --gtest_filter=CudaEngine.WideTasksMatchTheReference > $V/racecheck_wide.log 2>&1
echo "racecheck rc $?"; tail -3 $V/racecheck_wide.log
ts end
cd $OUT && tar czf v.tgz v && rm -rf v
