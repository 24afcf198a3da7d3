"""Test support: seeded random batches over a paged KV cache (forests of
shared pages, forks, odd lengths), every cache form the wrapper takes, and a
float64 reference computed from the page tables alone."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import List, Tuple

import numpy as np

# relative L2 tolerances of the outputs (docs/BENCHMARKS.md for fp16/bf16 on the GPU);
# the CPU engine accumulates in fp32, far inside these
TOLERANCE = {"float16": 3e-3, "bfloat16": 1e-2, "float32": 1e-5}


def to_bf16_bits(x: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16 bits (round to nearest even), as uint16."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def from_bf16_bits(b: np.ndarray) -> np.ndarray:
    return (np.asarray(b).astype(np.uint32) << 16).view(np.float32)


def store(x: np.ndarray, dtype: str) -> np.ndarray:
    """x (float32) in numpy storage of `dtype`: float16, float32, or bfloat16 as uint16 bits."""
    if dtype == "bfloat16":
        return to_bf16_bits(x)
    return x.astype(dtype)


def widen(x: np.ndarray, dtype: str) -> np.ndarray:
    return from_bf16_bits(x).astype(np.float64) if dtype == "bfloat16" else np.asarray(x, dtype=np.float64)


@dataclass
class Batch:
    num_qo_heads: int
    num_kv_heads: int
    head_dim: int
    page_size: int
    num_pages: int
    indptr: np.ndarray
    indices: np.ndarray
    last_page_len: np.ndarray
    k: np.ndarray  # (pages, page_size, Hkv, D) float32, values as stored (rounded to the dtype)
    v: np.ndarray
    q: np.ndarray  # (B, Hq, D) float32, rounded likewise

    @property
    def batch_size(self) -> int:
        return int(self.last_page_len.size)


def random_batch(seed: int, num_qo_heads: int, num_kv_heads: int, head_dim: int, page_size: int,
                 dtype: str = "float32", nodes: int = 5, requests: int = 6, max_node_pages: int = 4,
                 fork_prob: float = 0.2) -> Batch:
    """A forest of `nodes` shared nodes of whole pages; each request takes a
    root-to-node path plus a private tail of any length (a partial last
    page); some requests are exact forks (they share the partial page too)."""
    rng = np.random.default_rng(seed)
    next_page = 0
    parent, node_pages = [], []
    for i in range(nodes):
        parent.append(-1 if i == 0 or rng.random() < 0.2 else int(rng.integers(0, i)))
        n = int(rng.integers(0, max_node_pages + 1))
        node_pages.append(list(range(next_page, next_page + n)))
        next_page += n
    req_pages: List[List[int]] = []
    req_last: List[int] = []
    for r in range(requests):
        if r > 0 and rng.random() < fork_prob:
            src = int(rng.integers(0, r))
            req_pages.append(list(req_pages[src]))
            req_last.append(req_last[src])
            continue
        path, i = [], int(rng.integers(0, nodes))
        while i >= 0:
            path.append(i)
            i = parent[i]
        pages = [p for i in reversed(path) for p in node_pages[i]]
        tail = int(rng.integers(0, 3 * page_size + 6))
        if not pages:
            tail = max(tail, 1)
        last = page_size
        for t in range(0, tail, page_size):
            pages.append(next_page)
            next_page += 1
            last = min(page_size, tail - t)
        req_pages.append(pages)
        req_last.append(last)
    order = rng.permutation(requests)  # requests in any order
    indptr = np.zeros(requests + 1, np.int32)
    indptr[1:] = np.cumsum([len(req_pages[r]) for r in order])
    indices = np.array([p for r in order for p in req_pages[r]], np.int32)
    last_page_len = np.array([req_last[r] for r in order], np.int32)
    num_pages = next_page + 3  # unused pages stay in the pool

    def rounded(shape, scale=1.0):
        x = (rng.uniform(-1, 1, size=shape) * scale).astype(np.float32)
        return widen(store(x, dtype), dtype).astype(np.float32)

    k = rounded((num_pages, page_size, num_kv_heads, head_dim))
    v = rounded((num_pages, page_size, num_kv_heads, head_dim))
    q = rounded((requests, num_qo_heads, head_dim), 3.0)
    return Batch(num_qo_heads, num_kv_heads, head_dim, page_size, num_pages, indptr, indices, last_page_len, k, v, q)


def reference(b: Batch, sm_scale: float = None, cap: float = 0.0, sinks=None) -> Tuple[np.ndarray, np.ndarray]:
    """float64 attention of each request alone, from the page tables; lse natural log. cap > 0 soft-caps
    the logits (cap · tanh(s / cap)); sinks (one a qo head) join each row's denominator."""
    scale = 1.0 / math.sqrt(b.head_dim) if sm_scale is None else sm_scale
    group = b.num_qo_heads // b.num_kv_heads
    out = np.zeros((b.batch_size, b.num_qo_heads, b.head_dim))
    lse = np.zeros((b.batch_size, b.num_qo_heads))
    for r in range(b.batch_size):
        pages = b.indices[b.indptr[r]:b.indptr[r + 1]]
        n = (len(pages) - 1) * b.page_size + int(b.last_page_len[r])
        keys = b.k[pages].reshape(-1, b.num_kv_heads, b.head_dim)[:n].astype(np.float64)
        values = b.v[pages].reshape(-1, b.num_kv_heads, b.head_dim)[:n].astype(np.float64)
        for h in range(b.num_qo_heads):
            s = keys[:, h // group] @ b.q[r, h].astype(np.float64) * scale
            if cap:
                s = cap * np.tanh(s / cap)
            m = s.max()
            p = np.exp(s - m)
            denominator = p.sum() + (math.exp(sinks[h] - m) if sinks is not None else 0.0)
            out[r, h] = p @ values[:, h // group] / denominator
            lse[r, h] = m + math.log(denominator)
    return out, lse


# ------------------------------------------------------------------ fp8 caches

FORMATS = {"float8_e4m3fn": (3, 7, 0x7E), "float8_e5m2": (2, 15, 0x7B)}  # mantissa bits, bias, largest code


def fp8_values(fmt):
    """The value of every finite non-negative code of the format, in code order."""
    mantissa, bias, top = FORMATS[fmt]
    codes = np.arange(top + 1)
    e, m = codes >> mantissa, codes & ((1 << mantissa) - 1)
    return np.where(e == 0, np.ldexp(m.astype(np.float64), 1 - bias - mantissa),
                    np.ldexp(((1 << mantissa) | m).astype(np.float64), e - bias - mantissa))


def quantise(x, fmt):
    """float values -> the format's bits (nearest, ties to the even code; in range), as uint8."""
    values = fp8_values(fmt)
    a = np.abs(x.astype(np.float64))
    hi = np.clip(np.searchsorted(values, a), 1, values.size - 1)
    lo = hi - 1
    take_hi = (values[hi] - a < a - values[lo]) | ((values[hi] - a == a - values[lo]) & (lo % 2 == 1))
    code = np.where(take_hi, hi, lo).astype(np.uint8)
    return code | np.where(np.signbit(x), 0x80, 0).astype(np.uint8)


def dequantise(bits, fmt):
    values = fp8_values(fmt)
    v = values[bits & 0x7F]
    return np.where(bits & 0x80, -v, v)


def fp8_of(b, fmt, k_scale, v_scale):
    """Batch b's K and V stored in `fmt` over scales (one, or one a kv head): the bits, and the batch of the
    dequantised values (the stored value times its scale)."""
    bits, real = {}, {}
    for name, x, s in (("k", b.k, k_scale), ("v", b.v, v_scale)):
        per = s if s.size > 1 else np.full(b.num_kv_heads, s[0], np.float32)
        bits[name] = quantise(x / per[None, None, :, None], fmt)
        real[name] = (dequantise(bits[name], fmt) * per[None, None, :, None]).astype(np.float32)
    return bits, dataclasses.replace(b, k=real["k"], v=real["v"])


def fp8_case(seed, fmt, per_head, hq=8, hkv=2, dim=64, page=7):
    """A random batch whose K and V are stored in `fmt` over scales (one, or one a
    kv head): the bits, the scales, and the batch of the dequantised values."""
    b = random_batch(seed, hq, hkv, dim, page, "bfloat16", nodes=4, requests=5)
    k_scale = (np.linspace(0.5, 2.0, hkv) if per_head else np.array([0.75])).astype(np.float32)
    v_scale = (np.linspace(3.0, 0.25, hkv) if per_head else np.array([1.5])).astype(np.float32)
    bits, real = fp8_of(b, fmt, k_scale, v_scale)
    return bits, k_scale, v_scale, real


def kv_lengths(b):
    pages = np.diff(b.indptr)
    return (pages - 1) * b.page_size + b.last_page_len


def masked_reference(b, q, qo_indptr, sees, cap=0.0, sinks=None):
    """float64 attention of every query token over the keys sees(r, i, j) keeps, soft-capped and with
    sinks as reference's; a row that keeps none: 0, and lse -inf (or its sink)."""
    group, scale = b.num_qo_heads // b.num_kv_heads, 1.0 / math.sqrt(b.head_dim)
    out = np.zeros((q.shape[0], b.num_qo_heads, b.head_dim))
    lse = np.full((q.shape[0], b.num_qo_heads), -np.inf)
    for r, n in enumerate(kv_lengths(b)):
        pages = b.indices[b.indptr[r]:b.indptr[r + 1]]
        keys = b.k[pages].reshape(-1, b.num_kv_heads, b.head_dim)[:n].astype(np.float64)
        values = b.v[pages].reshape(-1, b.num_kv_heads, b.head_dim)[:n].astype(np.float64)
        for i, row in enumerate(range(qo_indptr[r], qo_indptr[r + 1])):
            keep = np.array([sees(r, i, j) for j in range(n)], dtype=bool)
            for h in range(b.num_qo_heads):
                sink = -np.inf if sinks is None else float(sinks[h])
                if not keep.any():
                    lse[row, h] = sink
                    continue
                s = keys[keep, h // group] @ q[row, h].astype(np.float64) * scale
                if cap:
                    s = cap * np.tanh(s / cap)
                m = s.max()
                p = np.exp(s - m)
                denominator = p.sum() + math.exp(sink - m)
                out[row, h] = p @ values[keep, h // group] / denominator
                lse[row, h] = m + math.log(denominator)
    return out, lse


def rel_l2(x: np.ndarray, ref: np.ndarray) -> float:
    x = np.asarray(x, dtype=np.float64)
    assert not np.isnan(x).any(), "NaN in the output"
    return float(np.linalg.norm(x - ref) / np.linalg.norm(ref))


# ------------------------------------------------------------------ cache forms

CACHE_FORMS = ("interleaved", "tuple", "vllm", "strided")


def cache_of(b: Batch, dtype: str, layout: str, form: str):
    """The batch's KV in one of the forms run() takes, as numpy arrays in `dtype` storage:
    interleaved: FlashInfer's (pages, 2, page, Hkv, D) / (pages, 2, Hkv, page, D);
    tuple: (k_cache, v_cache), each (pages, page, Hkv, D) / (pages, Hkv, page, D);
    vllm: one (2, pages, ...) array passed as (kv[0], kv[1]);
    strided: k and v views into a larger buffer: padded pages, heads and dims."""
    k, v = b.k, b.v
    if layout == "HND":
        k, v = k.transpose(0, 2, 1, 3), v.transpose(0, 2, 1, 3)
    k, v = store(np.ascontiguousarray(k), dtype), store(np.ascontiguousarray(v), dtype)
    if form == "interleaved":
        return np.ascontiguousarray(np.stack([k, v], axis=1))
    if form == "tuple":
        return (k, v)
    if form == "vllm":
        kv = np.ascontiguousarray(np.stack([k, v], axis=0))
        return (kv[0], kv[1])
    assert form == "strided"
    p, a, c, d = k.shape
    big = np.zeros((2, p + 1, a + 1, c + 2, d + 8), dtype=k.dtype)
    big[0, 1:, :a, 1:c + 1, :d] = k
    big[1, 1:, :a, 1:c + 1, :d] = v
    return (big[0, 1:, :a, 1:c + 1, :d], big[1, 1:, :a, 1:c + 1, :d])


def padded_block_table(b, rows, cols):
    """A batch as an engine's padded block table: one row per request, then rows of no tokens."""
    table = np.full((rows, cols), -1, np.int32)
    lens = np.zeros(rows, np.int32)
    for r in range(b.batch_size):
        pages = b.indices[b.indptr[r]:b.indptr[r + 1]]
        table[r, :pages.size] = pages
        lens[r] = (pages.size - 1) * b.page_size + b.last_page_len[r]
    return table, lens
