# Run 39, call 6 (the tree of 159d313): the small trees at every split policy the CLI has
# (adaptive, none, fixed 4 to 32 chunks a node) and on 132 blocks (one a SM), two rounds, to
# see whether any plan beats the planner's where the time is fixed costs (no carry).
set -uo pipefail
V=$OUT/v; mkdir -p $V
ts() { echo "## $(date +%T) ${SECONDS}s $*"; }
ts start
cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a-real > $V/configure.log 2>&1 &&
  cmake --build build-gpu -j 16 --target codec_tool > $V/build.log 2>&1 || { echo "!! build failed"; tail -30 $V/build.log; }
ts built
W=shape:DT,depth:2,seq:128,depth:3,shape:2,seq:512,seq:2048
for r in 1 2; do
  timeout 120 ./build-gpu/codec bench --backend cuda --workload $W \
    --split adaptive,none,fixed:2,fixed:4,fixed:8,fixed:12,fixed:16,fixed:24,fixed:32 2>/dev/null | sed "s/^/r$r /" >> $V/splits.log
  timeout 60 ./build-gpu/codec bench --backend cuda --workload $W --blocks 132 2>/dev/null | sed "s/^/r$r blocks132 /" >> $V/splits.log
  ts "round $r"
done
python3 - $V/splits.log <<'PY'
import collections, sys
t = collections.defaultdict(list)
for line in open(sys.argv[1]):
    f = line.split()
    if len(f) < 8 or f[1] in ("workload", "backend") or not f[1][0].isalpha() or ":" not in f[1] and f[1] != "blocks132": continue
    if f[1] == "blocks132": key, w, ms = "blocks 132", f[2], f[6]
    else: key, w, ms = " ".join(f[-2:]) if "split" in f[-2:] else "?", f[1], f[5]
    try: t[(w, key)].append(float(ms))
    except ValueError: t.pop((w, key), None)
ws = sorted({w for w, _ in t})
for w in ws:
    base = min(t.get((w, "split adaptive"), [float("nan")]))
    row = sorted(((min(v), k) for (x, k), v in t.items() if x == w))
    print(w, "adaptive %.4f" % base, " ".join("%s %.4f (%.3f)" % (k.replace("split ", ""), m, m / base) for m, k in row))
PY
ts end
cd $OUT && tar czf v.tgz v && rm -rf v
