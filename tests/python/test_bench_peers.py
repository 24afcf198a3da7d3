"""The peers that bench/peers.py builds itself, checked on the CPU before any
GPU time goes to them: the Hydragen-style decomposition (bench/hydragen.py)
against float64 where torch is installed, and everywhere the structure of
the cascade levels FlashInfer's cascade gets (bench/cascade.py: each level's
groups cover every request once; their KV lists and last page lengths are
the forest's nodes)."""

import numpy as np
import pytest

import codec
from batches import random_batch, reference, rel_l2
from bench.cascade import cascade_levels, forest_json


def hydragen_and_torch():
    torch = pytest.importorskip("torch", reason="torch is not installed: the Hydragen-style peer is torch code")
    from bench.hydragen import Hydragen
    return Hydragen, torch


@pytest.mark.torch
@pytest.mark.parametrize("kernel", ["matmul", "flash"])
@pytest.mark.parametrize("seed,hq,hkv,page_size,requests,fork", [
    (1, 8, 2, 16, 6, 0.2), (2, 32, 8, 16, 9, 0.3), (3, 4, 4, 5, 7, 0.0), (4, 16, 1, 1, 5, 0.5), (5, 8, 2, 3, 1, 0.0)])
def test_hydragen_matches_float64(seed, hq, hkv, page_size, requests, fork, kernel):
    Hydragen, torch = hydragen_and_torch()
    b = random_batch(seed, hq, hkv, 64, page_size, requests=requests, fork_prob=fork)
    forest = forest_json(codec.derive_forest(b.indptr, b.indices, b.last_page_len, page_size))
    assert any(len(n["pages"]) for n in forest["nodes"])
    hyd = Hydragen(forest, torch.from_numpy(b.k), torch.from_numpy(b.v), hq, 1 / 8, kernel)
    out = hyd(torch.from_numpy(b.q)).numpy()
    assert rel_l2(out, reference(b)[0]) <= 1e-5


@pytest.mark.torch
def test_hydragen_refuses_an_unknown_kernel():
    Hydragen, torch = hydragen_and_torch()
    b = random_batch(1, 8, 2, 64, 16, requests=2)
    forest = forest_json(codec.derive_forest(b.indptr, b.indices, b.last_page_len, 16))
    with pytest.raises(ValueError, match="kernel: 'matmul' or 'flash', not 'cudnn'"):
        Hydragen(forest, torch.from_numpy(b.k), torch.from_numpy(b.v), 8, 1 / 8, "cudnn")


def test_cascade_levels_group_every_nodes_requests():
    b = random_batch(7, 8, 2, 64, 16, nodes=1, requests=5, max_node_pages=3)  # one root: two levels
    forest = forest_json(codec.derive_forest(b.indptr, b.indices, b.last_page_len, 16))
    levels = cascade_levels(forest, 16)
    if levels is None:
        pytest.skip("this batch's requests sit at different depths")
    order, qo, kv_indptr, kv_indices, last = levels
    assert sorted(order) == list(range(b.batch_size))
    for lvl in range(len(qo)):  # each level's groups cover the requests once, in order
        assert qo[lvl][0] == 0 and qo[lvl][-1] == b.batch_size and np.all(np.diff(qo[lvl]) > 0)
        assert len(kv_indptr[lvl]) == len(qo[lvl]) and kv_indptr[lvl][-1] == len(kv_indices[lvl])
        assert len(last[lvl]) == len(qo[lvl]) - 1
    # concatenated over the levels, a request's KV pages are its page table;
    # its groups' last pages are full but on the last level, where the
    # request's own last page length is
    for pos, r in enumerate(order):
        pages = []
        for lvl in range(len(qo)):
            g = int(np.searchsorted(qo[lvl], pos, side="right")) - 1
            pages += kv_indices[lvl][kv_indptr[lvl][g]:kv_indptr[lvl][g + 1]]
            assert last[lvl][g] == (b.last_page_len[r] if lvl == len(qo) - 1 else 16), (r, lvl)
        assert pages == b.indices[b.indptr[r]:b.indptr[r + 1]].tolist(), r


def test_keep_matrices_follow_flashinfers_conventions():
    from bench.queries import keep_matrices
    qo_indptr, kv_lens = [0, 3, 4], [5, 2]
    causal = keep_matrices("causal", qo_indptr, kv_lens)  # token i keeps key j iff j <= kv_len - q_len + i
    assert causal[0].tolist() == [[1, 1, 1, 0, 0], [1, 1, 1, 1, 0], [1, 1, 1, 1, 1]]
    assert causal[1].tolist() == [[1, 1]]
    # a draft tree over the new tokens (each request's bits from a byte boundary), the rest kept
    draft = [np.array([[1, 0, 0], [1, 1, 0], [1, 0, 1]], bool), np.array([[1]], bool)]
    bits = np.concatenate([np.packbits(m.ravel(), bitorder="little") for m in draft])
    got = keep_matrices("draft", qo_indptr, kv_lens, bits)
    assert got[0].tolist() == [[1, 1, 1, 0, 0], [1, 1, 1, 1, 0], [1, 1, 1, 0, 1]] and got[1].tolist() == [[1, 1]]
    rng = np.random.default_rng(3)
    custom = [rng.random((3, 5)) < 0.5, rng.random((1, 2)) < 0.5]
    bits = np.concatenate([np.packbits(m.ravel(), bitorder="little") for m in custom])
    assert all(np.array_equal(a, b) for a, b in zip(keep_matrices("custom", qo_indptr, kv_lens, bits), custom))
    with pytest.raises(ValueError, match="mask: 'causal', 'draft' or 'custom', not 'tree'"):
        keep_matrices("tree", qo_indptr, kv_lens)


def test_token_levels_count_each_requests_query_tokens():
    from bench.queries import token_levels
    order, qo = [2, 0, 1], [[0, 3], [0, 1, 3]]  # one root over all, then request 2 alone and 0, 1 together
    rows, levels = token_levels(order, qo, [0, 2, 3, 7])  # q_len 2, 1, 4
    assert rows.tolist() == [3, 4, 5, 6, 0, 1, 2]
    assert levels == [[0, 7], [0, 4, 7]]
