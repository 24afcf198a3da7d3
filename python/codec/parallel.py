"""Tensor parallelism: which heads one rank of a tensor-parallel group holds.
Attention needs no communication across ranks: every rank plans the batch
with its slice's head counts (the forest does not depend on heads, so every
rank makes the same plan) and runs it on its own q, KV cache and workspace;
the model's collectives gather the heads afterwards."""

from __future__ import annotations

import operator
from dataclasses import dataclass

from . import _codec


@dataclass(frozen=True)
class HeadSlice:
    """The query heads ``qo_begin .. qo_begin + num_qo_heads`` and kv heads
    ``kv_begin .. kv_begin + num_kv_heads`` of the model that a rank holds,
    numbered from 0 on the rank."""

    num_qo_heads: int
    num_kv_heads: int
    qo_begin: int
    kv_begin: int

    @property
    def qo_heads(self) -> slice:
        return slice(self.qo_begin, self.qo_begin + self.num_qo_heads)

    @property
    def kv_heads(self) -> slice:
        return slice(self.kv_begin, self.kv_begin + self.num_kv_heads)


def tensor_parallel_slice(num_qo_heads: int, num_kv_heads: int, tp_size: int, rank: int) -> HeadSlice:
    """The heads of ``rank`` in a group of ``tp_size``: Hkv / tp_size kv heads
    and their query heads when tp_size ≤ Hkv; one kv head, replicated on
    tp_size / Hkv ranks, and Hq / tp_size of its query heads when tp_size >
    Hkv. Raises ValueError, naming the value, when the heads do not split."""
    counts = [operator.index(x) for x in (num_qo_heads, num_kv_heads, tp_size, rank)]  # no silent truncation
    return HeadSlice(*_codec.tensor_parallel_slice(*counts))
