"""Several query tokens a request against float64: the prefill wrapper under
no mask, causal, custom (bool and packed) and draft masks on the CPU engine
and (torch tensors) the CUDA engine, and the decode wrapper's q_len_per_req
and qo_indptr; a chunk that reaches from a request's own pages into a shared
prefix; bad inputs refused by name."""


import numpy as np
import pytest

import codec
from batches import (TOLERANCE, cache_of, kv_lengths, masked_reference, padded_block_table, random_batch, rel_l2,
                     store, widen)


def setup(seed, dtype="float32", page_size=7, max_q=9):
    b = random_batch(seed, 8, 2, 64, page_size, dtype, nodes=4, requests=5, max_node_pages=3)
    rng = np.random.default_rng(seed + 100)
    lens = kv_lengths(b)
    q_len = np.array([rng.integers(1, min(max_q, n) + 1) for n in lens])
    qo_indptr = np.concatenate([[0], np.cumsum(q_len)]).astype(np.int32)
    q = widen(store(rng.uniform(-3, 3, (qo_indptr[-1], 8, 64)).astype(np.float32), dtype), dtype)
    return b, q.astype(np.float32), qo_indptr, q_len, lens, rng


def check(out, lse, ref, dtype):
    ref_out, ref_lse = ref
    assert rel_l2(widen(out, dtype) if out.dtype == np.uint16 else out.astype(np.float64), ref_out) <= TOLERANCE[dtype]
    empty = np.isinf(ref_lse)
    assert np.array_equal(np.isinf(lse), empty) and (lse[empty] < 0).all()
    assert rel_l2(lse[~empty], ref_lse[~empty]) <= 1e-5


def mask_case(mask, rng, q_len, lens):
    """The plan's keyword arguments for `mask` over random bits or trees, and which keys each token sees."""
    if mask == "none":
        return {}, lambda r, i, j: True
    if mask == "causal":
        return {"causal": True}, lambda r, i, j: j <= lens[r] - q_len[r] + i
    if mask in ("custom", "packed"):
        bits = [rng.random((q_len[r], lens[r])) < 0.6 for r in range(len(lens))]
        bits[0][0, :] = False  # a row that sees nothing
        bits[-1][-1, :] = np.arange(lens[-1]) < lens[-1] - q_len[-1]  # a row that sees only what precedes its tokens
        arg = (np.concatenate([m.reshape(-1) for m in bits]) if mask == "custom"
               else np.concatenate([np.packbits(m.reshape(-1), bitorder="little") for m in bits]))
        return {"custom_mask" if mask == "custom" else "packed_custom_mask": arg}, lambda r, i, j: bits[r][i, j]
    trees = []
    for n in q_len:  # a random tree: each new token's parent among the earlier ones, or none
        parent = [-1] + [int(rng.integers(-1, i)) for i in range(1, n)]
        m = np.zeros((n, n), bool)
        for i in range(n):
            j = i
            while j >= 0:
                m[i, j], j = True, parent[j]
        trees.append(m)
    return ({"draft_mask": np.concatenate([m.reshape(-1) for m in trees])},
            lambda r, i, j: j < lens[r] - q_len[r] or trees[r][i, j - (lens[r] - q_len[r])])


MASKS = ["none", "causal", "custom", "packed", "draft"]


@pytest.mark.parametrize("mask", MASKS)
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_prefill_wrapper_matches_float64_under_each_mask(mask, dtype):
    for seed in range(3):
        b, q, qo_indptr, q_len, lens, rng = setup(seed, dtype)
        kwargs, sees = mask_case(mask, rng, q_len, lens)
        w = codec.BatchPrefixPrefillWrapper(np.zeros(32 << 20, np.uint8))
        w.plan(qo_indptr, b.indptr, b.indices, b.last_page_len, 8, 2, 64, b.page_size, q_data_type=dtype, **kwargs)
        assert w.plan_stats["num_requests"] == qo_indptr[-1] and w.plan_stats["batch_requests"] == len(lens)
        out, lse = w.run(store(q, dtype), cache_of(b, dtype, "NHD", "interleaved"), return_lse=True)
        check(out, lse, masked_reference(b, q, qo_indptr, sees), dtype)


@pytest.mark.torch
@pytest.mark.parametrize("mask", MASKS)
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_cuda_prefill_wrapper_matches_float64_under_each_mask(mask, dtype):
    """The same on the CUDA engine, torch tensors on the device: the kernels' masked tasks."""
    torch = pytest.importorskip("torch")
    if not (torch.cuda.is_available() and codec.cuda_available()):
        pytest.skip("no CUDA device (or this build has no CUDA engine)")

    def device(x):  # an array in `dtype` storage (bfloat16 as its bits) as a CUDA tensor
        t = torch.from_numpy(np.ascontiguousarray(x))
        return (t.view(torch.bfloat16) if dtype == "bfloat16" else t).cuda()

    for seed in range(3):
        b, q, qo_indptr, q_len, lens, rng = setup(seed, dtype, max_q=40)
        kwargs, sees = mask_case(mask, rng, q_len, lens)
        w = codec.BatchPrefixPrefillWrapper(torch.zeros(64 << 20, dtype=torch.uint8, device="cuda"))
        w.plan(*(torch.from_numpy(x).cuda() for x in (qo_indptr, b.indptr, b.indices, b.last_page_len)), 8, 2, 64,
               b.page_size, q_data_type=getattr(torch, dtype), **kwargs)
        out, lse = w.run(device(store(q, dtype)), device(cache_of(b, dtype, "NHD", "interleaved")), return_lse=True)
        check(out.float().cpu().numpy(), lse.cpu().numpy(), masked_reference(b, q, qo_indptr, sees), dtype)


def test_decode_wrapper_takes_several_tokens_a_request_causally():
    b, q, qo_indptr, q_len, lens, _ = setup(7, max_q=4)
    cache = cache_of(b, "float32", "HND", "tuple")
    w = codec.BatchPrefixDecodeWrapper(np.zeros(32 << 20, np.uint8), kv_layout="HND")
    causal = lambda r, i, j: j <= lens[r] - q_len[r] + i  # noqa: E731
    w.plan(b.indptr, b.indices, b.last_page_len, 8, 2, 64, b.page_size, q_data_type="float32", qo_indptr=qo_indptr)
    out, lse = w.run(q, cache, return_lse=True)
    check(out, lse, masked_reference(b, q, qo_indptr, causal), "float32")
    # q_len_per_req: the same tokens for every request
    uniform = np.arange(0, 3 * len(lens) + 1, 3, dtype=np.int32)
    q3 = np.random.default_rng(3).uniform(-3, 3, (uniform[-1], 8, 64)).astype(np.float32)
    w.plan(b.indptr, b.indices, b.last_page_len, 8, 2, 64, b.page_size, q_data_type="float32", q_len_per_req=3)
    out, lse = w.run(q3, cache, return_lse=True, q_len_per_req=3)  # FlashInfer's run takes it too
    check(out, lse, masked_reference(b, q3, uniform, lambda r, i, j: j <= lens[r] - 3 + i), "float32")
    with pytest.raises(ValueError, match="q_len_per_req 2 differs from the plan's 3: plan again with it"):
        w.run(q3, cache, q_len_per_req=2)
    w.plan(b.indptr, b.indices, b.last_page_len, 8, 2, 64, b.page_size, q_data_type="float32", qo_indptr=qo_indptr)
    with pytest.raises(ValueError, match="q_len_per_req 1 differs from the plan's qo_indptr"):
        w.run(q, cache, q_len_per_req=1)


def test_flashinfer_decode_plan_keywords():
    """FlashInfer 0.6's other decode plan keywords: accepted at their defaults or, for the batch's other
    forms, not read; refused by name otherwise, before the plan changes."""
    b, q, _, _, lens, _ = setup(8)
    one = q[:len(lens)]
    cache = cache_of(b, "float32", "NHD", "interleaved")
    w = codec.BatchPrefixDecodeWrapper(np.zeros(32 << 20, np.uint8))
    plan = lambda **kw: w.plan(b.indptr, b.indices, b.last_page_len, 8, 2, 64, b.page_size,  # noqa: E731
                               q_data_type="float32", **kw)
    plan(window_right=0, o_data_type="float32", block_tables=np.zeros((len(lens), 3), np.int32),
         seq_lens=lens.astype(np.int32), fixed_split_size=-1, disable_split_kv=False)
    out, lse = w.run(one, cache, return_lse=True)
    check(out, lse, masked_reference(b, one, np.arange(len(lens) + 1), lambda r, i, j: True), "float32")
    for kw, match in (({"window_right": 3}, "window_right 3: no query token sees keys after its own"),
                      ({"o_data_type": "float16"}, "o_data_type float16 differs from q's float32"),
                      ({"fixed_split_size": 32}, "fixed_split_size 32, disable_split_kv False: CoDec's planner"),
                      ({"disable_split_kv": True}, "disable_split_kv True")):
        with pytest.raises(ValueError, match=match):
            plan(**kw)
    with pytest.raises(ValueError, match="jit_args: FlashInfer's JIT attention variants are not supported"):
        codec.BatchPrefixDecodeWrapper(np.zeros(1 << 20, np.uint8), jit_args=["variant"])
    with pytest.raises(ValueError, match="jit_args, jit_kwargs: FlashInfer's JIT attention variants"):
        codec.BatchPrefixPrefillWrapper(np.zeros(1 << 20, np.uint8), jit_kwargs={"variant": 1})


def test_a_long_chunk_reaches_into_the_shared_prefix():
    """Two requests share 3 pages; request 1's 40 query tokens start inside them (its own part is 5 tokens)."""
    rng = np.random.default_rng(5)
    ps, hq, hkv, d = 16, 4, 2, 64
    k = rng.uniform(-1, 1, (6, ps, hkv, d)).astype(np.float32)
    v = rng.uniform(-1, 1, (6, ps, hkv, d)).astype(np.float32)
    indptr, indices, last = np.array([0, 4, 8], np.int32), np.array([0, 1, 2, 3, 0, 1, 2, 4], np.int32), \
        np.array([16, 5], np.int32)
    qo_indptr = np.array([0, 1, 41], np.int32)
    q = rng.uniform(-3, 3, (41, hq, d)).astype(np.float32)

    class B:
        num_qo_heads, num_kv_heads, head_dim, page_size = hq, hkv, d, ps
    b = B()
    b.indptr, b.indices, b.last_page_len, b.k, b.v = indptr, indices, last, k, v
    w = codec.BatchPrefixPrefillWrapper(np.zeros(16 << 20, np.uint8))
    w.plan(qo_indptr, indptr, indices, last, hq, hkv, d, ps, causal=True, q_data_type="float32")
    out, lse = w.run(q, np.stack([k, v], axis=1), return_lse=True)
    lens, q_len = kv_lengths(b), np.diff(qo_indptr)
    assert lens[1] - q_len[1] < 3 * ps  # request 1's first query tokens sit in the shared pages
    check(out, lse, masked_reference(b, q, qo_indptr, lambda r, i, j: j <= lens[r] - q_len[r] + i), "float32")


def test_bad_query_batches_are_refused_by_name():
    b, q, qo_indptr, q_len, lens, _ = setup(2)
    w = codec.BatchPrefixPrefillWrapper(np.zeros(16 << 20, np.uint8))
    plan = lambda qo, **kw: w.plan(qo, b.indptr, b.indices, b.last_page_len, 8, 2, 64, b.page_size,  # noqa: E731
                                   q_data_type="float32", **kw)
    with pytest.raises(ValueError, match="qo_indptr has 3 entries, paged_kv_indptr 6"):
        plan(np.array([0, 1, 2], np.int32))
    with pytest.raises(ValueError, match=r"qo_indptr\[2\] = 1 must be greater than qo_indptr\[1\] = 1"):
        plan(np.array([0, 1, 1, 2, 3, 4], np.int32))
    too_long = np.array([0, lens[0] + 1, lens[0] + 2, lens[0] + 3, lens[0] + 4, lens[0] + 5], np.int32)
    with pytest.raises(ValueError, match=f"request 0 has {lens[0] + 1} query tokens but {lens[0]} KV tokens"):
        plan(too_long)
    with pytest.raises(ValueError, match="custom_mask has 3 elements; the requests' matrices take"):
        plan(qo_indptr, custom_mask=np.ones(3, bool))
    with pytest.raises(ValueError, match="mask has 1 bytes, expected"):
        plan(qo_indptr, packed_custom_mask=np.ones(1, np.uint8))
    with pytest.raises(ValueError, match="give one of custom_mask, packed_custom_mask and draft_mask"):
        plan(qo_indptr, custom_mask=np.ones(3, bool), draft_mask=np.ones(3, bool))
    # FlashInfer's other plan arguments: multi-item scoring and fixed splits refused, other backends' forms ignored
    with pytest.raises(ValueError, match="prefix_len_ptr: FlashInfer's multi-item scoring is not supported"):
        plan(qo_indptr, prefix_len_ptr=np.zeros(len(lens), np.uint32))
    with pytest.raises(ValueError, match="token_pos_in_items_len: FlashInfer's multi-item scoring"):
        plan(qo_indptr, token_pos_in_items_len=20)
    with pytest.raises(ValueError, match="fixed_split_size 64, disable_split_kv False: CoDec's planner chooses"):
        plan(qo_indptr, fixed_split_size=64)
    with pytest.raises(ValueError, match="fixed_split_size None, disable_split_kv True"):
        plan(qo_indptr, disable_split_kv=True)
    plan(qo_indptr, causal=True, seq_lens=lens.astype(np.uint32), block_tables=np.zeros((len(lens), 4), np.uint32),
         max_token_per_sequence=int(q_len.max()), max_sequence_kv=int(lens.max()), fixed_split_size=-1)
    out, lse = w.run(q, cache_of(b, "float32", "NHD", "interleaved"), return_lse=True)
    check(out, lse, masked_reference(b, q, qo_indptr, lambda r, i, j: j <= lens[r] - q_len[r] + i), "float32")
    w.plan(qo_indptr, b.indptr, b.indices, b.last_page_len, 8, 2, 64, b.page_size, q_data_type="float32")
    with pytest.raises(ValueError, match=f"q.batch {len(lens)} differs|out.batch"):
        w.run(q[:len(lens)], cache_of(b, "float32", "NHD", "interleaved"))


@pytest.mark.torch
def test_torch_tensors_take_the_custom_op_with_several_tokens():
    torch = pytest.importorskip("torch")
    b, q, qo_indptr, q_len, lens, _ = setup(4, max_q=6)
    w = codec.BatchPrefixPrefillWrapper(torch.zeros(32 << 20, dtype=torch.uint8))
    w.plan(torch.from_numpy(qo_indptr), torch.from_numpy(b.indptr), torch.from_numpy(b.indices),
           torch.from_numpy(b.last_page_len), 8, 2, 64, b.page_size, causal=True, q_data_type=torch.float32)
    out, lse = w.run(torch.from_numpy(q), torch.from_numpy(cache_of(b, "float32", "NHD", "interleaved")),
                     return_lse=True)
    check(out.numpy(), lse.numpy(), masked_reference(b, q, qo_indptr, lambda r, i, j: j <= lens[r] - q_len[r] + i),
          "float32")


@pytest.mark.torch
def test_cuda_graph_replays_query_tokens_under_each_mask():
    """CUDA-graph mode with several tokens a request: one graph, captured with
    a causal plan, replays the exact result of every later plan staged in its
    place (other batches, custom, packed, draft and no masks); rows past a
    batch come out empty; a batch past the maxima is refused by name. The
    decode wrapper's first q_len_per_req fixes its maximum, as FlashInfer's."""
    torch = pytest.importorskip("torch")
    if not (torch.cuda.is_available() and codec.cuda_available()):
        pytest.skip("no CUDA device (or this build has no CUDA engine)")
    cases = [(setup(seed, "bfloat16", max_q=40), mask) for seed, mask in
             zip(range(20, 26), ["causal", "custom", "draft", "packed", "none", "causal"])]
    max_rows = max(int(c[0][2][-1]) for c in cases)
    max_pages = max(c[0][0].num_pages for c in cases)
    masks = [mask_case(mask, c[-1], c[3], c[4]) for c, mask in cases]
    # the packed mask's bytes: each request's matrix from a byte boundary
    mask_bytes = max(sum(-(-int(q) * int(q if m == "draft" else n) // 8) for q, n in zip(c[3], c[4])) for c, m in cases)
    w = codec.BatchPrefixPrefillWrapper(torch.zeros(64 << 20, dtype=torch.uint8, device="cuda"), use_cuda_graph=True,
                                        qo_indptr_buf=torch.zeros(8, dtype=torch.int32, device="cuda"),
                                        paged_kv_indices_buf=torch.zeros(128, dtype=torch.int32, device="cuda"),
                                        custom_mask_buf=torch.zeros(mask_bytes, dtype=torch.uint8, device="cuda"),
                                        max_query_tokens=max_rows)
    q = torch.zeros((max_rows, 8, 64), dtype=torch.bfloat16, device="cuda")
    out = torch.empty_like(q)
    lse = torch.empty((max_rows, 8), device="cuda")
    cache = torch.zeros((max_pages, 2, 7, 2, 64), dtype=torch.bfloat16, device="cuda")
    graph = None
    for i, (((b, qf, qo_indptr, q_len, lens, _), mask), (kwargs, sees)) in enumerate(zip(cases, masks)):
        n = int(qo_indptr[-1])
        q.zero_()
        q[:n] = torch.from_numpy(store(qf, "bfloat16")).view(torch.bfloat16).cuda()
        cache[:b.num_pages] = torch.from_numpy(cache_of(b, "bfloat16", "NHD", "interleaved")).view(torch.bfloat16).cuda()
        out.fill_(float("nan"))
        w.plan(qo_indptr, b.indptr, b.indices, b.last_page_len, 8, 2, 64, b.page_size, q_data_type=torch.bfloat16,
               num_pages=max_pages, **kwargs)
        if graph is None:  # captured once, with the first (causal) plan
            w.run(q, cache, out=out, lse=lse)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                w.run(q, cache, out=out, lse=lse)
        graph.replay()
        torch.cuda.synchronize()
        check(out[:n].float().cpu().numpy(), lse[:n].cpu().numpy(), masked_reference(b, qf, qo_indptr, sees),
              "bfloat16")
        assert torch.all(out[n:] == 0) and torch.all(lse[n:] == float("-inf")), f"padding rows, batch {i} ({mask})"
    many = random_batch(5, 8, 2, 64, 7, "bfloat16", requests=7)  # 7 requests of 14 to 84 tokens
    assert kv_lengths(many).min() >= 3 and kv_lengths(many).sum() > max_rows
    whole = np.concatenate([[0], np.cumsum(kv_lengths(many))]).astype(np.int32)  # every token a query
    with pytest.raises(ValueError, match=f"{whole[-1]} query tokens, more than max_query_tokens {max_rows}"):
        w.plan(whole, many.indptr, many.indices, many.last_page_len, 8, 2, 64, 7, q_data_type=torch.bfloat16,
               causal=True)

    dec = codec.BatchPrefixDecodeWrapper(torch.zeros(64 << 20, dtype=torch.uint8, device="cuda"), use_cuda_graph=True,
                                         max_batch_size=8, max_num_pages=4096)
    for q_len_per_req in (2, 1):  # the first plan fixes 8 × 2 query tokens; fewer fit
        dec.plan(many.indptr, many.indices, many.last_page_len, 8, 2, 64, 7, q_data_type=torch.bfloat16,
                 q_len_per_req=q_len_per_req)
    with pytest.raises(ValueError, match="21 query tokens, more than max_query_tokens 16"):
        dec.plan(many.indptr, many.indices, many.last_page_len, 8, 2, 64, 7, q_data_type=torch.bfloat16,
                 q_len_per_req=3)


def packed_rows(flat, sizes):
    """Bool matrices of `sizes` elements each, concatenated, packed each from a byte boundary (little bit order)."""
    ends = np.cumsum(sizes)
    return np.concatenate([np.packbits(flat[e - n:e], bitorder="little") for n, e in zip(sizes, ends)])


@pytest.mark.torch
@pytest.mark.parametrize("mask", ["none", "causal", "packed", "draft", "window"])
def test_prefill_wrapper_plans_masks_in_the_stream(mask):
    """A verification step planned inside its CUDA graph: every replay plans
    the device qo_indptr, block table, lengths and packed mask the tensors
    then hold (draft trees and custom masks of other shapes each step, a
    causal window); rows past the batch come out empty; a mask buffer
    shorter than a batch's matrices runs it as zeros and is reported."""
    torch = pytest.importorskip("torch")
    if not (torch.cuda.is_available() and codec.cuda_available()):
        pytest.skip("no CUDA device (or this build has no CUDA engine)")
    cases = [setup(seed, "bfloat16", max_q=12) for seed in range(30, 35)]
    max_b = max(len(c[4]) for c in cases)
    cols = max(int(np.diff(c[0].indptr).max()) for c in cases)
    max_pages = max(c[0].num_pages for c in cases)
    max_rows = max(int(c[2][-1]) for c in cases)
    window = 9
    kinds = {"window": "causal", "packed": "packed", "draft": "draft"}
    masks = [mask_case(kinds.get(mask, mask), c[5], c[3], c[4]) for c in cases]
    bits = []
    for (b, _, _, q_len, lens, _), (kwargs, _) in zip(cases, masks):
        bits.append(kwargs["packed_custom_mask"] if mask == "packed" else
                    packed_rows(kwargs["draft_mask"], q_len * q_len) if mask == "draft" else np.zeros(1, np.uint8))
    mask_bytes = max(x.size for x in bits)
    w = codec.BatchPrefixPrefillWrapper(torch.zeros(64 << 20, dtype=torch.uint8, device="cuda"), use_cuda_graph=True,
                                        max_batch_size=max_b, max_num_pages=max_b * cols, max_query_tokens=max_rows,
                                        max_mask_bytes=mask_bytes)
    table = torch.full((max_b, cols), -1, dtype=torch.int32, device="cuda")
    lens_d = torch.zeros(max_b, dtype=torch.int32, device="cuda")
    qo = torch.zeros(max_b + 1, dtype=torch.int32, device="cuda")
    bits_d = torch.zeros(mask_bytes, dtype=torch.uint8, device="cuda")
    q = torch.zeros((max_rows, 8, 64), dtype=torch.bfloat16, device="cuda")
    out, lse = torch.empty_like(q), torch.empty((max_rows, 8), device="cuda")
    cache = torch.zeros((max_pages, 2, 7, 2, 64), dtype=torch.bfloat16, device="cuda")
    packed = {"packed": {"packed_custom_mask": bits_d}, "draft": {"packed_draft_mask": bits_d}}.get(mask, {})

    def load(i):
        b, qf, qo_indptr, _, _, _ = cases[i]
        t, n = padded_block_table(b, max_b, cols)
        table.copy_(torch.from_numpy(t))
        lens_d.copy_(torch.from_numpy(n))
        qo.copy_(torch.from_numpy(np.concatenate([qo_indptr, np.full(max_b + 1 - qo_indptr.size, qo_indptr[-1])])
                                  .astype(np.int32)))
        bits_d.zero_()
        bits_d[:bits[i].size] = torch.from_numpy(bits[i]).cuda()
        q.zero_()
        q[:qo_indptr[-1]] = torch.from_numpy(store(qf, "bfloat16")).view(torch.bfloat16).cuda()
        cache[:b.num_pages] = torch.from_numpy(cache_of(b, "bfloat16", "NHD", "interleaved")).view(torch.bfloat16).cuda()
        out.fill_(float("nan"))

    def step():
        w.plan_block_table_in_stream(qo, table, lens_d, 8, 2, 64, 7, num_pages=max_pages, q_data_type=torch.bfloat16,
                                     causal=mask in ("causal", "window"), window_left=window if mask == "window" else -1,
                                     **packed)
        w.run(q, cache, out=out, lse=lse)

    load(0)
    step()  # eagerly first: the capacity is made, the plan lands in stream order
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    for i, ((b, qf, qo_indptr, q_len, lens, _), (_, sees)) in enumerate(zip(cases, masks)):
        load(i)
        graph.replay()
        torch.cuda.synchronize()
        n = int(qo_indptr[-1])
        keep = sees if mask != "window" else (lambda r, i, j: sees(r, i, j) and j + q_len[r] + window >= lens[r] + i)
        check(out[:n].float().cpu().numpy(), lse[:n].cpu().numpy(), masked_reference(b, qf, qo_indptr, keep),
              "bfloat16")
        assert torch.all(out[n:] == 0) and torch.all(lse[n:] == float("-inf")), f"padding rows, batch {i}"
    w.check_stream_plans()
    if mask in ("packed", "draft"):  # a buffer of one byte cannot hold the batch's matrices: zeros, then the error
        short = {k: bits_d[:1] for k in packed}
        w.plan_block_table_in_stream(qo, table, lens_d, 8, 2, 64, 7, num_pages=max_pages, q_data_type=torch.bfloat16,
                                     **short)
        w.run(q, cache, out=out, lse=lse)
        torch.cuda.synchronize()
        assert torch.all(out == 0)
        with pytest.raises(ValueError, match="an in-stream plan failed: .*mask takes [0-9]+ bytes, more than the 1"):
            w.check_stream_plans()


def test_prefill_in_stream_plans_are_refused_by_name():
    """What the host can refuse before any stream work: a wrapper without CUDA graphs, bool masks."""
    w = codec.BatchPrefixPrefillWrapper(np.zeros(1 << 20, np.uint8))
    with pytest.raises(ValueError, match="needs a CUDA-graph wrapper"):
        w.plan_block_table_in_stream(None, None, None, 8, 2, 64, 7, num_pages=1)
    torch = pytest.importorskip("torch")
    if not (torch.cuda.is_available() and codec.cuda_available()):
        pytest.skip("no CUDA device (or this build has no CUDA engine)")
    g = codec.BatchPrefixPrefillWrapper(torch.zeros(16 << 20, dtype=torch.uint8, device="cuda"), use_cuda_graph=True,
                                        max_batch_size=4, max_num_pages=64, max_query_tokens=16, max_mask_bytes=8)
    table = torch.zeros((4, 4), dtype=torch.int32, device="cuda")
    lens = torch.ones(4, dtype=torch.int32, device="cuda")
    qo = torch.arange(5, dtype=torch.int32, device="cuda")
    plan = lambda **kw: g.plan_block_table_in_stream(qo, table, lens, 8, 2, 64, 7, num_pages=16,  # noqa: E731
                                                     q_data_type=torch.bfloat16, **kw)
    with pytest.raises(ValueError, match="custom_mask: in the stream masks come packed"):
        plan(custom_mask=torch.ones(4, dtype=torch.bool, device="cuda"))
    with pytest.raises(ValueError, match="give one of packed_custom_mask and packed_draft_mask"):
        plan(packed_custom_mask=torch.ones(1, dtype=torch.uint8, device="cuda"),
             packed_draft_mask=torch.ones(1, dtype=torch.uint8, device="cuda"))
    with pytest.raises(ValueError, match=r"mask_bits is \(9,\); expected a contiguous \(bytes,\) of 1 to the "
                       "wrapper's max_mask_bytes = 8"):
        plan(packed_custom_mask=torch.ones(9, dtype=torch.uint8, device="cuda"))
    with pytest.raises(ValueError, match="mask_bits has dtype int32; expected uint8"):
        plan(packed_draft_mask=torch.ones(4, dtype=torch.int32, device="cuda"))
    assert not g._planned
    unsized = codec.BatchPrefixPrefillWrapper(torch.zeros(16 << 20, dtype=torch.uint8, device="cuda"),
                                              use_cuda_graph=True, max_batch_size=4, max_num_pages=64)
    with pytest.raises(ValueError, match="plan_block_table_in_stream needs the wrapper's max_query_tokens"):
        unsized.plan_block_table_in_stream(qo, table, lens, 8, 2, 64, 7, num_pages=16, q_data_type=torch.bfloat16)


@pytest.mark.torch
@pytest.mark.parametrize("form", ["q_len_per_req", "qo_indptr"])
def test_cuda_graph_plans_query_tokens_in_the_stream(form):
    """A decode step of several causal tokens a request planned inside its
    CUDA graph: every replay plans the block table, lengths (and device
    qo_indptr) the tensors then hold; padding rows come out empty."""
    torch = pytest.importorskip("torch")
    if not (torch.cuda.is_available() and codec.cuda_available()):
        pytest.skip("no CUDA device (or this build has no CUDA engine)")
    max_b, k = 8, 3
    batches = [random_batch(s, 8, 2, 64, 7, "bfloat16", requests=2 + s % 6) for s in range(1, 6)]  # kv >= 3
    assert all(kv_lengths(b).min() >= k for b in batches)
    cols = max(int(np.diff(b.indptr).max()) for b in batches)
    max_pages = max(b.num_pages for b in batches)
    rows = max_b * k
    w = codec.BatchPrefixDecodeWrapper(torch.zeros(64 << 20, dtype=torch.uint8, device="cuda"), use_cuda_graph=True,
                                       max_batch_size=max_b, max_num_pages=max_b * cols,
                                       max_query_tokens=rows if form == "qo_indptr" else None)
    table = torch.full((max_b, cols), -1, dtype=torch.int32, device="cuda")
    lens = torch.zeros(max_b, dtype=torch.int32, device="cuda")
    qo = torch.zeros(max_b + 1, dtype=torch.int32, device="cuda")
    q = torch.zeros((rows, 8, 64), dtype=torch.bfloat16, device="cuda")
    out, lse = torch.empty_like(q), torch.empty((rows, 8), device="cuda")
    cache = torch.zeros((max_pages, 2, 7, 2, 64), dtype=torch.bfloat16, device="cuda")
    rng = np.random.default_rng(5)

    def load(b):  # the batch, its tokens (k each, or 1..k with qo_indptr) and their q rows
        q_len = np.full(b.batch_size, k) if form == "q_len_per_req" else rng.integers(1, k + 1, b.batch_size)
        qo_indptr = np.concatenate([[0], np.cumsum(q_len)]).astype(np.int32)
        t, n = padded_block_table(b, max_b, cols)
        table.copy_(torch.from_numpy(t))
        lens.copy_(torch.from_numpy(n))
        qo.copy_(torch.from_numpy(np.concatenate([qo_indptr, np.full(max_b - b.batch_size, qo_indptr[-1])])
                                  .astype(np.int32)))
        qf = widen(store(rng.uniform(-3, 3, (qo_indptr[-1], 8, 64)).astype(np.float32), "bfloat16"), "bfloat16")
        q.zero_()
        q[:qo_indptr[-1]] = torch.from_numpy(store(qf, "bfloat16")).view(torch.bfloat16).cuda()
        cache[:b.num_pages] = torch.from_numpy(cache_of(b, "bfloat16", "NHD", "interleaved")).view(torch.bfloat16).cuda()
        out.fill_(float("nan"))
        return qf.astype(np.float32), qo_indptr, q_len

    def step():
        tokens = {"q_len_per_req": k} if form == "q_len_per_req" else {"qo_indptr": qo}
        w.plan_block_table_in_stream(table, lens, 8, 2, 64, 7, num_pages=max_pages, q_data_type=torch.bfloat16,
                                     **tokens)
        w.run(q, cache, out=out, lse=lse)

    load(batches[0])
    step()  # eagerly first: the capacity is made, the plan lands in stream order
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    for i, b in enumerate(batches):
        qf, qo_indptr, q_len = load(b)
        graph.replay()
        torch.cuda.synchronize()
        n, lens_b = int(qo_indptr[-1]), kv_lengths(b)
        check(out[:n].float().cpu().numpy(), lse[:n].cpu().numpy(),
              masked_reference(b, qf, qo_indptr, lambda r, i, j: j <= lens_b[r] - q_len[r] + i), "bfloat16")
        assert torch.all(out[n:] == 0) and torch.all(lse[n:] == float("-inf")), f"padding rows, batch {i}"
    w.check_stream_plans()
