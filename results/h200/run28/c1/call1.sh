# Run 28, call 1: build; a per-phase trace of PAC and the merge (trace/trace.patch, a separate
# build) on the small trees and three large workloads; the tile loop on compute-bound shared
# nodes (dense_*.json: documents read by many requests, no private tokens); every GPU test, C++
# and Python.
set -uo pipefail
V=$OUT/v; mkdir -p $V/trace
ts() { echo "## $(date +%T) $*"; }
ts start
CODEC_GPU_STEPS="build" bash scripts/gpu_run.sh $V/p > $V/build.log 2>&1; tail -2 $V/build.log; ts built
rm -rf /tmp/tr && mkdir /tmp/tr && cp -r CMakeLists.txt CMakePresets.json cmake include src data bench tests python pyproject.toml README.md /tmp/tr/
(cd /tmp/tr && patch -p1 < $OLDPWD/results/h200/run28/trace/trace.patch && \
  cmake -S . -B b -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a-real -DCODEC_BUILD_TESTS=OFF \
    -DCODEC_BUILD_BENCH=OFF > /dev/null && cmake --build b -j 16 --target codec_tool) > $V/trace_build.log 2>&1
echo "trace build rc $?"; ts "trace built"
for w in depth:2 shape:DT seq:128 sysprompt:512 batch:64 fewshot; do
  mkdir -p $V/trace/${w/:/_}
  CODEC_TRACE_DIR=$V/trace/${w/:/_} timeout 60 /tmp/tr/b/codec bench --backend cuda --workload $w --reps 5 \
    > $V/trace/${w/:/_}/bench.log 2>&1; echo "trace $w rc $?"
done
ts traced
for spec in 4:128:8192 2:256:16384; do
  IFS=: read docs reqs tokens <<< "$spec"
  python3 -c "import json,sys; d,r,t=map(int,sys.argv[1:]); print(json.dumps({'name':f'dense_{d}x{r}x{t}',
    'nodes':[{'id':f'doc{i}','parent':None,'tokens':t} for i in range(d)],
    'requests':[{'node':f'doc{i}'} for i in range(d) for _ in range(r)]}))" $docs $reqs $tokens > $V/dense_$spec.json
  timeout 120 ./build-gpu/codec bench --backend cuda --workload $V/dense_$spec.json --save $V/dense_${spec//:/_}.json \
    > $V/dense_${spec//:/_}.log 2>&1; echo "dense $spec rc $?"; tail -3 $V/dense_${spec//:/_}.log
done
ts dense
CODEC_GPU_STEPS="test python" timeout 420 bash scripts/gpu_run.sh $V/t > $V/tests.log 2>&1
echo "tests rc $?"; grep -E "tests passed|passed|failed|status" $V/tests.log | tail -6; ts tests
cd $OUT && tar czf v.tgz v && rm -rf v
