# Run 40, call 1: the wide producer's one-pass K/V copy (f303288), three builds alternating, three rounds:
#   old      86ea3d8 (abtmp/old.tar): K copied after k_empty, V after v_empty
#   onepass  the working tree (86ea3d8 + f303288): K and V of a tile in one pass after both waits
#   nok      onepass without the k_empty barrier (abtmp/pac_wide_nok.cuh): v_empty alone frees a stage
# on the dense shape, the wide workloads, sysprompt at page sizes 16 and 1, and small trees;
# every C++ GPU test of onepass and nok first (carry abtmp).
set -uo pipefail
V=$OUT/v; mkdir -p $V
ts() { echo "## $(date +%T) ${SECONDS}s $*"; }
ts start
git diff HEAD > $V/working_tree.diff
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.limit --format=csv > $V/machine.txt
python3 -c "import json; print(json.dumps({'name':'dense_2x256x16384','nodes':[{'id':f'doc{i}','parent':None,'tokens':16384} for i in range(2)],'requests':[{'node':f'doc{i}'} for i in range(2) for _ in range(256)]}))" > /tmp/dense.json
rm -rf /tmp/old /tmp/onepass /tmp/nok && mkdir -p /tmp/old /tmp/onepass /tmp/nok
tar -xf abtmp/old.tar -C /tmp/old
tar --exclude="./build*" --exclude=./.git --exclude=./abtmp --exclude=./.whl --exclude=./.pat --exclude=./results -cf - . | tar -xf - -C /tmp/onepass
tar --exclude="./build*" --exclude=./.git --exclude=./abtmp --exclude=./.whl --exclude=./.pat --exclude=./results -cf - . | tar -xf - -C /tmp/nok
cp abtmp/pac_wide_nok.cuh /tmp/nok/src/engine/cuda/kernels/pac_wide.cuh
build() { local d=$1; shift; (cd $d && cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a-real > /dev/null &&
  cmake --build build -j 5 --target "$@" > build.log 2>&1) || echo "!! build of $d failed"; }
build /tmp/old codec_tool & build /tmp/onepass codec_tool test_engine_cuda & build /tmp/nok codec_tool test_engine_cuda
wait
ts built
for c in onepass nok; do
  timeout 100 /tmp/$c/build/tests/test_engine_cuda > $V/${c}_tests.log 2>&1; echo "$c GPU tests rc $?"; tail -2 $V/${c}_tests.log
done
ts tested
row() { grep -E "^[A-Za-z0-9_.:/-]+ +[0-9.]+ " | sed "s/^/### $1 | /"; }
b() { local bin=$1; shift; timeout 100 $bin bench --backend cuda "$@" 2>/dev/null; }
W=/tmp/dense.json,batch:64,batch:32,long,sysprompt:512,sysprompt:256,loogle:8,fewshot,depth:2,shape:DT
for r in 1 2 3; do
  for c in old onepass nok; do
    b /tmp/$c/build/codec --workload $W | row "$c r$r" >> $V/ab.log
    b /tmp/$c/build/codec --workload sysprompt:512 --page-size 1 | row "$c r$r" | sed "s/| sysprompt:512/| sysprompt:512@1/" >> $V/ab.log
    b /tmp/$c/build/codec --workload batch:64 --dtype fp16 | row "$c r$r" | sed "s/| batch:64/| batch:64@fp16/" >> $V/ab.log
  done
  ts "round $r"
done
python3 scripts/ab_summary.py $V/ab.log
ts end
cd $OUT && tar czf v.tgz v && rm -rf v
