"""fp8 KV caches (float8_e4m3fn, float8_e5m2) with scales, on the CPU engine
and (torch float8 tensors) the CUDA engine: numpy callers pass the bits as
uint8 with kv_data_type naming the format, torch callers float8 tensors;
k_scale and v_scale as a float, a 0-d array or tensor, or one a kv head.
Against float64 attention over the dequantised values (the stored value
times its scale), for the decode and prefill wrappers, and on the GPU in a
CUDA graph; bad scales and dtypes refused by name."""

import dataclasses

import numpy as np
import pytest

import codec
from batches import FORMATS, TOLERANCE, fp8_case, reference, rel_l2, store, widen

@pytest.mark.parametrize("fmt", list(FORMATS))
@pytest.mark.parametrize("per_head", [False, True], ids=["one_scale", "per_head"])
def test_numpy_fp8_cache_matches_float64(fmt, per_head):
    bits, k_scale, v_scale, b = fp8_case(3, fmt, per_head)
    w = codec.BatchPrefixDecodeWrapper(np.zeros(16 << 20, np.uint8))
    w.plan(b.indptr, b.indices, b.last_page_len, 8, 2, 64, 7, q_data_type="bfloat16", kv_data_type=fmt)
    cache = np.ascontiguousarray(np.stack([bits["k"], bits["v"]], axis=1))  # (pages, 2, page, Hkv, D) uint8
    scales = dict(k_scale=float(k_scale[0]), v_scale=v_scale) if not per_head else dict(k_scale=k_scale,
                                                                                         v_scale=v_scale)
    out, lse = w.run(store(b.q, "bfloat16"), cache, return_lse=True, **scales)
    ref_out, ref_lse = reference(b)
    assert out.dtype == np.uint16  # q's dtype (bfloat16 bits)
    assert rel_l2(widen(out, "bfloat16"), ref_out) <= TOLERANCE["bfloat16"]
    assert rel_l2(lse, ref_lse) <= 1e-5
    f32 = np.empty((b.batch_size, 8, 64), np.float32)
    w.run(store(b.q, "bfloat16"), cache, out=f32, **scales)
    assert rel_l2(f32, ref_out) <= 2e-5  # fp32 out: the engine's accumulation only


@pytest.mark.torch
@pytest.mark.parametrize("fmt", list(FORMATS))
def test_torch_float8_cache_and_prefill_with_scales(fmt):
    torch = pytest.importorskip("torch")
    bits, k_scale, v_scale, b = fp8_case(4, fmt, per_head=True)
    tdtype = getattr(torch, fmt)
    cache = (torch.from_numpy(bits["k"]).view(tdtype), torch.from_numpy(bits["v"]).view(tdtype))
    q = torch.from_numpy(b.q).to(torch.float16)
    w = codec.BatchPrefixDecodeWrapper(torch.zeros(16 << 20, dtype=torch.uint8))
    w.plan(torch.from_numpy(b.indptr), torch.from_numpy(b.indices), torch.from_numpy(b.last_page_len), 8, 2, 64, 7,
           q_data_type=torch.float16, kv_data_type=tdtype)
    out = w.run(q, cache, k_scale=torch.from_numpy(k_scale), v_scale=torch.from_numpy(v_scale))
    assert out.dtype == torch.float16
    qb = dataclasses.replace(b, q=q.float().numpy())
    assert rel_l2(out.float().numpy(), reference(qb)[0]) <= TOLERANCE["float16"]
    # the prefill wrapper, each request's last token a query, the same cache and scales
    qo = np.arange(b.batch_size + 1, dtype=np.int32)
    pre = codec.BatchPrefixPrefillWrapper(torch.zeros(16 << 20, dtype=torch.uint8))
    pre.plan(torch.from_numpy(qo), torch.from_numpy(b.indptr), torch.from_numpy(b.indices),
             torch.from_numpy(b.last_page_len), 8, 2, 64, 7, causal=True, q_data_type=torch.float16, kv_data_type=tdtype)
    out2 = pre.run(q, cache, k_scale=torch.from_numpy(k_scale), v_scale=torch.from_numpy(v_scale))
    assert torch.equal(out, out2)


@pytest.mark.torch
@pytest.mark.parametrize("fmt", list(FORMATS))
def test_cuda_fp8_cache_matches_float64(fmt):
    """The CUDA engine on float8 tensors at every head dim: per-head scales
    in device memory, one token a request and several causal ones; then float
    scales (device scalars filled in the stream) replayed in a CUDA graph."""
    torch = pytest.importorskip("torch")
    if not (torch.cuda.is_available() and codec.cuda_available()):
        pytest.skip("no CUDA device (or this build has no CUDA engine)")
    tdtype = getattr(torch, fmt)

    def on_device(bits, b):
        cache = tuple(torch.from_numpy(bits[n]).cuda().view(tdtype) for n in ("k", "v"))
        q = torch.from_numpy(b.q).to(torch.bfloat16).cuda()
        return cache, q, dataclasses.replace(b, q=q.float().cpu().numpy())

    for dim in (64, 128, 256):
        bits, k_scale, v_scale, b = fp8_case(5 + dim, fmt, per_head=True, dim=dim, page=16)
        cache, q, qb = on_device(bits, b)
        scales = dict(k_scale=torch.from_numpy(k_scale).cuda(), v_scale=torch.from_numpy(v_scale).cuda())
        table = [torch.from_numpy(x).cuda() for x in (b.indptr, b.indices, b.last_page_len)]
        w = codec.BatchPrefixDecodeWrapper(torch.zeros(64 << 20, dtype=torch.uint8, device="cuda"))
        w.plan(*table, 8, 2, dim, 16, q_data_type=torch.bfloat16, kv_data_type=tdtype)
        out = w.run(q, cache, **scales)
        assert rel_l2(out.float().cpu().numpy(), reference(qb)[0]) <= TOLERANCE["bfloat16"], dim
        pre = codec.BatchPrefixPrefillWrapper(torch.zeros(64 << 20, dtype=torch.uint8, device="cuda"))
        pre.plan(torch.arange(b.batch_size + 1, dtype=torch.int32, device="cuda"), *table, 8, 2, dim, 16, causal=True,
                 q_data_type=torch.bfloat16, kv_data_type=tdtype)
        assert torch.equal(pre.run(q, cache, **scales), out), dim

    bits, k_scale, v_scale, b = fp8_case(9, fmt, per_head=False, page=16)
    cache, q, qb = on_device(bits, b)
    w = codec.BatchPrefixDecodeWrapper(torch.zeros(64 << 20, dtype=torch.uint8, device="cuda"))
    w.plan(*(torch.from_numpy(x).cuda() for x in (b.indptr, b.indices, b.last_page_len)), 8, 2, 64, 16,
           q_data_type=torch.bfloat16, kv_data_type=tdtype)
    out = torch.full_like(q, float("nan"))
    w.run(q, cache, out=out, k_scale=float(k_scale[0]), v_scale=float(v_scale[0]))  # eagerly first
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        w.run(q, cache, out=out, k_scale=float(k_scale[0]), v_scale=float(v_scale[0]))
    out.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    assert rel_l2(out.float().cpu().numpy(), reference(qb)[0]) <= TOLERANCE["bfloat16"]


def test_bad_fp8_arguments_are_refused_by_name():
    bits, k_scale, v_scale, b = fp8_case(5, "float8_e4m3fn", per_head=True)
    cache = np.ascontiguousarray(np.stack([bits["k"], bits["v"]], axis=1))
    w = codec.BatchPrefixDecodeWrapper(np.zeros(16 << 20, np.uint8))
    plan = lambda **kw: w.plan(b.indptr, b.indices, b.last_page_len, 8, 2, 64, 7, **kw)  # noqa: E731
    with pytest.raises(ValueError, match="q_data_type float8_e4m3fn: fp8 is a KV cache dtype"):
        plan(q_data_type="float8_e4m3fn")
    plan(q_data_type="bfloat16", kv_data_type="fp8_e4m3")
    q = store(b.q, "bfloat16")
    with pytest.raises(ValueError, match=r"k_scale has 3 values: expected none, one, or one per kv head \(2\)"):
        w.run(q, cache, k_scale=np.ones(3, np.float32))
    with pytest.raises(ValueError, match=r"v_scale\[1\] = inf is not finite"):
        w.run(q, cache, v_scale=np.array([1.0, np.inf], np.float32))
    with pytest.raises(TypeError, match="k_cache|paged_kv_cache"):  # a bf16 cache where the plan says fp8
        w.run(q, store(np.stack([b.k, b.v], axis=1), "bfloat16"))
    with pytest.raises(TypeError, match="v_cache has dtype uint16; expected float8_e4m3fn"):  # K and V apart
        w.run(q, (bits["k"], store(b.v, "bfloat16")))
    with pytest.raises(ValueError, match="kv_data_type float16 differ"):
        w.plan(b.indptr, b.indices, b.last_page_len, 8, 2, 64, 7, q_data_type="bfloat16", kv_data_type="float16")
    # the prefill wrapper's o_data_type is q's, not the cache's
    pre = codec.BatchPrefixPrefillWrapper(np.zeros(16 << 20, np.uint8))
    qo = np.arange(b.batch_size + 1, dtype=np.int32)
    pre.plan(qo, b.indptr, b.indices, b.last_page_len, 8, 2, 64, 7, q_data_type="bfloat16", kv_data_type="fp8",
             o_data_type="bfloat16")
    with pytest.raises(ValueError, match="o_data_type float8_e4m3fn differs from q's bfloat16"):
        pre.plan(qo, b.indptr, b.indices, b.last_page_len, 8, 2, 64, 7, q_data_type="bfloat16",
                 kv_data_type="fp8", o_data_type="float8_e4m3fn")


def test_copy_pages_moves_fp8_bytes():
    """copy_pages on an fp8 cache: numpy's uint8 bits and torch's float8 tensors, copied byte for byte."""
    rng = np.random.default_rng(7)
    cache = rng.integers(0, 256, (6, 2, 4, 2, 64), dtype=np.uint8)
    copies = np.array([[1, 3, 4], [0, 5, 2]], np.int32)
    want = cache.copy()
    want[3, :, :4] = cache[1, :, :4]
    want[5, :, :2] = cache[0, :, :2]
    codec.copy_pages(cache, copies)
    assert np.array_equal(cache, want)
    torch = pytest.importorskip("torch")
    t = torch.from_numpy(rng.integers(0, 256, (6, 2, 4, 2, 64), dtype=np.uint8)).view(torch.float8_e5m2)
    before = t.view(torch.uint8).clone()
    codec.copy_pages(t, copies)
    after = t.view(torch.uint8)
    assert torch.equal(after[3, :, :4], before[1, :, :4]) and torch.equal(after[5, :, :2], before[0, :, :2])
    assert torch.equal(after[:3], before[:3]) and torch.equal(after[4], before[4])
