# Run 32, call 4: the tree of the commit that takes tails in (the producer's tail tiles in a loop of
# their own too) against main (abtmp/old.tar, b1a41af) and against itself without tails
# (--tail-tokens 0), alternating in two rounds on the workloads with wide tasks and a few small
# trees; the GPU tests first. Then scripts/gpu_run.sh's pat and peers steps on sysprompt:512 at
# page sizes 16 and 1 (carry .whl, .pat and abtmp).
set -uo pipefail
V=$OUT/v; mkdir -p $V
ts() { echo "## $(date +%T) $*"; }
ts start
cfg="-DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a-real"
rm -rf /tmp/old && mkdir -p /tmp/old && tar -xf abtmp/old.tar -C /tmp/old
(cd /tmp/old && cmake -S . -B build $cfg -DCODEC_BUILD_TESTS=OFF > /dev/null && cmake --build build -j 6 --target codec_tool > $V/build_old.log 2>&1 || echo "!! old build failed") &
cmake -S . -B build-gpu $cfg > /dev/null && cmake --build build-gpu -j 10 --target codec_tool test_engine_cuda > $V/build_new.log 2>&1 || echo "!! new build failed"
wait; ts built
timeout 200 ./build-gpu/tests/test_engine_cuda > $V/gpu_tests.log 2>&1; echo "gpu tests rc $?"; grep -E "FAILED|PASSED|Failure" $V/gpu_tests.log | head
ts tests
cur=data/cost_tables/nvidia_h200_d128_bf16.json
W=sysprompt:512,sysprompt:256,sysprompt:128,sysprompt:64,long,batch:32,batch:64,loogle:8,depth:2,shape:DT
row() { grep -E "^[A-Za-z0-9_.:-]+ +[0-9.]+ " | sed "s/^/### $1 | /"; }
for r in 1 2; do
  timeout 80 /tmp/old/build/codec bench --backend cuda --workload $W --cost-table $cur 2>/dev/null | row "old r$r" >> $V/ab.log
  timeout 80 ./build-gpu/codec bench --backend cuda --workload $W --cost-table $cur 2>/dev/null | row "new r$r" >> $V/ab.log
  timeout 80 ./build-gpu/codec bench --backend cuda --workload $W --cost-table $cur --tail-tokens 0 2>/dev/null | row "notail r$r" >> $V/ab.log
  timeout 30 /tmp/old/build/codec bench --backend cuda --workload sysprompt:512 --page-size 1 --cost-table $cur 2>/dev/null | row "old r$r" | sed 's/sysprompt:512/sysprompt:512@1/' >> $V/ab.log
  timeout 30 ./build-gpu/codec bench --backend cuda --workload sysprompt:512 --page-size 1 --cost-table $cur 2>/dev/null | row "new r$r" | sed 's/sysprompt:512/sysprompt:512@1/' >> $V/ab.log
  timeout 30 ./build-gpu/codec bench --backend cuda --workload sysprompt:512 --page-size 1 --cost-table $cur --tail-tokens 0 2>/dev/null | row "notail r$r" | sed 's/sysprompt:512/sysprompt:512@1/' >> $V/ab.log
done
ts ab
python3 - $V/ab.log <<'PY'
import sys, collections, math
t = collections.defaultdict(lambda: collections.defaultdict(list))
for line in open(sys.argv[1]):
    f = line.split()
    t[f[4]][f[1]].append(float(f[8]))
g = collections.defaultdict(list)
print("workload old new notail new/old notail/old")
for w, v in t.items():
    if not all(v[k] for k in ("old", "new", "notail")): print(w, "missing", dict(v)); continue
    o, n, z = min(v["old"]), min(v["new"]), min(v["notail"])
    g["new/old"].append(n / o); g["notail/old"].append(z / o)
    print(f"{w} {o:.4f} {n:.4f} {z:.4f} {n/o:.3f} {z/o:.3f}")
for k, x in g.items(): print(k, "geomean", round(math.exp(sum(map(math.log, x)) / len(x)), 4))
PY
grep -c " ok$" $V/ab.log; grep -v " ok$" $V/ab.log | head -3
if [ $SECONDS -lt 400 ]; then
  CODEC_GPU_STEPS="pat peers" CODEC_PEERS=fi_decode,fi_cascade,sdpa,hydragen,pat CODEC_PEER_WORKLOADS=sysprompt:512,sysprompt:512@1 \
    timeout $((570 - SECONDS)) bash scripts/gpu_run.sh $V/gpu_run > $V/gpu_run.log 2>&1
  echo "gpu_run rc $?"; grep -E "^== |!!" $V/gpu_run.log | tail -8
fi
ts end
cd $OUT && tar czf v.tgz v && rm -rf v
