# Run 43, call 3: KV tiles prefetched into L2 beyond the PAC ring
# (CODEC_KV_PREFETCH tiles past the cp.async stages, one bulk L2 prefetch
# a token row of K and of V), P = 4 against P = 0 (the same tree,
# -DCODEC_KV_PREFETCH=0), two rounds alternating; with run 43's planner
# switches, so that batch:64 also runs with the leaves on the SMs the root
# leaves free, where a block's bytes in flight bound its leaves.
set -uo pipefail
V=$OUT/v; mkdir -p $V
cfg() { cmake -S . -B $1 -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a-real "${@:2}" > $V/configure_$1.log 2>&1; }
cfg build-p4; cfg build-p0 "-DCMAKE_CUDA_FLAGS=-DCODEC_KV_PREFETCH=0"
(cmake --build build-p4 -j 8 --target codec_tool > $V/build_p4.log 2>&1) & (cmake --build build-p0 -j 8 --target codec_tool > $V/build_p0.log 2>&1) & wait
[ -x build-p4/codec ] && [ -x build-p0/codec ] || { tail -20 $V/build_p*.log; exit 1; }
cases=("flat:8|--split none|" "flat:8||" "flat:64||" "batch:64||" "batch:64|--beside-wide 0.5 --split exhaustive|100 25" "batch:64|--split exhaustive|96 24" "long||" "depth:2||" "seq:2048||" "fewshot||" "loogle:8||")
for r in 1 2; do
  for c in "${cases[@]}"; do
    IFS='|' read -r w args envs <<< "$c"; set -- $envs
    for b in p0 p4; do
      row=$(CODEC_WIDE_USED=${1:-0} CODEC_WIDE_K=${2:-0} ./build-$b/codec bench --backend cuda --workload $w $args 2>&1 | grep "^$w ")
      echo "### $b r$r $w $args ${envs:+used=$1 k=$2} | $row" | tee -a $V/ab.log
    done
  done
done
cd $OUT && tar czf v.tgz v
