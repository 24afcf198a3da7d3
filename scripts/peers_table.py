#!/usr/bin/env python3
"""Markdown table of bench/peers.py's peers.json: CoDec, its flat baseline and
the peers side by side (ms), and CoDec's speedup over each peer's best variant;
with --best, one row per workload against the best FlashInfer variant (decode
or cascade, whichever is faster there) and the best peer of any family, the
geometric means of both (the headline of results/README.md), and the first
mean's ceiling: CoDec at max(its floor, the least time any implementation took
on any workload of the run), since no kernel here gets under the launch and
the first bytes.
  python3 scripts/peers_table.py [--best] results/h200/runN/peers/peers.json"""
import json
import math
import sys

best = "--best" in sys.argv[1:]
rows = json.load(open([a for a in sys.argv[1:] if a != "--best"][0]))
families = [("fi_decode", "FlashInfer decode"), ("fi_cascade", "FlashInfer cascade"), ("hydragen", "Hydragen-style"),
            ("pat", "PAT"), ("sdpa", "cuDNN SDPA"), ("flex", "flex_attention")]
peers = [(key, name) for key, name in families if any(f"{key}_ms" in r for r in rows)]  # the families that ran


def best_of(r, keys):
    """(ms, 'family variant') of the fastest of these families on row r, or None."""
    ran = [(r[f"{k}_ms"], f"{dict(families)[k]} {r[f'{k}_variant']}") for k in keys if r.get(f"{k}_ms")]
    return min(ran) if ran else None


if best:
    print("| workload | CoDec ms | best FlashInfer ms (variant) | CoDec vs it | best peer ms (family, variant) | CoDec vs it |")
    print("|---|---|---|---|---|---|")
    fi_logs, any_logs, ceiling_logs = [], [], []
    ran = [r for r in rows if "error" not in r]
    least = min(min(r["codec_ms"], best_of(r, [k for k, _ in peers])[0]) for r in ran)
    for r in ran:
        fi, anyp = best_of(r, ["fi_decode", "fi_cascade"]), best_of(r, [k for k, _ in peers])
        print(f"| {r['workload']} | {r['codec_ms']:.4f} | {fi[0]:.4f} ({fi[1]}) | {fi[0] / r['codec_ms']:.2f}× | "
              f"{anyp[0]:.4f} ({anyp[1]}) | {anyp[0] / r['codec_ms']:.2f}× |")
        fi_logs.append(math.log(fi[0] / r["codec_ms"]))
        any_logs.append(math.log(anyp[0] / r["codec_ms"]))
        ceiling_logs.append(math.log(fi[0] / max(r["floor_ms"], least)))
    print()
    print(f"Geometric-mean speedup of CoDec over the best FlashInfer variant per workload: "
          f"{math.exp(sum(fi_logs) / len(fi_logs)):.2f}× over {len(fi_logs)} workloads")
    print(f"Geometric-mean speedup of CoDec over the best peer of any family per workload: "
          f"{math.exp(sum(any_logs) / len(any_logs)):.2f}× over {len(any_logs)} workloads")
    print(f"Ceiling of the first, CoDec at max(floor, {least * 1e3:.1f} µs: the least time any implementation "
          f"took here) on every workload: {math.exp(sum(ceiling_logs) / len(ceiling_logs)):.2f}×")
    sys.exit(0)
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
