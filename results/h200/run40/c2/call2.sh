# Run 40, call 2: call 1's one-pass copy only where the node's KV is shared by several tasks
# (node rows > 128: L2-resident, issue-bound), K ahead of V elsewhere (HBM-bound), against
# 86ea3d8, three rounds alternating:
#   old     86ea3d8 (abtmp/old.tar)
#   hybrid  the working tree
# on both dense shapes, the wide workloads, sysprompt at page sizes 16 and 1, and small trees;
# every C++ GPU test of hybrid first (carry abtmp).
set -uo pipefail
V=$OUT/v; mkdir -p $V
ts() { echo "## $(date +%T) ${SECONDS}s $*"; }
ts start
git diff HEAD > $V/working_tree.diff
python3 -c "import json; print(json.dumps({'name':'dense_2x256x16384','nodes':[{'id':f'doc{i}','parent':None,'tokens':16384} for i in range(2)],'requests':[{'node':f'doc{i}'} for i in range(2) for _ in range(256)]}))" > /tmp/dense.json
python3 -c "import json; print(json.dumps({'name':'dense_4x128x8192','nodes':[{'id':f'doc{i}','parent':None,'tokens':8192} for i in range(4)],'requests':[{'node':f'doc{i}'} for i in range(4) for _ in range(128)]}))" > /tmp/dense4.json
rm -rf /tmp/old /tmp/hybrid && mkdir -p /tmp/old /tmp/hybrid
tar -xf abtmp/old.tar -C /tmp/old
tar --exclude="./build*" --exclude=./.git --exclude=./abtmp --exclude=./.whl --exclude=./.pat --exclude=./results -cf - . | tar -xf - -C /tmp/hybrid
build() { local d=$1; shift; (cd $d && cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a-real > /dev/null &&
  cmake --build build -j 8 --target "$@" > build.log 2>&1) || echo "!! build of $d failed"; }
build /tmp/old codec_tool & build /tmp/hybrid codec_tool test_engine_cuda
wait
ts built
timeout 100 /tmp/hybrid/build/tests/test_engine_cuda > $V/hybrid_tests.log 2>&1; echo "hybrid GPU tests rc $?"; tail -2 $V/hybrid_tests.log
ts tested
row() { grep -E "^[A-Za-z0-9_.:/-]+ +[0-9.]+ " | sed "s/^/### $1 | /"; }
b() { local bin=$1; shift; timeout 100 $bin bench --backend cuda "$@" 2>/dev/null; }
W=/tmp/dense.json,/tmp/dense4.json,batch:64,batch:32,long,sysprompt:512,sysprompt:256,loogle:8,depth:2,shape:DT
for r in 1 2 3; do
  for c in old hybrid; do
    b /tmp/$c/build/codec --workload $W | row "$c r$r" >> $V/ab.log
    b /tmp/$c/build/codec --workload sysprompt:512 --page-size 1 | row "$c r$r" | sed "s/| sysprompt:512/| sysprompt:512@1/" >> $V/ab.log
  done
  ts "round $r"
done
python3 scripts/ab_summary.py $V/ab.log
ts end
cd $OUT && tar czf v.tgz v && rm -rf v
