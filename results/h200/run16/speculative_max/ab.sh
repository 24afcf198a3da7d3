#!/usr/bin/env bash
# A/B of the speculative softmax max (run 16): abtmp/pac_old.cuh held 928a8bf's
# pac.cuh (old), the working tree had the change (new). Both builds read the
# same cost tables (the tree's data/). One device call:
#   bash results/h200/run16/speculative_max/ab.sh   (writes $OUT/ab.log)
set -uo pipefail
# The old kernel: git show 928a8bf:src/engine/cuda/pac.cuh > abtmp/pac_old.cuh (not committed)
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
for w in batch:64 long loogle:8 fewshot batch:16 ratio:0.8 depth:4 flat:64; do ab 1 --workload $w; done
ab 1 --workload batch:64 --model llama3.2-1b
ab 1 --workload long --model gemma2-9b
for w in batch:64 long loogle:8 fewshot; do ab 2 --workload $w; done
echo "== done $(date)"
} 2>&1 | tee $OUT/ab.log | grep -E "^(###|==|!!|\[  )"
