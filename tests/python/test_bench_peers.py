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
