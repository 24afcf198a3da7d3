# Session 27, call 6: the d64 contention table against the committed one on the 14 plans call 2 did not time (one round).
cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a-real -DCODEC_BUILD_TESTS=OFF -DCODEC_BUILD_BENCH=OFF > /dev/null &&
  cmake --build build-gpu -j 16 --target codec_tool > /dev/null 2>&1 || { echo "!! build failed"; exit 1; }
echo "## built $(date +%T)" >> $OUT/ab_d64_rest.log
for w in ratio:0.05 ratio:0.1 seq:256 seq:512 seq:1024 seq:2048 batch:4 batch:8 depth:4 shape:3 shape:4 shape:5 loogle:16 flat:8; do for t in old new; do
  echo "### d64 $t r1 $w | $(timeout 30 ./build-gpu/codec bench --backend cuda --workload $w --model llama3.2-1b --reps 20 --cost-table abtmp/${t}_d64.json 2>&1 | grep -E "^[a-z]+(:[0-9.A-Z]+)? +[0-9.]+ " | head -1)" >> $OUT/ab_d64_rest.log
done; done
echo "## done $(date +%T)" >> $OUT/ab_d64_rest.log
