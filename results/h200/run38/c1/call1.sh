# Run 38, call 1: the wide kernel's P·V wait kept after the softmax it should overlap.
# ptxas had hoisted wgmma.wait_group 0 of each step above 59 of the tile's 64 exponentials
# (SASS of pac_wide_kernel<128, bf16>), so a consumer waited for its P·V and only then
# exponentiated; wgmma::wait_after guards the wait with a predicate read from the sums of
# the exponentials. Old = e4e2184 (abtmp/old.tar: git archive e4e2184 CMakeLists.txt cmake
# include src tests bench data), new = the working tree. Every C++ test of the new build on
# the GPU, then three rounds alternating on the workloads with wide tasks, run 30's two dense
# shapes, and controls without wide tasks (carry abtmp).
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
grep -i "ptxas.*warn\|C7514\|serialized" $V/build.log /tmp/old/build.log | head
ts built
timeout 150 ctest --test-dir build-gpu --output-on-failure -j 4 --timeout 120 > $V/ctest.log 2>&1; echo "ctest rc $?"
tail -3 $V/ctest.log
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
python3 scripts/ab_summary.py $V/ab.log
ts end
cd $OUT && tar czf v.tgz v && rm -rf v
