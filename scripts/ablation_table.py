#!/usr/bin/env python3
"""Renders the `ablation` step of scripts/gpu_run.sh (one `codec bench --split
adaptive,none,fixed:K,... --save` JSON per workload) as the Markdown table of
results/README.md: the flat baseline, sharing without partitioning (`none`),
the best fixed split count, and the adaptive plan (full CoDec).
    python3 scripts/ablation_table.py results/h200/run16/final/ablation_*.json"""
import json
import sys

print("| workload | flat ms | sharing, no partitioning (`none`) ms | best fixed split ms (K) | adaptive (full CoDec) ms "
      "| adaptive vs flat | adaptive vs best fixed |")
print("|---|---|---|---|---|---|---|")
for path in sys.argv[1:]:
    runs = {r["split"]: r for r in json.load(open(path))}
    adaptive, none = runs["adaptive"], runs["none"]
    fixed = min((r for s, r in runs.items() if s.startswith("fixed:")), key=lambda r: r["codec_ms"])
    print(f"| {adaptive['workload']} | {adaptive['flat_ms']:.4f} | {none['codec_ms']:.4f} "
          f"| {fixed['codec_ms']:.4f} ({fixed['split'].split(':')[1]}) | {adaptive['codec_ms']:.4f} "
          f"| {adaptive['flat_ms'] / adaptive['codec_ms']:.2f}× | {fixed['codec_ms'] / adaptive['codec_ms']:.2f}× |")
