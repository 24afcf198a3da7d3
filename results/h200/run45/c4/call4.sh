# Run 45, call 4: the KV copies' token offsets in 32-bit units (tile/kv_loader.cuh, cuda_engine.cu's
# make_kv_pool) against main's 64-bit byte offsets (abtmp/kv_loader.cuh, abtmp/cuda_engine.cu: 4332ec5's),
# two sm_90a builds alternating, three rounds (a round is skipped once the call nears its limit); the
# GPU tests on the new sm_90a build and on a generic sm_90 build (every layout: NHD, HND, interleaved,
# padded NHD, whose 16-byte unit is the least the kernels take).
set -uo pipefail
V=$OUT/v; mkdir -p $V
ts() { echo "## $(date +%T) ${SECONDS}s $*"; }
old=/tmp/ab_old; rm -rf $old && mkdir -p $old
tar --exclude="./build*" --exclude=./.git --exclude=./results -cf - . | tar -xf - -C $old
cp abtmp/kv_loader.cuh $old/src/engine/cuda/tile/kv_loader.cuh; cp abtmp/cuda_engine.cu $old/src/engine/cuda/cuda_engine.cu
cfg() { cmake -S $1 -B $1/$2 -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=$3 -DCODEC_BUILD_BENCH=OFF > $V/configure_$4.log 2>&1; }
cfg $old build 90a-real old; cfg . build-gpu 90a-real new; cfg . build-sm90 90-real sm90
(cmake --build $old/build -j 6 --target codec_tool > $V/build_old.log 2>&1) &
(cmake --build build-gpu -j 6 --target codec_tool test_engine_cuda > $V/build_new.log 2>&1) &
(cmake --build build-sm90 -j 4 --target test_engine_cuda > $V/build_sm90.log 2>&1) &
wait
ts built
[ -x $old/build/codec ] && [ -x build-gpu/codec ] || { tail -20 $V/build_*.log; exit 1; }
timeout 150 ./build-gpu/tests/test_engine_cuda > $V/test_new.log 2>&1; echo "test_engine_cuda sm_90a rc=$?"; tail -3 $V/test_new.log
timeout 150 ./build-sm90/tests/test_engine_cuda > $V/test_sm90.log 2>&1; echo "test_engine_cuda generic sm_90 rc=$?"; tail -3 $V/test_sm90.log
ts tested
W=depth:2,shape:DT,seq:128,seq:512,seq:2048,depth:4,depth:6,shape:2,shape:5,long,loogle:8,fewshot,sysprompt:512,batch:64,flat:64,flat:8
W64=depth:2,seq:512,depth:6,loogle:8,batch:64
for r in 1 2 3; do
  [ $SECONDS -lt 470 ] || { ts "round $r skipped"; break; }
  for b in old new; do
    bin=$old/build/codec; [ $b = new ] && bin=./build-gpu/codec
    $bin bench --backend cuda --workload $W 2>&1 | grep -E "^[a-z]+:?[0-9.A-Z]* +[0-9.]+ " | sed "s/^/### $b r$r | /" >> $V/ab.log
    $bin bench --backend cuda --workload flat:8 --split none 2>&1 | grep "^flat:8 " | sed "s/^/### $b r$r --split none | /" >> $V/ab.log
    $bin bench --backend cuda --model llama3.2-1b --workload $W64 2>&1 | grep -E "^[a-z]+:?[0-9.A-Z]* +[0-9.]+ " | sed "s/^/### $b r$r d64 | /" >> $V/ab.log
  done
  ts "round $r"
done
python3 scripts/ab_summary.py $V/ab.log | tee $V/summary.txt
cd $OUT && tar czf v.tgz v
