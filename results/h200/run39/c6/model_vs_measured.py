"""The model's prediction (makespan + merge, `codec plan --target h200 --split S`) beside call 6's
measured time (each configuration's faster round) for every small tree and split policy.
  tar xzf v.tgz && python3 model_vs_measured.py v/splits.log PATH/TO/codec > model_vs_measured.txt"""
import collections
import subprocess
import sys

log, codec = sys.argv[1], sys.argv[2]
measured = collections.defaultdict(list)
for line in open(log):
    f = line.split()
    if len(f) > 8 and ":" in f[1] and f[-2] == "split":
        measured[(f[1], f[-1])].append(float(f[5]) * 1000)
splits = ["adaptive", "none"] + [f"fixed:{k}" for k in (2, 4, 8, 12, 16, 24, 32)]
for w in sorted({w for w, _ in measured}):
    print(w)
    rows = []
    for s in splits:
        f = subprocess.run([codec, "plan", "--target", "h200", "--workload", w, "--split", s],
                           capture_output=True, text=True, check=True).stdout.splitlines()[-1].split()
        rows.append((min(measured[(w, s)]), s, int(f[4]), int(f[8]), float(f[9]) + float(f[12])))
    for meas, s, tasks, b_k, pred in sorted(rows):
        print(f"  {s:9} tasks {tasks:5d} most chunks a node {b_k:3d}  predicted {pred:7.2f} us  measured {meas:6.2f} us")
