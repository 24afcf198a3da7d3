# Run 31, call 1 (main, 98964fa): the build and every Python test through scripts/gpu_run.sh
# (they last ran on ab46884); then each kernel of a run alone under ncu (serialised: no PDL
# overlap), to split the wide-task workloads' time between the wide, PAC and merge kernels
# and to time the wide kernel's tile loop without the merge and the launches.
set -uo pipefail
V=$OUT/v; mkdir -p $V
ts() { echo "## $(date +%T) $*"; }
ts start
CODEC_GPU_STEPS="build python" timeout 420 bash scripts/gpu_run.sh $V > $V/gpu_run.log 2>&1
echo "gpu_run rc $?"; grep -E "^== |FAIL|passed|failed|!!" $V/gpu_run.log | tail -12
ts gpu_run
for spec in 4:128:8192 2:256:16384; do
  IFS=: read docs reqs tokens <<< "$spec"
  python3 -c "import json,sys; d,r,t=map(int,sys.argv[1:]); print(json.dumps({'name':f'dense_{d}x{r}x{t}',
    'nodes':[{'id':f'doc{i}','parent':None,'tokens':t} for i in range(d)],
    'requests':[{'node':f'doc{i}'} for i in range(d) for _ in range(r)]}))" $docs $reqs $tokens > /tmp/dense_${spec//:/_}.json
done
for w in /tmp/dense_2_256_16384.json /tmp/dense_4_128_8192.json batch:64 sysprompt:512 long shape:DT depth:2 seq:128; do
  n=$(basename ${w//:/_} .json)
  timeout 90 ncu --clock-control none --metrics gpu__time_duration.sum,dram__bytes_read.sum,sm__cycles_active.avg \
    --nvtx --nvtx-include "codec/" --csv ./build-gpu/codec bench --backend cuda --workload "$w" --reps 1 \
    > $V/ncu_$n.csv 2>&1 || echo "!! ncu $n"
  echo "== $n"; grep -E '"(gpu__time_duration.sum|dram__bytes_read.sum)"' $V/ncu_$n.csv | awk -F'","' '{print $5, $(NF-2), $(NF-1), $NF}' | cut -c1-150
done
ts ncu
cd $OUT && tar czf v.tgz v && rm -rf v
