# Run 42, call 2: the PAC grid trimmed to the last block with a task only in
# plans without wide blocks ("new", call 1's trim beside a wide grid dropped)
# against main's 0b8f624 ("old": cuda_engine.cu/.hpp, plan.hpp/.cpp from it in
# abtmp), three rounds alternating, on the trees without wide blocks whose
# tasks leave blocks empty, and long and batch:32 (wide: the same grid both
# sides). Then every C++ test on "new" (ctest, sm_90a).
set -uo pipefail
V=$OUT/v; mkdir -p $V
ts() { echo "## $(date +%T) ${SECONDS}s $*"; }
CODEC_AB_ROUNDS=3 bash scripts/gpu_ab.sh $V src/engine/cuda/cuda_engine.cu include/codec/engine/cuda_engine.hpp \
  include/codec/plan/plan.hpp src/plan/plan.cpp -- \
  "--workload depth:2" "--workload depth:3" "--workload shape:DT" "--workload shape:3" "--workload seq:128" \
  "--workload seq:2048" "--workload flat:8" "--workload long" "--workload batch:32"
python3 scripts/ab_summary.py $V/ab.log | tee $V/summary.txt
ts ab
cmake --build build-gpu -j 16 > $V/build_all.log 2>&1 || echo "!! build failed"
ts build
ctest --test-dir build-gpu --output-on-failure -j 4 --timeout 300 > $V/ctest.log 2>&1; echo "ctest rc $?"
tail -4 $V/ctest.log
ts ctest
cd $OUT && tar czf v.tgz v && rm -f v/build_*.log
