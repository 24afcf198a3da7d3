# Run 42, call 1: the trimmed PAC grid (2aa0f1d: the grid ends at the last
# block with a task, PlanExtent::busy_blocks) as "new" against main's 0b8f624
# ("old": cuda_engine.cu/.hpp, plan.hpp/.cpp from 0b8f624 in abtmp), three
# rounds alternating. test_engine_cuda runs on "new" (its tests see trimmed grids).
set -uo pipefail
V=$OUT/v; mkdir -p $V
CODEC_AB_ROUNDS=3 bash scripts/gpu_ab.sh $V src/engine/cuda/cuda_engine.cu include/codec/engine/cuda_engine.hpp \
  include/codec/plan/plan.hpp src/plan/plan.cpp -- \
  "--workload long" "--workload batch:32" "--workload batch:64" "--workload loogle:8" "--workload depth:2" \
  "--workload shape:DT" "--workload seq:128" "--workload sysprompt:512" "--workload fewshot"
python3 scripts/ab_summary.py $V/ab.log | tee $V/summary.txt
cd $OUT && tar czf v.tgz v && rm -rf v/build_*.log
