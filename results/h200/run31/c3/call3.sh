# Run 31, call 3: the tree (single-task blocks: a PAC block of a plan with a task a block at most
# finds its task by its index, without loading block_indptr) against main (abtmp/old.tar, 98964fa),
# both on the committed table (cur); and the tree on run 30's profile (abtmp/run30_d128.json),
# alternating in two rounds. The GPU tests of the tree first.
set -uo pipefail
V=$OUT/v; mkdir -p $V
ts() { echo "## $(date +%T) $*"; }
ts start
cfg="-DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a-real"
rm -rf /tmp/old && mkdir -p /tmp/old && tar -xf abtmp/old.tar -C /tmp/old
(cd /tmp/old && cmake -S . -B build $cfg > /dev/null && cmake --build build -j 6 --target codec_tool > $V/build_old.log 2>&1 || echo "!! old build failed") &
cmake -S . -B build-gpu $cfg > /dev/null && cmake --build build-gpu -j 10 --target codec_tool test_engine_cuda > $V/build_new.log 2>&1 || echo "!! new build failed"
wait; ts built
timeout 200 ./build-gpu/tests/test_engine_cuda > $V/gpu_tests.log 2>&1; echo "gpu tests rc $?"; grep -E "FAILED|PASSED|Failure" $V/gpu_tests.log | head
ts tests
cur=data/cost_tables/nvidia_h200_d128_bf16.json
W=depth:2,shape:DT,seq:128,depth:3,depth:4,seq:512,shape:3,depth:5,batch:64,batch:32,batch:16,long,loogle:4,loogle:8,sysprompt:512,sysprompt:64,fewshot,flat:64,depth:6,ratio:0.2,seq:2048,shape:5
row() { grep -E "^[A-Za-z0-9_.:-]+ +[0-9.]+ " | sed "s/^/### $1 | /"; }
for r in 1 2; do
  /tmp/old/build/codec bench --backend cuda --workload $W --cost-table $cur 2>/dev/null | row "old r$r" >> $V/ab.log
  ./build-gpu/codec bench --backend cuda --workload $W --cost-table $cur 2>/dev/null | row "new r$r" >> $V/ab.log
  ./build-gpu/codec bench --backend cuda --workload $W --cost-table abtmp/run30_d128.json 2>/dev/null | row "run30 r$r" >> $V/ab.log
done
ts ab
python3 - $V/ab.log <<'PY'
import sys, collections, math
t = collections.defaultdict(lambda: collections.defaultdict(list))
for line in open(sys.argv[1]):
    f = line.split()
    t[f[4]][f[1]].append(float(f[8]))
g = collections.defaultdict(list)
print("workload old new run30 new/old run30/new")
for w, v in t.items():
    o, n, r = min(v["old"]), min(v["new"]), min(v["run30"])
    g["new/old"].append(n / o); g["run30/new"].append(r / n)
    print(f"{w} {o:.4f} {n:.4f} {r:.4f} {n/o:.3f} {r/n:.3f}")
for k, x in g.items(): print(k, "geomean", round(math.exp(sum(map(math.log, x)) / len(x)), 4))
PY
cd $OUT && tar czf v.tgz v && rm -rf v
