# Run 30, call 2 (uncommitted tree: the wide kernel with ping-pong, nodes wide where the prices say so).
# Three builds at once: new (the tree), main (abtmp/old.tar, 56cbe97) and nopp (the tree with
# abtmp/pac_wide.cuh: the wide kernel without ping-pong). Every GPU test on new; the sanitizers on the
# wide test; workloads alternating main / new (and nopp on the wide ones), one process per build and
# list; then `codec profile` of new (the wide grid).
set -uo pipefail
V=$OUT/v; mkdir -p $V
ts() { echo "## $(date +%T) $*"; }
ts start
rm -rf /tmp/main /tmp/nopp && mkdir -p /tmp/main /tmp/nopp && tar -xf abtmp/old.tar -C /tmp/main
tar --exclude="./build*" --exclude=./.git --exclude=./results -cf - . | tar -xf - -C /tmp/nopp
cp abtmp/pac_wide.cuh /tmp/nopp/src/engine/cuda/kernels/pac_wide.cuh
cfg="-DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a-real"
(cd /tmp/main && cmake -S . -B build $cfg >/dev/null && cmake --build build -j 5 --target codec_tool > /tmp/build_main.log 2>&1 || echo "!! main build failed") &
(cd /tmp/nopp && cmake -S . -B build $cfg >/dev/null && cmake --build build -j 5 --target codec_tool > /tmp/build_nopp.log 2>&1 || echo "!! nopp build failed") &
cmake -S . -B build-gpu $cfg > /dev/null && cmake --build build-gpu -j 6 --target codec_tool test_engine_cuda > $V/build_new.log 2>&1 || echo "!! new build failed"
wait; ts built
t=./build-gpu/tests/test_engine_cuda
timeout 200 $t > $V/gpu_tests.log 2>&1; echo "gpu tests rc $?"; grep -E "FAILED|PASSED|SKIPPED|Failure" $V/gpu_tests.log | head
ts tests
for spec in 4:128:8192 2:256:16384; do
  IFS=: read docs reqs tokens <<< "$spec"
  python3 -c "import json,sys; d,r,t=map(int,sys.argv[1:]); print(json.dumps({'name':f'dense_{d}x{r}x{t}',
    'nodes':[{'id':f'doc{i}','parent':None,'tokens':t} for i in range(d)],
    'requests':[{'node':f'doc{i}'} for i in range(d) for _ in range(r)]}))" $docs $reqs $tokens > /tmp/dense_${spec//:/_}.json
done
wide=/tmp/dense_4_128_8192.json,/tmp/dense_2_256_16384.json,batch:64,sysprompt:512
rest=long,loogle:8,batch:32,fewshot,depth:2,shape:DT,seq:128,sysprompt:64,flat:64
row() { grep -E "^[A-Za-z0-9_.:-]+ +[0-9.]+ " | sed "s/^/$1 /"; }
{ ./build-gpu/codec bench --backend cuda --workload $wide,$rest 2>/dev/null | row new
  /tmp/main/build/codec bench --backend cuda --workload $wide,$rest 2>/dev/null | row main
  /tmp/nopp/build/codec bench --backend cuda --workload $wide 2>/dev/null | row nopp
  /tmp/main/build/codec bench --backend cuda --workload $wide,long,loogle:8,batch:32 2>/dev/null | row main
  ./build-gpu/codec bench --backend cuda --workload $wide,long,loogle:8,batch:32 2>/dev/null | row new
  /tmp/nopp/build/codec bench --backend cuda --workload $wide 2>/dev/null | row nopp
} > $V/ab.log; cat $V/ab.log | awk '{print $1, $2, $6}'
ts ab
for tool in memcheck racecheck synccheck; do
  echo "=== $tool" >> $V/sanitizers.log
  timeout 100 compute-sanitizer --error-exitcode 1 --tool $tool $t --gtest_filter='CudaEngine.WideTasks*' \
    >> $V/sanitizers.log 2>&1; echo "$tool rc $?"; tail -1 $V/sanitizers.log
done
ts sanitizers
timeout 150 ./build-gpu/codec profile --out $V/nvidia_h200_d128_bf16.json > $V/profile.log 2>&1; echo "profile rc $?"
grep wide $V/profile.log | head -14
ts done
