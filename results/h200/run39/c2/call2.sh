# Run 39, call 2 (main at b2567ad plus the padded-layout tests): every Python test on the GPU (the
# package installed offline as a user does), then every built-in workload (carry .whl).
set -uo pipefail
ts() { echo "## $(date +%T) ${SECONDS}s $*"; }
ts start
CODEC_GPU_STEPS="build python" timeout 480 bash scripts/gpu_run.sh $OUT/v > $OUT/gpu_run.log 2>&1; echo "gpu_run rc $?"
grep -E "passed|failed|^!!" $OUT/gpu_run.log | tail -5
ts python
timeout $((590 - SECONDS)) ./build-gpu/codec bench --backend cuda --workload all --save $OUT/v/bench_all.json > $OUT/v/bench_all.log 2>&1; echo "bench rc $?"
ts end
cd $OUT && tar czf v.tgz v && rm -rf v
