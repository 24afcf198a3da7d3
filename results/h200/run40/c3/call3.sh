# Run 40, call 3: call 2's hybrid with the copy mode's load (node rows) moved first in the
# producer's task, against 86ea3d8, two rounds alternating:
#   old     86ea3d8 (abtmp/old.tar)
#   hybrid  the working tree: one pass where node rows > 128, K ahead of V elsewhere
# on both dense shapes, the wide workloads, sysprompt at page sizes 16 and 1, and small trees;
# then every C++ test of hybrid (ctest), memcheck of the wide and layouts tests and racecheck
# of the wide test (carry abtmp).
set -uo pipefail
V=$OUT/v; mkdir -p $V
ts() { echo "## $(date +%T) ${SECONDS}s $*"; }
ts start
git diff HEAD > $V/working_tree.diff
python3 -c "import json; print(json.dumps({'name':'dense_2x256x16384','nodes':[{'id':f'doc{i}','parent':None,'tokens':16384} for i in range(2)],'requests':[{'node':f'doc{i}'} for i in range(2) for _ in range(256)]}))" > /tmp/dense.json
python3 -c "import json; print(json.dumps({'name':'dense_4x128x8192','nodes':[{'id':f'doc{i}','parent':None,'tokens':8192} for i in range(4)],'requests':[{'node':f'doc{i}'} for i in range(4) for _ in range(128)]}))" > /tmp/dense4.json
rm -rf /tmp/old && mkdir -p /tmp/old && tar -xf abtmp/old.tar -C /tmp/old
(cd /tmp/old && cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a-real > /dev/null &&
  cmake --build build -j 4 --target codec_tool > build.log 2>&1) || echo "!! old build failed" &
cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a-real > $V/configure.log 2>&1 &&
  cmake --build build-gpu -j 12 --target codec_tool test_engine_cuda > $V/build.log 2>&1 || echo "!! build failed"
wait
ts built
timeout 100 ./build-gpu/tests/test_engine_cuda > $V/hybrid_tests.log 2>&1; echo "hybrid GPU tests rc $?"; tail -2 $V/hybrid_tests.log
(cmake --build build-gpu -j 8 > $V/build_all.log 2>&1 || echo "!! full build failed") &  # the rest of ctest's targets, beside the A/B's CPU-light runs
row() { grep -E "^[A-Za-z0-9_.:/-]+ +[0-9.]+ " | sed "s/^/### $1 | /"; }
b() { local bin=$1; shift; timeout 100 $bin bench --backend cuda "$@" 2>/dev/null; }
W=/tmp/dense.json,/tmp/dense4.json,batch:64,batch:32,long,sysprompt:512,sysprompt:256,loogle:8,depth:2,shape:DT
wait
ts "full build"
for r in 1 2; do
  for c in old hybrid; do
    bin=/tmp/old/build/codec; [ $c = hybrid ] && bin=./build-gpu/codec
    b $bin --workload $W | row "$c r$r" >> $V/ab.log
    b $bin --workload sysprompt:512 --page-size 1 | row "$c r$r" | sed "s/| sysprompt:512/| sysprompt:512@1/" >> $V/ab.log
  done
  ts "round $r"
done
python3 scripts/ab_summary.py $V/ab.log
timeout 120 ctest --test-dir build-gpu --output-on-failure -j 4 --timeout 100 > $V/ctest.log 2>&1; echo "ctest rc $?"
tail -3 $V/ctest.log; grep -E "Failed|\*\*\*" $V/ctest.log | head
ts ctest
san="compute-sanitizer --error-exitcode 1"
t=./build-gpu/tests/test_engine_cuda
timeout 150 $san --tool memcheck $t --gtest_filter=CudaEngine.WideTasksMatchTheReference:CudaEngine.LayoutsGiveBitIdenticalResults > $V/memcheck.log 2>&1
echo "memcheck rc $?"; tail -3 $V/memcheck.log
ts memcheck
timeout 120 $san --tool racecheck $t --gtest_filter=CudaEngine.WideTasksMatchTheReference > $V/racecheck_wide.log 2>&1
echo "racecheck rc $?"; tail -3 $V/racecheck_wide.log
ts end
