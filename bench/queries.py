"""Several query tokens a request, as `codec bench --q-len/--tree/--custom-mask
--dump` writes them (qo_indptr.npy, mask_bits.npy, meta.json's "mask"), turned
into what FlashInfer's wrappers take: each request's boolean [q_len, kv_len]
keep matrix (its prefill wrapper's custom_mask) and cascade levels counted in
query tokens. numpy only: checked on any machine (tests/python/test_bench_peers.py)."""

import numpy as np


def keep_matrices(mask, qo_indptr, kv_lens, mask_bits=None):
    """Request r's [q_len, kv_len] keep matrix (True = the token sees the key)
    under `mask`: "causal" (bottom-right aligned), "draft" (bits over the
    request's [q_len, q_len] new tokens, everything before them kept) or
    "custom" (bits over [q_len, kv_len]); the bits of each request start on a
    byte boundary of mask_bits, the low bit first."""
    if mask not in ("causal", "draft", "custom"):
        raise ValueError(f"mask: 'causal', 'draft' or 'custom', not {mask!r}")
    q_lens = np.diff(np.asarray(qo_indptr, dtype=np.int64))
    bits = None if mask == "causal" else np.unpackbits(np.asarray(mask_bits, dtype=np.uint8), bitorder="little")
    out, byte = [], 0
    for q, kv in zip(q_lens.tolist(), np.asarray(kv_lens, dtype=np.int64).tolist()):
        if mask == "causal":
            keep = np.arange(kv)[None, :] <= (kv - q + np.arange(q))[:, None]
        else:
            cols = q if mask == "draft" else kv
            own = bits[byte * 8: byte * 8 + q * cols].reshape(q, cols).astype(bool)
            byte += -(-q * cols // 8)
            keep = own if mask == "custom" else np.concatenate([np.ones((q, kv - q), dtype=bool), own], axis=1)
        out.append(keep)
    return out


def token_levels(order, qo, qo_indptr):
    """Cascade levels of requests (bench.cascade.cascade_levels' order and
    per-level qo_indptr) counted in query tokens: the rows of q in the levels'
    order and each level's qo_indptr over them."""
    starts = np.asarray(qo_indptr, dtype=np.int64)
    q_lens = np.diff(starts)
    rows = np.concatenate([np.arange(starts[r], starts[r + 1]) for r in order]) if len(order) else np.zeros(0, np.int64)
    prefix = np.concatenate([[0], np.cumsum(q_lens[list(order)])])
    return rows, [prefix[np.asarray(level)].tolist() for level in qo]
