# Run 44, call 5: the new tile step (call 3's tree) under `codec fuzz` (1,000 random cases against
# the fp64 reference), then batch:64, long and batch:32 with the price of PAC tasks beside the wide
# kernel lowered (its plans change at 0.7 for long, at 0.65 for batch:64: 96 wide tasks), against
# main's kernels at the committed price, three rounds alternating.
set -uo pipefail
V=$OUT/v; mkdir -p $V
ts() { echo "## $(date +%T) ${SECONDS}s $*"; }
old=/tmp/ab_old; rm -rf $old && mkdir -p $old
tar --exclude="./build*" --exclude=./.git --exclude=./results -cf - . | tar -xf - -C $old
cp abtmp/attend_mma.cuh $old/src/engine/cuda/tile/attend_mma.cuh; cp abtmp/pac.cuh $old/src/engine/cuda/kernels/pac.cuh
cfg() { cmake -S $1 -B $1/$2 -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a-real -DCODEC_BUILD_BENCH=OFF > $V/configure_$3.log 2>&1; }
cfg $old build old; cfg . build-gpu new
(cmake --build $old/build -j 8 --target codec_tool > $V/build_old.log 2>&1) &
(cmake --build build-gpu -j 8 --target codec_tool > $V/build_new.log 2>&1) &
wait
[ -x $old/build/codec ] && [ -x build-gpu/codec ] || { tail -20 $V/build_*.log; exit 1; }
ts built
timeout 200 ./build-gpu/codec fuzz --backend cuda --count 1000 --seed 44 > $V/fuzz.log 2>&1; echo "fuzz rc=$?"; tail -2 $V/fuzz.log
ts fuzzed
for r in 1 2 3; do
  for c in old new bw07=0.7 bw06=0.6; do
    b=${c%%=*} bin=./build-gpu/codec extra=
    [ $b = old ] && bin=$old/build/codec
    [[ $c = *=* ]] && extra="--beside-wide ${c#*=}"
    $bin bench --backend cuda --workload batch:64,long,batch:32 $extra 2>&1 | grep -E "^[a-z]+:?[0-9.A-Z]* +[0-9.]+ " | sed "s/^/### $b r$r | /" >> $V/ab.log
  done
  ts "round $r"
done
python3 scripts/ab_summary.py $V/ab.log | tee $V/summary.txt
cd $OUT && tar czf v.tgz v
