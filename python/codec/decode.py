"""BatchPrefixDecodeWrapper: decode attention over paged KV in the shape of
FlashInfer's BatchDecodeWithPagedKVCacheWrapper, where requests that share
KV pages (a common prefix) read them once per batch."""

from __future__ import annotations

from typing import Any, Optional

from ._paged import PagedWrapper, require as _require
from ._tensors import host_int32, is_torch

class BatchPrefixDecodeWrapper(PagedWrapper):
    """Decode attention for a batch of requests over a paged KV cache, one
    query token a request or a few causal ones (draft tokens to verify), with
    every KV page that several requests share read once per batch (CoDec).
    The interface is FlashInfer's ``BatchDecodeWithPagedKVCacheWrapper``:
    ``plan`` once per batch (every layer reuses it), then ``run`` per layer.

    The lse that ``run`` returns is in natural log by default; FlashInfer's
    wrappers and ``merge_state`` use base 2, so code that merges lse the
    FlashInfer way passes ``run(..., lse_base=2)``.

    Args:
        workspace_buffer: a uint8 tensor or array on the device the work runs
            on: a CPU array (numpy, torch) runs the CPU engine; a CUDA tensor
            (torch, CuPy) the CUDA engine on that tensor's device. It holds
            the plan and the partial results; ``plan`` raises naming the bytes
            a batch needs when it is too small (128 MiB holds most batches).
        kv_layout: "NHD" (pages, page_size, num_kv_heads, head_dim) or "HND"
            (pages, num_kv_heads, page_size, head_dim).
        use_cuda_graph: every plan is laid out in the workspace for the
            maxima below, so a CUDA graph captured around ``run`` replays the
            exact result of each later ``plan`` without re-capture. ``plan``
            writes the new plan into the workspace on the current stream.
        max_batch_size, max_num_pages: the maxima of CUDA-graph mode:
            requests per batch and entries of ``indices`` (page-table entries).
            In that mode q and out may hold up to max_batch_size rows; rows
            past a batch come out as zeros (lse -inf).
        max_query_tokens: with several query tokens a request in CUDA-graph
            mode, the most rows of q a batch may bring (and out may hold). By
            default the first ``plan`` fixes it, as FlashInfer freezes
            q_len_per_req: max_batch_size × its q_len_per_req, or its
            qo_indptr's tokens; a first plan of one token a request fixes
            one a request. ``plan_block_table_in_stream`` with a device
            qo_indptr needs it given.
        use_tensor_cores, paged_kv_indptr_buffer, paged_kv_indices_buffer,
        paged_kv_last_page_len_buffer, backend: FlashInfer's, accepted so that
            code written for it runs unchanged: the buffers' lengths give the
            maxima of CUDA-graph mode; CoDec always uses tensor cores.
        jit_args: FlashInfer's custom JIT variants; refused unless None.
        num_threads: CPU engine threads (0: OpenMP's default).
    """
    def __init__(
        self,
        workspace_buffer: Any,
        kv_layout: str = "NHD",
        use_cuda_graph: bool = False,
        use_tensor_cores: bool = False,
        paged_kv_indptr_buffer: Any = None,
        paged_kv_indices_buffer: Any = None,
        paged_kv_last_page_len_buffer: Any = None,
        backend: str = "auto",
        jit_args: Any = None,
        *,
        max_batch_size: Optional[int] = None,
        max_num_pages: Optional[int] = None,
        max_query_tokens: Optional[int] = None,
        num_threads: int = 0,
    ) -> None:
        del use_tensor_cores  # CoDec's kernels always run on tensor cores
        _require(jit_args is None, "jit_args: FlashInfer's JIT attention variants are not supported (CoDec's "
                 "kernels are compiled with the package)")
        if paged_kv_last_page_len_buffer is not None and max_batch_size is None:
            max_batch_size = len(paged_kv_last_page_len_buffer)
        if paged_kv_indices_buffer is not None and max_num_pages is None:
            max_num_pages = len(paged_kv_indices_buffer)
        super().__init__(workspace_buffer, kv_layout, use_cuda_graph, backend, max_batch_size, max_num_pages,
                         num_threads, max_query_tokens)
        self._uniform_qo = {}  # (rows, q_len_per_req, device) -> its device qo_indptr, for in-stream plans
        self._q_len_per_req = None  # the plan's query tokens a request where uniform (None: a qo_indptr's)

    def plan(
        self,
        indptr: Any,
        indices: Any,
        last_page_len: Any,
        num_qo_heads: int,
        num_kv_heads: int,
        head_dim: int,
        page_size: int,
        pos_encoding_mode: str = "NONE",
        window_left: int = -1,
        logits_soft_cap: Optional[float] = None,
        q_data_type: Any = "float16",
        kv_data_type: Any = None,
        data_type: Any = None,
        sm_scale: Optional[float] = None,
        rope_scale: Optional[float] = None,
        rope_theta: Optional[float] = None,
        non_blocking: bool = True,
        *,
        num_pages: Optional[int] = None,
        q_len_per_req: int = 1,
        qo_indptr: Any = None,
        window_right: int = 0,
        o_data_type: Any = None,
        block_tables: Any = None,
        seq_lens: Any = None,
        fixed_split_size: Optional[int] = None,
        disable_split_kv: bool = False,
    ) -> None:
        """Plans the batch: request r's KV is pages ``indices[indptr[r]:indptr[r+1]]``,
        all full but the last, which holds ``last_page_len[r]`` tokens.

        Args:
            indptr, indices, last_page_len: the page table in CSR form, int32
                tensors or arrays on the host or a device (device ones are
                copied once, here). Requests whose lists start with the same
                page ids share that KV.
            num_qo_heads, num_kv_heads, head_dim, page_size: the attention
                shape; head_dim 64, 128 or 256.
            q_data_type, kv_data_type (data_type: FlashInfer's older name):
                torch or numpy dtypes or "float16", "bfloat16", "float32";
                q and KV share one (float32 on the CPU engine only), but an
                fp8 cache ("float8_e4m3fn", "float8_e5m2") under float16 or
                bfloat16 queries.
            sm_scale: the softmax scale, 1/sqrt(head_dim) by default.
            num_pages: the page pool's size, checked against the cache at
                ``run`` (default: the largest page index + 1).
            q_len_per_req, qo_indptr: several query tokens a request (draft
                tokens to verify), the last of its KV, each seeing the keys
                up to its own (causal): q_len_per_req of them each, or
                request r's rows ``qo_indptr[r]:qo_indptr[r+1]`` of q and
                out; ``run`` then takes a row per query token. Other masks:
                ``BatchPrefixPrefillWrapper``.
            logits_soft_cap: each logit s becomes cap · tanh(s / cap)
                (Gemma 2's); None or 0: none.
            window_left: a sliding window, FlashInfer's (-1: none): a query
                token sees window_left + 1 keys up to its own (transformers'
                sliding_window w is w - 1). In CUDA-graph mode a window
                needs masks at the capacity: a first plan with one fixes
                max_query_tokens to max_batch_size if it was not given.
            pos_encoding_mode, rope_scale, rope_theta: FlashInfer's; CoDec
                supports their defaults only (apply RoPE before writing the
                cache) and refuses others.
            window_right, o_data_type, block_tables, seq_lens,
            fixed_split_size, disable_split_kv: FlashInfer 0.6's keywords.
                window_right must be 0 (no key after a token's own) and
                o_data_type q's (or None); block_tables and seq_lens, the
                batch in its trtllm-gen backend's form, are accepted and not
                read (the CSR tables plan it); CoDec's planner chooses the KV
                splits, so fixed splits are refused.
        """
        del non_blocking  # page tables are read on the host; device ones are copied once here either way
        del block_tables, seq_lens  # the CSR tables plan the batch
        _require(window_right == 0, f"window_right {window_right}: no query token sees keys after its own (only 0)")
        _require(isinstance(q_len_per_req, int) and q_len_per_req >= 1,
                 f"q_len_per_req {q_len_per_req!r} must be an int >= 1")
        tokens = 0  # the maximum a CUDA-graph wrapper's first plan fixes: none where one a request
        per_req = q_len_per_req if qo_indptr is None else None  # run's q_len_per_req check
        if qo_indptr is not None:
            qo_indptr = host_int32(qo_indptr, "qo_indptr")
            tokens = max(int(qo_indptr[-1]) if qo_indptr.size else 0, self._max_batch_size)
        elif q_len_per_req != 1:
            batch = host_int32(last_page_len, "last_page_len").size
            qo_indptr = host_int32(list(range(0, (batch + 1) * q_len_per_req, q_len_per_req)), "qo_indptr")
            tokens = self._max_batch_size * q_len_per_req
        window = self._configure(num_qo_heads, num_kv_heads, head_dim, page_size, pos_encoding_mode, window_left,
                                 logits_soft_cap, q_data_type, kv_data_type, data_type, sm_scale, rope_scale,
                                 rope_theta, tokens, o_data_type, fixed_split_size, disable_split_kv)
        self._plan_pages(indptr, indices, last_page_len, num_pages, window, qo_indptr, "causal")
        self._q_len_per_req = per_req

    def plan_block_table(self, block_table: Any, seq_lens: Any, num_qo_heads: int, num_kv_heads: int,
                         head_dim: int, page_size: int, **kwargs: Any) -> None:
        """``plan`` from a vLLM-style padded block table: ``block_table[r]``
        lists request r's pages (entries past its length are ignored) and
        ``seq_lens[r]`` its KV tokens (>= 1). Other arguments as ``plan``'s."""
        import numpy as np
        lens = host_int32(seq_lens, "seq_lens")
        if is_torch(block_table):
            block_table = block_table.detach().to("cpu").numpy()
        elif type(block_table).__module__.split(".")[0] == "cupy":
            import cupy
            block_table = cupy.asnumpy(block_table)
        table = np.asarray(block_table)
        _require(table.ndim == 2 and table.shape[0] == lens.size,
                 f"block_table has shape {table.shape}; expected ({lens.size}, max_blocks) for {lens.size} seq_lens")
        _require(bool((lens >= 1).all()), f"seq_lens must be >= 1 (got {lens.min() if lens.size else None})")
        pages = (lens.astype(np.int64) + page_size - 1) // page_size
        _require(bool((pages <= table.shape[1]).all()),
                 f"seq_lens need up to {int(pages.max())} pages, more than block_table's {table.shape[1]} columns")
        indptr = np.zeros(lens.size + 1, dtype=np.int32)
        np.cumsum(pages, out=indptr[1:])
        indices = table[np.arange(table.shape[1])[None, :] < pages[:, None]]
        last = (lens - (pages - 1) * page_size).astype(np.int32)
        self.plan(indptr, host_int32(indices, "block_table"), last, num_qo_heads, num_kv_heads, head_dim,
                  page_size, **kwargs)

    def plan_block_table_in_stream(self, block_table: Any, seq_lens: Any, num_qo_heads: int, num_kv_heads: int,
                                   head_dim: int, page_size: int, *, num_pages: int, cumulative: bool = False,
                                   q_len_per_req: int = 1, qo_indptr: Any = None, **kwargs: Any) -> None:
        """Plans from device tensors without the host waiting: on the current
        CUDA stream, the block table and lengths are copied to pinned host
        memory, a host function the stream runs plans them, and the plan is
        copied into the workspace. Captured in a CUDA graph, every replay
        plans the batch the tensors then hold, so a graph of a decode step
        stays exact as requests grow, join and leave.

        Needs a CUDA-graph wrapper (``use_cuda_graph=True``). ``block_table``
        (batch, max_blocks) int32 on the device; ``seq_lens`` (batch,) int32,
        or with ``cumulative`` the prefix sums (batch + 1,) (cu_seq_lens).
        Rows without tokens (a padded batch's tail) must come last; their
        rows of ``run`` come out as zeros. A batch that cannot be planned
        (a page id outside ``num_pages``, more than the wrapper's maxima)
        also runs as zeros, and ``check_stream_plans`` raises its error.

        Several causal query tokens a request (draft tokens to verify):
        ``q_len_per_req`` of them each, or ``qo_indptr`` (batch + 1,) int32
        on the device, read in the stream like the table (padding rows
        repeat its last entry). q and out then hold the table's rows ×
        q_len_per_req rows, or with qo_indptr the wrapper's max_query_tokens.
        Other arguments as ``plan``'s."""
        self._check_in_stream(block_table, seq_lens, qo_indptr)
        _require(isinstance(q_len_per_req, int) and q_len_per_req >= 1,
                 f"q_len_per_req {q_len_per_req!r} must be an int >= 1")
        kwargs.pop("non_blocking", None)
        rows = int(block_table.shape[0])
        _require(qo_indptr is None or self._max_query_tokens is not None,
                 "plan_block_table_in_stream with qo_indptr needs the wrapper's max_query_tokens (the host never "
                 "sees the tokens to fix it)")
        per_req = q_len_per_req if qo_indptr is None else None  # run's q_len_per_req check
        uniform = qo_indptr is None and q_len_per_req > 1
        if uniform:  # a device constant per shape, kept: every graph that captured one copies from its address
            key = (rows, q_len_per_req, str(block_table.device))
            if key not in self._uniform_qo:
                import torch
                self._uniform_qo[key] = torch.arange(0, (rows + 1) * q_len_per_req, q_len_per_req,
                                                     dtype=torch.int32, device=block_table.device)
            qo_indptr = self._uniform_qo[key]
        tokens = 0 if qo_indptr is None else self._max_batch_size * q_len_per_req
        window = self._configure(num_qo_heads, num_kv_heads, head_dim, page_size, **kwargs, query_tokens=tokens)
        # q's rows the plans may cover: the table's tokens (rows × q_len_per_req), or with a device qo_indptr
        # the capacity's
        self._plan_in_stream(block_table, seq_lens, cumulative, num_pages, window,
                             rows * q_len_per_req if per_req is not None else self._max_query_tokens, qo_indptr)
        self._q_len_per_req = per_req

    def run(self, q: Any, paged_kv_cache: Any, *args: Any, q_len_per_req: Optional[int] = None,
            **kwargs: Any) -> Any:
        """Attention of every request's query rows over its KV: the
        arguments of ``PagedWrapper.run``, and FlashInfer's ``q_len_per_req``,
        accepted only equal to the planned count (None: as planned)."""
        _require(q_len_per_req is None or q_len_per_req == self._q_len_per_req,
                 f"q_len_per_req {q_len_per_req!r} differs from the plan's "
                 f"{self._q_len_per_req if self._q_len_per_req is not None else 'qo_indptr'}: plan again with it")
        return super().run(q, paged_kv_cache, *args, **kwargs)

    forward = run  # FlashInfer's older name
