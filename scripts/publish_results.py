#!/usr/bin/env python3
"""The tables and plots of results/README.md, from the raw files in one folder
(results/current/, which scripts/publish.sh's steps fill):

  bench_all.json        codec bench --workload all --save (every built-in workload)
  peers*.json           bench/peers.py's rows, one file per device call, merged here
  e2e_<workload>.json   bench/e2e_decode.py's result (TPOT per backend in the engine)
  planner_speed.txt     bench_planner's console output (derive + plan, median rows)
  python_api.json       bench/python_api.py (host time of plan and run beside FlashInfer's)
  breadth_<kind>.json   codec bench --save on what issues 51-53 add (publish.sh breadth: q_len, draft trees,
                        verify:8, soft-cap with sinks, windows, fp8 against bf16)
  sweep_peers_<kind>_<half>.json  bench/peers.py's rows with FlashInfer's wrappers on the same (publish.sh
                        peers_sweep), merged per kind

Each table of the page sits between `<!-- publish:NAME -->` and
`<!-- /publish:NAME -->`; --page rewrites those blocks in place, --check only
says whether they are what the files give (exit 1 if not). Without --page the
blocks are printed. --plots DIR writes peers.png and e2e_tpot.png (matplotlib).

  python3 scripts/publish_results.py results/current --page results/README.md --plots results
  python3 scripts/publish_results.py results/current --page results/README.md --check
"""
import argparse
import glob
import json
import math
import os
import re
import sys

# Peer families of bench/peers.py, in the page's column order.
FAMILIES = [("fi_decode", "FlashInfer decode"), ("fi_cascade", "FlashInfer cascade"), ("sdpa", "cuDNN SDPA"),
            ("hydragen", "Hydragen-style"), ("pat", "PAT"), ("flex", "flex_attention")]
FI = ("fi_decode", "fi_cascade")
# Workload families in the order of docs/BENCHMARKS.md and `codec bench --workload all`.
ORDER = ["seq", "batch", "depth", "ratio", "shape", "long", "loogle", "fewshot", "flat", "sysprompt", "dense", "verify",
         "window"]
SWEEPS = ("seq", "batch", "depth", "ratio", "shape")
COPY_TBPS, TENSOR_TFLOPS = 4.2, 790.0  # the floor's H200 ceilings (docs/BENCHMARKS.md, Protocol)


def geomean(xs):
    return math.exp(sum(math.log(x) for x in xs) / len(xs))


def workload_of(name):
    """A row's workload: a sweep's "loogle:8 q4" names its run after it."""
    return name.split(" ")[0]


def workload_key(name):
    """Sort key: family in ORDER, then its number (non-numbers after), then the page size of NAME@P."""
    base, _, page = workload_of(name).partition("@")
    family, _, param = base.partition(":")
    try:
        number = float(param) if param else 0.0
    except ValueError:
        number = math.inf
    rank = ORDER.index(family) if family in ORDER else len(ORDER)
    return rank, family, number, param, int(page) if page else 0


# ---- loading -------------------------------------------------------------------------------------------------


def load(folder):
    """Whatever of the six sources the folder holds; absent ones are None."""
    def read_json(name):
        path = os.path.join(folder, name)
        return json.load(open(path)) if os.path.exists(path) else None

    e2e = sorted(glob.glob(os.path.join(folder, "e2e_*.json")))
    planner = os.path.join(folder, "planner_speed.txt")
    breadth = {os.path.basename(p)[len("breadth_"):-len(".json")]: json.load(open(p))
               for p in sorted(glob.glob(os.path.join(folder, "breadth_*.json")))}
    sweeps = {}
    for path in sorted(glob.glob(os.path.join(folder, "sweep_peers_*_*.json"))):
        sweeps.setdefault(os.path.basename(path)[len("sweep_peers_"):].rsplit("_", 1)[0], []).append(path)
    sweep_machine = os.path.join(folder, "machine_sweep_peers.txt")
    return {"breadth": breadth or None,
            "sweeps": {kind: merged_rows(paths) for kind, paths in sweeps.items()} or None,
            "sweep_gpu": open(sweep_machine).readline().split(",")[0].strip() if os.path.exists(sweep_machine)
            else None,
            "bench": read_json("bench_all.json"),
            "peers": merged_rows(sorted(glob.glob(os.path.join(folder, "peers*.json")))) or None,
            "e2e": [json.load(open(p)) for p in e2e] or None,
            "planner": parse_planner(open(planner).read()) if os.path.exists(planner) else None,
            "python_api": read_json("python_api.json")}


def merged_rows(paths):
    """The rows of bench/peers.py's files, one device call each, in the page's order; a workload measured twice:
    the later file's row stands."""
    seen = {}
    for path in paths:
        for row in json.load(open(path)):
            seen[row["workload"]] = row
    return sorted(seen.values(), key=lambda r: workload_key(r["workload"]))


def in_order(kinds, order):
    """Run kinds in the page's order, unknown ones last."""
    return sorted(kinds, key=lambda k: order.index(k) if k in order else len(order))


PLANNER_ROW = re.compile(r"^BM_DeriveAndPlan/(\w+)/(\d+)_median\s+([\d.]+) us", re.M)


def parse_planner(text):
    """{(cost model, requests): [median µs of each run, in order]} from bench_planner's console output."""
    runs = {}
    for model, requests, us in PLANNER_ROW.findall(text):
        runs.setdefault((model, int(requests)), []).append(float(us))
    return runs


# ---- the peer set --------------------------------------------------------------------------------------------


def family_cell(row, key):
    """A family's best variant on the row in µs, or why there is none."""
    if row.get(f"{key}_ms"):
        return f"{row[f'{key}_ms'] * 1e3:.1f} {row[f'{key}_variant']}"
    errs = [v for k, v in row.items() if k.startswith(f"{key}_") and k.endswith("_err")]
    if errs:  # it ran, and its output was off the fp64 reference by more than the tolerance
        return f"off ({min(errs):.2f})"
    dense = key in ("sdpa", "flex") and "dense_note" in row  # dense per-request KV: requests of one length only
    return "n/a" if f"{key}_note" in row or dense else "–"


def best_of(row, keys):
    """(ms, key) of the fastest of these families on the row, or None."""
    ran = [(row[f"{k}_ms"], k) for k in keys if row.get(f"{k}_ms")]
    return min(ran) if ran else None


def peer_stats(rows):
    rows = [r for r in rows if "error" not in r]
    keys = [k for k, _ in FAMILIES]
    least = min(min(r["codec_ms"], best_of(r, keys)[0]) for r in rows)
    fi = [best_of(r, FI)[0] / r["codec_ms"] for r in rows]
    anyp = [best_of(r, keys)[0] / r["codec_ms"] for r in rows]
    ceiling = [best_of(r, FI)[0] / max(r["floor_ms"], least) for r in rows]
    per_family = {k: [r[f"{k}_ms"] / r["codec_ms"] for r in rows if r.get(f"{k}_ms")] for k in keys}
    return {"rows": rows, "least_ms": least, "fi": geomean(fi), "any": geomean(anyp),
            "ceiling": geomean(ceiling), "per_family": {k: v for k, v in per_family.items() if v}}


def peers_table(rows):
    s = peer_stats(rows)
    ran = [(k, n) for k, n in FAMILIES if any(f"{k}_ms" in r or f"{k}_note" in r for r in rows)]
    out = ["| workload | CoDec | " + " | ".join(n for _, n in ran) + " | best FlashInfer / CoDec | best peer / CoDec |",
           "|---" * (len(ran) + 4) + "|"]
    for r in s["rows"]:
        fi, anyp = best_of(r, FI), best_of(r, [k for k, _ in FAMILIES])
        out.append(f"| {r['workload']} | {r['codec_ms'] * 1e3:.1f} | "
                   + " | ".join(family_cell(r, k) for k, _ in ran)
                   + f" | {fi[0] / r['codec_ms']:.2f}× | {anyp[0] / r['codec_ms']:.2f}× ({dict(FAMILIES)[anyp[1]]}) |")
    return out


def peers_summary(rows):
    s = peer_stats(rows)
    n = len(s["rows"])
    fams = ", ".join(f"{name} {geomean(s['per_family'][k]):.2f}× ({len(s['per_family'][k])})"
                     for k, name in FAMILIES if k in s["per_family"])
    return [f"- Geometric mean of CoDec's speedup over the best FlashInfer variant of each workload: "
            f"**{s['fi']:.3f}×** over {n} workloads; over the best peer of any family: {s['any']:.3f}×.",
            f"- Per family, over the workloads where it ran and was within tolerance: {fams}.",
            f"- Ceiling of the first mean, CoDec at max(floor, {s['least_ms'] * 1e3:.1f} µs, the least time any "
            f"implementation took in the set) on every workload: {s['ceiling']:.2f}×."]


# ---- every built-in workload ---------------------------------------------------------------------------------


def floor_table(rows):
    """One row per workload family, the values of its points in their order."""
    families = {}
    for r in rows:
        families.setdefault(r["workload"].split(":")[0], []).append(r)

    def merge(r):
        return f"{round(100 * r['merge_share']):d}%" if r.get("codec_partial_ms", -1) >= 0 else "–"

    out = ["| workload | points | CoDec ms | CoDec / floor | CoDec vs flat | merge share |", "|---|---|---|---|---|---|"]
    for family, rs in families.items():
        points = ", ".join(r["workload"].partition(":")[2] or "–" for r in rs)
        out.append(f"| {family} | {points} | " + ", ".join(f"{r['codec_ms']:.4f}" for r in rs)
                   + " | **" + ", ".join(f"{r['codec_over_floor']:.2f}" for r in rs) + "** | "
                   + ", ".join(f"{r['speedup']:.2f}×" for r in rs) + " | " + ", ".join(merge(r) for r in rs) + " |")
    return out


def floor_summary(rows):
    sweeps = [r for r in rows if r["workload"].split(":")[0] in SWEEPS]
    passed = sum(bool(r.get("pass")) for r in rows)
    worst = max(r["codec_rel_l2"] for r in rows)
    worst_lse = max(r["codec_lse_rel_l2"] for r in rows)
    return [f"- Geometric mean of CoDec's speedup over flat on the {len(sweeps)} sweep points (seq, batch, depth, "
            f"ratio, shape): {geomean([r['speedup'] for r in sweeps]):.2f}×.",
            f"- Checked against fp64: {passed} of {len(rows)} rows within tolerance; CoDec's largest relative L2 "
            f"error {worst:.2e} (output), {worst_lse:.2e} (lse)."]


def tflops(r):
    """TFLOP/s over a whole run where the floor is compute's (FLOPs / 790 TFLOP/s), else None."""
    bytes_floor_ms = r["unique_kv_mb"] * 1e6 / (COPY_TBPS * 1e12) * 1e3
    return TENSOR_TFLOPS * r["floor_ms"] / r["codec_ms"] if r["floor_ms"] > 1.01 * bytes_floor_ms else None


# ---- issue 17's targets --------------------------------------------------------------------------------------


def targets_table(data):
    """Issue 17's targets, each with what the files give and whether it is met."""
    bench = {r["workload"]: r for r in data["bench"]}
    peers = {r["workload"]: r for r in data["peers"]}
    s = peer_stats(data["peers"])
    out = ["| target (issue 17) | measured | |", "|---|---|---|"]

    def add(target, measured, ok):
        out.append(f"| {target} | {measured} | {'met' if ok else '**missed**'} |")

    def joined(xs, fmt, unit=""):
        return ", ".join(format(x, fmt) + unit for x in xs)

    small = ["depth:2", "shape:DT", "seq:128"]
    us = [peers[w]["codec_ms"] * 1e3 for w in small]
    pac = [bench[w]["codec_partial_ms"] * 1e3 for w in small if bench[w].get("codec_partial_ms", -1) >= 0]
    alone = f"; its partial-attention kernel alone {joined(pac, '.1f')} (every-workload table)" if len(pac) == 3 else ""
    add(f"{', '.join(small)} ≤ 10 µs", f"{joined(us, '.1f')} µs (peer set){alone}", max(us) <= 10)
    vs_fi = [best_of(peers[w], FI)[0] / peers[w]["codec_ms"] for w in small]
    add("… and faster than every FlashInfer variant there", joined(vs_fi, ".2f", "×"), min(vs_fi) > 1)
    add("geometric mean ≥ 1.5× over the best FlashInfer variant", f"{s['fi']:.3f}× over {len(s['rows'])}",
        s["fi"] >= 1.5)
    keys = [k for k, _ in FAMILIES]
    behind = sorted((best_of(r, keys)[0] / r["codec_ms"], r["workload"], dict(FAMILIES)[best_of(r, keys)[1]])
                    for r in s["rows"])
    add("no workload more than 3% behind the best peer",
        ", ".join(f"{w} {x:.2f}× ({n})" for x, w, n in behind if x < 1) or "none behind", behind[0][0] >= 0.97)
    limits = (("batch:64", 1.35), ("long", 1.35), ("fewshot", 1.25))
    ratios = [bench[w]["codec_over_floor"] for w, _ in limits]
    add(", ".join(f"{w} ≤ {limit}×" for w, limit in limits) + " their floor", joined(ratios, ".2f", "×"),
        all(x <= limit for x, (_, limit) in zip(ratios, limits)))
    sysp = [peers[w]["codec_ms"] / peers[w]["floor_ms"] for w in ("sysprompt:512", "sysprompt:512@1")]
    add("sysprompt:512 ≤ 2× its floor, pages of 16 and 1", joined(sysp, ".2f", "×") + " (peer set)", max(sysp) <= 2)
    dense = [(w, tflops(bench[w])) for w in ("dense:2", "dense:4") if w in bench and tflops(bench[w])]
    if dense:
        add("many-row tile loop ≥ 550 TFLOP/s over a whole run", ", ".join(f"{w} {t:.0f}" for w, t in dense)
            + " TFLOP/s", min(t for _, t in dense) >= 550)
    flat = bench["flat:64"]
    vs_flat, tbps = flat["codec_ms"] / flat["flat_ms"], flat["unique_kv_mb"] / flat["codec_ms"] / 1e3
    add(f"flat:64 within 3% of flat and ≥ 95% of {COPY_TBPS} TB/s", f"{vs_flat:.3f}× flat, {tbps:.2f} TB/s",
        abs(vs_flat - 1) <= 0.03 and tbps >= 0.95 * COPY_TBPS)
    if data["planner"]:
        p64, p1024 = max(data["planner"][("measured", 64)]), max(data["planner"][("measured", 1024)])
        add("derive + plan ≤ 300 µs at 64 requests, ≤ 1,000 at 1,024 (2 cores)",
            f"{p64:.0f} and {p1024:.0f} µs (slower run, measured table)", p64 <= 300 and p1024 <= 1000)
    return out


# ---- issues 51-53: several query tokens, the variants, fp8 --------------------------------------------------


BREADTH_ORDER = ["q2", "q4", "q8", "tree", "verify", "verify_q4", "plain", "capped", "window", "bf16", "fp8"]
BREADTH_RUNS = {"q2": "2 query tokens", "q4": "4 query tokens", "q8": "8 query tokens", "tree": "4×4 draft tree",
                "verify": "1 query token", "verify_q4": "4 draft tokens", "plain": "plain",
                "capped": "soft-cap 50, sinks", "window": "window 4,096", "bf16": "bf16 cache", "fp8": "fp8 e4m3 cache"}


def breadth_table(breadth):
    out = ["| run | workload | CoDec ms | floor ms | × floor | TFLOP/s |", "|---|---|---|---|---|---|"]
    for kind in in_order(breadth, BREADTH_ORDER):
        for r in sorted(breadth[kind], key=lambda r: workload_key(r["workload"])):
            t = tflops(r)
            out.append(f"| {BREADTH_RUNS.get(kind, kind)} | {r['workload']} | {r['codec_ms']:.4f} | "
                       f"{r['floor_ms']:.4f} | {r['codec_over_floor']:.2f} | {f'{t:.0f}' if t else '–'} |")
    return out


def breadth_targets(breadth):
    """Issues 51-53's kernel targets that the breadth files give, each met or missed."""
    rows = {kind: {r["workload"]: r for r in rs} for kind, rs in breadth.items()}
    out = ["| target | measured | |", "|---|---|---|"]

    def add(target, measured, ok):
        out.append(f"| {target} | {measured} | {'met' if ok else '**missed**'} |")

    def points(xs):
        return f"{len(xs)} point{'' if len(xs) == 1 else 's'}"

    sweep = [(k, r) for k in ("q2", "q4", "q8", "tree") for r in rows.get(k, {}).values()]
    bound = [(k, r) for k, r in sweep if not tflops(r)]
    if bound:
        worst = max(bound, key=lambda kr: kr[1]["codec_over_floor"])
        add("51: memory-bound and balanced points ≤ 1.3× the floor",
            f"{points(bound)}, worst {worst[1]['workload']} ({BREADTH_RUNS[worst[0]]}) "
            f"{worst[1]['codec_over_floor']:.2f}×", worst[1]["codec_over_floor"] <= 1.3)
    compute = [(k, r) for k, r in sweep if tflops(r)]
    if compute:
        worst = min(compute, key=lambda kr: tflops(kr[1]))
        add("51: compute-bound points ≥ 550 TFLOP/s",
            f"{points(compute)}, slowest {worst[1]['workload']} ({BREADTH_RUNS[worst[0]]}) {tflops(worst[1]):.0f}",
            tflops(worst[1]) >= 550)
    if "verify" in rows and "verify_q4" in rows:
        one, four = rows["verify"]["verify:8"]["codec_ms"], rows["verify_q4"]["verify:8"]["codec_ms"]
        add("51: verify:8, 4 draft tokens ≤ 1.2× one token", f"{four / one:.2f}× ({four:.4f} against {one:.4f} ms)",
            four / one <= 1.2)
    if "plain" in rows and "capped" in rows:
        ratios = [(w, rows["capped"][w]["codec_ms"] / rows["plain"][w]["codec_ms"]) for w in rows["plain"]
                  if w in rows["capped"]]
        add("53: soft-cap and sinks ≤ 1.05× plain", ", ".join(f"{w} {x:.2f}×" for w, x in ratios),
            max(x for _, x in ratios) <= 1.05)
    if {"window:4096", "window:131072"} <= set(rows.get("window", {})):
        x = rows["window"]["window:131072"]["codec_ms"] / rows["window"]["window:4096"]["codec_ms"]
        add("53: window:131072 ≤ 1.1× the document cut to its window (window:4096)", f"{x:.2f}×", x <= 1.1)
    if "bf16" in rows and "fp8" in rows:
        cheap = [(w, rows["fp8"][w]["codec_ms"] / rows["bf16"][w]["codec_ms"]) for w in ("loogle:8", "fewshot", "flat:64")
                 if w in rows["fp8"] and w in rows["bf16"]]
        add("52: fp8 ≤ 0.6× bf16 where it stays memory-bound", ", ".join(f"{w} {x:.2f}×" for w, x in cheap),
            max(x for _, x in cheap) <= 0.6)
        heavy = [(w, rows["fp8"][w]["codec_over_floor"]) for w in ("batch:64", "long") if w in rows["fp8"]]
        add("52: fp8 ≤ 1.3× its floor where it turns compute-bound", ", ".join(f"{w} {x:.2f}×" for w, x in heavy),
            max(x for _, x in heavy) <= 1.3)
    return out


# FlashInfer's wrappers beside CoDec on what issues 51-53 add (bench/peers.py with --q-len, --tree, --dtype fp8,
# --soft-cap and --sinks, --window), in the page's column order; the workloads that share nothing.
SWEEP_FI = [("fi_decode", "decode"), ("fi_prefill", "prefill"), ("fi_sink", "attention-sink"),
            ("fi_cascade", "cascade")]
SWEEP_ORDER = ["q2", "q4", "q8", "tree", "fp8", "capped", "window"]
SWEEP_RUNS = {"q2": "2 query tokens", "q4": "4 query tokens", "q8": "8 query tokens", "tree": "4×4 draft tree",
              "fp8": "fp8 e4m3 cache", "capped": "soft-cap 50, sinks", "window": "window 4,096"}
SHARE_NOTHING = ("flat:64", "shape:DT")


def sweep_table(sweeps):
    out = ["| run | workload | CoDec µs | " + " | ".join(f"FlashInfer {n}" for _, n in SWEEP_FI)
           + " | best FlashInfer / CoDec |", "|---" * (len(SWEEP_FI) + 4) + "|"]
    for kind in in_order(sweeps, SWEEP_ORDER):
        for r in sweeps[kind]:
            if "error" in r:
                continue
            best = best_of(r, [k for k, _ in SWEEP_FI])
            ratio = f"{best[0] / r['codec_ms']:.2f}×" if best else "–"
            out.append(f"| {SWEEP_RUNS.get(kind, kind)} | {r['workload']} | {r['codec_ms'] * 1e3:.1f} | "
                       + " | ".join(family_cell(r, k) for k, _ in SWEEP_FI) + f" | {ratio} |")
    return out


def sweep_targets(sweeps):
    """Issues 51 and 52's targets against FlashInfer that the sweep files give, each met or missed."""
    out = ["| target | measured | |", "|---|---|---|"]

    def ratios(kinds, keys):
        """(kind, workload, FlashInfer's best of keys / CoDec) where one ran within the tolerance."""
        got = []
        for kind in kinds:
            for r in sweeps.get(kind, []):
                best = None if "error" in r else best_of(r, keys)
                if best:
                    got.append((kind, r["workload"], best[0] / r["codec_ms"]))
        return got

    def behind(got):  # the points where CoDec is behind more than allowed (3% where nothing is shared)
        return [(k, w, x) for k, w, x in got if x < (0.97 if workload_of(w) in SHARE_NOTHING else 1.0)]

    def worst(got):
        k, w, x = min(got, key=lambda g: g[2])
        return f"worst {w} ({SWEEP_RUNS.get(k, k)}) {x:.2f}×"

    several = ratios(("q2", "q4", "q8", "tree"), [k for k, _ in SWEEP_FI])
    if several:
        late = behind(several)
        out.append(f"| 51: never behind FlashInfer's fastest multi-token variant (≤ 3% on {', '.join(SHARE_NOTHING)}) "
                   f"| {len(several)} points, {worst(several)}; {len(late)} behind | "
                   f"{'met' if not late else '**missed**'} |")
        mean = geomean([x for _, _, x in several])
        out.append(f"| 51: ≥ 1.5× ahead of it in geometric mean | {mean:.2f}× | {'met' if mean >= 1.5 else '**missed**'} |")
    fp8 = ratios(("fp8",), ["fi_decode"])
    if fp8:
        late = behind(fp8)
        out.append(f"| 52: faster than FlashInfer's fp8 decode on every prefix-sharing workload (≤ 3% behind on "
                   f"{', '.join(SHARE_NOTHING)}) | {len(fp8)} points, {worst(fp8)}; {len(late)} behind | "
                   f"{'met' if not late else '**missed**'} |")
    return out


# ---- the engine, the host -------------------------------------------------------------------------------------


E2E_NAMES = {"codec": "CoDec", "fi_decode": "FlashInfer decode", "fi_cascade": "FlashInfer cascade",
             "fi_prefill": "FlashInfer prefill", "fi_sink": "FlashInfer attention-sink",
             "noop": "floor (no decode attention)", "sdpa": "`paged|sdpa`"}


def short_gpu(name):
    """"NVIDIA H100 80GB HBM3" -> "H100"; a name without a model number as it is."""
    m = re.search(r"\b([A-Z]\d{2,3}[A-Z]?)\b", name)
    return m.group(1) if m else name


def e2e_name(result):
    """A run's workload, with what sets it apart from the page's default: a model other than Qwen3-4B's shape,
    eager steps, the engine's FIFO scheduler, a GPU other than the H200."""
    notes = [result["model"]] if result.get("model", "qwen3-4b") != "qwen3-4b" else []
    notes += ["eager"] if result.get("cuda_graph") is False else []
    notes += ["FIFO"] if result.get("scheduler") == "fifo" else []
    notes += [f"{result['max_batch_tokens']:,}-token steps"] if result.get("max_batch_tokens") else []
    gpu = short_gpu(result.get("device", "H200"))
    notes += [gpu] if gpu != "H200" else []
    return f"{result['workload']} ({', '.join(notes)})" if notes else result["workload"]


# bench/e2e_decode.py's attention rows against fp64: above it, another attention (bench/peers.py's tolerance too)
E2E_ATTENTION_TOLERANCE = 1e-2


def off_reference(row):
    """A backend's largest relative error against fp64 on the checked attention rows where it computes another
    attention than the model's (noop's by design), else None."""
    err = row.get("attention_rel_l2_max")
    return err if err is not None and err > E2E_ATTENTION_TOLERANCE else None


def e2e_rows(result):
    """(backend, row, attention GPU ms or None) in the file's order; attention = forward GPU time − the floor's
    (a run with the step profile), else the attention calls' GPU time a step − the floor's."""
    rows = {b: r for b, r in result["rows"].items() if "tpot_ms" in r}
    floor_gpu = rows.get("noop", {}).get("step_host_ms_median", {}).get("forward_gpu")
    out = []
    for backend, r in rows.items():
        gpu = r.get("step_host_ms_median", {}).get("forward_gpu")
        attn = None
        if backend != "noop" and gpu is not None and floor_gpu is not None:
            attn = gpu - floor_gpu
        elif backend != "noop":
            attn = r.get("attention_gpu_minus_floor_ms")
        out.append((backend, r, attn))
    return out


def e2e_table(results):
    def ms(x):  # a run without the step profile has no forward or schedule times
        return f"{x:.2f}" if x is not None else "–"

    out = ["| workload | backend | TPOT ms (p90) | TPOT − floor ms | forward GPU ms | attention GPU ms "
           "| host schedule ms | attention vs fp64 |", "|---|---|---|---|---|---|---|---|"]
    for result in results:
        for backend, r, attn in e2e_rows(result):
            step = r.get("step_host_ms_median", {})
            cells = [e2e_name(result), E2E_NAMES.get(backend, backend),
                     f"{r['tpot_ms']:.2f} ({r['tpot_p90_ms']:.2f})", ms(r.get("tpot_minus_floor_ms")),
                     ms(step.get("forward_gpu")), f"**{attn:.2f}**" if attn is not None else "–",
                     ms(step.get("schedule")),
                     f"{r['attention_rel_l2_max']:.1e}" if "attention_rel_l2_max" in r else "–"]
            out.append("| " + " | ".join(cells) + " |")
    return out


def e2e_summary(results):
    """A line a run and FlashInfer backend: CoDec's attention GPU time, TPOT − floor (where CoDec's is above the
    floor's: an eager MoE's TPOT can hide attention in its noise) and TPOT against the backend's."""
    out = []
    for result in results:
        rows = {b: (r, a) for b, r, a in e2e_rows(result)}
        if "codec" not in rows:
            continue
        c, ca = rows["codec"]
        for peer in ("fi_decode", "fi_prefill", "fi_sink", "fi_cascade"):
            if peer not in rows:
                continue
            f, fa = rows[peer]
            if off_reference(f):
                out.append(f"- {e2e_name(result)}: {E2E_NAMES[peer]} computes another attention (relative error "
                           f"{off_reference(f):.2f} against fp64): not compared.")
                continue
            pairs = [("attention's GPU time", fa, ca, f" than {E2E_NAMES[peer]}'s"),
                     ("TPOT − floor", f.get("tpot_minus_floor_ms"), c.get("tpot_minus_floor_ms"), ""),
                     ("TPOT", f["tpot_ms"], c["tpot_ms"], "")]
            parts = [f"{what} {times(p, m)}{than}" for what, p, m, than in pairs if p and m and p > 0 and m > 0]
            out.append(f"- {e2e_name(result)}: " + ", ".join(parts) + ".")
    return out


def times(peer, codec):
    """CoDec's figure against a peer's (both > 0), as a factor above 1: "2.00× lower" or "1.25× higher"."""
    return f"{peer / codec:.2f}× lower" if peer >= codec else f"{codec / peer:.2f}× higher"


STEP_NAMES = {"prompt": "prompt steps", "prefill": "prefill steps over the cache", "mixed": "mixed steps"}


def step_ms(row, kind):
    """The median GPU time of a step of `kind`'s attention, all layers (e2e_harness.STEP_KINDS), or None."""
    return row.get(f"{kind}_step_attention_gpu_ms_median")


def e2e_steps_table(results):
    """Attention's GPU time in the steps with prefill chunks, by kind, of the runs that record the kinds."""
    runs = [r for r in results if "step_kinds" in r]
    if not runs:
        return []
    kinds = [k for k in STEP_NAMES if any(step_ms(row, k) is not None for r in runs for row in r["rows"].values())]
    out = ["| workload | backend | " + " | ".join(f"{STEP_NAMES[k]}: ms a step (steps)" for k in kinds) + " |",
           "|---" * (len(kinds) + 2) + "|"]
    for result in runs:
        for backend, r, _ in e2e_rows(result):
            cells = [f"{step_ms(r, k):.2f} ({int(r[f'{k}_steps'])})" if step_ms(r, k) is not None else "–"
                     for k in kinds]
            out.append(f"| {e2e_name(result)} | {E2E_NAMES.get(backend, backend)} | " + " | ".join(cells) + " |")
    return out


def e2e_steps_targets(results):
    """Issue 51's engine targets where a run has CoDec's and FlashInfer's steps of the kind: prefill steps over
    the cache within 1.1× of FlashInfer's prefill wrapper's and ≥ 3× below the causal SDPA's (FlashInfer decode's
    run leaves its prefill chunks to the SDPA paged|sdpa runs); mixed steps ≥ 2× below FlashInfer's best. A peer
    whose run had other steps with prefill chunks than CoDec's (counts by kind) is not judged: its steps held other
    work."""
    out = []
    for result in (r for r in results if "step_kinds" in r):
        rows = {b: r for b, r, _ in e2e_rows(result) if not off_reference(r) or b == "noop"}
        codec = rows.get("codec", {})

        def ratio(peer, kind):
            return step_ms(rows.get(peer, {}), kind) / step_ms(codec, kind) \
                if step_ms(codec, kind) and step_ms(rows.get(peer, {}), kind) else None

        def counts(row):
            return ", ".join(f"{int(row.get(f'{k}_steps', 0))} {k}" for k in STEP_NAMES if k != "prompt")

        def verdict(peers, ok):
            other = "; ".join(f"{E2E_NAMES[p]}'s steps ({counts(rows[p])})" for p in peers
                              if counts(rows[p]) != counts(codec))
            return f"not like for like: {other} are not CoDec's ({counts(codec)})" if other \
                else "met" if ok else "**missed**"

        name = e2e_name(result)
        got = ratio("fi_prefill", "prefill")
        if got:
            out.append(f"| 51: {name}, prefill steps over the cache ≤ 1.1× FlashInfer prefill's | CoDec "
                       f"{1 / got:.2f}× | {verdict(['fi_prefill'], 1 / got <= 1.1)} |")
        got = ratio("fi_decode", "prefill")
        if got:
            out.append(f"| 51: {name}, the same ≥ 3× below the causal SDPA's | {got:.2f}× | "
                       f"{verdict(['fi_decode'], got >= 3)} |")
        best = {p: x for p in ("fi_prefill", "fi_decode") if (x := ratio(p, "mixed"))}
        if best:
            out.append(f"| 51: {name}, mixed steps ≥ 2× below FlashInfer's | {min(best.values()):.2f}× | "
                       f"{verdict(list(best), min(best.values()) >= 2)} |")
    return ["| target | measured | |", "|---|---|---|"] + out if out else []


def planner_table(runs):
    counts = sorted({n for _, n in runs})
    models = [m for m in ("roofline", "measured") if any(k[0] == m for k in runs)]
    names = {"roofline": "roofline model", "measured": "measured H200 table"}
    out = ["| requests | " + " | ".join(f"{names[m]}, µs (each run)" for m in models) + " |",
           "|---" * (len(models) + 1) + "|"]
    for n in counts:
        out.append(f"| {n:,} | " + " | ".join(", ".join(f"{u:.0f}" for u in runs.get((m, n), [])) for m in models) + " |")
    return out


def python_api_table(result):
    sides = [("codec", "CoDec"), ("fi_tc", "FlashInfer decode tc"), ("fi_cc", "FlashInfer decode cc")]
    out = ["| requests | " + " | ".join(f"{n} plan / run busy / run idle" for _, n in sides) + " |",
           "|---" * (len(sides) + 1) + "|"]
    for r in result["host"]:
        cells = [" / ".join(f"{r[f'{p}_{k}']:.1f}" for k in ("plan_us", "run_us", "run_idle_us")) if f"{p}_plan_us" in r
                 else "–" for p, _ in sides]
        out.append(f"| {r['batch']:,} | " + " | ".join(cells) + " |")
    return out


def blocks(data):
    """Every block the folder's files give: name → lines."""
    out = {}
    if data["peers"]:
        out["peers"] = peers_table(data["peers"]) + [""] + peers_summary(data["peers"])
    if data["bench"]:
        out["floor"] = floor_table(data["bench"]) + [""] + floor_summary(data["bench"])
    if data["bench"] and data["peers"]:
        out["targets"] = targets_table(data)
    if data["e2e"]:
        out["e2e"] = e2e_table(data["e2e"]) + [""] + e2e_summary(data["e2e"])
        steps = e2e_steps_targets(data["e2e"])
        steps += ([""] if steps else []) + e2e_steps_table(data["e2e"])
        if steps:
            out["e2e-steps"] = steps
    if data["planner"]:
        out["planner"] = planner_table(data["planner"])
    if data["python_api"]:
        out["python-api"] = python_api_table(data["python_api"])
    if data["breadth"]:
        out["breadth"] = breadth_targets(data["breadth"]) + [""] + breadth_table(data["breadth"])
    if data["sweeps"]:
        gpu = [f"Measured on one {data['sweep_gpu']} (machine_sweep_peers.txt).", ""] if data["sweep_gpu"] else []
        out["peers-sweep"] = gpu + sweep_targets(data["sweeps"]) + [""] + sweep_table(data["sweeps"])
    return out


BLOCK = re.compile(r"(<!-- publish:([\w-]+) -->\n)(.*?)(<!-- /publish:\2 -->)", re.S)


def fill(page, rendered):
    """The page with each marked block replaced by its rendering; and the names of blocks the files lack."""
    missing = []

    def sub(m):
        if m.group(2) not in rendered:
            missing.append(m.group(2))
            return m.group(0)
        return m.group(1) + "\n".join(rendered[m.group(2)]) + "\n" + m.group(4)

    return BLOCK.sub(sub, page), missing


# ---- plots -----------------------------------------------------------------------------------------------------


def plot_peers(rows, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in rows if "error" not in r]
    fams = [(k, n) for k, n in FAMILIES if any(r.get(f"{k}_ms") for r in rows)]
    fig, ax = plt.subplots(figsize=(12, 4.2))
    width = 0.8 / len(fams)
    for i, (key, name) in enumerate(fams):
        xs = [j + (i - (len(fams) - 1) / 2) * width for j, r in enumerate(rows) if r.get(f"{key}_ms")]
        ys = [r[f"{key}_ms"] / r["codec_ms"] for r in rows if r.get(f"{key}_ms")]
        ax.bar(xs, ys, width, label=name, color=plt.get_cmap("tab10")(i))
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_yscale("log")
    ax.set_xticks(range(len(rows)))
    ax.set_xticklabels([r["workload"] for r in rows], rotation=45, ha="right", fontsize=8)
    ax.set_ylabel("peer time / CoDec time (log)")
    ax.set_xlim(-0.6, len(rows) - 0.4)
    ax.set_title(f"CoDec against each peer family (above 1: CoDec faster); geometric mean over the best FlashInfer "
                 f"variant {peer_stats(rows)['fi']:.3f}×", fontsize=10, pad=24)
    ax.grid(True, axis="y", which="both", alpha=0.3)
    ax.legend(fontsize=8, ncol=len(fams), loc="lower center", bbox_to_anchor=(0.5, 1.0), frameon=False)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def plot_e2e(results, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(results), figsize=(9 * len(results), 2.6), squeeze=False)
    for ax, result in zip(axes[0], results):
        rows = e2e_rows(result)
        floor = next((r["tpot_ms"] for b, r, _ in rows if b == "noop"), 0.0)
        names = [E2E_NAMES.get(b, b) for b, _, _ in rows]
        ax.barh(names, [min(floor, r["tpot_ms"]) for _, r, _ in rows], color="0.75", label="the floor's TPOT")
        ax.barh(names, [max(0.0, r["tpot_ms"] - floor) for _, r, _ in rows], left=[min(floor, r["tpot_ms"])
                for _, r, _ in rows], color="tab:blue", label="TPOT − floor")
        for i, (b, r, attn) in enumerate(rows):
            note = f"{r['tpot_ms']:.1f} ms" + (f" (attention on the GPU {attn:.1f} ms)" if attn is not None else "")
            note += "; another attention (off fp64)" if off_reference(r) and b != "noop" else ""
            ax.text(r["tpot_ms"] + 0.5, i, note, va="center", fontsize=8)
        ax.set_xlim(0, max(r["tpot_ms"] for _, r, _ in rows) * 1.7)
        ax.invert_yaxis()
        mode = "CUDA graphs" + (", async" if result.get("async_batching") else "") if result.get("cuda_graph") else "eager"
        ax.set_title(f"{e2e_name(result)}, {result['requests']} requests, {mode}: TPOT (ms)", fontsize=10)
        ax.set_xlabel("ms")
        ax.legend(fontsize=8, loc="upper right")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("folder", help="the raw files (results/current)")
    ap.add_argument("--page", help="a page with <!-- publish:NAME --> blocks to fill in place")
    ap.add_argument("--check", action="store_true", help="with --page: exit 1 if a block is not what the files give")
    ap.add_argument("--plots", help="folder for peers.png and e2e_tpot.png")
    a = ap.parse_args(argv)
    data = load(a.folder)
    rendered = blocks(data)
    if not rendered:
        sys.exit(f"{a.folder}: none of bench_all.json, peers*.json, e2e_*.json, planner_speed.txt, python_api.json, "
                 "breadth_*.json, sweep_peers_*.json")
    if a.page:
        page = open(a.page).read()
        new, missing = fill(page, rendered)
        if missing:
            print(f"{a.page}: no data in {a.folder} for the blocks {', '.join(missing)}", file=sys.stderr)
        if a.check:
            if new != page:
                print(f"{a.page}: its tables differ from what {a.folder} gives "
                      f"(python3 scripts/publish_results.py {a.folder} --page {a.page})", file=sys.stderr)
                return 1
            print(f"{a.page}: every table is what {a.folder} gives")
        elif new != page:
            open(a.page, "w").write(new)
            print(f"{a.page}: tables rewritten from {a.folder}")
    else:
        for name, lines in rendered.items():
            print(f"<!-- publish:{name} -->\n" + "\n".join(lines) + f"\n<!-- /publish:{name} -->\n")
    if a.plots:
        os.makedirs(a.plots, exist_ok=True)
        if data["peers"]:
            plot_peers(data["peers"], os.path.join(a.plots, "peers.png"))
        if data["e2e"]:
            plot_e2e(data["e2e"], os.path.join(a.plots, "e2e_tpot.png"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
