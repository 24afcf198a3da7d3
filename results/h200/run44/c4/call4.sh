# Run 44, call 4: the bf16 d128 cost table re-profiled on the new tile step (call 3's tree),
# then three configurations alternating, three rounds: old (main's kernels, committed table),
# new (the new tile step, committed table), newtab (the new tile step, its own table).
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
./build-gpu/codec profile --out $V/nvidia_h200_d128_bf16.json > $V/profile.log 2>&1; echo "profile rc=$?"; tail -5 $V/profile.log
ts profiled
W=depth:2,shape:DT,seq:128,seq:512,seq:2048,depth:4,depth:6,shape:2,shape:5,long,loogle:8,fewshot,sysprompt:512,batch:64,batch:32,flat:64,flat:8
for r in 1 2 3; do
  for b in old new newtab; do
    bin=./build-gpu/codec extra=
    [ $b = old ] && bin=$old/build/codec
    [ $b = newtab ] && extra="--cost-table $V/nvidia_h200_d128_bf16.json"
    $bin bench --backend cuda --workload $W $extra 2>&1 | grep -E "^[a-z]+:[0-9.A-Z]+ +[0-9.]+ " | sed "s/^/### $b r$r | /" >> $V/ab.log
  done
  ts "round $r"
done
python3 scripts/ab_summary.py $V/ab.log | tee $V/summary.txt
for w in batch:64 long batch:32; do
  for b in old newtab; do
    extra=; [ $b = newtab ] && extra="--cost-table $V/nvidia_h200_d128_bf16.json"
    echo "## plan $b $w"; ./build-gpu/codec plan --workload $w $extra 2>&1 | tail -1
  done
done | tee $V/plans.txt
cd $OUT && tar czf v.tgz v
