#!/usr/bin/env python3
"""Host time of one DECODE step of transformers 5.17 continuous batching, on CPU, with a tiny
Qwen3 and an attention that only writes the new K/V into the paged cache and returns zeros.

Every engine method of interest is wrapped (in this process only, no transformers file is edited)
with a perf_counter accumulator; a step is one `_generation_loop_body`; a step is a DECODE step
when every scheduled request has one query token and all requests are in it.

  python profile_decode.py --docs 2 [--layers 2] [--new-tokens 16] [--num-blocks 46038]
                           [--route varlen|config|name] [--cprofile OUT.txt] [--json OUT.json]

--route varlen: "paged|zero" through model.generate_batch, as bench/e2e_decode.py runs (read_index path).
--route config: "paged|zero", manager driven by fastpath.run_with_block_table (max_blocks_per_request set
                after config resolution): the engine's block-table decode path.
--route name:   "paged|zero_flash3" + seeded lazy flash import (fastpath.register), model.generate_batch.
"""

import argparse
import collections
import cProfile
import functools
import json
import os
import pstats
import sys
import time

import numpy as np
import torch

torch.set_num_threads(1)

import transformers  # noqa: E402
from transformers import AttentionInterface, GenerationConfig, Qwen3Config, Qwen3ForCausalLM  # noqa: E402
from transformers.generation.configuration_utils import ContinuousBatchingConfig  # noqa: E402
import transformers.generation.continuous_batching.cache as cache_mod  # noqa: E402
import transformers.generation.continuous_batching.cache_manager as cm_mod  # noqa: E402
import transformers.generation.continuous_batching.continuous_api as api_mod  # noqa: E402
import transformers.generation.continuous_batching.input_outputs as io_mod  # noqa: E402
import transformers.generation.continuous_batching.model_runner as mr_mod  # noqa: E402
import transformers.generation.continuous_batching.scheduler as sched_mod  # noqa: E402


def prompts(n_docs, seed=0):
    """bench/e2e_decode.py's loogle:N: N documents of 12k-30k tokens, 8 questions of 20-200 tokens each."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n_docs):
        doc = rng.integers(10, 150000, int(rng.integers(12000, 30001))).tolist()
        out += [doc + rng.integers(10, 150000, int(rng.integers(20, 201))).tolist() for _ in range(8)]
    return out


# ----------------------------------------------------------------------------------------- timing
STEPS = []          # one dict per engine step: section -> seconds, plus "kind"
CUR = None          # the step being timed
DEPTH = collections.Counter()  # re-entrancy guard per section


def timed(section):
    def deco(fn):
        @functools.wraps(fn)
        def wrapper(*a, **k):
            if CUR is None or DEPTH[section]:
                return fn(*a, **k)
            DEPTH[section] += 1
            t0 = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                CUR[section] = CUR.get(section, 0.0) + time.perf_counter() - t0
                CUR["n_" + section] = CUR.get("n_" + section, 0) + 1
                DEPTH[section] -= 1
        return wrapper
    return deco


def patch(cls, name, section):
    setattr(cls, name, timed(section)(getattr(cls, name)))


IN_PREPARE = [False]
_orig_tensor = torch.tensor


def _timed_tensor(*a, **k):
    """torch.tensor, timed when called from prepare_batch_tensors itself (its list -> tensor conversions)."""
    if CUR is None or not IN_PREPARE[0]:
        return _orig_tensor(*a, **k)
    t0 = time.perf_counter()
    try:
        return _orig_tensor(*a, **k)
    finally:
        CUR["prep.torch_tensor"] = CUR.get("prep.torch_tensor", 0.0) + time.perf_counter() - t0
        n = len(a[0]) if a and isinstance(a[0], list) else 0
        CUR["prep.torch_tensor_elems"] = CUR.get("prep.torch_tensor_elems", 0) + n


def install_timers():
    B = api_mod.ContinuousBatchProcessor
    M = api_mod.ContinuousBatchingManager
    IO = io_mod.ContinuousBatchingIOs
    C = cache_mod.PagedAttentionCache
    FA = cm_mod.FullAttentionCacheAllocator

    orig_body = M._generation_loop_body

    def body(self, batch_processor, bootstrapping):
        global CUR
        CUR = {}
        t0 = time.perf_counter()
        try:
            return orig_body(self, batch_processor, bootstrapping)
        finally:
            CUR["step"] = time.perf_counter() - t0
            sch = batch_processor.scheduler
            CUR["active"], CUR["waiting"] = len(sch.active_requests), len(sch.waiting_requests)
            CUR["free_blocks"] = batch_processor.cache.get_num_free_blocks()
            if "kind" in CUR:
                STEPS.append(CUR)
            CUR = None
    M._generation_loop_body = body

    patch(B, "prepare_next_batch", "prepare_next_batch")
    patch(sched_mod.FIFOScheduler, "schedule_batch", "schedule_batch")
    patch(B, "update_batch", "update_batch")
    patch(B, "_generation_step", "generation_step")
    patch(IO, "get_model_kwargs", "get_model_kwargs")
    patch(IO, "retrieve_device_outputs", "retrieve_device_outputs")
    patch(IO, "prepare_batch_update", "prepare_batch_update")
    patch(IO, "_reset_static_tensors", "prep.reset_static_tensors")
    patch(C, "extend_read_and_write_indices", "prep.extend_read_and_write_indices")
    patch(C, "fill_block_table", "prep.fill_block_table")
    patch(FA, "get_read_indices", "prep.get_read_indices")
    patch(FA, "get_write_indices", "prep.get_write_indices")
    patch(C, "mark_shareable_blocks_as_complete", "update.mark_shareable_blocks_as_complete")
    patch(mr_mod.ModelRunner, "compute_batch", "compute_batch")
    patch(Qwen3ForCausalLM, "forward", "model_forward")

    orig_prep = IO.prepare_batch_tensors

    def prep(self, requests_in_batch, logits_processors, use_decode_fast_path, num_q_tokens, max_kv_read,
             use_padding):
        if CUR is not None:
            decode = all(fs.query_length == 1 for fs in requests_in_batch)
            CUR["kind"] = "decode" if decode else "mixed/prefill"
            CUR["requests"] = len(requests_in_batch)
            CUR["fast_path"] = bool(use_decode_fast_path and self.block_table.numel() > 0)
            CUR["kv_read"] = max_kv_read
        IN_PREPARE[0] = True
        t0 = time.perf_counter()
        try:
            return orig_prep(self, requests_in_batch, logits_processors, use_decode_fast_path, num_q_tokens,
                             max_kv_read, use_padding)
        finally:
            IN_PREPARE[0] = False
            if CUR is not None:
                CUR["prepare_batch_tensors"] = CUR.get("prepare_batch_tensors", 0.0) + time.perf_counter() - t0
    IO.prepare_batch_tensors = prep
    torch.tensor = _timed_tensor

    # extend/fill call torch.tensor too (fill_block_table does, per request): don't count those as prepare's own
    for cls, name in [(C, "extend_read_and_write_indices"), (C, "fill_block_table")]:
        inner = getattr(cls, name)

        def outer(*a, _inner=inner, **k):
            IN_PREPARE[0] = False
            try:
                return _inner(*a, **k)
            finally:
                IN_PREPARE[0] = True
        setattr(cls, name, outer)


# -------------------------------------------------------------------------------------- attention
class ZeroAttention:
    """Writes the step's new K/V into the engine's paged cache (index_copy_ at write_index, as
    codec.integrations.transformers does; on the block-table path at block_table[b, pos // bs] * bs + pos % bs)
    and returns zeros (T, Hq, D) for every row. Records which kwargs the engine passed on each call."""

    def __init__(self):
        self.calls = collections.Counter()
        self.seen = {}

    def __call__(self, module, query, key, value, attention_mask, scaling=None, cache=None, write_index=None,
                 read_index=None, block_table=None, cu_seq_lens_k=None, **kwargs):
        t0 = time.perf_counter()
        self.cache = cache
        group, layer_in_group = cache.layer_index_to_group_indices[module.layer_idx]
        k_cache, v_cache = cache.key_cache[layer_in_group], cache.value_cache[layer_in_group]
        if isinstance(cu_seq_lens_k, dict):
            cu_seq_lens_k = cu_seq_lens_k["full_attention"]
        if block_table is None:
            k_cache.index_copy_(0, write_index[group], key[0].transpose(0, 1))
            v_cache.index_copy_(0, write_index[group], value[0].transpose(0, 1))
            self.calls["varlen"] += 1
        else:
            bt = block_table[group]  # (batch, max_blocks_per_request) int32, -1 padded
            b = key.shape[2]
            pos = (cu_seq_lens_k[1:b + 1] - cu_seq_lens_k[:b] - 1).long()  # the new token's position
            slots = bt[torch.arange(b), pos // cache.block_size].long() * cache.block_size + pos % cache.block_size
            k_cache.index_copy_(0, slots, key[0].transpose(0, 1))
            v_cache.index_copy_(0, slots, value[0].transpose(0, 1))
            self.calls["block_table"] += 1
            if "block_table" not in self.seen:
                self.seen["block_table"] = dict(
                    block_table_shape=tuple(block_table.shape), dtype=str(block_table.dtype),
                    cu_seq_lens_k=cu_seq_lens_k[:b + 1].tolist()[:3], read_index=[tuple(r.shape) for r in read_index],
                    write_index=[tuple(w.shape) for w in write_index], kwargs=sorted(kwargs))
        out = torch.zeros((query.shape[2], query.shape[1], query.shape[3]), dtype=query.dtype, device=query.device)
        if CUR is not None:
            CUR["attention"] = CUR.get("attention", 0.0) + time.perf_counter() - t0
        return out, None


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--docs", type=int, default=2)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--new-tokens", type=int, default=16)
    p.add_argument("--block-size", type=int, default=16)
    p.add_argument("--num-blocks", type=int, default=46038, help="46038: what an H200 gives paged|codec (h200_sizing.py)")
    p.add_argument("--max-batch-tokens", type=int, default=8192)
    p.add_argument("--route", default="varlen", choices=["varlen", "config", "name"])
    p.add_argument("--max-blocks-per-request", type=int, default=None)
    p.add_argument("--cprofile", default=None)
    p.add_argument("--json", default=None)
    p.add_argument("--dump-cache", default=None, help="save layer 0's K/V cache and the tokens (to compare routes)")
    a = p.parse_args()

    # No psutil here: give the memory handler a number so that the explicit sizes pass its check
    cache_mod.PagedAttentionMemoryHandler.get_available_memory = lambda self: 64 << 30

    cfg = Qwen3Config(vocab_size=1000, hidden_size=64, intermediate_size=128, num_hidden_layers=a.layers,
                      num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=65536)
    torch.manual_seed(0)
    model = Qwen3ForCausalLM(cfg).to(torch.bfloat16).eval()
    attn = ZeroAttention()
    import fastpath
    if a.route == "name":
        name = fastpath.register("paged|zero_flash3", attn)
        fastpath.pretend_cuda_for_decode_check()  # CPU only: the engine's check wants torch.cuda.is_available()
    else:
        name = "paged|zero"
        AttentionInterface.register(name, attn)
    model.set_attn_implementation(name)

    inputs = [[t % cfg.vocab_size for t in p] for p in prompts(a.docs)]  # same prefix structure, tiny vocab
    print(f"{len(inputs)} requests, {sum(map(len, inputs))} prompt tokens, {a.layers} layers, "
          f"num_pages {a.num_blocks * a.block_size}", file=sys.stderr)
    gen = GenerationConfig(max_new_tokens=a.new_tokens, do_sample=False, eos_token_id=-1, pad_token_id=0)
    cb = ContinuousBatchingConfig(block_size=a.block_size, return_logprobs=True, use_cuda_graph=False,
                                  max_requests_per_batch=len(inputs), num_blocks=a.num_blocks,
                                  max_batch_tokens=a.max_batch_tokens,
                                  max_blocks_per_request=a.max_blocks_per_request)
    install_timers()
    prof = None
    if a.cprofile:
        # the generation loop runs in a background thread: profile it there, decode steps only
        prof = cProfile.Profile()
        M = api_mod.ContinuousBatchingManager
        timed_body = M._generation_loop_body

        def prof_body(self, bp, bootstrapping):
            decode_now = (not bootstrapping and bp.scheduler.active_requests and not bp.scheduler.waiting_requests
                          and all(s.status.name == "DECODING" for s in bp.scheduler.active_requests.values()))
            if decode_now:
                prof.enable()
            try:
                return timed_body(self, bp, bootstrapping)
            finally:
                if decode_now:
                    prof.disable()
        M._generation_loop_body = prof_body

    t0 = time.perf_counter()
    if a.route == "config":
        out = fastpath.run_with_block_table(model, inputs, gen, cb, a.new_tokens)
    else:
        out = model.generate_batch(inputs=inputs, generation_config=gen, continuous_batching_config=cb,
                                   record_timestamps=True)
    wall = time.perf_counter() - t0
    errors = [o.error for o in out.values() if o.error]
    if errors:
        raise SystemExit(f"errors: {errors[:2]}")
    intervals = np.concatenate([np.diff(np.asarray(o.timestamps, dtype=np.float64))[1:] for o in out.values()])

    full = [s for s in STEPS if s["kind"] == "decode" and s["requests"] == len(inputs)]
    dec = [s for s in STEPS if s["kind"] == "decode"]
    keys = sorted({k for s in dec for k in s if not k.startswith("n_") and k not in ("kind", "requests", "fast_path")})
    steps = full if full else dec
    res = {"requests": len(inputs), "prompt_tokens": sum(map(len, inputs)), "layers": a.layers,
           "attn": name, "route": a.route, "num_pages": a.num_blocks * a.block_size, "wall_s": wall,
           "tpot_ms_median": float(np.median(intervals)) * 1e3,
           "steps_total": len(STEPS), "decode_steps": len(dec), "full_decode_steps": len(full),
           "decode_step_requests": sorted(collections.Counter(s["requests"] for s in dec).items()),
           "fast_path_steps": sum(s["fast_path"] for s in dec), "attention_calls": dict(attn.calls),
           "seen": attn.seen,
           "median_per_step": {k: float(np.median([s.get(k, 0.0) for s in steps])) for k in keys}}
    for k, v in res["median_per_step"].items():
        if not k.endswith("elems") and k not in ("kv_read", "active", "waiting", "free_blocks"):
            res["median_per_step"][k] = round(v * 1e3, 3)  # ms
    print(json.dumps(res, indent=1))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=1)
    if os.environ.get("PRINT_STEPS"):
        for s in STEPS:
            print(s["kind"], s["requests"], s["active"], s["waiting"], s["free_blocks"], round(s["step"] * 1e3, 1),
                  file=sys.stderr)
    if a.dump_cache:
        c = attn.cache
        torch.save({"k": c.key_cache[0], "v": c.value_cache[0],
                    "tokens": [list(o.generated_tokens) for o in out.values()]}, a.dump_cache)
    if prof is not None:
        with open(a.cprofile, "w") as f:
            st = pstats.Stats(prof, stream=f)
            f.write(f"decode steps profiled: {len(dec)}\n")
            st.sort_stats("cumulative").print_stats(45)
            st.sort_stats("tottime").print_stats(30)


if __name__ == "__main__":
    main()
