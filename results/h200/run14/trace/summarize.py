#!/usr/bin/env python3
"""Per-workload summary of a PAC task trace (trace_driver.cpp's CSV, optionally gzipped):
block start and end spread, task durations per (rows, kv_len) class, and how much a
perfect balance of the measured task durations over the 264 blocks could save.
    python3 summarize.py trace.csv.gz"""
import collections
import csv
import gzip
import statistics as st
import sys

path = sys.argv[1]
with (gzip.open(path, "rt") if path.endswith(".gz") else open(path)) as f:
    rows = list(csv.DictReader(f))
by = collections.defaultdict(list)
for r in rows:
    by[(r["workload"], r["variant"])].append(r)
for key, ts in by.items():
    t0 = min(int(r["start_ns"]) for r in ts)
    blocks = collections.defaultdict(list)
    for r in ts:
        blocks[int(r["block"])].append(r)
    ends = sorted((max(int(r["end_ns"]) for r in b) - t0) / 1000 for b in blocks.values())
    starts = sorted((min(int(r["start_ns"]) for r in b) - t0) / 1000 for b in blocks.values())
    sms = {int(l[0]["sm"]) for l in blocks.values()}
    dur = [(int(r["end_ns"]) - int(r["start_ns"])) / 1000 for r in ts]
    mean_busy = sum(dur) / 264
    bound = max(mean_busy, max(dur))
    print("%s %s: run %.4f ms, %d blocks on %d SMs, starts %.2f..%.2f us, ends min/median/max %.1f/%.1f/%.1f us, "
          "mean busy %.1f us, longest task %.1f us: a perfect balance would save %.1f%%"
          % (key[0], key[1], float(ts[0]["run_ms"]), len(blocks), len(sms), starts[0], starts[-1], ends[0],
             ends[len(ends) // 2], ends[-1], mean_busy, max(dur), 100 * (1 - bound / ends[-1])))
    cls = collections.defaultdict(list)
    for r, d in zip(ts, dur):
        cls[(int(r["rows"]), int(r["kv_len"]))].append(d)
    for (rw, n), d in sorted(cls.items(), key=lambda kv: -sum(kv[1]))[:4]:
        print("    rows %3d kv_len %6d: %5d tasks, median %.2f us (min %.2f, max %.2f)"
              % (rw, n, len(d), st.median(d), min(d), max(d)))
