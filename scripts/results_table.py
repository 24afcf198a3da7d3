#!/usr/bin/env python3
"""Renders a `codec bench --save` JSON file (one run of every workload) as the
Markdown table of results/README.md, then the geometric-mean speedup over the
flat baseline on the seq, batch, depth, ratio and shape sweeps.
    python3 scripts/results_table.py results/h200/run8/bench_all.json"""
import json
import math
import sys

rows = json.load(open(sys.argv[1]))
def merge(r):  # the merge's share of CoDec's time (1 - partial attention alone / whole run), where measured
    return f"{100 * r['merge_share']:.1f}%" if r.get("codec_partial_ms", -1) >= 0 else "-"


print("| workload | requests | unique KV MB | CoDec ms | flat ms | speedup | floor ms | CoDec / floor "
      "| merge | CoDec KV MB (plan) | rel. L2 error (out) | rel. L2 error (lse) |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|")
for r in rows:
    print(f"| {r['workload']} | {r['requests']} | {r['unique_kv_mb']:.1f} | {r['codec_ms']:.4f} | {r['flat_ms']:.4f} "
          f"| {r['speedup']:.2f} | {r['floor_ms']:.4f} | {r['codec_over_floor']:.2f} | {merge(r)} "
          f"| {r['codec_kv_mb']:.1f} | {r['codec_rel_l2']:.2e} | {r['codec_lse_rel_l2']:.2e} |")
sweeps = [r["speedup"] for r in rows if r["workload"].split(":")[0] in ("seq", "batch", "depth", "ratio", "shape")]
if sweeps:
    geomean = math.exp(sum(math.log(s) for s in sweeps) / len(sweeps))
    print(f"\nGeometric-mean speedup over flat on the {len(sweeps)} sweep points: {geomean:.2f}x")
