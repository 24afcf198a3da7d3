"""Tensor parallelism on the CPU engine: the head slices of a group cover
every head once (numpy, runs on CI), and two processes under
torch.distributed's gloo backend, each planning and running its slice and
all-gathering the heads, give the single process's output (where torch is
installed)."""

import numpy as np
import pytest

import codec
from batches import random_batch, reference, rel_l2


@pytest.mark.parametrize("hq,hkv", [(32, 8), (32, 1), (40, 8), (8, 8)])
def test_slices_cover_every_query_head_once(hq, hkv):
    for tp in (1, 2, 4, 8):
        if hq % tp or (hkv % tp and tp % hkv):
            continue
        held = np.zeros(hq, dtype=int)
        for rank in range(tp):
            s = codec.tensor_parallel_slice(hq, hkv, tp, rank)
            held[s.qo_heads] += 1
            heads = np.arange(hq)[s.qo_heads]  # their model kv heads are the rank's
            assert np.array_equal(heads // (hq // hkv), s.kv_begin + np.arange(s.num_qo_heads) // (s.num_qo_heads // s.num_kv_heads))
        assert (held == 1).all(), (tp, held)


def test_groups_that_do_not_split_the_heads_are_refused():
    with pytest.raises(ValueError, match="tensor-parallel size 3 does not divide num_qo_heads 32"):
        codec.tensor_parallel_slice(32, 8, 3, 0)
    with pytest.raises(ValueError, match="rank 2 is outside"):
        codec.tensor_parallel_slice(32, 8, 2, 2)


def run_slice(b, heads, workspace_mb=32):
    """CoDec on the CPU engine over the heads `heads` (a HeadSlice) of batch b (numpy)."""
    w = codec.BatchPrefixDecodeWrapper(np.empty(workspace_mb << 20, dtype=np.uint8), num_threads=1)
    w.plan(b.indptr, b.indices, b.last_page_len, heads.num_qo_heads, heads.num_kv_heads, b.head_dim, b.page_size,
           q_data_type="float32", num_pages=b.num_pages)
    k = np.ascontiguousarray(b.k[:, :, heads.kv_heads])
    v = np.ascontiguousarray(b.v[:, :, heads.kv_heads])
    return w.run(np.ascontiguousarray(b.q[:, heads.qo_heads]), (k, v))


def tp_worker(rank, world, port, out_path):
    import torch
    import torch.distributed as dist
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    try:
        b = random_batch(11, 32, 8, 64, 16)  # every rank draws the same batch
        mine = torch.from_numpy(np.asarray(run_slice(b, codec.tensor_parallel_slice(32, 8, world, rank))))
        parts = [torch.empty_like(mine) for _ in range(world)]
        dist.all_gather(parts, mine)
        if rank == 0:
            np.save(out_path, torch.cat(parts, dim=1).numpy())
    finally:
        dist.destroy_process_group()


@pytest.mark.torch
def test_two_gloo_processes_equal_one(tmp_path):
    torch = pytest.importorskip("torch", reason="torch is not installed: the gloo run needs torch.distributed")
    import socket
    import torch.multiprocessing as mp
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out_path = str(tmp_path / "tp.npy")
    mp.spawn(tp_worker, args=(2, port, out_path), nprocs=2, join=True)
    gathered = np.load(out_path)
    b = random_batch(11, 32, 8, 64, 16)
    single = np.asarray(run_slice(b, codec.tensor_parallel_slice(32, 8, 1, 0)))
    assert gathered.shape == single.shape
    np.testing.assert_allclose(gathered, single, rtol=1e-5, atol=1e-6)
    assert rel_l2(gathered, reference(b)[0]) <= 1e-5
