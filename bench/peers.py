#!/usr/bin/env python3
"""Peers side by side with CoDec on the same KV data (docs/BENCHMARKS.md, "Peers").

For each workload, `codec bench --backend cuda --dump` times CoDec and the flat
baseline and writes the batch it ran: Q, the paged K/V pool, the per-request
page tables, the derived prefix forest and CoDec's checked output. This script
then loads exactly that data onto the GPU and times, under the same protocol
(warm-up, a 256 MB L2 flush before every run: a read, which leaves L2 clean,
or with --flush write a memset, whose dirty lines are written back during the
run; CUDA events around the attention alone, CUDA-graph replays, median):

  fi_decode   FlashInfer BatchDecodeWithPagedKVCacheWrapper over the per-request
              page tables (shared pages are physically shared, as for flat),
              tensor-core (tc) and CUDA-core (cc) kernels
              (with --q-len: tc with q_len_per_req)
  fi_prefill  FlashInfer BatchPrefillWithPagedKVCacheWrapper over the same page
              tables, causal or with each request's keep matrix as custom_mask,
              FA2 and FA3 (only with several query tokens a request)
  fi_sink     FlashInfer BatchAttentionWithAttentionSinkWrapper (its prefill
              wrapper with a sink variant, JIT-built), FA2 and FA3, one query
              token a request or the dump's causal tokens (only with --sinks)
  fi_cascade  FlashInfer MultiLevelCascadeAttentionWrapper, one level per depth
              of the prefix forest (requests reordered so that every node's
              requests are contiguous, as the wrapper requires), on its default
              (auto: FA3 on sm_90) and its FA2 prefill backend; with several
              query tokens its levels count tokens, its last level causal or
              planned again with each request's keep matrix over its last node
  hydragen    a Hydragen-style decomposition (bench/hydragen.py): each shared
              node's attention for all its queries at once, on torch's
              FlashAttention (flash) or as two batched matrix products (matmul),
              single-request nodes batched padded, combined by lse;
              K/V gathered per node outside the timing
  pat         PAT (ASPLOS'26; scripts/fetch_pat.sh, built by gpu_run.sh's pat
              step), its prefix tree from the same page tables, built and packed
              outside the timing; timed eagerly (it launches on the legacy
              stream and creates streams per call: no graph capture). It takes
              pages of 16 tokens or more, head_dim 64 or 128, G of 1, 2, 4 or 8
  sdpa        PyTorch scaled_dot_product_attention, cuDNN backend, over dense
              per-request K/V (only where every request has the same length)
  flex        PyTorch flex_attention, compiled (torch.compile, its decoding
              kernel for one query token), over the same dense K/V; not over
              the paged cache, which needs a page-table block mask

Every peer's output is checked against CoDec's (which `codec bench` checked
against the fp64 reference): relative L2 error, no NaN. `<peer>_ms` is the
best variant of a family whose error is within 1e-2 (`<peer>_variant` names it).

With --q-len N or --tree W,D (as codec bench's) every request brings several
query tokens; hydragen, pat, sdpa and flex take one a request and are not run.
With --dtype fp8 or fp8_e5m2 (codec bench's: the cache's bits and a scale a kv
head) FlashInfer's wrappers read the same bits under bf16 queries; they take
one scale for all heads, so each head's K scale multiplies its q rows and its
V scale divides the reference, both outside the timing (an engine would fuse
them into the ops around attention); the peers that take no fp8 get a note.
With --window N, --soft-cap C or --sinks (as codec bench's) FlashInfer's
decode and prefill wrappers get window_left and logits_soft_cap at plan and
the sinks at run (a backend that ignores them fails the error check and is
not counted); the cascade takes the soft-cap but neither windows (each level
sees its own positions) nor sinks, and the peers FlashInfer does not build
take no variant: each gets a note instead.

  python3 -m bench.peers --codec build-gpu/codec --out OUTDIR [--workloads w1,w2] [--peers sdpa,flex] [--flush write]
                         [--q-len N | --tree W,D] [--window N] [--soft-cap C] [--sinks] [--dtype fp8]
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import time

if not __package__:  # python3 bench/peers.py: its imports are the bench package's
    raise SystemExit("run it from the repository root as a module: python3 -m bench.peers ...")

import numpy as np
import torch

from .cascade import cascade_levels
from .queries import keep_matrices, token_levels

FLUSH_BYTES = 256 << 20  # several times the H200's 60 MB L2
WARMUP = 5


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def rel_l2(x, ref):
    x = x.float()
    ref = ref.float()
    if not torch.isfinite(x).all():
        return float("nan")
    return float((x - ref).norm() / ref.norm())


class Timer:
    """Median of CUDA-event timings, each run after an L2 flush; a CUDA graph of
    fn when it can be captured (launch gaps then cost what they cost CoDec)."""

    def __init__(self, reps, flush):
        self.reps = reps
        self.flush_by_write = flush == "write"
        self.flush = torch.zeros(FLUSH_BYTES // 4, dtype=torch.int32, device="cuda")

    def __call__(self, fn, graph=True):
        fn()  # JIT, lazy allocations
        torch.cuda.synchronize()
        run, mode = fn, "eager"
        if graph:
            run, mode = self.capture(fn)
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        times = []
        for i in range(WARMUP + self.reps):
            if self.flush_by_write:
                self.flush.fill_(i & 0xFF)
            else:
                self.flush.sum()  # reads it all, writes one number
            start.record()
            run()
            stop.record()
            stop.synchronize()
            if i >= WARMUP:
                times.append(start.elapsed_time(stop))
        return float(np.median(times)), mode

    @staticmethod
    def capture(fn):
        """A replay of fn's CUDA graph, or fn itself where capture fails."""
        graph = torch.cuda.CUDAGraph()
        try:
            s = torch.cuda.Stream()
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                fn()
            torch.cuda.current_stream().wait_stream(s)
            with torch.cuda.graph(graph):
                fn()
            return graph.replay, "graph"
        except Exception as e:  # noqa: BLE001 - any capture failure: time eager calls instead
            log(f"    graph capture failed ({type(e).__name__}: {e}); timing eager calls")
            torch.cuda.synchronize()
            return fn, "eager"


DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp8_e4m3": torch.float8_e4m3fn,
          "fp8_e5m2": torch.float8_e5m2}


def load_dump(d):
    meta = json.load(open(os.path.join(d, "meta.json")))
    forest = json.load(open(os.path.join(d, "forest.json")))
    if meta["dtype"] not in DTYPES:
        raise ValueError(f"the peers take fp16, bf16 and fp8 caches, not {meta['dtype']}")
    q_dtype, kv_dtype = DTYPES[meta.get("q_dtype", meta["dtype"])], DTYPES[meta["dtype"]]

    def dev(name, dt):
        return torch.from_numpy(np.load(os.path.join(d, name))).to("cuda").to(dt)

    def cache(name):  # an fp8 cache's stored bits (uint8 in the dump), viewed as torch's float8
        if kv_dtype.itemsize == 1:
            return torch.from_numpy(np.load(os.path.join(d, name))).to("cuda").view(kv_dtype)
        return dev(name, kv_dtype)

    data = {
        "meta": meta,
        "forest": forest,
        "q": dev("q.npy", q_dtype),
        "k": cache("k_cache.npy"),  # [pages, page_size, Hkv, D] (NHD)
        "v": cache("v_cache.npy"),
        "indptr": dev("kv_indptr.npy", torch.int32),
        "indices": dev("kv_indices.npy", torch.int32),
        "last": dev("kv_last_page_len.npy", torch.int32),
        "out": dev("out.npy", torch.float32),
    }
    if os.path.exists(os.path.join(d, "sinks.npy")):
        data["sinks"] = dev("sinks.npy", torch.float32)
    if os.path.exists(os.path.join(d, "k_scale.npy")):  # an fp8 cache's, one a kv head
        data["k_scale"], data["v_scale"] = dev("k_scale.npy", torch.float32), dev("v_scale.npy", torch.float32)
    if os.path.exists(os.path.join(d, "qo_indptr.npy")):  # several query tokens a request
        data["qo_indptr"] = np.load(os.path.join(d, "qo_indptr.npy"))
        bits = os.path.join(d, "mask_bits.npy")
        data["mask_bits"] = np.load(bits) if os.path.exists(bits) else None
    return data


def kv_lengths(data):
    indptr = data["indptr"].cpu().numpy().astype(np.int64)
    return (indptr[1:] - indptr[:-1] - 1) * data["meta"]["page_size"] + data["last"].cpu().numpy()


# PAT's tile shapes (rows, KV tokens, warps) to pack into: its default set, less (16, 128, 1) for
# pages under 32 tokens, which that shape refuses
PAT_TILES = [[64, 128, 4], [64, 64, 4], [64, 32, 4], [32, 128, 2], [32, 64, 2], [32, 32, 2], [32, 16, 2],
             [16, 128, 1], [16, 64, 1], [16, 32, 1], [16, 16, 1]]


def make_pat(data):
    """PAT over the batch: its radix tree from the padded block table, packed
    into tiles, on the GPU; returns the call to time (out [B, Hq, D])."""
    from prefix_attn import PrefixTreeCPP, prefix_attn_with_kvcache
    meta = data["meta"]
    hq, hkv, ps = meta["num_qo_heads"], meta["num_kv_heads"], meta["page_size"]
    if ps % 16 or meta["head_dim"] not in (64, 128) or hq // hkv not in (1, 2, 4, 8):
        raise ValueError(f"PAT takes pages of a multiple of 16 tokens, head_dim 64 or 128, G 1/2/4/8; not page {ps}, "
                         f"head_dim {meta['head_dim']}, G {hq // hkv}")
    indptr = data["indptr"].cpu().long()
    pages = indptr[1:] - indptr[:-1]
    table = torch.zeros((pages.numel(), int(pages.max())), dtype=torch.int32)
    indices = data["indices"].cpu()
    for r in range(pages.numel()):
        table[r, : pages[r]] = indices[indptr[r]: indptr[r + 1]]
    lens = ((pages - 1) * ps + data["last"].cpu().long()).to(torch.int32)
    tree = PrefixTreeCPP(ps)
    tree.build_radix_tree(lens.tolist(), table)  # its binding takes a list (not a tensor from torch)
    tree.pack_schedule([t for t in PAT_TILES if ps >= 32 or t != [16, 128, 1]], hq // hkv, hkv)
    tree.kernel_info.to_gpu(torch.device("cuda"))
    q = data["q"].unsqueeze(1)  # [B, 1, Hq, D]
    out = torch.empty_like(q)

    def run():
        prefix_attn_with_kvcache(q=q, k_cache_paged=data["k"], v_cache_paged=data["v"], tree=tree,
                                 softmax_scale=meta["sm_scale"], out=out)
        return out.view(q.shape[0], hq, -1)

    run.keep = (tree, table)  # the tree reads the table's host buffer
    return run


def time_dense(data, measure, row, peers):
    """cuDNN SDPA and compiled flex_attention over dense per-request K/V, gathered
    from the pages outside the timing; only where every request has the same length."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.attention.flex_attention import flex_attention

    meta, q, k, v, ref = data["meta"], data["q"], data["k"], data["v"], data["out"]
    hq, hkv, dim, ps = meta["num_qo_heads"], meta["num_kv_heads"], meta["head_dim"], meta["page_size"]
    batch = q.shape[0]
    indptr = data["indptr"].cpu().numpy()
    lens = kv_lengths(data)
    if not (lens == lens[0]).all() or 2 * batch * int(lens.max()) * hkv * dim * q.element_size() >= (48 << 30):
        row["dense_note"] = "requests of different lengths or dense KV too large; not run"
        return
    idx = data["indices"].long()
    kd = k[idx].view(-1, hkv, dim)  # tokens of every request's pages, request-major
    vd = v[idx].view(-1, hkv, dim)
    pages = int(indptr[1] - indptr[0])
    kd = kd.view(batch, pages * ps, hkv, dim)[:, : lens[0]].transpose(1, 2).contiguous()
    vd = vd.view(batch, pages * ps, hkv, dim)[:, : lens[0]].transpose(1, 2).contiguous()
    qd = q.view(batch, hq, 1, dim)
    if "sdpa" in peers:
        fn = lambda: torch.nn.functional.scaled_dot_product_attention(  # noqa: E731
            qd, kd, vd, scale=meta["sm_scale"], enable_gqa=True).view(batch, hq, dim)
        try:
            with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                measure("sdpa", "cudnn", fn, ref)
        except RuntimeError as e:
            row["sdpa_note"] = f"cuDNN backend refused: {e}".splitlines()[0][:200]
            log("  sdpa", row["sdpa_note"])
    if "flex" in peers:
        flex = torch.compile(flex_attention, dynamic=False)  # compiles on the first, untimed call
        fn = lambda: flex(qd, kd, vd, scale=meta["sm_scale"], enable_gqa=True).view(batch, hq, dim)  # noqa: E731
        try:
            measure("flex", "compiled", fn, ref)
        except Exception as e:  # noqa: BLE001 - a compile or shape refusal: record it
            row["flex_note"] = f"{type(e).__name__}: {e}".splitlines()[0][:200]
            log("  flex", row["flex_note"])


def multi_token(data):
    """The dump's query tokens (qo_indptr, q_lens, kv_lens, mask, each request's
    keep matrix), or None for one token a request."""
    if "qo_indptr" not in data:
        return None
    kv_lens = kv_lengths(data)
    mask = data["meta"]["mask"]
    return {"qo_indptr": data["qo_indptr"], "q_lens": np.diff(data["qo_indptr"]), "kv_lens": kv_lens, "mask": mask,
            "keep": keep_matrices(mask, data["qo_indptr"], kv_lens, data["mask_bits"])}


def own_last_nodes(levels, tokens, page_size):
    """Whether the cascade's last level is a node of each request's own that
    holds all its query tokens (what masking that level alone needs), under
    a causal or draft mask."""
    order, qo, kp, ki, kl = levels
    if tokens["mask"] == "custom" or len(qo[-1]) - 1 != len(order):
        return False
    for g, r in enumerate(order):
        leaf = (kp[-1][g + 1] - kp[-1][g] - 1) * page_size + kl[-1][g]
        if leaf < tokens["q_lens"][r]:
            return False
    return True


def tokens_mask(tokens):
    """FlashInfer's custom_mask (every request's keep matrix flattened, concatenated), or None when causal."""
    if tokens["mask"] == "causal":
        return None
    return torch.from_numpy(np.concatenate([m.ravel() for m in tokens["keep"]])).cuda()


def run_workload(name, d, timer, results, peers):
    data = load_dump(d)
    meta = data["meta"]
    hq, hkv, dim, ps = meta["num_qo_heads"], meta["num_kv_heads"], meta["head_dim"], meta["page_size"]
    q, k, v, ref = data["q"], data["k"], data["v"], data["out"]
    row = {"workload": name}
    fp8 = "k_scale" in data
    if fp8:  # FlashInfer's one scale for all heads: each head's into its q rows and the reference, untimed
        per_qo_head = lambda s: s.repeat_interleave(hq // hkv)[None, :, None]  # noqa: E731
        q = (q.float() * per_qo_head(data["k_scale"])).to(q.dtype)
        ref = ref / per_qo_head(data["v_scale"])
        row["fp8_note"] = "per-head scales folded into q and the reference outside the timing"

    ws = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")

    def measure(key, variant, fn, ref_rows, graph=True):
        out = fn()
        err = rel_l2(out, ref_rows)
        ms, mode = timer(fn, graph)
        row[f"{key}_{variant}_ms"], row[f"{key}_{variant}_err"], row[f"{key}_{variant}_mode"] = ms, err, mode
        log(f"  {key} {variant:6s} {ms:.4f} ms ({mode}), err {err:.2e}")
        if err <= 1e-2 and ms < row.get(f"{key}_ms", float("inf")):  # the family's best correct variant
            row[f"{key}_ms"], row[f"{key}_variant"] = ms, variant

    if {"fi_decode", "fi_prefill", "fi_sink", "fi_cascade"} & set(peers):
        import flashinfer
    tokens = multi_token(data)  # None: one query token a request
    t32 = lambda xs: torch.tensor(np.asarray(xs), dtype=torch.int32, device="cuda")  # noqa: E731
    # the variants (codec bench --window, --soft-cap, --sinks): plan's and run's arguments of FlashInfer's wrappers
    window, cap, sinks = meta.get("window_left", -1), meta.get("logits_soft_cap", 0.0), data.get("sinks")
    planned = {"window_left": window, "logits_soft_cap": cap or None}
    sink_run = {} if sinks is None else {"sinks": sinks}

    # FlashInfer flat decode over the per-request page tables: its tensor-core
    # (prefill-kernel) and CUDA-core decode kernels; with several causal tokens
    # a request, the same number each, the tensor-core one with q_len_per_req
    if "fi_decode" in peers:
        if tokens is not None and (tokens["mask"] != "causal" or len(set(tokens["q_lens"])) != 1):
            row["fi_decode_note"] = "q_len_per_req takes the same causal tokens for every request; not run"
        for variant, tensor_cores in (("tc", True), ("cc", False)):
            if tokens is not None and ("fi_decode_note" in row or not tensor_cores):
                continue
            extra = {} if tokens is None else {"q_len_per_req": int(tokens["q_lens"][0])}
            dec = flashinfer.BatchDecodeWithPagedKVCacheWrapper(ws, "NHD", use_tensor_cores=tensor_cores)
            try:
                dec.plan(data["indptr"], data["indices"], data["last"], hq, hkv, dim, ps, q_data_type=q.dtype,
                         kv_data_type=k.dtype, sm_scale=meta["sm_scale"], **extra, **planned)
                measure("fi_decode", variant, lambda: dec.run(q, (k, v), **sink_run), ref)
            except Exception as e:  # noqa: BLE001 - a kernel that refuses a variant: record it
                row[f"fi_decode_{variant}_note"] = f"{type(e).__name__}: {e}".splitlines()[0][:200]
                log(f"  fi_decode {variant}", row[f"fi_decode_{variant}_note"])
            del dec

    # FlashInfer's prefill wrapper over the per-request page tables, causal or
    # with the requests' keep matrices as custom_mask: its FA2 and FA3 kernels
    if "fi_prefill" in peers and tokens is not None:
        mask = tokens_mask(tokens)
        for variant in ("fa2", "fa3"):
            pre = flashinfer.BatchPrefillWithPagedKVCacheWrapper(ws, "NHD", backend=variant)
            try:
                pre.plan(t32(tokens["qo_indptr"]), data["indptr"], data["indices"], data["last"], hq, hkv, dim, ps,
                         causal=tokens["mask"] == "causal", custom_mask=mask, sm_scale=meta["sm_scale"],
                         q_data_type=q.dtype, kv_data_type=k.dtype, **planned)
                measure("fi_prefill", variant, lambda: pre.run(q, (k, v), **sink_run), ref)
            except Exception as e:  # noqa: BLE001 - a backend that refuses the mask: record it
                row[f"fi_prefill_{variant}_note"] = f"{type(e).__name__}: {e}".splitlines()[0][:200]
                log(f"  fi_prefill {variant}", row[f"fi_prefill_{variant}_note"])
            del pre

    # FlashInfer's attention-sink wrapper: its prefill wrapper with a sink
    # variant (no soft-cap), over the per-request page tables, causal
    if "fi_sink" in peers and sinks is not None:
        if cap:
            row["fi_sink_note"] = "the sink variant has no soft-cap; not run"
        elif tokens is not None and tokens["mask"] != "causal":
            row["fi_sink_note"] = "causal tokens only; not run"
        else:
            qo = tokens["qo_indptr"] if tokens is not None else np.arange(len(data["last"]) + 1)
            for variant in ("fa2", "fa3"):
                try:
                    sink_w = flashinfer.BatchAttentionWithAttentionSinkWrapper(
                        ws, "NHD", backend=variant, q_data_type=q.dtype, kv_data_type=k.dtype, head_dim_qk=dim,
                        head_dim_vo=dim, window_left=window)
                    sink_w.plan(t32(qo), data["indptr"], data["indices"], data["last"], hq, hkv, dim, ps, causal=True,
                                window_left=window, q_data_type=q.dtype, kv_data_type=k.dtype)
                    measure("fi_sink", variant, lambda: sink_w.run(q, (k, v), sinks, meta["sm_scale"]), ref)
                    del sink_w
                except Exception as e:  # noqa: BLE001 - a backend that refuses the shape: record it
                    row[f"fi_sink_{variant}_note"] = f"{type(e).__name__}: {e}".splitlines()[0][:200]
                    log(f"  fi_sink {variant}", row[f"fi_sink_{variant}_note"])

    # FlashInfer cascade, one level per depth of the forest. Its default
    # backend on sm_90 is the FA3 prefill kernel; the FA2 one (which splits long
    # KV across blocks) is timed too, by giving the wrapper FA2 level wrappers.
    # With several query tokens a request the levels count tokens; the wrapper
    # makes its last level causal, and under a draft or custom mask that level
    # is planned again with each request's keep matrix over its own last node.
    levels = None
    if "fi_cascade" in peers and (window >= 0 or sinks is not None):
        row["fi_cascade_note"] = "windows (a level sees its own positions) and sinks are not the cascade's; not run"
    elif "fi_cascade" in peers:
        levels = cascade_levels(data["forest"], ps)
        if levels is None:
            row["fi_cascade_note"] = "requests at different depths; not run"
        elif tokens is not None and not own_last_nodes(levels, tokens, ps):
            # the wrapper masks only its last level: each request's query tokens must lie in a node of its own
            row["fi_cascade_note"] = ("a request's query tokens reach past a last level of its own, or a custom "
                                      "mask; not run")
            levels = None
    if levels is not None:
        order, qo, kp, ki, kl = levels
        rows = np.asarray(order)
        if tokens is not None:
            rows, qo = token_levels(order, qo, tokens["qo_indptr"])
        perm = torch.tensor(rows, dtype=torch.int64, device="cuda")
        qp = q[perm].contiguous()
        row["fi_cascade_levels"] = len(qo)
        last_mask = None
        if tokens is not None and tokens["mask"] != "causal":
            leaf = [(len(ki[-1][kp[-1][g]:kp[-1][g + 1]]) - 1) * ps + kl[-1][g] for g in range(len(order))]
            last_mask = torch.from_numpy(np.concatenate(
                [tokens["keep"][r][:, tokens["kv_lens"][r] - n:].ravel() for r, n in zip(order, leaf)])).cuda()
        for variant in ("auto", "fa2"):
            cas = flashinfer.MultiLevelCascadeAttentionWrapper(len(qo), ws, "NHD")
            if variant == "fa2":
                cas._batch_prefill_wrappers = [flashinfer.BatchPrefillWithPagedKVCacheWrapper(ws, "NHD", backend="fa2")
                                               for _ in qo]
            args = (hq, hkv, dim, ps)
            cas.plan([t32(x) for x in qo], [t32(x) for x in kp], [t32(x) for x in ki], [t32(x) for x in kl], *args,
                     causal=tokens is not None, sm_scale=meta["sm_scale"], q_data_type=q.dtype, kv_data_type=k.dtype,
                     logits_soft_cap=cap or None)
            try:
                if last_mask is not None:  # a fresh last level: a planned "auto" one has chosen FA3, which has no masks
                    last = flashinfer.BatchPrefillWithPagedKVCacheWrapper(ws, "NHD", backend=variant)
                    last.plan(t32(qo[-1]), t32(kp[-1]), t32(ki[-1]), t32(kl[-1]), *args, custom_mask=last_mask,
                              sm_scale=meta["sm_scale"], q_data_type=q.dtype, kv_data_type=k.dtype,
                              logits_soft_cap=cap or None)
                    cas._batch_prefill_wrappers[-1] = last
                measure("fi_cascade", variant, lambda: cas.run(qp, (k, v)), ref[perm])
            except Exception as e:  # noqa: BLE001 - a backend that refuses the mask: record it
                row[f"fi_cascade_{variant}_note"] = f"{type(e).__name__}: {e}".splitlines()[0][:200]
                log(f"  fi_cascade {variant}", row[f"fi_cascade_{variant}_note"])
            del cas
        del qp

    if fp8:  # the peers below read 16-bit caches
        skipped = [p for p in ("hydragen", "pat", "sdpa", "flex") if p in peers]
        if skipped:
            row["fp8_peers_note"] = f"{', '.join(skipped)}: 16-bit caches; not run"
        peers = [p for p in peers if p not in skipped]
    if tokens is not None:  # the peers below take one query token a request
        skipped = [p for p in ("hydragen", "pat", "sdpa", "flex") if p in peers]
        if skipped:
            row["one_token_peers_note"] = f"{', '.join(skipped)}: one query token a request; not run"
        peers = [p for p in peers if p not in skipped]
    if window >= 0 or cap or sinks is not None:  # ... and plain attention
        skipped = [p for p in ("hydragen", "pat", "sdpa", "flex") if p in peers]
        if skipped:
            row["variant_peers_note"] = f"{', '.join(skipped)}: no window, soft-cap or sinks; not run"
        peers = [p for p in peers if p not in skipped]

    if "hydragen" in peers:
        from .hydragen import Hydragen
        for kernel in ("flash", "matmul"):
            hyd = Hydragen(data["forest"], k, v, hq, meta["sm_scale"], kernel)
            measure("hydragen", kernel, lambda: hyd(q), ref)
            del hyd

    if "pat" in peers:
        try:
            t0 = time.perf_counter()
            pat = make_pat(data)
            row["pat_plan_ms"] = (time.perf_counter() - t0) * 1e3
            measure("pat", "tree", pat, ref, graph=False)
            del pat
        except (RuntimeError, ValueError, ImportError) as e:  # a refusal of the shape, or no build
            row["pat_note"] = f"{type(e).__name__}: {e}".splitlines()[0][:200]
            log("  pat", row["pat_note"])

    if "sdpa" in peers or "flex" in peers:
        time_dense(data, measure, row, peers)
    results.append(row)
    del data
    torch.cuda.empty_cache()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--codec", default="build-gpu/codec", help="codec binary built with the CUDA engine")
    ap.add_argument("--out", required=True, help="folder for peers.json and per-workload codec JSON")
    ap.add_argument("--workloads", default="seq:128,seq:512,seq:2048,batch:4,batch:16,batch:64,depth:2,depth:4,"
                    "depth:6,ratio:0.05,ratio:0.2,ratio:0.8,shape:2,shape:5,shape:DT,long,loogle:8,fewshot,flat:64,"
                    "sysprompt:512,sysprompt:512@1",
                    help="built-in workloads, comma-separated; NAME@P runs NAME at page size P")
    ap.add_argument("--q-len", type=int, default=1, help="query tokens a request, causal (codec bench --q-len)")
    ap.add_argument("--tree", default="", help="W,D: a draft tree of D levels of W query tokens (codec bench --tree)")
    ap.add_argument("--dtype", default="", help="the cache's dtype (codec bench --dtype: fp8, fp8_e5m2, fp16)")
    ap.add_argument("--window", type=int, default=0, help="a sliding window of N keys (codec bench --window)")
    ap.add_argument("--soft-cap", type=float, default=0.0, help="a logit soft-cap (codec bench --soft-cap)")
    ap.add_argument("--sinks", action="store_true", help="attention sinks from the seed (codec bench --sinks)")
    ap.add_argument("--peers", default="fi_decode,fi_prefill,fi_sink,fi_cascade,hydragen,sdpa,flex",
                    help="peer families to time (also: pat, once scripts/fetch_pat.sh and gpu_run.sh's pat step built it)")
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--flush", choices=("read", "write"), default="read",
                    help="L2 flush before each timed run: a read (L2 left clean) or a write (left dirty)")
    ap.add_argument("--scratch", default="/tmp/codec_peers", help="where dumps go (deleted after each workload)")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    peers = args.peers.split(",")
    families = ("fi_decode", "fi_prefill", "fi_sink", "fi_cascade", "hydragen", "pat", "sdpa", "flex")
    unknown = set(peers) - set(families)
    if unknown:
        ap.error(f"--peers: unknown families {sorted(unknown)} ({', '.join(families)})")
    queries = ["--q-len", str(args.q_len)] + (["--tree", args.tree] if args.tree else [])
    suffix = f" t{args.tree.replace(',', 'x')}" if args.tree else f" q{args.q_len}" if args.q_len > 1 else ""
    variants = ((["--dtype", args.dtype] if args.dtype else []) + (["--window", str(args.window)] if args.window else [])
                + (["--soft-cap", str(args.soft_cap)] if args.soft_cap else []) + (["--sinks"] if args.sinks else []))
    suffix += "".join(f" {x}" for x in (args.dtype, args.window and f"w{args.window}",
                                        args.soft_cap and f"c{args.soft_cap:g}", args.sinks and "s") if x)
    versions = f"torch {torch.__version__}"
    if {"fi_decode", "fi_prefill", "fi_sink", "fi_cascade"} & set(peers):
        import flashinfer

        versions = f"flashinfer {flashinfer.__version__}, " + versions
    log(f"{versions}, {torch.cuda.get_device_name()}")
    timer = Timer(args.reps, args.flush)
    results = []
    for workload_arg in args.workloads.split(","):
        workload, _, page_size = workload_arg.partition("@")
        name = workload_arg + suffix
        tag = name.replace(":", "_").replace("@", "_ps").replace(" ", "_")
        d = os.path.join(args.scratch, tag)
        shutil.rmtree(d, ignore_errors=True)
        saved = os.path.join(args.out, f"codec_{tag}.json")
        t0 = time.time()
        subprocess.run([args.codec, "bench", "--backend", "cuda", "--workload", workload, "--reps", str(args.reps),
                        "--flush", args.flush, *(["--page-size", page_size] if page_size else []),
                        *queries, *variants, "--dump", d, "--save", saved],
                       check=True, stdout=sys.stderr)
        codec_row = json.load(open(saved))[0]
        log(f"{name}: codec {codec_row['codec_ms']:.4f} ms, flat {codec_row['flat_ms']:.4f} ms "
            f"(codec bench {time.time() - t0:.0f} s)")
        n = len(results)
        try:
            run_workload(name, d, timer, results, peers)
        except Exception as e:  # noqa: BLE001 - record and go on to the next workload
            log(f"  peers failed: {type(e).__name__}: {e}")
            results.append({"workload": name, "error": f"{type(e).__name__}: {e}"[:300]})
        results[n].update({k: codec_row[k] for k in ("codec_ms", "flat_ms", "floor_ms", "requests", "q_len", "mask")})
        shutil.rmtree(d, ignore_errors=True)
        json.dump(results, open(os.path.join(args.out, "peers.json"), "w"), indent=1)
    print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
