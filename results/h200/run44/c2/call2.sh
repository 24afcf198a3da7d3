# Run 44, call 2: why a PAC block streams at half the copy path's rate (c1/: 55 GB/s an
# SM with a 96 KiB ring on 66 SMs, where flat:8 unsplit streams ~26 GB/s a block).
# main's kernels: the timings of flat:8 unsplit (64 tasks of 2 MB on 64 blocks),
# flat:8 and flat:64, then ncu's full set on the PAC kernel of each, its details and its
# SASS with the warps' stall samples.
set -uo pipefail
V=$OUT/v; mkdir -p $V
ts() { echo "## $(date +%T) ${SECONDS}s $*"; }
cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a-real > $V/configure.log 2>&1
cmake --build build-gpu -j 16 --target codec_tool > $V/build.log 2>&1 || { tail -30 $V/build.log; exit 1; }
ts built
cases=("flat:8|--split none" "flat:8|" "flat:64|" "depth:2|")
for c in "${cases[@]}"; do
  IFS='|' read -r w args <<< "$c"
  ./build-gpu/codec bench --backend cuda --workload $w $args 2>&1 | grep "^$w " | sed "s/^/### $args | /" | tee -a $V/bench.log
done
ts timed
for c in "${cases[@]}"; do
  IFS='|' read -r w args <<< "$c"
  n=${w//:/_}${args:+_none}
  timeout 150 ncu --clock-control none --set full --import-source no -k regex:pac_kernel -c 1 --nvtx --nvtx-include "codec/" \
    -o $V/$n ./build-gpu/codec bench --backend cuda --workload $w $args --reps 1 > $V/ncu_$n.log 2>&1
  ncu --import $V/$n.ncu-rep --page details --csv > $V/${n}_details.csv 2>&1
  ncu --import $V/$n.ncu-rep --page source --print-source sass --csv > $V/${n}_sass.csv 2>&1
  ts "ncu $n"
done
cd $OUT && tar czf v.tgz v
