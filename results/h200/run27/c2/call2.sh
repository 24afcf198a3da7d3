# Run 27, call 2: A/B of the next task's descriptor and first page ids loaded during a task's
# epilogue (pac.cuh, ptx.cuh; old = abtmp/ from e95ddbc), GPU tests on the new build first.
set -uo pipefail
V=$OUT/v; mkdir -p $V
ts() { echo "## $(date +%T) $*"; }
ts start
CODEC_AB_ROUNDS=2 timeout 560 bash scripts/gpu_ab.sh $V/ab src/engine/cuda/kernels/pac.cuh src/engine/cuda/primitives/ptx.cuh -- \
  "--workload fewshot" "--workload sysprompt:512" "--workload sysprompt:512 --page-size 1" "--workload loogle:8" \
  "--workload long" "--workload batch:64" "--workload depth:6" "--workload flat:64" "--workload shape:5" \
  "--workload fewshot --model llama3.2-1b" "--workload sysprompt:512 --model llama3.2-1b" "--workload loogle:8 --model llama3.2-1b" \
  "--workload flat:64 --model llama3.2-1b"
ts ab
cd $OUT && tar czf v.tgz v && rm -rf v
