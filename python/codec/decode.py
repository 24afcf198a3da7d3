"""BatchPrefixDecodeWrapper: decode attention over paged KV in the shape of
FlashInfer's BatchDecodeWithPagedKVCacheWrapper, where requests that share
KV pages (a common prefix) read them once per batch."""

from __future__ import annotations

import math
import os
from typing import Any, Optional, Tuple, Union

from . import _codec
from ._plan_slots import PlanSlot
from ._tensors import current_stream, device_of, dtype_name, empty_like_rows, host_int32, is_torch, nbytes

_COST_TABLES = os.path.join(os.path.dirname(__file__), "data", "cost_tables")  # the wheel's measured tables


def lse_base2(lse_base: Union[str, float]) -> bool:
    if lse_base in ("e", math.e):
        return False
    if lse_base in (2, 2.0, "2"):
        return True
    raise ValueError(f"lse_base {lse_base!r} is not 'e' (natural log) or 2")


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise ValueError(message)


class BatchPrefixDecodeWrapper:
    """Decode attention for a batch of requests over a paged KV cache, one
    query token per request, with every KV page that several requests share
    read once per batch (CoDec). The interface is FlashInfer's
    ``BatchDecodeWithPagedKVCacheWrapper``: ``plan`` once per batch (every
    layer reuses it), then ``run`` per layer.

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
        use_tensor_cores, paged_kv_indptr_buffer, paged_kv_indices_buffer,
        paged_kv_last_page_len_buffer, backend: FlashInfer's, accepted so that
            code written for it runs unchanged: the buffers' lengths give the
            maxima of CUDA-graph mode; CoDec always uses tensor cores.
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
        *,
        max_batch_size: Optional[int] = None,
        max_num_pages: Optional[int] = None,
        num_threads: int = 0,
    ) -> None:
        _require(kv_layout in ("NHD", "HND"), f"kv_layout {kv_layout!r} is not 'NHD' or 'HND'")
        _require(backend == "auto", f"backend {backend!r}: CoDec has one backend, 'auto'")
        del use_tensor_cores  # CoDec's kernels always run on tensor cores
        shape = getattr(workspace_buffer, "shape", None)
        if shape is None or len(shape) != 1:
            raise ValueError(f"workspace_buffer must be a 1-D uint8 tensor or array, not {shape}")
        self._device = device_of(workspace_buffer)
        if paged_kv_last_page_len_buffer is not None and max_batch_size is None:
            max_batch_size = len(paged_kv_last_page_len_buffer)
        if paged_kv_indices_buffer is not None and max_num_pages is None:
            max_num_pages = len(paged_kv_indices_buffer)
        if use_cuda_graph:
            _require(self._device[0] == "cuda", "use_cuda_graph needs a CUDA workspace_buffer")
            _require(isinstance(max_batch_size, int) and max_batch_size >= 1,
                     f"use_cuda_graph needs max_batch_size >= 1 (got {max_batch_size!r})")
            _require(isinstance(max_num_pages, int) and max_num_pages >= 1,
                     f"use_cuda_graph needs max_num_pages >= 1 (got {max_num_pages!r})")
        self._workspace = workspace_buffer
        self._hnd = kv_layout == "HND"
        self._kv_layout = kv_layout
        self._use_cuda_graph = bool(use_cuda_graph)
        self._max_batch_size = max_batch_size if use_cuda_graph else 0
        self._max_num_pages = max_num_pages if use_cuda_graph else 0
        self._num_threads = int(num_threads)
        self._planner = None
        self._config = None
        # The current plan, where run and the torch custom op (which takes the slot's handle) find it
        self._slot = PlanSlot(self._num_threads)
        self._handle = self._slot.handle
        self._planned = False
        self._in_stream = False  # the current plan is made in the stream (plan_block_table_in_stream)
        self._stream_rows = self._stream_pages = 0
        self._capacity_plan = None

    @property
    def is_cuda_graph_enabled(self) -> bool:
        return self._use_cuda_graph

    @property
    def plan_stats(self) -> dict:
        """The current plan's statistics: tasks, blocks, makespan and its lower bound, the merge's predicted
        time (0 where the cost model prices none), planning time."""
        _require(self._planned, "no plan yet: call plan() first")
        return self._planner.stream_stats() if self._in_stream else self._slot.plan.stats

    def _configure(self, num_qo_heads, num_kv_heads, head_dim, page_size, pos_encoding_mode="NONE", window_left=-1,
                   logits_soft_cap=None, q_data_type="float16", kv_data_type=None, data_type=None, sm_scale=None,
                   rope_scale=None, rope_theta=None) -> None:
        """Checks plan's arguments and makes the planner for them (kept while they stay the same)."""
        _require(pos_encoding_mode == "NONE",
                 f"pos_encoding_mode {pos_encoding_mode!r}: CoDec takes RoPE applied before the cache ('NONE')")
        _require(window_left in (-1, None), f"window_left {window_left}: sliding windows are not supported")
        _require(logits_soft_cap in (None, 0, 0.0), f"logits_soft_cap {logits_soft_cap}: not supported")
        _require(rope_scale is None and rope_theta is None, "rope_scale and rope_theta: CoDec applies no RoPE")
        q_dtype = dtype_name(q_data_type, "q_data_type")
        kv_source = kv_data_type if kv_data_type is not None else data_type
        kv_dtype = q_dtype if kv_source is None else dtype_name(kv_source, "kv_data_type")
        _require(q_dtype == kv_dtype, f"q_data_type {q_dtype} and kv_data_type {kv_dtype} differ: "
                 "CoDec computes with q and KV in one dtype")
        for name, value in (("num_qo_heads", num_qo_heads), ("num_kv_heads", num_kv_heads),
                            ("head_dim", head_dim), ("page_size", page_size)):
            if not isinstance(value, int) or isinstance(value, bool):
                raise TypeError(f"{name} must be an int, not {type(value).__name__}")
        scale = 1.0 / math.sqrt(head_dim) if sm_scale is None else float(sm_scale)
        config = (num_qo_heads, num_kv_heads, head_dim, page_size, kv_dtype, scale)
        if self._planner is None or config != self._config:
            _require(not (self._use_cuda_graph and self._planner is not None),
                     f"this CUDA-graph wrapper was planned for (num_qo_heads, num_kv_heads, head_dim, page_size, "
                     f"dtype, sm_scale) = {self._config}; a graph cannot change them: got {config}")
            # The library picks the cost model: the table measured for this GPU (the package's copies first), else
            # the roofline.
            self._planner = _codec.Planner(
                self._device[0], self._device[1], num_qo_heads, num_kv_heads, head_dim, page_size,
                kv_dtype, scale, nbytes(self._workspace), self._max_batch_size, self._max_num_pages or 0,
                self._num_threads, cost_table_dirs=[_COST_TABLES])
            self._config = config

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
                q and KV must share one (float32 on the CPU engine only).
            sm_scale: the softmax scale, 1/sqrt(head_dim) by default.
            num_pages: the page pool's size, checked against the cache at
                ``run`` (default: the largest page index + 1).
            pos_encoding_mode, window_left, logits_soft_cap, rope_scale,
            rope_theta: FlashInfer's; CoDec supports their defaults only
                (apply RoPE before writing the cache) and refuses others.
        """
        self._configure(num_qo_heads, num_kv_heads, head_dim, page_size, pos_encoding_mode, window_left,
                        logits_soft_cap, q_data_type, kv_data_type, data_type, sm_scale, rope_scale, rope_theta)
        del non_blocking  # page tables are read on the host; device ones are copied once here either way
        indptr_h = host_int32(indptr, "indptr")
        indices_h = host_int32(indices, "indices")
        last_h = host_int32(last_page_len, "last_page_len")
        if num_pages is None:
            num_pages = int(indices_h.max()) + 1 if indices_h.size else 1
        plan = self._planner.plan(indptr_h, indices_h, last_h, int(num_pages))
        self._planner.upload(plan, self._workspace, current_stream(self._workspace))
        self._slot.plan = plan
        self._planned = True
        self._in_stream = False

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
                                   **kwargs: Any) -> None:
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
        Other arguments as ``plan``'s."""
        _require(self._use_cuda_graph, "plan_block_table_in_stream needs a CUDA-graph wrapper (use_cuda_graph=True)")
        _require(is_torch(block_table) and is_torch(seq_lens),
                 "plan_block_table_in_stream takes torch tensors on the wrapper's device")
        kwargs.pop("non_blocking", None)
        self._configure(num_qo_heads, num_kv_heads, head_dim, page_size, **kwargs)
        self._planned = False  # a call that fails leaves no plan to run
        self._planner.stream_plan(block_table, seq_lens, bool(cumulative), int(num_pages), self._workspace,
                                  current_stream(self._workspace))
        # What run checks: the host never sees these plans, whose rows index q
        # and whose pages index the cache, up to the table's rows and num_pages.
        self._stream_rows, self._stream_pages = int(block_table.shape[0]), int(num_pages)
        if self._capacity_plan is None:
            self._capacity_plan = self._planner.capacity_plan()
        self._slot.plan = self._capacity_plan
        self._planned = True
        self._in_stream = True

    def check_stream_plans(self) -> None:
        """Raises ValueError with the first error an in-stream plan met since
        the last check (its batch ran as zeros); the work it waits for is the
        caller's to synchronise."""
        error = self._planner.take_stream_error() if self._planner is not None else None
        if error is not None:
            raise ValueError(f"an in-stream plan failed: {error}")

    def run(
        self,
        q: Any,
        paged_kv_cache: Any,
        *args: Any,
        q_scale: Optional[float] = None,
        k_scale: Optional[float] = None,
        v_scale: Optional[float] = None,
        out: Any = None,
        lse: Any = None,
        return_lse: bool = False,
        enable_pdl: Optional[bool] = None,
        window_left: Optional[int] = None,
        lse_base: Union[str, float] = "e",
    ) -> Union[Any, Tuple[Any, Any]]:
        """Attention of every request's query rows over its KV.

        Uses the caller's current CUDA stream, allocates nothing but out and
        lse when they are not passed, never synchronises, and can be captured
        in a CUDA graph; the plan serves every layer.

        Args:
            q: (batch, num_qo_heads, head_dim) in the planned dtype, any batch
                and head strides with a contiguous last dimension.
            paged_kv_cache: FlashInfer's single tensor (pages, 2, page_size,
                num_kv_heads, head_dim) for NHD or (pages, 2, num_kv_heads,
                page_size, head_dim) for HND, or a (k_cache, v_cache) tuple of
                (pages, page_size, num_kv_heads, head_dim) / (pages,
                num_kv_heads, page_size, head_dim) tensors with equal strides
                (vLLM's (2, blocks, ...) cache as (kv[0], kv[1])). Any page,
                token and head strides; the last dimension contiguous.
            out: (batch, num_qo_heads, head_dim), the planned dtype (float32
                too on the CPU engine); allocated when None.
            lse: (batch, num_qo_heads) float32; allocated when None and
                return_lse.
            lse_base: "e" (default: the natural log of this library's C++ API
                and vLLM's merge_attn_states) or 2 (what FlashInfer's wrappers
                return).
            q_scale, k_scale, v_scale, enable_pdl, window_left: FlashInfer's;
                scales are not supported, PDL is always on where the GPU has it.

        Returns:
            out, or (out, lse) when return_lse.
        """
        if args:
            raise TypeError(f"run() takes q and paged_kv_cache positionally, not {len(args)} more arguments")
        _require(q_scale is None and k_scale is None and v_scale is None,
                 "q_scale, k_scale, v_scale: CoDec takes unscaled q and KV (fold a scale into sm_scale)")
        _require(window_left in (None, -1), f"window_left {window_left}: sliding windows are not supported")
        del enable_pdl
        _require(self._planned, "run() before plan(): plan the batch first")
        base2 = lse_base2(lse_base)
        if isinstance(paged_kv_cache, (tuple, list)):
            _require(len(paged_kv_cache) == 2, f"paged_kv_cache tuple has {len(paged_kv_cache)} entries; expected (k_cache, v_cache)")
            k, v = paged_kv_cache
        else:
            k, v = paged_kv_cache, None
        if self._in_stream:
            pool = k.shape[0]
            _require(q.shape[0] >= self._stream_rows, f"q has {q.shape[0]} rows, fewer than the "
                     f"{self._stream_rows} rows of the block table planned in the stream")
            _require(pool >= self._stream_pages, f"the KV cache has {pool} pages, fewer than the num_pages "
                     f"{self._stream_pages} planned in the stream")
        if out is None:
            out = empty_like_rows(q, (q.shape[0], q.shape[1], q.shape[2]))
        if return_lse and lse is None:
            lse = empty_like_rows(q, (q.shape[0], q.shape[1]), "float32")
        if is_torch(q):  # through the custom op, which finds the plan by the slot's handle
            from . import _torch_ops  # torch is optional: loaded once a torch tensor shows up
            _torch_ops.decode(q, k, v, self._workspace, out, lse, self._handle, self._hnd, base2)
        else:
            self._slot.run(q, k, v, self._hnd, out, lse, self._workspace, base2, current_stream(q))
        return (out, lse) if return_lse else out

    forward = run  # FlashInfer's older name
