# Run 38, call 6, on call 5's warm machine: the committed tree (./build-gpu, call 5) against
# e4e2184 (/tmp/old/build, built in call 4) on the wide workloads call 4 did not time, the
# smaller dense shape, fp16 batch:64 and a control; two rounds alternating.
set -uo pipefail
V=$OUT/v; mkdir -p $V
ts() { echo "## $(date +%T) ${SECONDS}s $*"; }
ls /tmp/old/build/codec ./build-gpu/codec || exit 1
python3 -c "import json; print(json.dumps({'name':'dense_4x128x8192','nodes':[{'id':f'doc{i}','parent':None,'tokens':8192} for i in range(4)],'requests':[{'node':f'doc{i}'} for i in range(4) for _ in range(128)]}))" > /tmp/dense4.json
row() { grep -E "^[A-Za-z0-9_.:/-]+ +[0-9.]+ " | sed "s/^/### $1 | /"; }
b() { local bin=$1; shift; timeout 60 $bin bench --backend cuda "$@" 2>/dev/null; }
for r in 1 2; do
  for c in old:/tmp/old/build new:./build-gpu; do
    b ${c#*:}/codec --workload batch:32,sysprompt:256,loogle:8,fewshot,/tmp/dense4.json,depth:2 | row "${c%%:*} r$r" >> $V/ab.log
    b ${c#*:}/codec --workload batch:64 --dtype fp16 | row "${c%%:*} r$r" | sed "s/| batch:64/| batch:64@fp16/" >> $V/ab.log
  done
  ts "round $r"
done
python3 scripts/ab_summary.py $V/ab.log
cd $OUT && tar czf v.tgz v && rm -rf v
