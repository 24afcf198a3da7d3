#!/usr/bin/env python3
"""Summary of a scripts/gpu_ab.sh log: for each bench argument list, both
builds' CoDec times over the rounds (ms) and new / old of each build's best
round (below 1: new is faster), then the geometric mean of those ratios.

  python3 scripts/ab_summary.py OUT/ab.log
"""
import collections
import math
import re
import sys

ROW = re.compile(r"### (old|new) r\d+ (.*?) \| (.*)")


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    times = collections.defaultdict(lambda: {"old": [], "new": []})
    for line in open(sys.argv[1]):
        m = ROW.match(line)
        fields = m.group(3).split() if m else []
        if len(fields) > 4:  # a bench row: workload, scale, requests, unique tokens, codec ms, ...
            times[m.group(2)][m.group(1)].append(float(fields[4]))
    ratios = []
    for args, t in times.items():
        if not t["old"] or not t["new"]:
            print(f"{args}: incomplete (old {t['old']}, new {t['new']})")
            continue
        ratios.append(min(t["new"]) / min(t["old"]))
        print(f"{args:55} old {' '.join(f'{x:.4f}' for x in t['old'])}  new {' '.join(f'{x:.4f}' for x in t['new'])}"
              f"  new/old {ratios[-1]:.3f}")
    if ratios:
        print(f"geometric mean new/old over {len(ratios)}: {math.exp(sum(map(math.log, ratios)) / len(ratios)):.4f}")


if __name__ == "__main__":
    main()
