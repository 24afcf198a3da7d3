#!/usr/bin/env bash
# A/B of the order of the row-sum additions in exp_pack (run 16): abtmp/pac_old.cuh held 1980066's
# pac.cuh (old), the working tree had the change (new). Both builds read the
# same cost tables (the tree's data/). One device call:
#   bash results/h200/run16/speculative_max/ab_sum_order.sh   (writes $OUT/ab_sum_order.log)
set -uo pipefail
# The old kernel: git show 1980066:src/engine/cuda/pac.cuh > abtmp/pac_old.cuh (not committed)
[ -f abtmp/pac_old.cuh ] || { echo "!! abtmp/pac_old.cuh missing: old and new would be the same build"; exit 1; }
{
rm -rf /tmp/old && mkdir /tmp/old && tar --exclude="./build*" --exclude=./.git -cf - . | tar -xf - -C /tmp/old
cp abtmp/pac_old.cuh /tmp/old/src/engine/cuda/pac.cuh
(cd /tmp/old && cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a-real > /dev/null && cmake --build build -j 8 --target codec_tool > /dev/null) &
cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a-real > /dev/null && cmake --build build-gpu -j 8 --target codec_tool test_engine_cuda > $OUT/build.log 2>&1 || echo "!! new build failed"
wait
echo "== built $(date)"
timeout 120 ./build-gpu/tests/test_engine_cuda 2>&1 | tail -15
row() { timeout 90 "$@" 2>&1 | grep -E "^[a-z]+(:[0-9.A-Z]+)? +[0-9.]+ " | head -1; }
ab() {  # ab ROUND ARGS...: old, then new, on the same arguments
  for b in old new; do
    bin=./build-gpu/codec; [ $b = old ] && bin=/tmp/old/build/codec
    echo "### $b r$1 ${*:2} | $(row $bin bench --backend cuda "${@:2}")"
  done
}
for r in 1 2; do
  for w in long loogle:8 batch:64; do ab $r --workload $w; done
  ab $r --workload batch:64 --model llama3.2-1b
done
echo "== done $(date)"
} 2>&1 | tee $OUT/ab_sum_order.log | grep -E "^(###|==|!!|\[  )"
