#!/usr/bin/env python3
"""Phases of one traced run (trace.patch's CSV): from the L2 flush's end to the PAC blocks'
starts, each task's phases (start to its first tile visible, the rest of its tiles, the
epilogue), the last task's end, and the merge's blocks (start, past griddepcontrol.wait, end).
Times in µs from the flush's end.
    python3 summarize.py trace_3.csv.gz [...]"""
import collections
import csv
import gzip
import statistics as st
import sys


def q(v):
    v = sorted(v)
    return "median %.2f  p10 %.2f  p90 %.2f  max %.2f" % (st.median(v), v[len(v) // 10], v[len(v) * 9 // 10], v[-1])


for path in sys.argv[1:]:
    rows = list(csv.DictReader(gzip.open(path, "rt") if path.endswith(".gz") else open(path)))
    t0 = int(next(r for r in rows if r["kind"] == "flush")["start"])
    us = lambda x: (int(x) - t0) / 1000
    blocks = [us(r["start"]) for r in rows if r["kind"] == "block"]
    tasks = [r for r in rows if r["kind"] == "task"]
    merge = [r for r in rows if r["kind"] == "merge"]
    print("%s: %d blocks, %d tasks, %d merge blocks" % (path, len(blocks), len(tasks), len(merge)))
    print("  PAC block start   " + q(blocks) + "  first %.2f" % min(blocks))
    per_block = collections.Counter(r["block"] for r in tasks)
    print("  tasks per block   " + str(sorted(collections.Counter(per_block.values()).items())))
    first = {}
    for r in tasks:
        first.setdefault(r["block"], r)
    lead = [us(r["start"]) - blocks[int(r["block"])] for r in first.values()]
    print("  block start -> 1st task start  " + q(lead))
    for name, a, b in (("start -> 1st tile visible", "start", "ready"), ("1st tile -> loop end", "ready", "loop"),
                       ("epilogue", "loop", "end"), ("whole task", "start", "end")):
        print("  %-27s %s" % (name, q([(int(r[b]) - int(r[a])) / 1000 for r in tasks])))
    ends = [us(r["end"]) for r in tasks]
    print("  task end          " + q(ends))
    cls = collections.defaultdict(list)
    for r in tasks:
        cls[(int(r["rows"]), int(r["tiles"]))].append((int(r["end"]) - int(r["start"])) / 1000)
    for (rw, ti), d in sorted(cls.items(), key=lambda kv: -sum(kv[1]))[:4]:
        print("    rows %3d tiles %4d: %5d tasks, median %.2f us (%.3f per tile)" % (rw, ti, len(d), st.median(d),
                                                                             st.median(d) / max(ti, 1)))
    if merge:
        ms = [us(r["start"]) for r in merge]
        mw = [us(r["ready"]) for r in merge if int(r["ready"])]
        me = [us(r["end"]) for r in merge if int(r["end"])]
        print("  merge start       " + q(ms))
        if mw: print("  merge past wait   " + q(mw))
        if me: print("  merge end         " + q(me))
