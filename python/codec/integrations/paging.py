"""Page tables from the slot-addressed caches engines keep: the cache is one
tensor of slots, page p holding slots ``p·block_size .. (p + 1)·block_size``,
and a request's KV tokens are listed by slot, or its pages by block id. No
torch needed."""

from __future__ import annotations

from typing import Tuple

import numpy as np


def page_tables_from_slots(page_start_slots: np.ndarray, seq_lens: np.ndarray,
                           block_size: int) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """CSR page tables (indptr, indices, last_page_len) of requests whose
    pages start at the given cache slots (``page_start_slots``: the slot of
    token ``j·block_size`` of every request, request after request, as
    ``page_starts`` lists them) and which hold ``seq_lens`` tokens."""
    seq_lens = np.asarray(seq_lens, dtype=np.int64)
    if seq_lens.size and seq_lens.min() < 1:
        raise ValueError(f"every request needs a KV token; seq_lens has {int(seq_lens.min())}")
    pages = (seq_lens + block_size - 1) // block_size
    slots = np.asarray(page_start_slots, dtype=np.int64)
    if slots.size != int(pages.sum()):
        raise ValueError(f"{slots.size} page starts for {int(pages.sum())} pages")
    if slots.size and (slots % block_size).any():
        raise ValueError("a page's first token is not at the start of a cache block: the engine's layout is not "
                         "block-aligned (a sliding-window ring takes pages of one token)")
    indptr = np.zeros(seq_lens.size + 1, dtype=np.int32)
    np.cumsum(pages, out=indptr[1:])
    return indptr, (slots // block_size).astype(np.int32), (seq_lens - (pages - 1) * block_size).astype(np.int32)


def page_starts(cu_seq_lens_k: np.ndarray, block_size: int, requests: np.ndarray) -> np.ndarray:
    """Positions, in the engine's concatenated read slots, of the first token of
    every page of the given requests (request r's KV tokens are the slots
    ``cu_seq_lens_k[r] : cu_seq_lens_k[r + 1]``)."""
    starts = cu_seq_lens_k[requests].astype(np.int64)
    lens = (cu_seq_lens_k[requests + 1] - cu_seq_lens_k[requests]).astype(np.int64)
    pages = (lens + block_size - 1) // block_size
    first = np.repeat(np.cumsum(pages) - pages, pages)  # each page's request's first page, in page order
    return np.repeat(starts, pages) + (np.arange(int(pages.sum())) - first) * block_size


def page_tables_from_block_table(block_table: np.ndarray, seq_lens: np.ndarray,
                                 block_size: int) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """CSR page tables (indptr, indices, last_page_len) of requests whose
    block ids are the rows of ``block_table`` (one row per request, as many
    columns as the longest needs or more, unused entries arbitrary) and which
    hold ``seq_lens`` tokens."""
    table = np.asarray(block_table)
    seq_lens = np.asarray(seq_lens, dtype=np.int64)
    if table.ndim != 2 or table.shape[0] != seq_lens.size:
        raise ValueError(f"block_table of shape {table.shape} for {seq_lens.size} requests")
    if seq_lens.size and seq_lens.min() < 1:
        raise ValueError(f"every request needs a KV token; seq_lens has {int(seq_lens.min())}")
    pages = (seq_lens + block_size - 1) // block_size
    if pages.size and pages.max() > table.shape[1]:
        raise ValueError(f"a request of {int(seq_lens.max())} tokens needs {int(pages.max())} blocks; "
                         f"block_table has {table.shape[1]} columns")
    used = np.arange(table.shape[1])[None, :] < pages[:, None]  # row-major: request after request
    indices = table[used].astype(np.int32)
    if indices.size and indices.min() < 0:
        raise ValueError("block_table lists no block (a negative id) for a page a request holds")
    indptr = np.zeros(seq_lens.size + 1, dtype=np.int32)
    np.cumsum(pages, out=indptr[1:])
    return indptr, indices, (seq_lens - (pages - 1) * block_size).astype(np.int32)
