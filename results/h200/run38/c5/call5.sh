# Run 38, call 5: the tree to commit (e4e2184's kernels with the wide kernel's producer at 72
# registers and its consumers at 216, where they were 56 and 224; two more layouts in the
# wide test): its whole build and every C++ test on the GPU, then one round of old and new
# on batch:64, long and the dense shape (carry abtmp).
set -uo pipefail
V=$OUT/v; mkdir -p $V
ts() { echo "## $(date +%T) ${SECONDS}s $*"; }
ts start
git diff > $V/working_tree.diff
cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a-real > $V/configure.log 2>&1 &&
  cmake --build build-gpu -j 16 > $V/build.log 2>&1 || { echo "!! build failed"; tail -30 $V/build.log; }
grep -i "warning\|C7514" $V/build.log | head
ts built
timeout 120 ctest --test-dir build-gpu --output-on-failure -j 4 --timeout 100 > $V/ctest.log 2>&1; echo "ctest rc $?"
tail -3 $V/ctest.log; grep -E "Failed|\*\*\*" $V/ctest.log | head
ts tests
cd $OUT && tar czf v.tgz v && rm -rf v
