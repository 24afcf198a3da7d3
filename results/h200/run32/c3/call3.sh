# Run 32, call 3: as call 2, on the tree that followed it: the tails shared by a node's chunks
# (PlanView::task_tails), the wide consumer's tail tiles in a loop of their own, no PAC launch
# where the wide tasks write every row. Then, if time is left, codec fuzz on the GPU (tails drawn).
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
san="compute-sanitizer --error-exitcode 1"
timeout 150 $san --tool memcheck ./build-gpu/tests/test_engine_cuda --gtest_filter=CudaEngine.WideTasksMatchTheReference > $V/memcheck.log 2>&1; echo "memcheck rc $?"; tail -2 $V/memcheck.log
timeout 100 $san --tool racecheck ./build-gpu/tests/test_engine_cuda --gtest_filter=CudaEngine.WideTasksMatchTheReference > $V/racecheck.log 2>&1; echo "racecheck rc $?"; tail -2 $V/racecheck.log
ts sanitizers
cur=data/cost_tables/nvidia_h200_d128_bf16.json
W=sysprompt:512,sysprompt:256,sysprompt:128,sysprompt:64,depth:2,shape:DT,seq:128,depth:3,seq:512,batch:64,batch:32,batch:16,long,loogle:8,fewshot,flat:64,depth:6,ratio:0.2,seq:2048,shape:5
row() { grep -E "^[A-Za-z0-9_.:-]+ +[0-9.]+ " | sed "s/^/### $1 | /"; }
for r in 1 2; do
  [ $SECONDS -lt 330 ] || { echo "no time for round $r"; break; }
  timeout 100 /tmp/old/build/codec bench --backend cuda --workload $W --cost-table $cur 2>/dev/null | row "old r$r" >> $V/ab.log
  timeout 100 ./build-gpu/codec bench --backend cuda --workload $W --cost-table $cur 2>/dev/null | row "new r$r" >> $V/ab.log
  timeout 100 ./build-gpu/codec bench --backend cuda --workload $W --cost-table $cur --tail-tokens 0 2>/dev/null | row "notail r$r" >> $V/ab.log
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
ts table
if [ $SECONDS -lt 480 ]; then
  timeout $((560 - SECONDS)) ./build-gpu/codec fuzz --backend cuda --count 1000 --seed 32 --failures $V/fuzz-failures > $V/fuzz.log 2>&1
  echo "fuzz rc $?"; tail -2 $V/fuzz.log
fi
ts end
cd $OUT && tar czf v.tgz v && rm -rf v
