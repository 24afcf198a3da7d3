# Run 38, call 3: TMA for the wide kernel's KV tiles. Where the page size is a multiple of 16
# and a wide task's chunk starts on a 16-token group, each whole 128-token K (or V) tile comes
# by 16 boxes of 16 tokens x 64 elements (2 per group, issued by 8 lanes of the producer's
# warp 0), the rest (partial last tiles, tails, other page sizes) by cp.async as before; the
# producer keeps 72 registers and the consumers 216 (56 and 224 before). Old = e4e2184
# (abtmp/old.tar), new = the working tree. Every C++ test of the new build on the GPU, then
# three rounds alternating on the workloads with wide tasks (sysprompt:512 at page size 1
# too, where every copy stays cp.async), run 30's two dense shapes and controls, then
# memcheck, racecheck and synccheck of the wide test (carry abtmp).
set -uo pipefail
V=$OUT/v; mkdir -p $V
ts() { echo "## $(date +%T) ${SECONDS}s $*"; }
ts start
git diff > $V/working_tree.diff; git status --short > $V/status.txt
for spec in 4:128:8192 2:256:16384; do
  IFS=: read docs reqs tokens <<< "$spec"
  python3 -c "import json,sys; d,r,t=map(int,sys.argv[1:]); print(json.dumps({'name':f'dense_{d}x{r}x{t}',
    'nodes':[{'id':f'doc{i}','parent':None,'tokens':t} for i in range(d)],
    'requests':[{'node':f'doc{i}'} for i in range(d) for _ in range(r)]}))" $docs $reqs $tokens > /tmp/dense_${spec//:/_}.json
done
rm -rf /tmp/old && mkdir -p /tmp/old && tar -xf abtmp/old.tar -C /tmp/old
(cd /tmp/old && cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a-real > /dev/null &&
  cmake --build build -j 6 --target codec_tool > build.log 2>&1) || echo "!! old build failed" &
cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a-real > $V/configure.log 2>&1 &&
  cmake --build build-gpu -j 12 > $V/build.log 2>&1 || { echo "!! build failed"; tail -30 $V/build.log; }
wait
grep -i "warning\|C7514\|serialized" $V/build.log | head
ts built
timeout 150 ./build-gpu/tests/test_engine_cuda --gtest_filter='CudaEngine.Wide*' > $V/wide_test.log 2>&1; echo "wide test rc $?"
grep -E "OK \]|FAILED|Failure|expected" $V/wide_test.log | head -20
timeout 200 ctest --test-dir build-gpu --output-on-failure -j 4 --timeout 150 > $V/ctest.log 2>&1; echo "ctest rc $?"
tail -3 $V/ctest.log; grep -E "Failed|\*\*\*" $V/ctest.log | head
ts tests
row() { grep -E "^[A-Za-z0-9_.:/-]+ +[0-9.]+ " | sed "s/^/### $1 | /"; }
b() { local bin=$1; shift; timeout 100 $bin bench --backend cuda "$@" 2>/dev/null; }
W=batch:64,batch:32,long,sysprompt:512,sysprompt:256,loogle:8,fewshot,/tmp/dense_4_128_8192.json,/tmp/dense_2_256_16384.json,depth:2,flat:64
for r in 1 2 3; do
  for c in old:/tmp/old/build new:./build-gpu; do
    b ${c#*:}/codec --workload $W | row "${c%%:*} r$r" >> $V/ab.log
    b ${c#*:}/codec --workload sysprompt:512 --page-size 1 | row "${c%%:*} r$r" | sed "s/| sysprompt:512/| sysprompt:512@1/" >> $V/ab.log
  done
  ts "round $r"
done
grep -c FAIL $V/ab.log
python3 scripts/ab_summary.py $V/ab.log
san="timeout 150 compute-sanitizer --error-exitcode 1"
for tool in memcheck racecheck synccheck; do
  $san --tool $tool ./build-gpu/tests/test_engine_cuda --gtest_filter=CudaEngine.WideTasksMatchTheReference > $V/$tool.log 2>&1
  echo "$tool rc $?"; tail -2 $V/$tool.log
done
ts end
cd $OUT && tar czf v.tgz v && rm -rf v
