# Run 45, call 5: 32-bit unit offsets in PAC's loaders only, the wide kernel's producer on byte offsets
# as before (its SASS is 4332ec5's instruction for instruction, bar kernel-parameter offsets), against
# 4332ec5 (abtmp/kv_loader.cuh, abtmp/cuda_engine.cu, abtmp/pac_wide.cuh), two sm_90a builds
# alternating, up to three rounds; the GPU tests on the new build first.
set -uo pipefail
V=$OUT/v; mkdir -p $V
ts() { echo "## $(date +%T) ${SECONDS}s $*"; }
old=/tmp/ab_old; rm -rf $old && mkdir -p $old
tar --exclude="./build*" --exclude=./.git --exclude=./results -cf - . | tar -xf - -C $old
cp abtmp/kv_loader.cuh $old/src/engine/cuda/tile/kv_loader.cuh; cp abtmp/cuda_engine.cu $old/src/engine/cuda/cuda_engine.cu
cp abtmp/pac_wide.cuh $old/src/engine/cuda/kernels/pac_wide.cuh
cfg() { cmake -S $1 -B $1/$2 -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=$3 -DCODEC_BUILD_BENCH=OFF > $V/configure_$4.log 2>&1; }
cfg $old build 90a-real old; cfg . build-gpu 90a-real new
(cmake --build $old/build -j 8 --target codec_tool > $V/build_old.log 2>&1) &
(cmake --build build-gpu -j 8 --target codec_tool test_engine_cuda > $V/build_new.log 2>&1) &
wait
ts built
[ -x $old/build/codec ] && [ -x build-gpu/codec ] || { tail -20 $V/build_*.log; exit 1; }
timeout 60 ./build-gpu/tests/test_engine_cuda > $V/test_new.log 2>&1; echo "test_engine_cuda sm_90a rc=$?"; tail -3 $V/test_new.log
ts tested
W=sysprompt:512,batch:64,loogle:8,long,seq:2048,depth:2,shape:DT,depth:6,fewshot,flat:64,flat:8
for r in 1 2 3; do
  [ $SECONDS -lt 185 ] || { ts "round $r skipped"; break; }
  for b in old new; do
    bin=$old/build/codec; [ $b = new ] && bin=./build-gpu/codec
    $bin bench --backend cuda --workload $W 2>&1 | grep -E "^[a-z]+:?[0-9.A-Z]* +[0-9.]+ " | sed "s/^/### $b r$r | /" >> $V/ab.log
    $bin bench --backend cuda --workload flat:8 --split none 2>&1 | grep "^flat:8 " | sed "s/^/### $b r$r --split none | /" >> $V/ab.log
    $bin bench --backend cuda --model llama3.2-1b --workload batch:64,loogle:8 2>&1 | grep -E "^[a-z]+:?[0-9.A-Z]* +[0-9.]+ " | sed "s/^/### $b r$r d64 | /" >> $V/ab.log
  done
  ts "round $r"
done
python3 scripts/ab_summary.py $V/ab.log | tee $V/summary.txt
cd $OUT && tar czf v.tgz v
