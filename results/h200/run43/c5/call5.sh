# Run 43, call 5 (on call 3's machine, a2934cd + bench/wgmma_rate.cu): wgmma
# m64nNk16's rate by N, both operands in shared memory, for a leaf tile
# computed transposed (docs/DESIGN_NOTES.md, "Leaves inside the wide blocks").
mkdir -p $OUT/v
nvcc -std=c++20 -O3 -arch=sm_90a -Isrc -Iinclude bench/wgmma_rate.cu -o /tmp/wr
/tmp/wr > $OUT/v/wgmma_rate.txt 2>&1; echo "rc $?"; cat $OUT/v/wgmma_rate.txt
nvidia-smi --query-gpu=clocks.sm,clocks.max.sm --format=csv
