#!/usr/bin/env python3
"""Markdown table of bench/peers.py's peers.json: CoDec, its flat baseline and
the peers side by side (ms), and CoDec's speedup over each peer's best variant.
  python3 scripts/peers_table.py results/h200/runN/peers/peers.json"""
import json
import math
import sys

rows = json.load(open(sys.argv[1]))
families = [("fi_decode", "FlashInfer decode"), ("fi_cascade", "FlashInfer cascade"), ("sdpa", "cuDNN SDPA"),
            ("flex", "flex_attention")]
peers = [(key, name) for key, name in families if any(f"{key}_ms" in r for r in rows)]  # the families that ran
head = ["workload", "CoDec ms", "flat ms"] + [f"{name} ms" for _, name in peers] + \
       [f"CoDec vs {name}" for _, name in peers]
print("| " + " | ".join(head) + " |")
print("|" + "---|" * len(head))
logs = {key: [] for key, _ in peers}
for r in rows:
    if "error" in r:
        cells = [r["workload"], f"{r['codec_ms']:.4f}", f"{r['flat_ms']:.4f}", f"failed: {r['error']}"]
        print("| " + " | ".join(cells + ["-"] * (len(head) - len(cells))) + " |")
        continue
    cells = [r["workload"], f"{r['codec_ms']:.4f}", f"{r['flat_ms']:.4f}"]
    ratios = []
    for key, _ in peers:
        ms = r.get(f"{key}_ms")
        cells.append(f"{ms:.4f} ({r[f'{key}_variant']})" if ms else "-")
        ratios.append(f"{ms / r['codec_ms']:.2f}×" if ms else "-")
        if ms:
            logs[key].append(math.log(ms / r["codec_ms"]))
    print("| " + " | ".join(cells + ratios) + " |")
print()
for key, name in peers:
    if logs[key]:
        print(f"Geometric-mean speedup of CoDec over {name}: {math.exp(sum(logs[key]) / len(logs[key])):.2f}× "
              f"over the {len(logs[key])} workloads it ran")
