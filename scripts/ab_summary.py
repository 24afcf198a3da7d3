#!/usr/bin/env python3
"""Summary of a scripts/gpu_ab.sh log: for each bench argument list (and
workload, where one list ran several), every configuration's CoDec times over
the rounds (ms) and each one's best round over old's (below 1: faster than
old), then the geometric mean of each configuration's ratios.

  python3 scripts/ab_summary.py OUT/ab.log
"""
import collections
import math
import re
import sys

ROW = re.compile(r"### (\w+) r\d+ ?(.*?) ?\| (.*)")


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    times = collections.defaultdict(lambda: collections.defaultdict(list))  # (args, workload) → label → ms
    labels = []
    for line in open(sys.argv[1]):
        m = ROW.match(line)
        fields = m.group(3).split() if m else []
        if len(fields) > 4:  # a bench row: workload, scale, requests, unique tokens, codec ms, ...
            label = m.group(1)
            labels += [] if label in labels else [label]
            times[(m.group(2), fields[0])][label].append(float(fields[4]))
    others = [x for x in labels if x != "old"]
    ratios = collections.defaultdict(list)
    for (args, workload), t in times.items():
        name = args if workload in args.replace(",", " ").split() else f"{args} {workload}".strip()
        if not t["old"] or any(not t[x] for x in others):
            print(f"{name}: incomplete ({dict(t)})")
            continue
        line = f"{name:55} old {' '.join(f'{x:.4f}' for x in t['old'])}"
        for x in others:
            ratios[x].append(min(t[x]) / min(t["old"]))
            line += f"  {x} {' '.join(f'{v:.4f}' for v in t[x])} {x}/old {ratios[x][-1]:.3f}"
        print(line)
    for x in others:
        if ratios[x]:
            mean = math.exp(sum(map(math.log, ratios[x])) / len(ratios[x]))
            print(f"geometric mean {x}/old over {len(ratios[x])}: {mean:.4f}")


if __name__ == "__main__":
    main()
