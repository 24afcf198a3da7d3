"""The attention variants of today's models on the CPU engine (the CUDA
engine's are to come): the logit soft-cap of Gemma 2 (plan's
logits_soft_cap), the attention sinks of gpt-oss (run's sinks) and sliding
windows (plan's window_left), with numpy and torch tensors, against
float64; the lse includes the sinks."""


import numpy as np
import pytest

import codec
from batches import kv_lengths, masked_reference, random_batch, reference, rel_l2


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
