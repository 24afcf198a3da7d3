#!/usr/bin/env python3
"""Summary of a scripts/gpu_ab.sh log: for each bench argument list (and
workload, where one list ran several), every configuration's CoDec times over
the rounds (ms), each one's best round over old's (below 1: faster than old)
and its median round over old's median, then the geometric means of both.
A gain that only the best rounds show, not the medians, rests on one fast
round.

  python3 scripts/ab_summary.py OUT/ab.log
"""
import collections
import math
import re
import statistics
import sys

ROW = re.compile(r"### (\w+) r\d+ ?(.*?) ?\| (.*)")
NUMBER = re.compile(r"[0-9]+(\.[0-9]+)?")


def geometric_mean(xs):
    return math.exp(sum(map(math.log, xs)) / len(xs))


def summarise(lines):
    """The summary's lines for the log's lines."""
    times = collections.defaultdict(lambda: collections.defaultdict(list))  # (args, workload) → label → ms
    labels = []
    for line in lines:
        m = ROW.match(line)
        fields = m.group(3).split() if m else []
        # a bench row: workload (its name, then its tokens' and variants' tags: "long q4", "loogle:8 c50 s"),
        # scale, requests, unique tokens, codec ms, ...
        numeric = [i for i, x in enumerate(fields) if NUMBER.fullmatch(x)]
        if numeric and numeric[0] >= 1 and len(fields) > numeric[0] + 3:
            label, name = m.group(1), " ".join(fields[:numeric[0]])
            labels += [] if label in labels else [label]
            times[(m.group(2), name)][label].append(float(fields[numeric[0] + 3]))
    others = [x for x in labels if x != "old"]
    best = collections.defaultdict(list)    # label → best round / old's best, per row
    median = collections.defaultdict(list)  # label → median / old's median, per row
    out = []
    for (args, workload), t in times.items():
        named = re.search(r"--workload (\S+)", args)  # the row's name where the arguments name it alone
        name = args if named and named.group(1) == workload else f"{args} {workload}".strip()
        if not t["old"] or any(not t[x] for x in others):
            out.append(f"{name}: incomplete ({dict(t)})")
            continue
        line = f"{name:55} old {' '.join(f'{x:.4f}' for x in t['old'])}"
        for x in others:
            best[x].append(min(t[x]) / min(t["old"]))
            median[x].append(statistics.median(t[x]) / statistics.median(t["old"]))
            line += f"  {x} {' '.join(f'{v:.4f}' for v in t[x])} {x}/old {best[x][-1]:.3f} (median {median[x][-1]:.3f})"
        out.append(line)
    for x in others:
        if best[x]:
            out.append(f"geometric mean {x}/old over {len(best[x])}: {geometric_mean(best[x]):.4f} "
                       f"(medians {geometric_mean(median[x]):.4f})")
    return out


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    with open(sys.argv[1]) as f:
        print("\n".join(summarise(f)))


if __name__ == "__main__":
    main()
