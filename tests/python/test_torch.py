"""The package with torch tensors: the CPU engine on torch CPU tensors (real
bfloat16), the CUDA engine on CUDA tensors against float64, CUDA-graph
capture with re-planning between replays, torch.compile(fullgraph=True),
torch.library.opcheck, two streams, a second device, CuPy, and equality with
FlashInfer's BatchDecodeWithPagedKVCacheWrapper. Skipped, with the reason,
where torch, a GPU or FlashInfer is missing."""

import itertools
import math
import zlib

import numpy as np
import pytest

import codec
from batches import CACHE_FORMS, TOLERANCE, cache_of, padded_block_table, random_batch, reference, rel_l2, store

pytestmark = pytest.mark.torch
torch = pytest.importorskip("torch", reason="torch is not installed (scripts/test.sh installs it)")
needs_cuda = pytest.mark.skipif(not (torch.cuda.is_available() and codec.cuda_available()),
                                reason="no CUDA device (or this build has no CUDA engine)")
TORCH_DTYPE = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}


def as_torch(x, dtype, device):
    """A numpy array in `dtype` storage (bf16 as uint16 bits) as a torch tensor of that dtype."""
    if isinstance(x, tuple):
        return tuple(as_torch(y, dtype, device) for y in x)
    t = torch.from_numpy(np.ascontiguousarray(x) if x.flags.c_contiguous else x.copy())
    if dtype == "bfloat16":
        t = t.view(torch.bfloat16)
    return t.to(device)


def torch_cache(b, dtype, layout, form, device):
    """The cache forms of batches.cache_of, built as torch tensors (the strided form as views)."""
    if form != "strided":
        return as_torch(cache_of(b, dtype, layout, form), dtype, device)
    k, v = cache_of(b, dtype, layout, "tuple")
    p, a, c, d = k.shape
    big = torch.zeros((2, p + 1, a + 1, c + 2, d + 8), dtype=TORCH_DTYPE[dtype], device=device)
    big[0, 1:, :a, 1:c + 1, :d] = as_torch(k, dtype, device)
    big[1, 1:, :a, 1:c + 1, :d] = as_torch(v, dtype, device)
    return (big[0, 1:, :a, 1:c + 1, :d], big[1, 1:, :a, 1:c + 1, :d])


def check(out, lse, b, dtype, lse_scale=1.0):
    ref_out, ref_lse = reference(b)
    assert rel_l2(out.float().cpu().numpy(), ref_out) <= TOLERANCE[dtype]
    if lse is not None:
        assert rel_l2(lse.cpu().numpy() * lse_scale, ref_lse) <= 1e-4


def wrapper(b, dtype, device, layout="NHD", **kwargs):
    w = codec.BatchPrefixDecodeWrapper(torch.empty(64 << 20, dtype=torch.uint8, device=device), kv_layout=layout,
                                       **kwargs)
    w.plan(torch.from_numpy(b.indptr).to(device), torch.from_numpy(b.indices).to(device),
           torch.from_numpy(b.last_page_len).to(device), b.num_qo_heads, b.num_kv_heads, b.head_dim, b.page_size,
           q_data_type=TORCH_DTYPE[dtype], num_pages=b.num_pages)
    return w


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
def test_cpu_engine_on_torch_tensors(dtype):
    b = random_batch(31, 16, 4, 128, 16, dtype)
    w = wrapper(b, dtype, "cpu")
    out, lse = w.run(as_torch(store(b.q, dtype), dtype, "cpu"), torch_cache(b, dtype, "NHD", "interleaved", "cpu"),
                     return_lse=True)
    assert out.dtype == TORCH_DTYPE[dtype]
    check(out, lse, b, dtype)


CUDA_CASES = [(d, t, lay, form, heads, page)
              for i, (d, t, lay, form) in enumerate(itertools.product((64, 128, 256), ("float16", "bfloat16"),
                                                                      ("NHD", "HND"), CACHE_FORMS))
              for heads, page in [(((32, 8), (8, 8), (40, 8), (32, 1))[i // len(CACHE_FORMS) % 4],
                                   (1, 7, 16, 64)[(i + i // len(CACHE_FORMS)) % 4])]]  # every form meets every one


@needs_cuda
@pytest.mark.parametrize("head_dim,dtype,layout,form,heads,page_size", CUDA_CASES)
def test_cuda_matches_float64_reference(head_dim, dtype, layout, form, heads, page_size):
    b = random_batch(zlib.crc32(repr((head_dim, dtype, layout, form)).encode()) % 997, *heads, head_dim, page_size, dtype,
                     nodes=6, requests=9, max_node_pages=max(1, 300 // page_size))
    w = wrapper(b, dtype, "cuda", layout)
    q = as_torch(store(b.q, dtype), dtype, "cuda")
    out, lse = w.run(q, torch_cache(b, dtype, layout, form, "cuda"), return_lse=True)
    check(out, lse, b, dtype)


@needs_cuda
def test_cuda_strided_q_out_and_base_two():
    b = random_batch(41, 32, 8, 128, 16, "bfloat16", nodes=5, requests=7)
    w = wrapper(b, "bfloat16", "cuda")
    qt = as_torch(store(b.q, "bfloat16"), "bfloat16", "cuda").transpose(0, 1).contiguous()[None]  # (1, Hq, B, D)
    q = qt[0].transpose(0, 1)
    out = torch.full((b.batch_size, 32, 136), float("nan"), dtype=torch.bfloat16, device="cuda")[:, :, :128]
    lse = torch.empty((32, b.batch_size), device="cuda").t()
    w.run(q, torch_cache(b, "bfloat16", "NHD", "vllm", "cuda"), out=out, lse=lse, lse_base=2)
    check(out, lse, b, "bfloat16", lse_scale=math.log(2))


@needs_cuda
def test_cuda_graph_replays_each_new_plan():
    heads, kv_heads, dim, page = 32, 8, 128, 16
    batches = [random_batch(s, heads, kv_heads, dim, page, "bfloat16", nodes=4, requests=3 + s % 12)
               for s in range(51, 56)]
    max_b = 16
    max_entries = max(b.indices.size for b in batches)
    max_pages = max(b.num_pages for b in batches)
    w = codec.BatchPrefixDecodeWrapper(torch.empty(64 << 20, dtype=torch.uint8, device="cuda"), use_cuda_graph=True,
                                       max_batch_size=max_b, max_num_pages=max_entries)
    q = torch.zeros((max_b, heads, dim), dtype=torch.bfloat16, device="cuda")
    out = torch.empty_like(q)
    lse = torch.empty((max_b, heads), device="cuda")
    cache = torch.zeros((max_pages, 2, page, kv_heads, dim), dtype=torch.bfloat16, device="cuda")
    graph = None
    for i, b in enumerate(batches):
        q.zero_()
        q[:b.batch_size] = as_torch(store(b.q, "bfloat16"), "bfloat16", "cuda")
        cache[:b.num_pages] = as_torch(cache_of(b, "bfloat16", "NHD", "interleaved"), "bfloat16", "cuda")
        out.fill_(float("nan"))
        w.plan(b.indptr, b.indices, b.last_page_len, heads, kv_heads, dim, page, q_data_type=torch.bfloat16,
               num_pages=max_pages)
        if graph is None:  # captured once, with the first plan
            w.run(q, cache, out=out, lse=lse)  # warm-up outside capture
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                w.run(q, cache, out=out, lse=lse)
        graph.replay()
        torch.cuda.synchronize()
        n = b.batch_size
        check(out[:n], lse[:n], b, "bfloat16")
        assert torch.all(out[n:] == 0) and torch.all(lse[n:] == float("-inf")), f"padding rows, batch {i}"
    with pytest.raises(ValueError, match="more than max_batch_size 16"):
        big = random_batch(60, heads, kv_heads, dim, page, "bfloat16", requests=17)
        w.plan(big.indptr, big.indices, big.last_page_len, heads, kv_heads, dim, page, q_data_type=torch.bfloat16)
    with pytest.raises(ValueError, match="a graph cannot change them"):
        w.plan(b.indptr, b.indices, b.last_page_len, heads, kv_heads, dim, page, q_data_type=torch.float16)


@needs_cuda
@pytest.mark.parametrize("cumulative", [False, True], ids=["seq_lens", "cu_seq_lens"])
def test_cuda_graph_plans_each_replay_in_the_stream(cumulative):
    """One graph captured around plan_block_table_in_stream and run: every
    replay plans the batch its device block table then holds (nothing
    re-planned on the host), padding rows come out empty, and a batch that
    cannot be planned runs as zeros with its error kept."""
    heads, kv_heads, dim, page = 32, 8, 128, 16
    batches = [random_batch(s, heads, kv_heads, dim, page, "bfloat16", nodes=4, requests=3 + s % 12)
               for s in range(71, 76)]
    max_b, cols = 16, max(int(np.diff(b.indptr).max()) for b in batches)
    max_pages = max(b.num_pages for b in batches)
    w = codec.BatchPrefixDecodeWrapper(torch.empty(64 << 20, dtype=torch.uint8, device="cuda"), use_cuda_graph=True,
                                       max_batch_size=max_b, max_num_pages=max_b * cols)
    table = torch.full((max_b, cols), -1, dtype=torch.int32, device="cuda")
    lens = torch.zeros(max_b + 1 if cumulative else max_b, dtype=torch.int32, device="cuda")
    q = torch.zeros((max_b, heads, dim), dtype=torch.bfloat16, device="cuda")
    out = torch.empty_like(q)
    lse = torch.empty((max_b, heads), device="cuda")
    cache = torch.zeros((max_pages, 2, page, kv_heads, dim), dtype=torch.bfloat16, device="cuda")

    def step():
        w.plan_block_table_in_stream(table, lens, heads, kv_heads, dim, page, num_pages=max_pages,
                                     cumulative=cumulative, q_data_type=torch.bfloat16)
        w.run(q, cache, out=out, lse=lse)

    def load(b):
        t, n = padded_block_table(b, max_b, cols)
        table.copy_(torch.from_numpy(t))
        lens.copy_(torch.from_numpy(np.concatenate([[0], np.cumsum(n)]).astype(np.int32) if cumulative else n))
        q.zero_()
        q[:b.batch_size] = as_torch(store(b.q, "bfloat16"), "bfloat16", "cuda")
        cache[:b.num_pages] = as_torch(cache_of(b, "bfloat16", "NHD", "interleaved"), "bfloat16", "cuda")
        out.fill_(float("nan"))

    load(batches[0])
    step()  # eagerly: the same plan in stream order, the host never waiting
    torch.cuda.synchronize()
    check(out[:batches[0].batch_size], lse[:batches[0].batch_size], batches[0], "bfloat16")
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    for i, b in enumerate(batches):
        load(b)
        graph.replay()
        torch.cuda.synchronize()
        n = b.batch_size
        check(out[:n], lse[:n], b, "bfloat16")
        assert torch.all(out[n:] == 0) and torch.all(lse[n:] == float("-inf")), f"padding rows, batch {i}"
    assert w.plan_stats["plans"] == 1 + len(batches) and w.plan_stats["num_requests"] == batches[-1].batch_size
    w.check_stream_plans()  # no error so far
    table[0, 0] = max_pages + 5  # a page outside the pool: that replay runs as zeros
    graph.replay()
    torch.cuda.synchronize()
    assert torch.all(out == 0) and torch.all(lse == float("-inf"))
    with pytest.raises(ValueError, match=f"an in-stream plan failed: .*row 0 column 0 holds page {max_pages + 5}"):
        w.check_stream_plans()
    w.check_stream_plans()  # the error was taken
    with pytest.raises(ValueError,
                       match=f"q has 2 rows, fewer than the {max_b} rows plans made in the stream may cover"):
        w.run(q[:2], cache)  # the plan's rows index q, which run cannot see
    with pytest.raises(ValueError, match=f"the KV cache has 1 pages, fewer than the num_pages {max_pages}"):
        w.run(q, cache[:1])
    with pytest.raises(ValueError, match="block_table has dtype int64; expected int32"):
        w.plan_block_table_in_stream(table.long(), lens, heads, kv_heads, dim, page, num_pages=max_pages,
                                     cumulative=cumulative, q_data_type=torch.bfloat16)
    with pytest.raises(ValueError, match="needs a CUDA-graph wrapper"):
        plain = codec.BatchPrefixDecodeWrapper(torch.empty(1 << 20, dtype=torch.uint8, device="cuda"))
        plain.plan_block_table_in_stream(table, lens, heads, kv_heads, dim, page, num_pages=max_pages)


@needs_cuda
def test_torch_compile_fullgraph_has_no_graph_break():
    b = random_batch(61, 32, 8, 128, 16, "bfloat16", nodes=5, requests=8)
    w = wrapper(b, "bfloat16", "cuda")
    q = as_torch(store(b.q, "bfloat16"), "bfloat16", "cuda")
    cache = torch_cache(b, "bfloat16", "NHD", "interleaved", "cuda")

    def step(q, cache):
        out, lse = w.run(q * 1.0, cache, return_lse=True)
        v, s = codec.merge_state(out, lse, out, lse)  # merging a state with itself: same o, lse + ln 2
        return v + 0.0, s

    torch._dynamo.reset()
    compiled = torch.compile(step, fullgraph=True)
    v, s = compiled(q, cache)
    check(v, s - math.log(2), b, "bfloat16")
    explanation = torch._dynamo.explain(step)(q, cache)
    assert explanation.graph_break_count == 0, explanation.break_reasons
    # a new plan on the same wrapper: the compiled step runs it
    c = random_batch(62, 32, 8, 128, 16, "bfloat16", nodes=3, requests=8)
    w.plan(c.indptr, c.indices, c.last_page_len, 32, 8, 128, 16, q_data_type=torch.bfloat16, num_pages=c.num_pages)
    v, s = compiled(as_torch(store(c.q, "bfloat16"), "bfloat16", "cuda"),
                    torch_cache(c, "bfloat16", "NHD", "interleaved", "cuda"))
    check(v, s - math.log(2), c, "bfloat16")


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=needs_cuda)])
def test_opcheck(device):
    dtype = "bfloat16" if device == "cuda" else "float32"
    b = random_batch(71, 8, 2, 64, 16, dtype)
    w = wrapper(b, dtype, device)
    q = as_torch(store(b.q, dtype), dtype, device)
    k, v = torch_cache(b, dtype, "NHD", "tuple", device)
    out = torch.zeros_like(q)
    lse = torch.zeros(q.shape[:2], device=device)
    torch.library.opcheck(torch.ops.codec.batch_prefix_decode.default,
                          (q, k, v, w._workspace, out, lse, w._handle, False, False))
    v_a, v_b = torch.randn_like(out), torch.randn_like(out)  # finite inputs: NaN never compares equal
    s_a, s_b = torch.randn_like(lse), torch.randn_like(lse)
    torch.library.opcheck(torch.ops.codec.merge_state.default, (v_a, s_a, v_b, s_b, False))


def test_scales_and_sinks_through_the_custom_op():
    """k_scale, v_scale and sinks as the registered op's arguments: opcheck,
    and a fullgraph compile of the prefill wrapper's run (several causal
    tokens a request) equal to its eager result, which the scales change. On
    the CPU engine, whose caches of any dtype take scales (the CUDA engine's
    fp8 ones only: test_fp8.py)."""
    device, dtype = "cpu", "float32"
    b = random_batch(72, 8, 2, 64, 16, dtype, nodes=4, requests=5)
    rows = np.arange(b.batch_size + 1, dtype=np.int32) * 2  # two tokens a request: each request's q row twice
    w = codec.BatchPrefixPrefillWrapper(torch.empty(64 << 20, dtype=torch.uint8, device=device))
    w.plan(torch.from_numpy(rows), *(torch.from_numpy(x) for x in (b.indptr, b.indices, b.last_page_len)),
           8, 2, 64, 16, causal=True, q_data_type=TORCH_DTYPE[dtype], num_pages=b.num_pages)
    q = as_torch(store(np.repeat(b.q, 2, axis=0), dtype), dtype, device)
    k, v = torch_cache(b, dtype, "NHD", "tuple", device)
    k_scale = torch.tensor([0.5, 2.0], device=device)
    v_scale = torch.tensor([1.5, 0.25], device=device)
    sinks = torch.linspace(-1.0, 1.0, 8, device=device)
    out = torch.zeros_like(q)
    lse = torch.zeros(q.shape[:2], device=device)
    torch.library.opcheck(torch.ops.codec.batch_prefix_decode.default,
                          (q, k, v, w._workspace, out, lse, w._handle, False, False, k_scale, v_scale, sinks))

    def step(q, k, v, k_scale, v_scale, sinks):
        return w.run(q, (k, v), return_lse=True, k_scale=k_scale, v_scale=v_scale, sinks=sinks)

    eager = step(q, k, v, k_scale, v_scale, sinks)
    plain = step(q, k, v, None, None, None)
    torch._dynamo.reset()
    compiled = torch.compile(step, fullgraph=True, backend="aot_eager")(q, k, v, k_scale, v_scale, sinks)
    for x, y, z in zip(compiled, eager, plain):
        assert torch.equal(x, y)
        assert not torch.allclose(y, z)


@needs_cuda
def test_two_streams_and_the_current_stream():
    b = random_batch(81, 32, 8, 128, 16, "float16", nodes=6, requests=9)
    c = random_batch(82, 32, 8, 128, 16, "float16", nodes=6, requests=5)
    streams = [torch.cuda.Stream(), torch.cuda.Stream()]
    results = []
    for batch, stream in zip((b, c), streams):
        with torch.cuda.stream(stream):
            w = wrapper(batch, "float16", "cuda")
            q = as_torch(store(batch.q, "float16"), "float16", "cuda")
            cache = torch_cache(batch, "float16", "NHD", "tuple", "cuda")
            results.append((w, w.run(q, cache, return_lse=True)))
    for (w, (out, lse)), batch, stream in zip(results, (b, c), streams):
        stream.synchronize()
        check(out, lse, batch, "float16")


@pytest.mark.skipif(torch.cuda.device_count() < 2 or not codec.cuda_available(), reason="needs two CUDA devices")
def test_second_device_index():
    b = random_batch(91, 32, 8, 128, 16, "bfloat16")
    with torch.cuda.device(0):  # another device current: the wrapper runs on its workspace's
        w = wrapper(b, "bfloat16", "cuda:1")
        out = w.run(as_torch(store(b.q, "bfloat16"), "bfloat16", "cuda:1"),
                    torch_cache(b, "bfloat16", "NHD", "interleaved", "cuda:1"))
    assert out.device.index == 1
    check(out, None, b, "bfloat16")


@needs_cuda
def test_device_mismatch_and_small_workspace():
    b = random_batch(95, 32, 8, 128, 16, "bfloat16")
    w = wrapper(b, "bfloat16", "cuda")
    q = as_torch(store(b.q, "bfloat16"), "bfloat16", "cpu")
    with pytest.raises(ValueError, match="q is on cpu, but the plan runs on cuda:0"):
        w.run(q, torch_cache(b, "bfloat16", "NHD", "interleaved", "cuda"))
    small = codec.BatchPrefixDecodeWrapper(torch.empty(4096, dtype=torch.uint8, device="cuda"))
    with pytest.raises(ValueError, match="workspace_buffer of 4096 bytes is too small"):
        small.plan(b.indptr, b.indices, b.last_page_len, 32, 8, 128, 16, q_data_type=torch.bfloat16)
    with pytest.raises(ValueError, match="the CUDA engine takes float16 or bfloat16"):
        codec.BatchPrefixDecodeWrapper(torch.empty(1 << 20, dtype=torch.uint8, device="cuda")).plan(
            b.indptr, b.indices, b.last_page_len, 32, 8, 128, 16, q_data_type=torch.float32)


@needs_cuda
def test_merge_state_and_copy_pages_on_cuda_match_the_cpu():
    rng = np.random.default_rng(5)
    va, vb = (rng.uniform(-1, 1, (9, 4, 128)).astype(np.float32) for _ in range(2))
    sa, sb = (rng.uniform(-5, 5, (9, 4)).astype(np.float32) for _ in range(2))
    sa[0, 0] = sb[0, 0] = -np.inf
    cpu_v, cpu_s = codec.merge_state(va, sa, vb, sb)
    gpu_v, gpu_s = codec.merge_state(*(torch.from_numpy(x).cuda() for x in (va, sa, vb, sb)))
    np.testing.assert_allclose(gpu_v.cpu().numpy(), cpu_v, atol=1e-6)
    np.testing.assert_allclose(gpu_s.cpu().numpy(), cpu_s, rtol=1e-6)
    cache = rng.uniform(-1, 1, (20, 2, 16, 2, 64)).astype(np.float16)
    copies = np.array([[1, 2, 16], [2, 5, 7], [9, 3, 1]], np.int32)
    gpu = torch.from_numpy(cache).cuda()
    codec.copy_pages(gpu, copies)
    codec.copy_pages(cache, copies)
    torch.cuda.synchronize()
    np.testing.assert_array_equal(gpu.cpu().numpy(), cache)


@needs_cuda
def test_cupy_arrays():
    cupy = pytest.importorskip("cupy", reason="CuPy is not installed")
    b = random_batch(97, 16, 4, 64, 16, "float16")
    w = codec.BatchPrefixDecodeWrapper(cupy.zeros(16 << 20, dtype=cupy.uint8))
    w.plan(b.indptr, b.indices, b.last_page_len, 16, 4, 64, 16, q_data_type="float16", num_pages=b.num_pages)
    out = w.run(cupy.asarray(store(b.q, "float16")), cupy.asarray(cache_of(b, "float16", "NHD", "interleaved")))
    assert isinstance(out, cupy.ndarray)
    assert rel_l2(cupy.asnumpy(out).astype(np.float64), reference(b)[0]) <= TOLERANCE["float16"]


@needs_cuda
@pytest.mark.parametrize("dtype,layout", [("float16", "NHD"), ("bfloat16", "HND")])
def test_equals_flashinfer_batch_decode(dtype, layout):
    flashinfer = pytest.importorskip("flashinfer", reason="FlashInfer is not installed (scripts/fetch_peer_wheels.sh)")
    b = random_batch(99, 32, 8, 128, 16, dtype, nodes=6, requests=12, max_node_pages=20)
    q = as_torch(store(b.q, dtype), dtype, "cuda")
    cache = torch_cache(b, dtype, layout, "interleaved", "cuda")
    args = (torch.from_numpy(b.indptr).cuda(), torch.from_numpy(b.indices).cuda(),
            torch.from_numpy(b.last_page_len).cuda(), 32, 8, 128, 16)
    fi = flashinfer.BatchDecodeWithPagedKVCacheWrapper(torch.empty(128 << 20, dtype=torch.uint8, device="cuda"),
                                                       kv_layout=layout, use_tensor_cores=True)
    fi.plan(*args, q_data_type=TORCH_DTYPE[dtype])
    fi_out, fi_lse = fi.run(q, cache, return_lse=True)
    w = codec.BatchPrefixDecodeWrapper(torch.empty(128 << 20, dtype=torch.uint8, device="cuda"), kv_layout=layout)
    w.plan(*args, q_data_type=TORCH_DTYPE[dtype])  # the same call, another class
    out, lse = w.run(q, cache, return_lse=True, lse_base=2)  # FlashInfer's lse is base 2
    ref = reference(b)[0]
    assert rel_l2(fi_out.float().cpu().numpy(), ref) <= TOLERANCE[dtype]
    assert rel_l2(out.float().cpu().numpy(), fi_out.float().cpu().numpy()) <= TOLERANCE[dtype]
    assert rel_l2(lse.cpu().numpy(), fi_lse.cpu().numpy()) <= 1e-3
