#!/usr/bin/env python3
"""Decode inside a real engine: Hugging Face transformers' continuous batching
on Qwen3-4B's shape (random bf16 weights), one attention backend at a time on
the same prompts, in eager mode.

Backends: codec (`paged|codec`, codec.integrations.transformers), sdpa (the
engine's own `paged|sdpa`), noop (`paged|codec` with the decode rows' attention
skipped: zeros; prefill as codec), which measures the engine's floor.

TPOT is the median interval between successive tokens of a request, over all
requests, from the second generated token on, taken from the engine's own
timestamps (`record_timestamps`); with every request submitted at once the
prefills come first, so the intervals are those of decode steps. Correctness:
every backend's logprobs against sdpa's on the steps whose token history both
runs share (bench/e2e_check.py; relative L2 and largest difference).

  python3 bench/e2e_decode.py --out OUT --workload loogle:4 [--backends codec,noop,sdpa] [--layers 36]
"""

import argparse
import json
import os
import sys
import time

import numpy as np
import torch

import codec.integrations.transformers as codec_tf
from e2e_check import compare_on_shared_history

QWEN3_4B = dict(vocab_size=151936, hidden_size=2560, intermediate_size=9728, num_hidden_layers=36,
                num_attention_heads=32, num_key_value_heads=8, head_dim=128, max_position_embeddings=65536)


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def prompts(workload, seed=0):
    """loogle:N: N documents of 12k-30k tokens, 8 questions of 20-200 tokens each."""
    kind, _, n = workload.partition(":")
    rng = np.random.default_rng(seed)
    if kind != "loogle":
        raise SystemExit(f"unknown workload {workload!r}")
    out = []
    for _ in range(int(n or 4)):
        doc = rng.integers(10, 150000, int(rng.integers(12000, 30001))).tolist()
        out += [doc + rng.integers(10, 150000, int(rng.integers(20, 201))).tolist() for _ in range(8)]
    return out


class NoDecodeAttention(codec_tf.PagedAttention):
    """paged|codec with no decode attention (rows of zeros, no plan): the engine's cost without it."""

    def plan(self, cache, step, read_slots, query, scale):
        pass

    def decode(self, cache, q, pages, out):
        out.zero_()


def run(model, impl, inputs, new_tokens, block_size):
    from transformers import GenerationConfig
    from transformers.generation.configuration_utils import ContinuousBatchingConfig
    model.set_attn_implementation(impl)
    gen = GenerationConfig(max_new_tokens=new_tokens, do_sample=False, eos_token_id=-1, pad_token_id=0)
    cb = ContinuousBatchingConfig(block_size=block_size, return_logprobs=True, use_cuda_graph=False,
                                  max_requests_per_batch=len(inputs))
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    out = model.generate_batch(inputs=inputs, generation_config=gen, continuous_batching_config=cb,
                               record_timestamps=True)
    torch.cuda.synchronize()
    wall = time.perf_counter() - t0
    errors = [o.error for o in out.values() if o.error]
    if errors:
        raise RuntimeError(f"{impl}: {errors[:2]}")
    intervals = np.concatenate([np.diff(np.asarray(o.timestamps, dtype=np.float64))[1:] for o in out.values()])
    trace = {k: (list(o.generated_tokens), [float(x) for x in o.logprobs]) for k, o in out.items()}
    return {"tpot_ms": float(np.median(intervals)) * 1e3, "tpot_p90_ms": float(np.percentile(intervals, 90)) * 1e3,
            "wall_s": wall, "tokens": sum(len(o.generated_tokens) for o in out.values()),
            "peak_gpu_gb": torch.cuda.max_memory_allocated() / 1e9}, trace


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True)
    p.add_argument("--workload", default="loogle:4")
    p.add_argument("--backends", default="codec,noop,sdpa")
    p.add_argument("--layers", type=int, default=36)
    p.add_argument("--new-tokens", type=int, default=64)
    p.add_argument("--block-size", type=int, default=16)
    a = p.parse_args()
    from transformers import Qwen3Config, Qwen3ForCausalLM
    cfg = Qwen3Config(**{**QWEN3_4B, "num_hidden_layers": a.layers})
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = Qwen3ForCausalLM(cfg).to(torch.bfloat16).eval()
    names = {"codec": codec_tf.register(), "sdpa": "paged|sdpa",
             "noop": codec_tf.register("paged|nodecode", NoDecodeAttention())}
    inputs = prompts(a.workload)
    log(f"{a.workload}: {len(inputs)} requests, {sum(map(len, inputs))} prompt tokens, {a.layers} layers")
    rows, traces = {}, {}
    for b in a.backends.split(","):
        log(f"== {b}")
        rows[b], traces[b] = run(model, names[b], inputs, a.new_tokens, a.block_size)
        log(rows[b])
        os.makedirs(a.out, exist_ok=True)
        with open(os.path.join(a.out, f"e2e_{a.workload.replace(':', '_')}_{b}.json"), "w") as f:
            json.dump(rows[b], f, indent=2)
    if "sdpa" in traces:
        for b in traces:
            if b != "noop":  # noop's decode attention is zeros: nothing to check
                rows[b]["vs_sdpa"] = compare_on_shared_history(traces["sdpa"], traces[b])
    floor = rows.get("noop", {}).get("tpot_ms")
    for b in rows:
        if floor is not None:
            rows[b]["tpot_minus_floor_ms"] = rows[b]["tpot_ms"] - floor
    result = {"workload": a.workload, "requests": len(inputs), "layers": a.layers, "block_size": a.block_size,
              "new_tokens": a.new_tokens, "device": torch.cuda.get_device_name(), "rows": rows}
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, f"e2e_{a.workload.replace(':', '_')}.json"), "w") as f:
        json.dump(result, f, indent=2)
    print(f"{'backend':>8} {'TPOT ms':>9} {'p90 ms':>8} {'- floor':>8} {'GB':>6} {'logprob err':>12} {'steps':>6}")
    for b, r in rows.items():
        check = r.get("vs_sdpa", {})
        print(f"{b:>8} {r['tpot_ms']:9.2f} {r['tpot_p90_ms']:8.2f} {r.get('tpot_minus_floor_ms', float('nan')):8.2f} "
              f"{r['peak_gpu_gb']:6.1f} {check.get('logprob_rel_l2', float('nan')):12.2e} "
              f"{check.get('steps_compared', 0):6d}")


if __name__ == "__main__":
    main()
