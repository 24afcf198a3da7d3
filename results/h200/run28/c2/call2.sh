# Run 28, call 2: A/B of the PAC epilogue and prologue change (old = abtmp/pac.cuh, main's),
# alternating builds, two rounds; then the trace build (trace/trace.patch) of the new kernel
# on three workloads.
set -uo pipefail
V=$OUT/v; mkdir -p $V/trace
ts() { echo "## $(date +%T) $*"; }
ts start
python3 -c "import json; print(json.dumps({'name':'dense_4x128x8192','nodes':[{'id':f'doc{i}','parent':None,'tokens':8192} for i in range(4)],
  'requests':[{'node':f'doc{i}'} for i in range(4) for _ in range(128)]}))" > /tmp/dense.json
CODEC_AB_ROUNDS=2 timeout 420 bash scripts/gpu_ab.sh $V src/engine/cuda/kernels/pac.cuh -- \
  "--workload depth:2" "--workload shape:DT" "--workload seq:128" "--workload depth:4" "--workload sysprompt:64" \
  "--workload sysprompt:512" "--workload sysprompt:512 --page-size 1" "--workload fewshot" "--workload loogle:8" \
  "--workload long" "--workload batch:64" "--workload flat:64" "--workload /tmp/dense.json" \
  "--workload depth:2 --model llama3.2-1b" "--workload fewshot --model llama3.2-1b" > $V/ab_driver.log 2>&1
echo "ab rc $?"; grep -E "PASSED|FAILED" $V/ab.log | tail -3; ts ab
python3 scripts/ab_summary.py $V/ab.log 2>&1 | tail -22
rm -rf /tmp/tr && mkdir /tmp/tr && cp -r CMakeLists.txt CMakePresets.json cmake include src data bench tests python pyproject.toml README.md /tmp/tr/
(cd /tmp/tr && patch -p1 < $OLDPWD/results/h200/run28/trace/trace.patch && \
  cmake -S . -B b -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a-real -DCODEC_BUILD_TESTS=OFF \
    -DCODEC_BUILD_BENCH=OFF > /dev/null && cmake --build b -j 16 --target codec_tool) > $V/trace_build.log 2>&1
echo "trace build rc $?"
for w in depth:2 sysprompt:512 fewshot; do
  mkdir -p $V/trace/${w/:/_}
  CODEC_TRACE_DIR=$V/trace/${w/:/_} timeout 60 /tmp/tr/b/codec bench --backend cuda --workload $w --reps 5 \
    > $V/trace/${w/:/_}/bench.log 2>&1; echo "trace $w rc $?"
done
ts traced
cd $OUT && tar czf v.tgz v && rm -rf v
