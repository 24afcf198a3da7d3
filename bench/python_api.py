#!/usr/bin/env python3
"""CoDec through its Python API, next to FlashInfer through its own, on one GPU.

host: the host time of `plan` and of `run` (µs, median) at B = 64, 256 and
  1,024 requests sharing a 4,096-token system prompt, each with 1-16 private
  tokens (qwen3-4b heads, bf16, page size 16): CoDec's BatchPrefixDecodeWrapper
  and FlashInfer's BatchDecodeWithPagedKVCacheWrapper (tensor-core and
  CUDA-core kernels), both called the way an engine calls them: page tables as
  CPU int32 tensors, `run` on tensors already on the GPU with `out` passed,
  calls enqueued back to back (each timed alone; the GPU runs behind), and
  again with the GPU drained before each call (`run_idle`). The
  kernel time of each (CUDA-graph replays after a 256 MB L2 flush, as
  bench/peers.py times) sits beside it.
cli: the kernel time of `codec bench` against the same plan and data run
  through the Python API: `codec bench --dump` writes a workload's batch and
  its time; this script runs it through BatchPrefixDecodeWrapper with the same
  timing protocol and reports the ratio (target: within 3%).

  python3 -m bench.python_api --out OUT [--codec build-gpu/codec] [--workloads batch:64,long]
"""

import argparse
import json
import os
import subprocess
import time

if not __package__:  # python3 bench/python_api.py: its imports are the bench package's
    raise SystemExit("run it from the repository root as a module: python3 -m bench.python_api ...")

import numpy as np
import torch

import codec

from .peers import Timer, load_dump, log, rel_l2

HQ, HKV, DIM, PAGE, PROMPT = 32, 8, 128, 16, 4096


def sysprompt_tables(batch, seed=0):
    """Page tables of `batch` requests sharing a PROMPT-token prefix, each with 1-16 own tokens."""
    rng = np.random.default_rng(seed)
    shared = PROMPT // PAGE
    tails = rng.integers(1, 17, size=batch)
    pages = [np.concatenate([np.arange(shared), [shared + r]]) for r in range(batch)]  # one own page each
    indptr = np.zeros(batch + 1, np.int32)
    indptr[1:] = np.cumsum([len(p) for p in pages])
    return (torch.from_numpy(indptr), torch.from_numpy(np.concatenate(pages).astype(np.int32)),
            torch.from_numpy(tails.astype(np.int32)), shared + batch)


def median_us(fn, reps, idle=False):
    """Median host time of one call; idle: the GPU drained before each call."""
    times = []
    for _ in range(reps):
        if idle:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e6)
    return float(np.median(times))


def host_rows(batches, reps, timer):
    rows = []
    for batch in batches:
        indptr, indices, last, num_pages = sysprompt_tables(batch)
        q = torch.randn(batch, HQ, DIM, dtype=torch.bfloat16, device="cuda")
        cache = torch.randn(num_pages, 2, PAGE, HKV, DIM, dtype=torch.bfloat16, device="cuda")
        out = torch.empty_like(q)
        args = (indptr, indices, last, HQ, HKV, DIM, PAGE)
        row = {"batch": batch, "page_table_entries": int(indices.numel())}
        w = codec.BatchPrefixDecodeWrapper(torch.empty(256 << 20, dtype=torch.uint8, device="cuda"))
        plan = lambda: w.plan(*args, q_data_type=torch.bfloat16)  # noqa: E731
        plan()
        row["codec_plan_us"] = median_us(plan, reps)
        row["codec_planner_ms"] = w.plan_stats["plan_ms"]
        run = lambda: w.run(q, cache, out=out)  # noqa: E731
        run()
        torch.cuda.synchronize()
        row["codec_run_us"] = median_us(run, reps)
        row["codec_run_idle_us"] = median_us(run, reps, idle=True)
        torch.cuda.synchronize()
        row["codec_kernel_ms"], _ = timer(run)
        ref = out.clone()
        try:
            import flashinfer
        except ImportError as e:
            row["flashinfer_note"] = f"not installed: {e}"
            rows.append(row)
            continue
        for variant, tc in (("tc", True), ("cc", False)):
            fi = flashinfer.BatchDecodeWithPagedKVCacheWrapper(
                torch.empty(256 << 20, dtype=torch.uint8, device="cuda"), "NHD", use_tensor_cores=tc)
            fplan = lambda: fi.plan(*args, q_data_type=torch.bfloat16)  # noqa: E731
            fplan()
            row[f"fi_{variant}_plan_us"] = median_us(fplan, reps)
            frun = lambda: fi.run(q, cache, out=out)  # noqa: E731
            frun()
            torch.cuda.synchronize()
            row[f"fi_{variant}_run_us"] = median_us(frun, reps)
            row[f"fi_{variant}_run_idle_us"] = median_us(frun, reps, idle=True)
            torch.cuda.synchronize()
            row[f"fi_{variant}_kernel_ms"], _ = timer(frun)
            row[f"fi_{variant}_rel_l2_vs_codec"] = rel_l2(out, ref)
        rows.append(row)
        log(row)
    return rows


def cli_rows(codec_tool, workloads, out_dir, timer, reps):
    rows = []
    for name in workloads:
        d = os.path.join(out_dir, "dump_" + name.replace(":", "_"))
        cmd = [codec_tool, "bench", "--backend", "cuda", "--workload", name, "--reps", str(reps), "--dump", d,
               "--json"]
        log(" ".join(cmd))
        bench = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)[0]
        data = load_dump(d)
        meta = data["meta"]
        w = codec.BatchPrefixDecodeWrapper(torch.empty(512 << 20, dtype=torch.uint8, device="cuda"))
        w.plan(data["indptr"].cpu(), data["indices"].cpu(), data["last"].cpu(), meta["num_qo_heads"],
               meta["num_kv_heads"], meta["head_dim"], meta["page_size"], q_data_type=data["q"].dtype,
               sm_scale=meta["sm_scale"], num_pages=data["k"].shape[0])
        out = torch.empty_like(data["q"])
        run = lambda: w.run(data["q"], (data["k"], data["v"]), out=out)  # noqa: E731
        ms, mode = timer(run)
        row = {"workload": name, "cli_codec_ms": bench["codec_ms"], "python_codec_ms": ms, "mode": mode,
               "python_over_cli": ms / bench["codec_ms"], "rel_l2_vs_cli_output": rel_l2(out, data["out"]),
               "python_plan_tasks": w.plan_stats["num_tasks"]}
        rows.append(row)
        log(row)
        for f in os.listdir(d):  # the dump is large; the row keeps what matters
            os.remove(os.path.join(d, f))
        os.rmdir(d)
    return rows


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True)
    p.add_argument("--codec", default="build-gpu/codec")
    p.add_argument("--batches", default="64,256,1024")
    p.add_argument("--workloads", default="batch:64,long,depth:2")
    p.add_argument("--reps", type=int, default=200)
    a = p.parse_args()
    os.makedirs(a.out, exist_ok=True)
    timer = Timer(30, "read")
    result = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
              "host": host_rows([int(b) for b in a.batches.split(",")], a.reps, timer),
              "cli": cli_rows(a.codec, a.workloads.split(","), a.out, timer, 30) if a.workloads else []}
    try:
        import flashinfer
        result["flashinfer"] = flashinfer.__version__
    except ImportError:
        pass
    with open(os.path.join(a.out, "python_api.json"), "w") as f:
        json.dump(result, f, indent=2)
    print("host us: plan, run (GPU busy), run (GPU idle); kernel ms")
    print(f"{'B':>6} | {'codec':^30} | {'flashinfer tc':^30} | {'flashinfer cc':^30}")
    for r in result["host"]:
        cells = []
        for pre in ("codec", "fi_tc", "fi_cc"):
            keys = (f"{pre}_plan_us", f"{pre}_run_us", f"{pre}_run_idle_us", f"{pre}_kernel_ms")
            cells.append(" ".join(format(r[k], ".4f" if k.endswith("ms") else ".1f") if k in r else "-" for k in keys))
        print(f"{r['batch']:>6} | " + " | ".join(f"{c:^30}" for c in cells))
    for r in result["cli"]:
        print(f"{r['workload']:>12}: codec bench {r['cli_codec_ms']:.4f} ms, Python API {r['python_codec_ms']:.4f} ms "
              f"({r['python_over_cli']:.3f}x), output rel_l2 {r['rel_l2_vs_cli_output']:.2e}")


if __name__ == "__main__":
    main()
