"""The per-step builder of ``paged|codec``: at the first layer of each of
the engine's layer groups in a step (the layers that share page tables),
which of its rows decode and which run prefill chunks, the page tables of
the requests its backend computes and the new tokens' cache slots
(``Step``, or ``GraphStep`` for a step captured in one of the engine's CUDA
graphs), planned once by a ``DecodeBackend`` for every layer of the group.
Nothing here is CoDec's: the backend is."""

from __future__ import annotations

from typing import Any, List, Optional, Protocol, Tuple, Union

import numpy as np
import torch

from ..paging import page_starts, page_tables_from_block_table, page_tables_from_slots


class Step:
    """One engine step's rows for one layer group, read at the group's first
    layer: which requests decode (one query token) and which run prefill
    chunks, and the page tables (CSR: ``indptr``, ``indices``,
    ``last_page_len``, pages of ``page_size`` tokens) of the requests the
    backend computes (``requests``): the decode requests, or with a backend
    that takes prefill chunks too (``DecodeBackend.prefill``) every request
    of the step, with their ``qo_indptr`` (None when each has one token).
    ``rows`` are the step's rows the backend computes (None: all of them);
    ``prefill`` the chunks left to ``PagedAttention``'s SDPA, as (q0, q1,
    k0, k1). On the block-table path it also holds the cache slots of the
    new tokens, which the engine then leaves to the attention to write.

    The plan is for the group's attention: ``window_left`` (FlashInfer's,
    -1: none) and ``logits_soft_cap`` (None: none). A group of
    sliding-window layers (``ring``: the engine keeps each request's last
    ``ring`` tokens in a ring of slots that is not block-aligned, and lists
    the new tokens' KV as ``sentinel`` slots) has pages of one token, in the
    tokens' order. Where every request's KV fits the ring (decode rows;
    chunks no longer than the room the ring has) the pages are its slots,
    the new tokens written first: the ring then holds exactly the keys the
    rows see, so the plan takes no window. A chunk that would overwrite keys
    its own first rows see (``gathered``) reads instead the engine's gather
    of each request's cached and new KV (``PagedAttentionCache.update``,
    request after request), under the window."""

    def __init__(self, query: torch.Tensor, cu_seq_lens_q: torch.Tensor, cu_seq_lens_k: torch.Tensor,
                 block_size: int, read_slots: Optional[torch.Tensor], block_table: Optional[torch.Tensor],
                 write_trash: int, write_slots: Optional[torch.Tensor] = None, backend_prefill: bool = False,
                 group: int = 0, ring: int = 0, sentinel: int = -1, window_left: int = -1,
                 logits_soft_cap: Optional[float] = None) -> None:
        # The step's lengths on the host: two small copies (the engine made them from host lists).
        self.cu_q = cu_seq_lens_q.to("cpu").numpy().astype(np.int64)
        self.cu_k = cu_seq_lens_k.to("cpu").numpy().astype(np.int64)
        q_lens = np.diff(self.cu_q)
        tokens = query.shape[2]
        self.group, self.page_size, self.logits_soft_cap = group, 1 if ring else block_size, logits_soft_cap
        self.window_left, self.gathered, self._gathered_rows = window_left, False, 0
        self.decode = np.flatnonzero(q_lens == 1)
        self.all_decode = self.decode.size == q_lens.size and self.decode.size == tokens
        chunked = np.flatnonzero(q_lens > 1)
        self.requests = np.flatnonzero(q_lens >= 1) if backend_prefill else self.decode  # padding has no token
        self.qo_indptr = (np.concatenate([[0], np.cumsum(q_lens[self.requests])]).astype(np.int32)
                          if backend_prefill and chunked.size else None)
        self.prefill = [] if backend_prefill else [
            (int(self.cu_q[r]), int(self.cu_q[r + 1]), int(self.cu_k[r]), int(self.cu_k[r + 1])) for r in chunked]
        rows = np.arange(int(self.cu_q[-1])) if backend_prefill else self.cu_q[self.decode]
        self.all_rows = rows.size == tokens
        self.rows = None if self.all_rows else torch.from_numpy(rows).to(query.device)
        self.write_slots = None
        if not self.requests.size:
            return
        if block_table is not None:  # decode-only, and in graph mode padded with rows of no tokens
            if chunked.size:
                raise ValueError(f"a step with {chunked.size} prefill chunks came with a block table: the engine "
                                 "passes block tables for decode-only steps")
            seq_lens = self.cu_k[self.decode + 1] - self.cu_k[self.decode]
            pages = -(-seq_lens // block_size)
            table = block_table[:, :int(pages.max())].to("cpu").numpy()[self.decode]  # one copy of the columns in use
            self.indptr, self.indices, self.last_page_len = page_tables_from_block_table(table, seq_lens, block_size)
            last = seq_lens - 1  # the new token: the last of each request
            slots = np.full(tokens, write_trash, dtype=np.int64)  # padding tokens write where nothing reads
            slots[self.cu_q[self.decode]] = (table[np.arange(seq_lens.size), last // block_size].astype(np.int64)
                                             * block_size + last % block_size)
            self.write_slots = torch.from_numpy(slots).to(query.device)
            return
        # The slots of the pages' first tokens, one small gather: from the read slots, or where the engine
        # reads no cache (every request a whole prompt, its KV its new tokens) from the new tokens' slots.
        read = read_slots is not None and read_slots.numel() > 0
        slots, cu = (read_slots, self.cu_k) if read else (write_slots, self.cu_q)
        seq_lens = cu[self.requests + 1] - cu[self.requests]
        positions = page_starts(cu, self.page_size, self.requests)
        if ring:
            self.gathered = bool(seq_lens.max() > ring)
            if self.gathered:  # the pages are the gathered rows themselves
                self._gathered_rows = int(cu[-1])
                self.indptr, self.indices, self.last_page_len = page_tables_from_slots(positions, seq_lens, 1)
                return
            self.window_left = -1  # every key the ring holds lies in every row's window
            if read:  # the engine lists the new tokens as a sentinel slot (it reads a ring before writing it)
                slots = slots.clone()
                slots[slots == sentinel] = write_slots
        if slots is None:
            raise ValueError("a step that reads no cache needs its write slots for its page tables")
        starts = slots[torch.from_numpy(positions).to(slots.device)].to("cpu").numpy()
        self.indptr, self.indices, self.last_page_len = page_tables_from_slots(starts, seq_lens, self.page_size)

    def num_pages(self, cache: Any) -> int:
        """The pages of the pool the page tables index: the gathered rows, or the engine cache's pages."""
        return self._gathered_rows if self.gathered else cache.key_cache[0].shape[0] // self.page_size


class GraphStep:
    """A decode-only step captured in one of the engine's CUDA graphs: its
    rows (the batch padded to the graph's size; padding rows hold no tokens)
    and the new tokens' slots are tensors on the device, which each replay
    refills, and the plan is made in the stream (``plan_in_stream``). The
    engine's block table may have fewer rows than the step has tokens (its
    padding caps the sequences at its most requests): the tokens past its
    rows are padding too."""

    prefill: List[Tuple[int, int, int, int]] = []
    qo_indptr = None
    group = 0  # the engine passes block tables only to models of one layer group
    gathered = False

    def __init__(self, block_table: torch.Tensor, cu_seq_lens_k: torch.Tensor, tokens: int, block_size: int,
                 write_trash: int, window_left: int = -1, logits_soft_cap: Optional[float] = None) -> None:
        self.page_size, self.window_left, self.logits_soft_cap = block_size, window_left, logits_soft_cap
        rows = min(tokens, block_table.shape[0])
        self.decode = self.requests = np.arange(rows)
        self.all_decode = self.all_rows = rows == tokens
        self.rows = None if self.all_rows else torch.arange(rows, device=block_table.device)
        self.block_table, self.cu_seq_lens_k = block_table[:rows], cu_seq_lens_k[:rows + 1]
        lens = self.cu_seq_lens_k[1:] - self.cu_seq_lens_k[:-1]
        last = (lens - 1).clamp_(min=0)
        page = self.block_table.gather(1, (last // block_size).long()[:, None])[:, 0].long()
        # padding writes into the engine's write-trash slot, which nothing reads
        self.write_slots = torch.full((tokens,), write_trash, dtype=torch.long, device=block_table.device)
        self.write_slots[:rows] = torch.where(lens > 0, page * block_size + last % block_size, write_trash)


class DecodeBackend(Protocol):
    """What computes a step's decode rows (CoDec's: ``CodecDecode``): planned
    once per step and layer group at the group's first layer, run at every
    layer. ``prefill``: it computes the rows of prefill chunks too, causally,
    in the same plan (the step's ``qo_indptr``); without it
    ``PagedAttention`` runs them by SDPA."""

    prefill: bool = False

    def plan(self, cache: Any, step: Step, query: torch.Tensor, scale: float) -> None:
        """Plans an eager step's requests (``step.requests``: its page tables,
        pages of ``step.page_size`` tokens among ``step.num_pages(cache)``, and
        ``qo_indptr``) for every layer of its group, under its
        ``window_left`` and ``logits_soft_cap``."""

    def plan_in_stream(self, cache: Any, step: GraphStep, query: torch.Tensor, scale: float) -> None:
        """Plans a step being captured in a CUDA graph, so that every replay plans its own batch."""

    def run(self, cache: Any, step: Union[Step, GraphStep], q: torch.Tensor,
            pages: Tuple[torch.Tensor, torch.Tensor], out: torch.Tensor,
            sinks: Optional[torch.Tensor] = None) -> None:
        """Attention of the step's planned rows q (n, Hq, D) over the layer's
        ``pages`` (k and v, (pages, page_size, Hkv, D)) into out (n, Hq, D),
        with the layer's attention sinks (gpt-oss: (Hq,) float32 logits),
        passed only for a layer that has them."""

    def check_stream_plans(self, cache: Any = None) -> None:
        """Raises RuntimeError with the first error a graph replay's plan met
        since the last check, for one engine cache or all."""


def build_step(backend: DecodeBackend, cache: Any, query: torch.Tensor, scale: float, cu_seq_lens_q: torch.Tensor,
               cu_seq_lens_k: torch.Tensor, read_slots: Optional[torch.Tensor], block_table: Optional[torch.Tensor],
               write_slots: Optional[torch.Tensor] = None, group: int = 0, ring: int = 0, window_left: int = -1,
               logits_soft_cap: Optional[float] = None) -> Union[Step, GraphStep]:
    """A new step of a layer group, read at the group's first layer
    (``block_table``: the group's, on the block-table path; ``write_slots``:
    the new tokens' cache slots, the engine's; ``ring``: the sliding window
    the engine keeps the group's KV in a ring of, 0 for blocks) and planned
    by ``backend`` for the group's attention (``scale``, ``window_left``,
    ``logits_soft_cap``)."""
    if block_table is not None and query.is_cuda and torch.cuda.is_current_stream_capturing():
        # captured in a graph: nothing may wait for the device, and every replay must re-plan
        graph_step = GraphStep(block_table, cu_seq_lens_k, query.shape[2], cache.block_size, cache.write_trash_index,
                               window_left, logits_soft_cap)
        backend.plan_in_stream(cache, graph_step, query, scale)
        return graph_step
    backend.check_stream_plans(cache)  # the replays since the last eager step
    step = Step(query, cu_seq_lens_q, cu_seq_lens_k, cache.block_size, read_slots, block_table, cache.write_trash_index,
                write_slots, getattr(backend, "prefill", False), group, ring, cache.sentinel_index, window_left,
                logits_soft_cap)
    if step.requests.size:
        backend.plan(cache, step, query, scale)
    return step
