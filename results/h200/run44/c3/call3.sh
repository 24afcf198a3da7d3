# Run 44, call 3: the mma.sync tile step compiled per step count (attend_tile_mma<D, T, kSteps>,
# Q·Kᵀ in two chains for 1-2 steps) against main's (abtmp/attend_mma.cuh, abtmp/pac.cuh: HEAD's),
# two builds of sm_90a alternating, three rounds; the GPU tests on the new sm_90a build and on a
# generic sm_90 build (every task on the mma.sync path there: 2 and 4 steps too).
set -uo pipefail
V=$OUT/v; mkdir -p $V
ts() { echo "## $(date +%T) ${SECONDS}s $*"; }
old=/tmp/ab_old; rm -rf $old && mkdir -p $old
tar --exclude="./build*" --exclude=./.git --exclude=./results -cf - . | tar -xf - -C $old
cp abtmp/attend_mma.cuh $old/src/engine/cuda/tile/attend_mma.cuh; cp abtmp/pac.cuh $old/src/engine/cuda/kernels/pac.cuh
cfg() { cmake -S $1 -B $1/$2 -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=$3 -DCODEC_BUILD_BENCH=OFF > $V/configure_$4.log 2>&1; }
cfg $old build 90a-real old; cfg . build-gpu 90a-real new; cfg . build-sm90 90-real sm90
(cmake --build $old/build -j 6 --target codec_tool > $V/build_old.log 2>&1) &
(cmake --build build-gpu -j 6 --target codec_tool test_engine_cuda > $V/build_new.log 2>&1) &
(cmake --build build-sm90 -j 4 --target test_engine_cuda > $V/build_sm90.log 2>&1) &
wait
ts built
[ -x $old/build/codec ] && [ -x build-gpu/codec ] || { tail -20 $V/build_*.log; exit 1; }
timeout 200 ./build-gpu/tests/test_engine_cuda > $V/test_new.log 2>&1; echo "test_engine_cuda sm_90a rc=$?"; tail -3 $V/test_new.log
timeout 200 ./build-sm90/tests/test_engine_cuda > $V/test_sm90.log 2>&1; echo "test_engine_cuda generic sm_90 rc=$?"; tail -3 $V/test_sm90.log
ts tested
W=depth:2,shape:DT,seq:128,seq:512,seq:2048,depth:4,depth:6,shape:2,shape:5,long,loogle:8,fewshot,sysprompt:512,batch:64,flat:64,flat:8
for r in 1 2 3; do
  for b in old new; do
    bin=$old/build/codec; [ $b = new ] && bin=./build-gpu/codec
    $bin bench --backend cuda --workload $W 2>&1 | grep -E "^[a-z]+:[0-9.A-Z]+ +[0-9.]+ " | sed "s/^/### $b r$r | /" >> $V/ab.log
    $bin bench --backend cuda --workload flat:8 --split none 2>&1 | grep "^flat:8 " | sed "s/^/### $b r$r --split none | /" >> $V/ab.log
  done
  ts "round $r"
done
python3 scripts/ab_summary.py $V/ab.log | tee $V/summary.txt
cd $OUT && tar czf v.tgz v
