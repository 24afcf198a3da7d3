# Run 37, call 2: the plan warmed into L2 at the PAC kernel's start (each block prefetches a 4 KiB
# slice of the packed plan), against b9e7c45 without it (abtmp/old.tar: git archive b9e7c45
# CMakeLists.txt cmake include src tests bench data). The working tree's whole build and every C++
# test on the GPU first, then three rounds alternating on 16 bf16 workloads (the small trees, where
# a task's page-id and request-id loads are DRAM round trips after its descriptor's, and larger
# ones), and llama3.2-1b's small trees at head_dim 64 (carry abtmp).
set -uo pipefail
V=$OUT/v; mkdir -p $V
ts() { echo "## $(date +%T) ${SECONDS}s $*"; }
ts start
git rev-parse HEAD > $V/head.txt 2>/dev/null; git diff > $V/working_tree.diff
rm -rf /tmp/old && mkdir -p /tmp/old && tar -xf abtmp/old.tar -C /tmp/old
(cd /tmp/old && cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a-real > /dev/null &&
  cmake --build build -j 6 --target codec_tool > build.log 2>&1) || echo "!! old build failed" &
cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a-real > $V/configure.log 2>&1 &&
  cmake --build build-gpu -j 12 > $V/build.log 2>&1 || { echo "!! build failed"; tail -30 $V/build.log; }
wait
ts built
timeout 120 ctest --test-dir build-gpu --output-on-failure -j 4 --timeout 100 > $V/ctest.log 2>&1; echo "ctest rc $?"
tail -3 $V/ctest.log
ts tests
row() { grep -E "^[A-Za-z0-9_.:/-]+ +[0-9.]+ " | sed "s/^/### $1 | /"; }
b() { local bin=$1; shift; timeout $((575 - SECONDS)) $bin bench --backend cuda "$@" 2>/dev/null; }
W=seq:128,seq:512,seq:2048,depth:2,depth:3,depth:4,shape:DT,shape:2,shape:5,batch:4,ratio:0.8,long,loogle:8,fewshot,sysprompt:512,flat:8
W64=seq:128,depth:2,depth:3,shape:DT,shape:2,fewshot
for r in 1 2 3; do
  b /tmp/old/build/codec --workload $W | row "old r$r" >> $V/ab.log
  b ./build-gpu/codec --workload $W | row "new r$r" >> $V/ab.log
  b /tmp/old/build/codec --model llama3.2-1b --workload $W64 | row "old r$r d64" >> $V/ab.log
  b ./build-gpu/codec --model llama3.2-1b --workload $W64 | row "new r$r d64" >> $V/ab.log
  ts "round $r"
done
python3 scripts/ab_summary.py $V/ab.log
ts end
cd $OUT && tar czf v.tgz v && rm -rf v
