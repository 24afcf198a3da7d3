#!/usr/bin/env python3
"""Warp stall samples of an ncu SASS page (`ncu --import R --page source --print-source sass --csv`):
the reasons over the whole kernel, the instructions with the most samples, and with --per N the
instructions executed by opcode divided by N (e.g. warps x tiles: 256 x 64 for flat:8 unsplit).

  python3 stalls.py [--per N] SASS.csv...
"""
import collections
import csv
import sys


def main(argv):
    per = None
    if argv[:1] == ["--per"]:
        per, argv = float(argv[1]), argv[2:]
    for name in argv:
        rows = list(csv.reader(open(name)))
        hdr, data = rows[1], rows[2:]
        ix = {h: i for i, h in enumerate(hdr)}
        reasons = [h for h in hdr if h.startswith("stall_") and "Not Issued" not in h]
        total, samples, ops = collections.Counter(), 0, collections.Counter()
        top = []
        for r in data:
            s = int(r[ix["Warp Stall Sampling (All Samples)"]] or 0)
            samples += s
            for h in reasons:
                if r[ix[h]] not in ("", "-"):
                    total[h] += int(r[ix[h]])
            words = [w for w in r[ix["Source"]].split() if not w.startswith("@")]
            ops[words[0].split(".")[0] if words else "?"] += int(r[ix["Instructions Executed"]] or 0)
            top.append((s, r[ix["Address"]][-5:], r[ix["Source"]].strip()[:60],
                        {h: int(r[ix[h]]) for h in reasons if r[ix[h]] not in ("", "-", "0")}))
        print(f"===== {name}: {samples} samples")
        for h, v in total.most_common(10):
            print(f"  {h:25s} {v:8d} {100 * v / samples:5.1f}%")
        top.sort(key=lambda x: -x[0])
        for s, a, src, d in top[:18]:
            print(f"   {s:7d} {100 * s / samples:5.1f}% {a} {src:60s} {sorted(d.items(), key=lambda x: -x[1])[:3]}")
        if per:
            print(f"  instructions executed / {per:g}: {sum(ops.values()) / per:.1f}")
            for op, n in ops.most_common(20):
                print(f"    {op:12s} {n / per:8.1f}")


if __name__ == "__main__":
    main(sys.argv[1:])
