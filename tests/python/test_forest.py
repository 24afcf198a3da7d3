"""KVForest against derive_forest, and end to end: a KV pool managed by
KVForest (copies applied with copy_pages) gives the attention of each
request's token sequence."""

import numpy as np
import pytest

import codec
from batches import rel_l2


def signature(forest):
    """The forest as a multiset of nodes (reading requests, tokens, pages), whatever the node order."""
    return sorted((tuple(forest.node_reqs(i)), int(forest.num_tokens[i]), tuple(forest.node_pages(i)))
                  for i in range(forest.num_nodes))


def check_consistent(f: codec.KVForest):
    t = f.page_tables()
    if t.ids.size == 0:
        return
    derived = codec.derive_forest(t.indptr, t.indices, t.last_page_len, f.page_size)
    assert signature(derived) == signature(f.forest())
    for r, rid in enumerate(t.ids):
        np.testing.assert_array_equal(t.indices[t.indptr[r]:t.indptr[r + 1]], f.pages(rid))
        n = len(f.tokens(rid))
        assert (t.indptr[r + 1] - t.indptr[r] - 1) * f.page_size + t.last_page_len[r] == n


@pytest.mark.parametrize("page_size", [1, 3, 16])
def test_random_operations_match_derive_forest(page_size):
    rng = np.random.default_rng(page_size)
    f = codec.KVForest(num_pages=4000, page_size=page_size)
    prompts = [rng.integers(0, 50, size=int(rng.integers(1, 60))) for _ in range(6)]
    live = []
    for step in range(400):
        op = rng.random()
        if op < 0.35 or not live:
            base = prompts[int(rng.integers(0, len(prompts)))]
            cut = int(rng.integers(1, len(base) + 1))
            tokens = np.concatenate([base[:cut], rng.integers(0, 50, size=int(rng.integers(0, 8)))])
            live.append(f.insert(tokens).request)
        elif op < 0.5:
            live.append(f.fork(live[int(rng.integers(0, len(live)))]))
        elif op < 0.85:
            u = f.append(live[int(rng.integers(0, len(live)))], int(rng.integers(0, 50)))
            assert u.write_end - u.write_begin == 1
        else:
            f.release(live.pop(int(rng.integers(0, len(live)))))
        if step % 25 == 0:
            check_consistent(f)
    check_consistent(f)
    for rid in live:
        f.release(rid)
    assert f.free_pages == f.num_pages, "pages leaked"


def kv_of(tokens, position, heads, dim):
    """Synthetic K and V of a token: a function of its id and position, as a real model's KV is of its prefix."""
    rng = np.random.default_rng(int(tokens) * 100003 + int(position))
    return rng.uniform(-1, 1, (2, heads, dim)).astype(np.float32)


@pytest.mark.parametrize("layout", ["NHD", "HND"])
def test_managed_pool_gives_each_sequence_its_attention(layout):
    page_size, heads, kv_heads, dim = 4, 8, 2, 64
    f = codec.KVForest(num_pages=200, page_size=page_size)
    shape = (200, 2, page_size, kv_heads, dim) if layout == "NHD" else (200, 2, kv_heads, page_size, dim)
    cache = np.full(shape, np.nan, np.float32)  # unwritten slots are NaN: reading one fails the check

    def write(rid, update):
        codec.copy_pages(cache, update.copies, kv_layout=layout)
        toks = f.tokens(rid)
        for t, slot in zip(range(update.write_begin, update.write_end),
                           f.slots(rid, update.write_begin, update.write_end)):
            page, off = divmod(int(slot), page_size)
            kv = kv_of(toks[t], t, kv_heads, dim)
            if layout == "NHD":
                cache[page, :, off] = kv
            else:
                cache[page, :, :, off] = kv

    rng = np.random.default_rng(1)
    doc = rng.integers(0, 100, size=23)  # a shared document ending inside a page
    ids = []
    for _ in range(3):
        u = f.insert(np.concatenate([doc, rng.integers(0, 100, size=int(rng.integers(1, 9)))]))
        write(u.request, u)
        ids.append(u.request)
    ids.append(f.fork(ids[0]))
    for _ in range(5):  # decode steps: the fork's shared last page is copied when it diverges
        for rid in ids:
            write(rid, f.append(rid, int(rng.integers(0, 100))))
    t = f.page_tables()
    w = codec.BatchPrefixDecodeWrapper(np.zeros(1 << 20, np.uint8), kv_layout=layout)
    w.plan(t.indptr, t.indices, t.last_page_len, heads, kv_heads, dim, page_size, q_data_type="float32",
           num_pages=200)
    q = rng.uniform(-1, 1, (len(t.ids), heads, dim)).astype(np.float32)
    out = w.run(q, cache)
    for r, rid in enumerate(t.ids):
        toks = f.tokens(rid)
        kv = np.stack([kv_of(tok, pos, kv_heads, dim) for pos, tok in enumerate(toks)]).astype(np.float64)
        for h in range(heads):
            s = kv[:, 0, h // (heads // kv_heads)] @ q[r, h] / np.sqrt(dim)
            p = np.exp(s - s.max())
            ref = p @ kv[:, 1, h // (heads // kv_heads)] / p.sum()
            assert rel_l2(out[r, h], ref) < 1e-5


def test_bad_operations_raise():
    f = codec.KVForest(num_pages=2, page_size=4)
    with pytest.raises(ValueError, match="page pool exhausted"):
        f.insert(np.arange(100))  # more pages than the pool
    assert f.free_pages == 2  # nothing changed
    with pytest.raises(ValueError, match="copies\\[0\\]"):
        codec.copy_pages(np.zeros((2, 2, 4, 1, 64), np.float32), np.array([[0, 5, 1]], np.int32))
