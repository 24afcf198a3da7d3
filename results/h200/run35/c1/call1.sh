# Run 35, call 1 (on 46262fa: run 33's kernels and plans): the checks not run since a1c3f40 —
# scripts/gpu_run.sh's build, every Python test (the package installed offline), the GPU fuzz —
# then two questions of run 34's unrun call 2, on runtime options of the same build, two rounds
# alternating: wide tasks taking in tails of up to 64 or 128 tokens (--tail-tokens) against the
# default 16, and the measured best split of the small trees (--split fixed:K) against the
# planner's (carry .whl).
set -uo pipefail
V=$OUT/v; mkdir -p $V
ts() { echo "## $(date +%T) $*"; }
ts start
CODEC_GPU_STEPS="build python fuzz" timeout 420 bash scripts/gpu_run.sh $V > $V/gpu_run.log 2>&1
echo "gpu_run rc $?"
grep -E "^== |!!|passed|failed|PASSED|FAILED" $V/gpu_run.log | tail -20
ts checks
row() { grep -E "^[A-Za-z0-9_.:-]+ +[0-9.]+ " | sed "s/^/### $1 | /"; }
bench() { timeout 60 ./build-gpu/codec bench --backend cuda "$@" 2>/dev/null; }
WT=long,batch:64,batch:32,sysprompt:512,loogle:8,fewshot
for r in 1 2; do
  bench --workload $WT | row "old r$r" >> $V/ab_tails.log
  bench --workload $WT --tail-tokens 64 | row "t64 r$r" >> $V/ab_tails.log
  bench --workload $WT --tail-tokens 128 | row "t128 r$r" >> $V/ab_tails.log
  ts "tails r$r"
done
python3 scripts/ab_summary.py $V/ab_tails.log
WS=depth:2,shape:DT,seq:128,depth:3,shape:2
for r in 1 2; do
  bench --workload $WS | row "old r$r" >> $V/ab_split.log
  for k in 8 12 16 24 32 48; do bench --workload $WS --split fixed:$k | row "f$k r$r" >> $V/ab_split.log; done
  ts "split r$r"
done
python3 scripts/ab_summary.py $V/ab_split.log
ts end
cd $OUT && tar czf v.tgz v && rm -rf v
