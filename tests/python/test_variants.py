"""The attention variants of today's models: the logit soft-cap of Gemma 2
(plan's logits_soft_cap), the attention sinks of gpt-oss (run's sinks) and
sliding windows (plan's window_left), with numpy and torch tensors on the
CPU engine and torch tensors on the CUDA engine (eager, and planned in the
stream of a CUDA graph), against float64; the lse includes the sinks."""


import numpy as np
import pytest

import codec
from batches import (TOLERANCE, cache_of, fp8_of, kv_lengths, masked_reference, padded_block_table, random_batch,
                     reference, rel_l2, store, widen)


@pytest.mark.parametrize("cap,with_sinks", [(5.0, False), (0.0, True), (20.0, True)])
def test_soft_cap_and_sinks_match_float64(cap, with_sinks):
    b = random_batch(11, 8, 2, 64, 7, "float32", nodes=4, requests=6)
    b.q *= 6  # large logits: the cap bites
    sinks = np.linspace(-3, 9, 8).astype(np.float32) if with_sinks else None
    w = codec.BatchPrefixDecodeWrapper(np.zeros(16 << 20, np.uint8))
    w.plan(b.indptr, b.indices, b.last_page_len, 8, 2, 64, 7, q_data_type="float32", logits_soft_cap=cap)
    cache = np.ascontiguousarray(np.stack([b.k, b.v], axis=1))
    out, lse = w.run(b.q, cache, return_lse=True, sinks=sinks)
    ref_out, ref_lse = reference(b, cap=cap, sinks=sinks)
    assert rel_l2(out, ref_out) <= 2e-5 and rel_l2(lse, ref_lse) <= 2e-5
    if cap:  # the cap changed the result
        assert rel_l2(reference(b, sinks=sinks)[0], ref_out) > 1e-2


@pytest.mark.torch
def test_torch_sinks_through_the_custom_op():
    torch = pytest.importorskip("torch")
    b = random_batch(12, 8, 2, 64, 16, "float32", nodes=3, requests=4)
    sinks = torch.linspace(-1, 4, 8)
    w = codec.BatchPrefixDecodeWrapper(torch.zeros(16 << 20, dtype=torch.uint8))
    w.plan(torch.from_numpy(b.indptr), torch.from_numpy(b.indices), torch.from_numpy(b.last_page_len), 8, 2, 64, 16,
           q_data_type=torch.float32, logits_soft_cap=30.0)
    cache = torch.from_numpy(np.ascontiguousarray(np.stack([b.k, b.v], axis=1)))
    out, lse = w.run(torch.from_numpy(b.q), cache, return_lse=True, sinks=sinks)
    ref_out, ref_lse = reference(b, cap=30.0, sinks=sinks.numpy())
    assert rel_l2(out.numpy(), ref_out) <= 2e-5 and rel_l2(lse.numpy(), ref_lse) <= 2e-5


def test_bad_sinks_are_refused_by_name():
    b = random_batch(13, 8, 2, 64, 7, "float32", nodes=3, requests=3)
    w = codec.BatchPrefixDecodeWrapper(np.zeros(16 << 20, np.uint8))
    w.plan(b.indptr, b.indices, b.last_page_len, 8, 2, 64, 7, q_data_type="float32")
    cache = np.ascontiguousarray(np.stack([b.k, b.v], axis=1))
    with pytest.raises(ValueError, match=r"sinks is \(3,\); expected a contiguous \(8,\): one a qo head"):
        w.run(b.q, cache, sinks=np.zeros(3, np.float32))
    with pytest.raises(ValueError, match=r"sinks\[2\] = nan"):
        w.run(b.q, cache, sinks=np.array([0, 0, np.nan, 0, 0, 0, 0, 0], np.float32))


@pytest.mark.parametrize("window_left", [-2, 1.5])
def test_bad_windows_are_refused_by_name(window_left):
    """Before any plan is made, on both wrappers: the planned window stays as it was."""
    b = random_batch(13, 8, 2, 64, 7, "float32", nodes=3, requests=3)
    decode = codec.BatchPrefixDecodeWrapper(np.zeros(16 << 20, np.uint8))
    decode.plan(b.indptr, b.indices, b.last_page_len, 8, 2, 64, 7, q_data_type="float32", window_left=4)
    with pytest.raises(ValueError, match=f"window_left {window_left} must be an int >= -1"):
        decode.plan(b.indptr, b.indices, b.last_page_len, 8, 2, 64, 7, q_data_type="float32", window_left=window_left)
    # a plan that fails after its arguments passed (a bad page table) leaves the planned window too
    with pytest.raises(ValueError, match="last_page_len"):
        decode.plan(b.indptr, b.indices, b.last_page_len[:-1], 8, 2, 64, 7, q_data_type="float32", window_left=9)
    out = decode.run(b.q, np.ascontiguousarray(np.stack([b.k, b.v], axis=1)))
    assert out.shape == b.q.shape  # the window-4 plan still stands
    with pytest.raises(ValueError, match="window_left -1 differs from the planned 4"):
        decode.run(b.q, np.ascontiguousarray(np.stack([b.k, b.v], axis=1)), window_left=-1)
    prefill = codec.BatchPrefixPrefillWrapper(np.zeros(16 << 20, np.uint8))
    qo = np.arange(b.batch_size + 1, dtype=np.int32)
    with pytest.raises(ValueError, match=f"window_left {window_left} must be an int >= -1"):
        prefill.plan(qo, b.indptr, b.indices, b.last_page_len, 8, 2, 64, 7, q_data_type="float32",
                     window_left=window_left)


@pytest.mark.parametrize("window_left", [0, 9, 1000])
def test_sliding_windows_match_float64(window_left):
    """window_left (FlashInfer's): one token a request sees window_left + 1 keys up to its own, on the
    decode wrapper and, with several causal tokens a request, the prefill wrapper."""
    b = random_batch(14, 8, 2, 64, 7, "float32", nodes=4, requests=6)
    w = codec.BatchPrefixDecodeWrapper(np.zeros(16 << 20, np.uint8))
    w.plan(b.indptr, b.indices, b.last_page_len, 8, 2, 64, 7, q_data_type="float32", window_left=window_left)
    cache = np.ascontiguousarray(np.stack([b.k, b.v], axis=1))
    out, lse = w.run(b.q, cache, return_lse=True)
    ref_out, ref_lse = windowed(b, b.q, np.arange(b.batch_size + 1), window_left)
    assert rel_l2(out, ref_out) <= 2e-5 and rel_l2(lse, ref_lse) <= 2e-5
    with pytest.raises(ValueError, match=f"window_left 3 differs from the planned {window_left}"):
        w.run(b.q, cache, window_left=3)
    # several causal tokens a request, the same window
    lens = (np.diff(b.indptr) - 1) * 7 + b.last_page_len
    qo = np.concatenate([[0], np.cumsum(np.minimum(lens, 5))]).astype(np.int32)
    q = np.random.default_rng(3).uniform(-3, 3, (qo[-1], 8, 64)).astype(np.float32)
    pre = codec.BatchPrefixPrefillWrapper(np.zeros(16 << 20, np.uint8))
    pre.plan(qo, b.indptr, b.indices, b.last_page_len, 8, 2, 64, 7, causal=True, q_data_type="float32",
             window_left=window_left)
    out, lse = pre.run(q, cache, return_lse=True)
    ref_out, ref_lse = windowed(b, q, qo, window_left)
    assert rel_l2(out, ref_out) <= 2e-5 and rel_l2(lse, ref_lse) <= 2e-5


def windowed(b, q, qo_indptr, window_left):
    """float64 causal attention of each request's query tokens (the last of its KV) under the window."""
    lens, q_len = kv_lengths(b), np.diff(qo_indptr)
    return masked_reference(b, q, qo_indptr,
                            lambda r, i, j: lens[r] - q_len[r] + i - window_left <= j <= lens[r] - q_len[r] + i)


def cuda_or_skip():
    torch = pytest.importorskip("torch")
    if not (torch.cuda.is_available() and codec.cuda_available()):
        pytest.skip("no CUDA device (or this build has no CUDA engine)")
    return torch


def windowed_causal(lens, q_len, window_left):
    return lambda r, i, j: lens[r] - q_len[r] + i - window_left <= j <= lens[r] - q_len[r] + i


@pytest.mark.torch
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("window_left", [-1, 0, 9])
def test_cuda_variants_match_float64(dtype, window_left):
    """Soft-cap, sinks and windows together on the CUDA engine: one token a
    request on the decode wrapper, several causal tokens on the prefill
    wrapper; the kernels' results against float64 of the stored values."""
    torch = cuda_or_skip()

    def device(x):  # an array in `dtype` storage (bfloat16 as its bits) as a CUDA tensor
        t = torch.from_numpy(np.ascontiguousarray(x))
        return (t.view(torch.bfloat16) if dtype == "bfloat16" else t).cuda()

    b = random_batch(21, 8, 2, 64, 7, dtype, nodes=5, requests=6)
    lens = kv_lengths(b)
    cap, sinks = 20.0, np.linspace(-3, 9, 8).astype(np.float32)
    cache = device(cache_of(b, dtype, "NHD", "interleaved"))
    dev_sinks = torch.from_numpy(sinks).cuda()
    window = {} if window_left < 0 else {"window_left": window_left}
    w = codec.BatchPrefixDecodeWrapper(torch.zeros(64 << 20, dtype=torch.uint8, device="cuda"))
    w.plan(*(torch.from_numpy(x).cuda() for x in (b.indptr, b.indices, b.last_page_len)), 8, 2, 64, 7,
           q_data_type=getattr(torch, dtype), logits_soft_cap=cap, **window)
    q = widen(store(b.q * 4, dtype), dtype)  # large logits: the cap bites
    out, lse = w.run(device(store(q, dtype)), cache, return_lse=True, sinks=dev_sinks)
    ones = np.arange(b.batch_size + 1, dtype=np.int32)
    ref = masked_reference(b, q, ones, windowed_causal(lens, np.ones_like(lens), 1 << 30 if window_left < 0
                                                       else window_left), cap, sinks)
    assert rel_l2(out.float().cpu().numpy(), ref[0]) <= TOLERANCE[dtype]
    assert rel_l2(lse.cpu().numpy(), ref[1]) <= 1e-5

    q_len = np.minimum(lens, 1 + np.arange(b.batch_size) * 5)
    qo = np.concatenate([[0], np.cumsum(q_len)]).astype(np.int32)
    qt = widen(store(np.random.default_rng(4).uniform(-6, 6, (qo[-1], 8, 64)).astype(np.float32), dtype), dtype)
    pre = codec.BatchPrefixPrefillWrapper(torch.zeros(64 << 20, dtype=torch.uint8, device="cuda"))
    pre.plan(*(torch.from_numpy(x).cuda() for x in (qo, b.indptr, b.indices, b.last_page_len)), 8, 2, 64, 7,
             causal=True, q_data_type=getattr(torch, dtype), logits_soft_cap=cap, **window)
    out, lse = pre.run(device(store(qt, dtype)), cache, return_lse=True, sinks=dev_sinks)
    ref = masked_reference(b, qt, qo, windowed_causal(lens, q_len, 1 << 30 if window_left < 0 else window_left),
                           cap, sinks)
    assert rel_l2(out.float().cpu().numpy(), ref[0]) <= TOLERANCE[dtype]
    assert rel_l2(lse.cpu().numpy(), ref[1]) <= 1e-5


@pytest.mark.torch
@pytest.mark.parametrize("kv", ["bfloat16", "float8_e4m3fn"])
def test_cuda_graph_plans_windows_in_the_stream(kv):
    """A decode step of a sliding layer planned inside its CUDA graph, with
    sinks and a soft-cap (and an fp8 cache with per-head device scales):
    every replay plans the block table the tensors then hold under the
    window (the capacity carries masks: a first plan with a window fixes
    max_query_tokens); padding rows come out empty."""
    torch = cuda_or_skip()
    max_b, window_left, cap = 8, 11, 30.0
    batches = [random_batch(s, 8, 2, 64, 7, "bfloat16", requests=2 + s % 6) for s in range(31, 36)]
    cols = max(int(np.diff(b.indptr).max()) for b in batches)
    max_pages = max(b.num_pages for b in batches)
    w = codec.BatchPrefixDecodeWrapper(torch.zeros(64 << 20, dtype=torch.uint8, device="cuda"), use_cuda_graph=True,
                                       max_batch_size=max_b, max_num_pages=max_b * cols)
    table = torch.full((max_b, cols), -1, dtype=torch.int32, device="cuda")
    lens = torch.zeros(max_b, dtype=torch.int32, device="cuda")
    q = torch.zeros((max_b, 8, 64), dtype=torch.bfloat16, device="cuda")
    out, lse = torch.empty_like(q), torch.empty((max_b, 8), device="cuda")
    cache = torch.zeros((max_pages, 2, 7, 2, 64), dtype=getattr(torch, kv), device="cuda")
    sinks = np.linspace(-2, 6, 8).astype(np.float32)
    dev_sinks = torch.from_numpy(sinks).cuda()
    k_scale, v_scale = np.array([0.5, 1.75], np.float32), np.array([2.5, 0.75], np.float32)
    scales = ({} if kv == "bfloat16" else
              dict(k_scale=torch.from_numpy(k_scale).cuda(), v_scale=torch.from_numpy(v_scale).cuda()))

    def load(b):  # the batch of the values its cache holds
        t, n = padded_block_table(b, max_b, cols)
        table.copy_(torch.from_numpy(t))
        lens.copy_(torch.from_numpy(n))
        q.zero_()
        q[:b.batch_size] = torch.from_numpy(store(b.q, "bfloat16")).view(torch.bfloat16).cuda()
        if kv == "bfloat16":
            cache[:b.num_pages] = torch.from_numpy(cache_of(b, "bfloat16", "NHD", "interleaved")).view(torch.bfloat16)
        else:
            bits, b = fp8_of(b, kv, k_scale, v_scale)
            cache[:b.num_pages] = torch.from_numpy(np.stack([bits["k"], bits["v"]], axis=1)).view(cache.dtype)
        out.fill_(float("nan"))
        return b

    def step():
        w.plan_block_table_in_stream(table, lens, 8, 2, 64, 7, num_pages=max_pages, q_data_type=torch.bfloat16,
                                     kv_data_type=cache.dtype, window_left=window_left, logits_soft_cap=cap)
        w.run(q, cache, out=out, lse=lse, sinks=dev_sinks, **scales)

    load(batches[0])
    step()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    for i, b in enumerate(batches):
        b = load(b)
        graph.replay()
        torch.cuda.synchronize()
        n, lens_b = b.batch_size, kv_lengths(b)
        ones = np.arange(n + 1, dtype=np.int32)
        ref = masked_reference(b, widen(store(b.q, "bfloat16"), "bfloat16"), ones,
                               windowed_causal(lens_b, np.ones_like(lens_b), window_left), cap, sinks)
        assert rel_l2(out[:n].float().cpu().numpy(), ref[0]) <= TOLERANCE["bfloat16"], f"batch {i}"
        assert rel_l2(lse[:n].cpu().numpy(), ref[1]) <= 1e-5, f"batch {i}"
        assert torch.all(out[n:] == 0) and torch.all(lse[n:] == float("-inf")), f"padding rows, batch {i}"
    w.check_stream_plans()
