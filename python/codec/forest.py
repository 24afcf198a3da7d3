"""The prefix forest of a batch, and a forest manager that owns a page pool
for engines without a prefix cache of their own."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, List, Sequence

import numpy as np

from . import _codec
from ._tensors import current_stream, host_int32


@dataclass(frozen=True)
class Forest:
    """A batch's prefix forest: node i holds ``num_tokens[i]`` KV tokens in
    ``pages[page_begin[i] : page_begin[i] + num_pages[i]]``, is read by the
    requests ``reqs[req_begin[i] : req_begin[i] + num_reqs[i]]``, and hangs
    under ``parent[i]`` (-1 for a root; parents come first). A request's KV
    is its path from a root to ``request_node[r]``, concatenated."""

    page_size: int
    parent: np.ndarray
    num_tokens: np.ndarray
    page_begin: np.ndarray
    num_pages: np.ndarray
    req_begin: np.ndarray
    num_reqs: np.ndarray
    pages: np.ndarray
    reqs: np.ndarray
    request_node: np.ndarray

    @property
    def num_nodes(self) -> int:
        return int(self.parent.size)

    def node_pages(self, i: int) -> np.ndarray:
        return self.pages[self.page_begin[i]: self.page_begin[i] + self.num_pages[i]]

    def node_reqs(self, i: int) -> np.ndarray:
        return self.reqs[self.req_begin[i]: self.req_begin[i] + self.num_reqs[i]]

    def depth(self) -> np.ndarray:
        """Each node's depth (roots 0)."""
        d = np.zeros(self.num_nodes, dtype=np.int32)
        for i in range(self.num_nodes):
            d[i] = 0 if self.parent[i] < 0 else d[self.parent[i]] + 1
        return d


def derive_forest(indptr: Any, indices: Any, last_page_len: Any, page_size: int) -> Forest:
    """The prefix forest of standard page tables (FlashInfer's CSR form), as
    the planner sees it: a node is a maximal run of pages used by the same
    set of requests. O(total pages)."""
    return Forest(**_codec.derive_forest(host_int32(indptr, "indptr"), host_int32(indices, "indices"),
                                         host_int32(last_page_len, "last_page_len"), int(page_size)))


@dataclass(frozen=True)
class KVUpdate:
    """What the caller must do to the KV pool after a KVForest operation:
    apply ``copies`` (rows src, dst, num_tokens: the first num_tokens token
    slots of page src to page dst) with ``copy_pages``, then write the KV of
    the request's tokens [write_begin, write_end) (their slots: ``slots``)."""

    request: int
    copies: np.ndarray
    write_begin: int
    write_end: int


@dataclass(frozen=True)
class PageTables:
    """Page tables of the live requests, in ascending id order (``ids``)."""

    ids: np.ndarray
    indptr: np.ndarray
    indices: np.ndarray
    last_page_len: np.ndarray


class KVForest:
    """A radix tree over token ids at page granularity that owns a pool of
    ``num_pages`` pages of ``page_size`` tokens: full pages whose tokens and
    prefix match are shared; where sequences diverge inside a page, that page
    is copied for each branch, so every request's page list is a standard
    page table. It moves no KV: operations return the copies and token slots
    the caller applies and writes."""

    def __init__(self, num_pages: int, page_size: int) -> None:
        self._m = _codec.ForestManager(int(page_size), int(num_pages))

    def insert(self, tokens: Sequence[int]) -> KVUpdate:
        """A new request for ``tokens`` (non-empty), sharing the longest prefix
        of whole pages already held; write_begin is the count of tokens whose
        KV is reused. Raises ValueError when the pool runs out (nothing changes)."""
        request, copies, begin, end = self._m.insert(host_int32(np.asarray(tokens), "tokens"))
        return KVUpdate(request, copies, begin, end)

    def fork(self, request: int) -> int:
        """A new request with the same tokens, sharing every page (parallel sampling, beams)."""
        return self._m.fork(request)

    def append(self, request: int, token: int) -> KVUpdate:
        """Appends one token (a decode step); a shared last page is copied first."""
        copies, begin, end = self._m.append(request, int(token))
        return KVUpdate(request, copies, begin, end)

    def release(self, request: int) -> None:
        """Drops the request; pages nobody references return to the pool."""
        self._m.release(request)

    def alive(self, request: int) -> bool:
        return self._m.alive(request)

    def pages(self, request: int) -> np.ndarray:
        return self._m.pages(request)

    def tokens(self, request: int) -> np.ndarray:
        return self._m.tokens(request)

    def slots(self, request: int, begin: int, end: int) -> np.ndarray:
        """Token slots page · page_size + offset of the request's tokens [begin, end)."""
        t = np.arange(begin, end, dtype=np.int64)
        pages = self.pages(request).astype(np.int64)
        return pages[t // self.page_size] * self.page_size + t % self.page_size

    @property
    def live_requests(self) -> List[int]:
        return list(self._m.live_requests())

    def ref_count(self, page: int) -> int:
        return self._m.ref_count(page)

    @property
    def page_size(self) -> int:
        return self._m.page_size

    @property
    def num_pages(self) -> int:
        return self._m.num_pages

    @property
    def free_pages(self) -> int:
        return self._m.free_pages

    def page_tables(self) -> PageTables:
        return PageTables(*self._m.page_tables())

    def forest(self) -> Forest:
        """The forest of the live requests, built from the tree itself; equal
        to ``derive_forest(*page_tables())`` up to node order."""
        return Forest(**self._m.forest())


def copy_pages(paged_kv_cache: Any, copies: Any, kv_layout: str = "NHD") -> None:
    """Applies a KVForest's page copies to the cache, in order, on the
    cache's device (the current CUDA stream there). paged_kv_cache takes the
    forms ``BatchPrefixDecodeWrapper.run`` takes; copies is (n, 3) int32 (src,
    dst, num_tokens) or a list of such arrays."""
    if kv_layout not in ("NHD", "HND"):
        raise ValueError(f"kv_layout {kv_layout!r} is not 'NHD' or 'HND'")
    if isinstance(copies, (list, tuple)):
        copies = np.concatenate([np.asarray(c, dtype=np.int32).reshape(-1, 3) for c in copies] or
                                [np.zeros((0, 3), np.int32)])
    flat = host_int32(np.asarray(copies).reshape(-1), "copies")
    if isinstance(paged_kv_cache, (tuple, list)):
        k, v = paged_kv_cache
    else:
        k, v = paged_kv_cache, None
    _codec.copy_pages(k, v, kv_layout == "HND", flat, current_stream(k))
