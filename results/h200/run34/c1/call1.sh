# Run 34, call 1: plans in clusters (PlanView::cluster_size, --cluster C): the PAC kernel's
# clusters merge each kv head's rows from their blocks' shared memory, no merge kernel. The GPU
# tests (test_engine_cuda) and memcheck of the cluster test; then be76543 (abtmp/old.tar, carried)
# against this tree without clusters (--cluster 0) and with clusters of 8 and 16, in two
# alternating rounds, on the small trees and a few controls (merge-heavy and large workloads,
# where the refactored merge kernel runs).
set -uo pipefail
V=$OUT/v; mkdir -p $V
ts() { echo "## $(date +%T) $*"; }
ts start
mkdir -p abtmp/old && tar xf abtmp/old.tar -C abtmp/old
(cmake -S abtmp/old -B abtmp/old/build -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a-real > /dev/null &&
  cmake --build abtmp/old/build -j 8 --target codec_tool > $V/build_old.log 2>&1 || echo "!! old build failed") &
cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a-real > /dev/null &&
  cmake --build build-gpu -j 8 --target codec_tool test_engine_cuda > $V/build.log 2>&1 || echo "!! build failed"
wait
ts built
timeout 150 ./build-gpu/tests/test_engine_cuda > $V/gpu_tests.log 2>&1; echo "gpu tests rc $?"; grep -E "PASSED|FAILED|SKIPPED" $V/gpu_tests.log
timeout 90 compute-sanitizer --error-exitcode 1 --tool memcheck ./build-gpu/tests/test_engine_cuda \
  --gtest_filter=CudaEngine.ClustersMergeInsideThePacKernel > $V/memcheck.log 2>&1; echo "memcheck rc $?"; tail -2 $V/memcheck.log
ts checks
row() { grep -E "^[A-Za-z0-9_.:-]+ +[0-9.]+ " | sed "s/^/### $1 | /"; }
W=depth:2,depth:3,depth:4,shape:DT,shape:2,shape:3,seq:128,seq:512,seq:2048,flat:8,batch:4,fewshot,sysprompt:512,loogle:8
for r in 1 2; do
  timeout 100 abtmp/old/build/codec bench --backend cuda --workload $W 2>/dev/null | row "old r$r" >> $V/ab.log
  timeout 100 ./build-gpu/codec bench --backend cuda --workload $W --cluster 0 2>/dev/null | row "new r$r" >> $V/ab.log
  timeout 100 ./build-gpu/codec bench --backend cuda --workload $W --cluster 8 2>/dev/null | row "c8 r$r" >> $V/ab.log
  timeout 100 ./build-gpu/codec bench --backend cuda --workload $W --cluster 16 --save $V/c16_r$r.json 2>/dev/null | row "c16 r$r" >> $V/ab.log
  ts "r$r"
done
python3 scripts/ab_summary.py $V/ab.log
ts end
cd $OUT && tar czf v.tgz v && rm -rf v
