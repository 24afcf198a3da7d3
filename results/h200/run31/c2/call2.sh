# Run 31, call 2 (main, 98964fa): which cost table plans the wide-task workloads best, alternating
# in rounds: cur (data/cost_tables, run 21's grids: a wide task priced as two tasks of half its
# rows), merged (cur with run 30's measured wide grid added: abtmp/merged_d128.json) and run30
# (run 30's whole profile: abtmp/run30_d128.json). Then the tiny trees under fixed split counts.
set -uo pipefail
V=$OUT/v; mkdir -p $V
ts() { echo "## $(date +%T) $*"; }
ts start
cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a-real > $V/configure.log 2>&1 &&
  cmake --build build-gpu -j 16 --target codec_tool > $V/build.log 2>&1 || { echo "!! build"; tail $V/build.log; }
ts built
declare -A table=([cur]=data/cost_tables/nvidia_h200_d128_bf16.json [merged]=abtmp/merged_d128.json [run30]=abtmp/run30_d128.json)
W=batch:64,batch:32,long,sysprompt:512,sysprompt:64,loogle:8,fewshot,depth:6,shape:5,batch:16
for r in 1 2; do
  for t in cur merged run30; do
    ./build-gpu/codec bench --backend cuda --workload $W --cost-table ${table[$t]} 2>/dev/null |
      grep -E "^[A-Za-z0-9_.:-]+ +[0-9.]+ " | sed "s/^/### $t r$r | /" >> $V/ab.log
  done
done
awk '{print $2, $3, $5, $9}' $V/ab.log
ts ab
./build-gpu/codec bench --backend cuda --workload depth:2,shape:DT,seq:128,depth:3 \
  --split adaptive,none,fixed:2,fixed:4,fixed:8,fixed:16,fixed:32 > $V/splits.log 2>&1
grep -E "^[A-Za-z0-9_.:-]+ +[0-9.]+ |split" $V/splits.log | head -40
ts splits
cd $OUT && tar czf v.tgz v && rm -rf v
