# Run 30, call 3 (ab46884): scripts/gpu_run.sh's build, every GPU test (C++, the generic sm_90 build,
# Python), every built-in workload; then the two dense shapes with wide tasks on and off.
set -uo pipefail
V=$OUT/v; mkdir -p $V
CODEC_GPU_STEPS="build test python bench" timeout 500 bash scripts/gpu_run.sh $V > $V/gpu_run.log 2>&1
echo "gpu_run rc $?"; grep -E "^== |FAIL|passed|failed|PASSED|!!" $V/gpu_run.log | tail -24
for spec in 4:128:8192 2:256:16384; do
  IFS=: read docs reqs tokens <<< "$spec"
  python3 -c "import json,sys; d,r,t=map(int,sys.argv[1:]); print(json.dumps({'name':f'dense_{d}x{r}x{t}',
    'nodes':[{'id':f'doc{i}','parent':None,'tokens':t} for i in range(d)],
    'requests':[{'node':f'doc{i}'} for i in range(d) for _ in range(r)]}))" $docs $reqs $tokens > /tmp/dense_${spec//:/_}.json
done
timeout 60 ./build-gpu/codec bench --backend cuda --workload /tmp/dense_4_128_8192.json,/tmp/dense_2_256_16384.json \
  --wide auto,off --save $V/dense.json > $V/dense.log 2>&1; tail -4 $V/dense.log
cd $OUT && tar czf v.tgz v && rm -rf v
