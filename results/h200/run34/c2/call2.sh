# Run 34, call 2: why clusters lost in call 1. 7669782 (abtmp/clus.tar, carried) with a temporary switch
# (CODEC_EXP_ONE_PER_SM: the cluster kernel asks for 120 KiB of shared memory, so that a
# cluster's 16 blocks take 16 SMs, not 8), against clusters as in call 1 and the plain plan on
# 128 blocks (--blocks 128, no clusters), two rounds. Then long with tails of up to 64 and 128
# tokens taken in by its wide tasks.
set -uo pipefail
V=$OUT/v; mkdir -p $V
ts() { echo "## $(date +%T) $*"; }
mkdir -p abtmp/clus && tar xf abtmp/clus.tar -C abtmp/clus && cd abtmp/clus
cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a-real > /dev/null &&
  cmake --build build-gpu -j 16 --target codec_tool > $V/build.log 2>&1 || echo "!! build failed"
ts built
row() { grep -E "^[A-Za-z0-9_.:-]+ +[0-9.]+ " | sed "s/^/### $1 | /"; }
W=depth:2,depth:3,shape:DT,shape:2,seq:128,seq:512
b() { timeout 60 ./build-gpu/codec bench --backend cuda --workload $W "$@" 2>/dev/null; }
for r in 1 2; do
  b --cluster 0 | row "old r$r" >> $V/ab.log
  b --cluster 16 | row "c16 r$r" >> $V/ab.log
  CODEC_EXP_ONE_PER_SM=1 b --cluster 16 | row "c16one r$r" >> $V/ab.log
  b --cluster 0 --blocks 128 --cost-table data/cost_tables/nvidia_h200_d128_bf16.json | row "b128 r$r" >> $V/ab.log
  ts "r$r"
done
python3 ../../scripts/ab_summary.py $V/ab.log
# long's 32 private leaves of 128 tokens taken in by its wide root tasks (--tail-tokens; the
# H200's default takes tails of at most 16)
for r in 1 2; do
  for t in 16 64 128; do
    timeout 60 ./build-gpu/codec bench --backend cuda --workload long --tail-tokens $t 2>/dev/null |
      row "$([ $t = 16 ] && echo old || echo t$t) r$r" >> $V/ab_long.log
  done
done
python3 ../../scripts/ab_summary.py $V/ab_long.log
cd $OUT && tar czf v.tgz v && rm -rf v
