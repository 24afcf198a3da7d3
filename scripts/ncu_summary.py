#!/usr/bin/env python3
"""Sums dram__bytes_read.sum per (workload, variant) from the ncu CSV files
that scripts/gpu_run.sh writes, and prints CoDec vs flat next to the unique
KV bytes of the workload, and the merge kernel's share of CoDec's kernel time
(gpu__time_duration.sum)."""
import csv
import glob
import io
import json
import os
import sys

out = sys.argv[1]
unique = {}
for path in glob.glob(os.path.join(out, "ncu_meta_*.json")):
    for row in json.load(open(path)):
        unique[row["workload"]] = row["unique_kv_mb"] * 1e6
units = {"byte": 1, "Kbyte": 1e3, "Mbyte": 1e6, "Gbyte": 1e9, "KB": 1e3, "MB": 1e6, "GB": 1e9,
         "nsecond": 1e-9, "usecond": 1e-6, "msecond": 1e-3, "second": 1, "ns": 1e-9, "us": 1e-6, "ms": 1e-3}
totals = {}
merge_share = {}
for f in sorted(glob.glob(os.path.join(out, "ncu_*_*.csv"))):
    name = os.path.basename(f)[4:-4]
    workload, variant = name.rsplit("_", 1)
    workload = workload.replace("_", ":", 1)
    text = open(f).read()
    start = text.find('"ID"')
    if start < 0:
        print(f"{name}: no ncu table (see the file)")
        continue
    total, time_all, time_merge = 0.0, 0.0, 0.0
    for row in csv.DictReader(io.StringIO(text[start:])):
        value = float(row["Metric Value"].replace(",", "")) * units.get(row.get("Metric Unit", "byte"), 1)
        if row.get("Metric Name") == "dram__bytes_read.sum":
            total += value
        elif row.get("Metric Name") == "gpu__time_duration.sum":
            time_all += value
            if "merge" in row.get("Kernel Name", "").lower():
                time_merge += value
    totals.setdefault(workload, {})[variant] = total
    if variant == "codec" and time_all > 0:
        merge_share[workload] = (time_merge / time_all, time_all)
print(f"{'workload':<12} {'codec_MB':>10} {'flat_MB':>10} {'flat/codec':>10} {'unique_MB':>10} {'codec/unique':>12} "
      f"{'kernels_us':>10} {'merge_share':>11}")
for w, t in totals.items():
    c, fl, u = t.get("codec", 0), t.get("flat", 0), unique.get(w, 0)
    share, kernels = merge_share.get(w, (0.0, 0.0))
    print(f"{w:<12} {c/1e6:10.1f} {fl/1e6:10.1f} {fl/max(c,1):10.2f} {u/1e6:10.1f} {c/max(u,1):12.3f} "
          f"{kernels*1e6:10.1f} {share:11.3f}")
