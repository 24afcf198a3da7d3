# Run 38, call 4: which part of call 3's change lost. Three builds alternating, two rounds:
#   old    e4e2184 (abtmp/old.tar): cp.async, producer 56 registers, consumers 224
#   tma56  the working tree's TMA producer with e4e2184's 56/224 split (the producer spills)
#   regs72 e4e2184's kernels with call 3's 72/216 split alone
# on the dense shape, the wide workloads and sysprompt:512 at page size 1 (cp.async in every
# build); every C++ test of tma56 first (carry abtmp).
set -uo pipefail
V=$OUT/v; mkdir -p $V
ts() { echo "## $(date +%T) ${SECONDS}s $*"; }
ts start
git diff > $V/working_tree.diff
python3 -c "import json; print(json.dumps({'name':'dense_2x256x16384','nodes':[{'id':f'doc{i}','parent':None,'tokens':16384} for i in range(2)],'requests':[{'node':f'doc{i}'} for i in range(2) for _ in range(256)]}))" > /tmp/dense.json
rm -rf /tmp/old /tmp/tma56 /tmp/regs72 && mkdir -p /tmp/old /tmp/tma56 /tmp/regs72
tar -xf abtmp/old.tar -C /tmp/old && tar -xf abtmp/old.tar -C /tmp/regs72
tar --exclude="./build*" --exclude=./.git --exclude=./abtmp --exclude=./.whl --exclude=./.pat --exclude=./results -cf - . | tar -xf - -C /tmp/tma56
sed -i 's/kProducerRegs = 72;/kProducerRegs = 56;/; s/kConsumerRegs = 216;/kConsumerRegs = 224;/' /tmp/tma56/src/engine/cuda/kernel_traits.cuh
sed -i 's/kProducerRegs = 56;/kProducerRegs = 72;/; s/kConsumerRegs = 224;/kConsumerRegs = 216;/' /tmp/regs72/src/engine/cuda/kernel_traits.cuh
grep -h "kProducerRegs =\|kConsumerRegs =" /tmp/*/src/engine/cuda/kernel_traits.cuh
build() { local d=$1; shift; (cd $d && cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a-real > /dev/null &&
  cmake --build build -j 5 --target "$@" > build.log 2>&1) || echo "!! build of $d failed"; }
build /tmp/old codec_tool & build /tmp/regs72 codec_tool & build /tmp/tma56 codec_tool test_engine_cuda
wait
ts built
timeout 100 /tmp/tma56/build/tests/test_engine_cuda > $V/tma56_tests.log 2>&1; echo "tma56 GPU tests rc $?"; tail -2 $V/tma56_tests.log
row() { grep -E "^[A-Za-z0-9_.:/-]+ +[0-9.]+ " | sed "s/^/### $1 | /"; }
b() { local bin=$1; shift; timeout 100 $bin bench --backend cuda "$@" 2>/dev/null; }
for r in 1 2; do
  for c in old tma56 regs72; do
    b /tmp/$c/build/codec --workload /tmp/dense.json,batch:64,long,sysprompt:512 | row "$c r$r" >> $V/ab.log
    b /tmp/$c/build/codec --workload sysprompt:512 --page-size 1 | row "$c r$r" | sed "s/| sysprompt:512/| sysprompt:512@1/" >> $V/ab.log
  done
  ts "round $r"
done
python3 scripts/ab_summary.py $V/ab.log
ts end
cd $OUT && tar czf v.tgz v && rm -rf v
