# Run 27, call 1: build; every built-in workload under both L2 flushes (write: the 256 MB memset
# used so far; read: a 256 MB read that leaves L2 clean); ncu DRAM reads and writes of PAC and
# the merge on graph replays after each flush.
set -uo pipefail
V=$OUT/v; mkdir -p $V
ts() { echo "## $(date +%T) $*"; }
ts start
CODEC_GPU_STEPS="build" bash scripts/gpu_run.sh $V/p > $V/build.log 2>&1; tail -3 $V/build.log
ts built
for f in write read; do
  ./build-gpu/codec bench --backend cuda --workload all --flush $f --save $V/bench_$f.json > $V/bench_$f.log 2>&1
  echo "bench $f rc $?"; ts "bench $f"
done
# --reps 3: PAC launch 0 is the checked run, 1-3 direct calls, 4-11 graph replays each after a flush.
for w in depth:2 shape:DT seq:128 long; do
  for f in write read; do
    timeout 60 ncu --clock-control none --cache-control none -k regex:"pac_kernel|merge" --launch-skip 12 --launch-count 2 \
      --metrics dram__bytes_read.sum,dram__bytes_write.sum,gpu__time_duration.sum --csv \
      ./build-gpu/codec bench --backend cuda --workload $w --reps 3 --flush $f > $V/ncu_${w/:/_}_$f.csv 2>&1
  done
done
ts ncu
cd $OUT && tar czf v.tgz v && rm -rf v
