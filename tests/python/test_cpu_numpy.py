"""The Python package on the CPU engine with numpy arrays (no torch needed):
every cache form, layout, stride pattern, dtype and head dim against float64,
merge_state, the bad inputs, and plan_block_table."""

import itertools
import math
import zlib

import numpy as np
import pytest

import codec
from batches import CACHE_FORMS, TOLERANCE, cache_of, from_bf16_bits, random_batch, reference, rel_l2, store, widen

HEADS = [(8, 8), (8, 2), (10, 2), (8, 1)]  # MHA, GQA 4, GQA 5, MQA


def workspace(nbytes=16 << 20):
    return np.zeros(nbytes, dtype=np.uint8)


def planned(b, dtype, layout="NHD", **kwargs):
    w = codec.BatchPrefixDecodeWrapper(workspace(), kv_layout=layout, num_threads=2)
    w.plan(b.indptr, b.indices, b.last_page_len, b.num_qo_heads, b.num_kv_heads, b.head_dim, b.page_size,
           q_data_type=dtype, **kwargs)
    return w


def check(out, lse, b, dtype, sm_scale=None):
    ref_out, ref_lse = reference(b, sm_scale)
    assert rel_l2(widen(out, dtype), ref_out) <= TOLERANCE[dtype]
    assert rel_l2(lse, ref_lse) <= 1e-5


# every head dim × dtype × layout × cache form, with heads and page sizes varied
# alongside (each cache form meets every head configuration)
CASES = [(d, t, lay, form, HEADS[i // len(CACHE_FORMS) % 4], (1, 3, 16)[i % 3])
         for i, (d, t, lay, form) in enumerate(itertools.product(
             (64, 128, 256), ("float16", "bfloat16", "float32"), ("NHD", "HND"), CACHE_FORMS))]


@pytest.mark.parametrize("head_dim,dtype,layout,form,heads,page_size", CASES)
def test_matches_float64_reference(head_dim, dtype, layout, form, heads, page_size):
    b = random_batch(zlib.crc32(repr((head_dim, dtype, layout, form)).encode()) % 1000, *heads, head_dim, page_size,
                     dtype)  # a seed that is the same in every process (str hashes are not)
    w = planned(b, dtype, layout)
    out, lse = w.run(store(b.q, dtype), cache_of(b, dtype, layout, form), return_lse=True)
    assert out.shape == (b.batch_size, heads[0], head_dim) and out.dtype == store(b.q[:1], dtype).dtype
    check(out, lse, b, dtype)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_strided_q_out_lse_and_base_two(dtype):
    b = random_batch(5, 16, 4, 128, 16, dtype, nodes=6, requests=9)
    w = planned(b, dtype)
    # q as transformers passes it: a view of (1, Hq, B, D)
    qt = np.ascontiguousarray(store(b.q, dtype).transpose(1, 0, 2))[None]
    q = qt[0].transpose(1, 0, 2)
    assert not q.flags.c_contiguous
    out = np.zeros((b.batch_size, 16, 128 + 8), dtype=q.dtype)[:, :, :128]  # padded rows
    lse = np.zeros((16, b.batch_size), np.float32).T  # heads-major
    w.run(q, cache_of(b, dtype, "NHD", "tuple"), out=out, lse=lse, lse_base=2)
    check(out, lse * math.log(2), b, dtype)
    # out in float32 on the CPU engine
    out32 = w.run(q, cache_of(b, dtype, "NHD", "tuple"), out=np.empty((b.batch_size, 16, 128), np.float32))
    assert rel_l2(out32, reference(b)[0]) <= 1e-5


def test_sm_scale_and_replanning():
    b = random_batch(7, 8, 2, 64, 4, "float32")
    w = planned(b, "float32", sm_scale=0.3)
    out, lse = w.run(b.q, cache_of(b, "float32", "NHD", "tuple"), return_lse=True)
    check(out, lse, b, "float32", sm_scale=0.3)
    c = random_batch(8, 8, 2, 64, 4, "float32", requests=11)  # a new batch on the same wrapper
    w.plan(c.indptr, c.indices, c.last_page_len, 8, 2, 64, 4, q_data_type=np.float32)
    out, lse = w.run(c.q, cache_of(c, "float32", "NHD", "tuple"), return_lse=True)
    check(out, lse, c, "float32")
    assert w.plan_stats["num_requests"] == 11
    assert w.plan_stats["merge_us"] == 0  # the CPU engine's roofline prices no merge


def test_plan_block_table_equals_plan():
    b = random_batch(9, 8, 2, 64, 16, "float16", requests=7)
    lens = np.array([(b.indptr[r + 1] - b.indptr[r] - 1) * 16 + b.last_page_len[r] for r in range(7)], np.int32)
    width = int(np.diff(b.indptr).max()) + 3
    table = np.full((7, width), -1, np.int32)  # padded with garbage past each request's pages
    for r in range(7):
        pages = b.indices[b.indptr[r]:b.indptr[r + 1]]
        table[r, :len(pages)] = pages
    w = codec.BatchPrefixDecodeWrapper(workspace())
    w.plan_block_table(table, lens, 8, 2, 64, 16, q_data_type="float16", num_pages=b.num_pages)
    out = w.run(store(b.q, "float16"), cache_of(b, "float16", "NHD", "interleaved"))
    assert rel_l2(widen(out, "float16"), reference(b)[0]) <= TOLERANCE["float16"]


def test_merge_state_matches_float64():
    rng = np.random.default_rng(3)
    n, h, d = 6, 4, 32
    va, vb = rng.uniform(-1, 1, (n, h, d)).astype(np.float32), rng.uniform(-1, 1, (n, h, d)).astype(np.float32)
    sa, sb = rng.uniform(-10, 10, (n, h)).astype(np.float32), rng.uniform(-10, 10, (n, h)).astype(np.float32)
    sa[0, 0] = -np.inf          # one side empty: the other side
    sb[1, 1] = -np.inf
    sa[2, 2] = sb[2, 2] = -np.inf  # both empty: the empty state, not NaN
    for base, ln in (("e", 1.0), (2, math.log(2))):
        v, s = codec.merge_state(va, sa, vb, sb, lse_base=base)
        x, y = sa.astype(np.float64) * ln, sb.astype(np.float64) * ln
        m = np.maximum(x, y)
        with np.errstate(invalid="ignore", divide="ignore"):
            total = np.where(np.isinf(m), -np.inf, m + np.log(np.exp(x - m) + np.exp(y - m)))
            wa = np.where(np.isinf(m), 0, np.exp(x - total))[..., None]
            wb = np.where(np.isinf(m), 0, np.exp(y - total))[..., None]
        np.testing.assert_allclose(v, wa * va + wb * vb, atol=1e-6)
        np.testing.assert_allclose(s[~np.isinf(total)], (total / ln)[~np.isinf(total)], rtol=1e-6)
        assert s[2, 2] == -np.inf and not np.isnan(v).any()
        np.testing.assert_array_equal(v[2, 2], 0)
    # the merge of two halves of a request's keys is the whole (the contract the engines keep)
    b = next(x for x in (random_batch(s, 4, 4, 64, 8, "float32", nodes=1, requests=1, max_node_pages=6)
                         for s in range(100)) if len(x.indices) >= 2)
    pages = b.indices
    half = len(pages) // 2
    parts = []
    for sel in (slice(0, half), slice(half, None)):
        idx = pages[sel]
        last = 8 if sel.stop == half else int(b.last_page_len[0])
        w = codec.BatchPrefixDecodeWrapper(workspace())
        w.plan([0, len(idx)], idx, [last], 4, 4, 64, 8, q_data_type="float32", num_pages=b.num_pages)
        parts.append(w.run(b.q, cache_of(b, "float32", "NHD", "tuple"), return_lse=True))
    v, s = codec.merge_state(parts[0][0], parts[0][1], parts[1][0], parts[1][1])
    check(v, s, b, "float32")


def test_bfloat16_bits_round_trip():
    x = np.array([1.0, -2.5, 3.14159, 1e-3, 65504.0], np.float32)
    np.testing.assert_allclose(from_bf16_bits(store(x, "bfloat16")), x, rtol=2 ** -8)


# ------------------------------------------------------------------ bad inputs

@pytest.fixture
def setup():
    b = random_batch(21, 8, 2, 64, 16, "float16")
    return b, planned(b, "float16"), store(b.q, "float16"), cache_of(b, "float16", "NHD", "tuple")


def test_wrong_dtypes_are_type_errors(setup):
    b, w, q, kv = setup
    with pytest.raises(TypeError, match="q is float32 but the plan was made for float16"):
        w.run(q.astype(np.float32), kv)
    with pytest.raises(TypeError, match="k_cache has dtype uint16; expected float16"):
        w.run(q, (kv[0].view(np.uint16), kv[1]))
    bf = planned(b, "bfloat16")
    with pytest.raises(TypeError, match="k_cache is float16 but the plan was made for bfloat16"):
        bf.run(q.view(np.uint16), kv)
    with pytest.raises(TypeError, match="q has dtype float64"):
        w.run(q.astype(np.float64), kv)
    with pytest.raises(TypeError, match="lse has dtype float16; expected float32"):
        w.run(q, kv, lse=np.zeros((b.batch_size, 8), np.float16))
    with pytest.raises(TypeError, match="q_data_type 'int8'"):
        w.plan(b.indptr, b.indices, b.last_page_len, 8, 2, 64, 16, q_data_type="int8")
    with pytest.raises(TypeError, match="indices has dtype float32"):
        w.plan(b.indptr, b.indices.astype(np.float32), b.last_page_len, 8, 2, 64, 16, q_data_type="float16")


def test_shape_mismatches_are_value_errors(setup):
    b, w, q, kv = setup
    with pytest.raises(ValueError, match=f"q.batch {b.batch_size - 1} differs from out.batch {b.batch_size}"):
        w.run(q[:-1], kv, out=np.zeros_like(q))
    with pytest.raises(ValueError, match=f"out.batch {b.batch_size - 1} but the plan was made for a batch of {b.batch_size}"):
        w.run(q[:-1], kv)
    with pytest.raises(ValueError, match="q.heads 4 but the plan was made for 8 qo heads"):
        w.run(q[:, :4], kv)
    with pytest.raises(ValueError, match="kv.head_dim 32 but the plan was made for 64"):
        w.run(q, (kv[0][..., :32], kv[1][..., :32]))
    with pytest.raises(ValueError, match="kv.page_size 8 but the plan was made for 16"):
        w.run(q, (kv[0][:, :8], kv[1][:, :8]))
    with pytest.raises(ValueError, match="kv.num_kv_heads 1 but the plan was made for 2"):
        w.run(q, (kv[0][:, :, :1], kv[1][:, :, :1]))
    with pytest.raises(ValueError, match="outside the KV pool of 2 pages"):
        w.run(q, (kv[0][:2], kv[1][:2]))
    with pytest.raises(ValueError, match="k_cache and v_cache must have the same strides"):
        w.run(q, (kv[0], np.ascontiguousarray(kv[1].transpose(0, 2, 1, 3)).transpose(0, 2, 1, 3)))
    with pytest.raises(ValueError, match="k_cache has 3 dimensions"):
        w.run(q, (kv[0][0], kv[1][0]))
    with pytest.raises(ValueError, match="paged_kv_cache has 4 dimensions; expected 5"):
        w.run(q, kv[0])
    with pytest.raises(ValueError, match="q must be contiguous in its last dimension"):
        w.run(np.repeat(q, 2, axis=2)[:, :, ::2], kv)
    with pytest.raises(ValueError, match="out rows overlap"):
        w.run(q, kv, out=np.lib.stride_tricks.as_strided(np.zeros(64, np.float16), q.shape, (0, 0, 2)))


def test_strides_of_dimensions_of_one_may_differ():
    """K and V of one layout but for the stride of a dimension of extent 1
    (one kv head here), which nothing steps along: accepted, exact."""
    b = random_batch(5, 4, 1, 64, 16, "float32", requests=3)
    w = codec.BatchPrefixDecodeWrapper(np.zeros(16 << 20, np.uint8))
    w.plan(b.indptr, b.indices, b.last_page_len, 4, 1, 64, 16, q_data_type="float32")
    k = np.lib.stride_tricks.as_strided(b.k, b.k.shape, b.k.strides[:2] + (4 * 7, 4))  # head stride 7 floats
    out = w.run(b.q, (k, b.v))
    assert k.strides != b.v.strides and rel_l2(out, reference(b)[0]) <= 2e-5


def test_plan_refuses_what_it_cannot_do(setup):
    b, w, q, kv = setup
    args = (b.indptr, b.indices, b.last_page_len, 8, 2, 64, 16)
    small = codec.BatchPrefixDecodeWrapper(np.zeros(512, np.uint8))
    with pytest.raises(ValueError, match=r"workspace_buffer of 512 bytes is too small for this batch: it needs at least \d+ bytes"):
        small.plan(*args, q_data_type="float16")
    with pytest.raises(ValueError, match="num_qo_heads 8 is not a multiple of num_kv_heads 3"):
        w.plan(b.indptr, b.indices, b.last_page_len, 8, 3, 64, 16, q_data_type="float16")
    with pytest.raises(ValueError, match="unsupported head_dim 96"):
        w.plan(b.indptr, b.indices, b.last_page_len, 8, 2, 96, 16, q_data_type="float16")
    with pytest.raises(ValueError, match="q_data_type float16 and kv_data_type bfloat16 differ"):
        w.plan(*args, q_data_type="float16", kv_data_type="bfloat16")
    with pytest.raises(ValueError, match="pos_encoding_mode 'ROPE_LLAMA'"):
        w.plan(*args, pos_encoding_mode="ROPE_LLAMA")
    with pytest.raises(ValueError, match="logits_soft_cap -30.0 must be None or finite >= 0"):
        w.plan(*args, logits_soft_cap=-30.0)
    with pytest.raises(ValueError, match="kv_last_page_len\\[1\\] = 17 is outside"):
        w.plan(b.indptr, b.indices, np.where(np.arange(b.batch_size) == 1, 17, b.last_page_len), 8, 2, 64, 16)
    with pytest.raises(ValueError, match="request 0 has no pages"):
        w.plan(np.r_[0, b.indptr], b.indices, np.r_[1, b.last_page_len], 8, 2, 64, 16)
    with pytest.raises(ValueError, match="kv_layout 'NDH'"):
        codec.BatchPrefixDecodeWrapper(workspace(), kv_layout="NDH")
    with pytest.raises(ValueError, match="use_cuda_graph needs a CUDA workspace_buffer"):
        codec.BatchPrefixDecodeWrapper(workspace(), use_cuda_graph=True, max_batch_size=4, max_num_pages=10)
    with pytest.raises(ValueError, match="run\\(\\) before plan\\(\\)"):
        codec.BatchPrefixDecodeWrapper(workspace()).run(q, kv)
    with pytest.raises(ValueError, match="q_scale: CoDec takes unscaled q"):
        w.run(q, kv, q_scale=0.5)
    with pytest.raises(ValueError, match="lse_base 10"):
        w.run(q, kv, lse_base=10)
    with pytest.raises(ValueError, match="kv_indptr\\[0\\] = 1 must be 0"):
        w.plan(b.indptr + 1, b.indices, b.last_page_len, 8, 2, 64, 16)
    # a failed plan leaves the last good one in place
    out = w.run(q, kv)
    assert rel_l2(widen(out, "float16"), reference(b)[0]) <= TOLERANCE["float16"]


def test_cuda_is_refused_cleanly_where_absent():
    if codec.cuda_available():
        pytest.skip("a CUDA device is present: tests/python/test_torch_cuda.py covers it")
    assert isinstance(codec._codec.cuda_device_count(), int)
