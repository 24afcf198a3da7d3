"""The GPU timeline of loogle:8 decode steps in the engine's graphs, sync against async (CUPTI via torch.profiler)."""
import json, statistics, sys, os
import torch
from torch.profiler import profile, ProfilerActivity
sys.path.insert(0, "bench"); import e2e_decode
mode, out = sys.argv[1], sys.argv[2]
args = ["--out", out, "--workload", "loogle:8", "--backends", "codec", "--cuda-graph", "--new-tokens", "32", "--step-profile"]
if mode == "async": args.append("--async-batching")
with profile(activities=[ProfilerActivity.CUDA]) as prof:
    e2e_decode.main(args)
path = f"{out}/trace_{mode}.json"; prof.export_chrome_trace(path)
ev = [e for e in json.load(open(path))["traceEvents"] if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
os.remove(path)
ev.sort(key=lambda e: e["ts"])
plans = [i for i, e in enumerate(ev) if e["cat"] == "gpu_memcpy" and "HtoD" in e["name"] and e["args"].get("bytes", 0) > 1 << 20]
print(mode, "events", len(ev), "plan copies", len(plans), "streams", sorted({e.get("tid") for e in ev})[:8])
rows = []
for a, b in zip(plans[-20:-1], plans[-19:]):
    step = ev[a:b]; span = ev[b]["ts"] - ev[a]["ts"]
    d2h = [j for j in range(a - 1, max(a - 400, 0), -1) if ev[j]["cat"] == "gpu_memcpy" and "DtoH" in ev[j]["name"]]
    d = ev[d2h[0]] if d2h else None
    node = ev[a]["ts"] - (d["ts"] + d["dur"]) if d else float("nan")
    codec_k = sum(e["dur"] for e in step if "pac_kernel" in e["name"] or "merge_kernel" in e["name"])
    busy = sum(e["dur"] for e in step)
    gaps = sorted(((ev[k + 1]["ts"] - (ev[k]["ts"] + ev[k]["dur"]), ev[k]["name"][:60], ev[k + 1]["name"][:60]) for k in range(a, b)), reverse=True)[:3]
    rows.append((span, busy, codec_k, node, gaps))
med = lambda i: statistics.median(r[i] for r in rows) / 1e3
print(f"{mode}: step span {med(0):.2f} ms, ops busy {med(1):.2f} ms, pac+merge {med(2):.2f} ms, plan node (DtoH end to plan HtoD start) {med(3):.2f} ms")
for r in rows[-3:]:
    print("  largest gaps (us, after, before):", [(round(g[0]), g[1], g[2]) for g in r[4]])
