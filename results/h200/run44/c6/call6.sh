# Run 44, call 6: the price of PAC tasks beside the wide kernel at 0.6 against 0.8 on the new tile
# step (call 3's tree), where the price changes the plans: batch:64 and long, bf16 and fp16, three
# rounds alternating on one build.
set -uo pipefail
V=$OUT/v; mkdir -p $V
ts() { echo "## $(date +%T) ${SECONDS}s $*"; }
cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a-real -DCODEC_BUILD_BENCH=OFF > $V/configure.log 2>&1
cmake --build build-gpu -j 16 --target codec_tool > $V/build.log 2>&1 || { tail -20 $V/build.log; exit 1; }
ts built
for r in 1 2 3; do
  for dt in bf16 fp16; do
    for bw in 0.8 0.6; do
      ./build-gpu/codec bench --backend cuda --workload batch:64,long --dtype $dt --beside-wide $bw 2>&1 |
        grep -E "^[a-z]+:?[0-9.A-Z]* +[0-9.]+ " | sed "s/^/### p$(echo $bw | tr -d .) r$r --dtype $dt | /" >> $V/ab.log
    done
  done
  ts "round $r"
done
sed -i 's/### p08 /### old /' $V/ab.log
python3 scripts/ab_summary.py $V/ab.log | tee $V/summary.txt
cd $OUT && tar czf v.tgz v
