# Run 38, call 2: what bounds the wide kernel's tile loop. The working tree (e4e2184's kernels)
# against a copy whose producer copies no KV at all (the two copy_rows calls of wide_produce
# removed: the consumers compute on stale shared memory and every mbarrier still completes),
# two rounds alternating on the dense shapes (512 and 1,024 rows a kv head) and the workloads
# with wide tasks; the outputs of "nocopy" are wrong by design (its rows say FAIL). Then ncu's
# full set on the wide kernel of the larger dense shape and of long, both builds.
set -uo pipefail
V=$OUT/v; mkdir -p $V
ts() { echo "## $(date +%T) ${SECONDS}s $*"; }
ts start
git status --short > $V/status.txt
for spec in 4:128:8192 2:256:16384; do
  IFS=: read docs reqs tokens <<< "$spec"
  python3 -c "import json,sys; d,r,t=map(int,sys.argv[1:]); print(json.dumps({'name':f'dense_{d}x{r}x{t}',
    'nodes':[{'id':f'doc{i}','parent':None,'tokens':t} for i in range(d)],
    'requests':[{'node':f'doc{i}'} for i in range(d) for _ in range(r)]}))" $docs $reqs $tokens > /tmp/dense_${spec//:/_}.json
done
rm -rf /tmp/nocopy && mkdir -p /tmp/nocopy
tar --exclude="./build*" --exclude=./.git --exclude=./abtmp --exclude=./.whl --exclude=./.pat --exclude=./results -cf - . | tar -xf - -C /tmp/nocopy
sed -i '/kv.template copy_rows</d' /tmp/nocopy/src/engine/cuda/kernels/pac_wide.cuh
diff <(cat src/engine/cuda/kernels/pac_wide.cuh) /tmp/nocopy/src/engine/cuda/kernels/pac_wide.cuh > $V/nocopy.diff; cat $V/nocopy.diff
build() { (cd $1 && cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a-real > /dev/null &&
  cmake --build build-gpu -j 8 --target codec_tool > build.log 2>&1) || echo "!! build of $1 failed"; }
build /tmp/nocopy & build .
wait
ts built
row() { grep -E "^[A-Za-z0-9_.:/-]+ +[0-9.]+ " | sed "s/^/### $1 | /"; }
b() { local bin=$1; shift; timeout 100 $bin bench --backend cuda "$@" 2>/dev/null; }
W=/tmp/dense_4_128_8192.json,/tmp/dense_2_256_16384.json,batch:64,batch:32,long,sysprompt:512
for r in 1 2; do
  for c in base:./build-gpu nocopy:/tmp/nocopy/build-gpu; do
    b ${c#*:}/codec --workload $W | row "${c%%:*} r$r" >> $V/ab.log
  done
  ts "round $r"
done
python3 scripts/ab_summary.py $V/ab.log
for c in base:./build-gpu nocopy:/tmp/nocopy/build-gpu; do
  for w in /tmp/dense_2_256_16384.json long; do
    n=$(basename $w .json); n=${n//:/_}
    timeout 120 ncu --clock-control none --set full -k regex:pac_wide -c 1 --csv --page details \
      ${c#*:}/codec bench --backend cuda --workload $w --reps 1 > $V/ncu_${c%%:*}_$n.csv 2> $V/ncu_${c%%:*}_$n.err
    echo "ncu ${c%%:*} $n rc $?"
  done
done
ts end
cd $OUT && tar czf v.tgz v && rm -rf v
