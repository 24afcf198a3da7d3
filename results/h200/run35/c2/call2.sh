# Run 35, call 2: deeper KV rings for the wide kernel, three builds alternating in two rounds:
#   old  46262fa (abtmp/old.tar): 2 Q buffers, 2 K and 2 V stages of 128 tokens (192 KiB)
#   v3   the working tree: 2 Q buffers, 2 K and 3 V stages (224 KiB): V loads two tiles ahead
#   kv3  the working tree with 1 Q buffer, 3 K and 3 V stages (224 KiB): both two tiles ahead
# on the workloads with wide tasks and run 30's two dense shapes (every request ends on its
# document: 512 and 1,024 rows a kv head); the GPU tests on both new builds first (carry abtmp).
# The working tree was 46262fa with v3.patch (beside this script: separate K and V stage
# counts) applied; kv3 as committed keeps one kStages for both, the same machine code
# (README.md). To run it again:
#   cp results/h200/run35/c2/v3.patch /tmp && git checkout 46262fa && git apply /tmp/v3.patch
#   mkdir -p abtmp && git archive -o abtmp/old.tar 46262fa CMakeLists.txt cmake include src tests bench data
set -uo pipefail
V=$OUT/v; mkdir -p $V
ts() { echo "## $(date +%T) $*"; }
ts start
for spec in 4:128:8192 2:256:16384; do
  IFS=: read docs reqs tokens <<< "$spec"
  python3 -c "import json,sys; d,r,t=map(int,sys.argv[1:]); print(json.dumps({'name':f'dense_{d}x{r}x{t}',
    'nodes':[{'id':f'doc{i}','parent':None,'tokens':t} for i in range(d)],
    'requests':[{'node':f'doc{i}'} for i in range(d) for _ in range(r)]}))" $docs $reqs $tokens > /tmp/dense_${spec//:/_}.json
done
rm -rf /tmp/old /tmp/kv3 && mkdir -p /tmp/old /tmp/kv3 && tar -xf abtmp/old.tar -C /tmp/old
tar --exclude="./build*" --exclude=./.git --exclude=./abtmp --exclude=./.whl --exclude=./.pat -cf - . | tar -xf - -C /tmp/kv3
sed -i -e 's/kKStages = 2;/kKStages = 3;/' -e 's/kQBuffers = 2;/kQBuffers = 1;/' /tmp/kv3/src/engine/cuda/kernel_traits.cuh
grep -n "kKStages =\|kVStages =\|kQBuffers =" /tmp/kv3/src/engine/cuda/kernel_traits.cuh src/engine/cuda/kernel_traits.cuh
build() {  # build DIR TARGETS...
  local d=$1; shift
  (cd $d && cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a-real > /dev/null &&
    cmake --build build -j 6 --target "$@" > build.log 2>&1) || echo "!! build of $d failed"
}
build /tmp/old codec_tool & build /tmp/kv3 codec_tool test_engine_cuda & build . codec_tool test_engine_cuda
wait
ts built
for d in . /tmp/kv3; do
  timeout 100 $d/build/tests/test_engine_cuda > $V/gpu_tests_$(basename $(realpath $d)).log 2>&1
  echo "$d gpu tests rc $?"; grep -E "PASSED|FAILED" $V/gpu_tests_$(basename $(realpath $d)).log
done
ts tests
row() { grep -E "^[A-Za-z0-9_.:-]+ +[0-9.]+ " | sed "s/^/### $1 | /"; }
W=long,batch:64,batch:32,sysprompt:512,sysprompt:256,loogle:8,loogle:16,fewshot,/tmp/dense_4_128_8192.json,/tmp/dense_2_256_16384.json
for r in 1 2; do
  for c in old:/tmp/old v3:. kv3:/tmp/kv3; do
    timeout 100 ${c#*:}/build/codec bench --backend cuda --workload $W 2>/dev/null | row "${c%%:*} r$r" >> $V/ab.log
    timeout 60 ${c#*:}/build/codec bench --backend cuda --workload sysprompt:512 --page-size 1 2>/dev/null \
      | row "${c%%:*} r$r" | sed "s/| sysprompt:512/| sysprompt:512@1/" >> $V/ab.log
  done
  ts "r$r"
done
python3 scripts/ab_summary.py $V/ab.log
ts end
cd $OUT && tar czf v.tgz v && rm -rf v
