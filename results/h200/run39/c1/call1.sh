# Run 39, call 1 (main at b2567ad, run 38's 72/216 split, plus a padded-page layout in two GPU tests):
# every C++ test on the GPU; the bf16 d128 table re-profiled on this kernel and planned against the
# committed one (the whole table, and the committed table with the new wide grid alone), two rounds
# alternating (no carry).
set -uo pipefail
V=$OUT/v; mkdir -p $V
ts() { echo "## $(date +%T) ${SECONDS}s $*"; }
ts start
git diff > $V/working_tree.diff
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.limit --format=csv > $V/machine.txt
cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a-real > $V/configure.log 2>&1 &&
  cmake --build build-gpu -j 16 > $V/build.log 2>&1 || { echo "!! build failed"; tail -30 $V/build.log; }
ts built
timeout 200 ctest --test-dir build-gpu --output-on-failure -j 4 --timeout 150 > $V/ctest.log 2>&1; echo "ctest rc $?"
tail -3 $V/ctest.log; grep -E "Failed|\*\*\*" $V/ctest.log | head
ts tests
python3 -c "import json; print(json.dumps({'name':'dense_2x256x16384','nodes':[{'id':f'doc{i}','parent':None,'tokens':16384} for i in range(2)],'requests':[{'node':f'doc{i}'} for i in range(2) for _ in range(256)]}))" > /tmp/dense.json
mkdir -p $V/tables/old && cp data/cost_tables/nvidia_h200_d128_bf16.json $V/tables/old/
timeout 60 ./build-gpu/codec profile > $V/profile.log 2>&1; echo "profile rc $?"
cp data/cost_tables/nvidia_h200_d128_bf16.json $V/tables/new.json
cp $V/tables/old/nvidia_h200_d128_bf16.json data/cost_tables/
python3 -c "
import json,sys; o=json.load(open(sys.argv[1])); n=json.load(open(sys.argv[2]))
o['wide_rows'],o['wide_us']=n['wide_rows'],n['wide_us']; json.dump(o,open(sys.argv[3],'w'))" \
  $V/tables/old/nvidia_h200_d128_bf16.json $V/tables/new.json $V/tables/wide_only.json
ts profiled
row() { grep -E "^[A-Za-z0-9_.:/-]+ +[0-9.]+ " | sed "s/^/### $1 | /"; }
b() { timeout 100 ./build-gpu/codec bench --backend cuda "$@" 2>/dev/null; }
W=/tmp/dense.json,batch:64,batch:32,batch:16,long,sysprompt:512,sysprompt:256,loogle:8,loogle:16,fewshot,depth:2,depth:4,seq:128,shape:DT,seq:1024
for r in 1 2; do
  b --workload $W | row "old r$r" >> $V/ab_table.log
  b --workload $W --cost-table $V/tables/new.json | row "profiled r$r" >> $V/ab_table.log
  b --workload $W --cost-table $V/tables/wide_only.json | row "wide_only r$r" >> $V/ab_table.log
  ts "table round $r"
done
python3 scripts/ab_summary.py $V/ab_table.log
ts end
cd $OUT && tar czf v.tgz v && rm -rf v
