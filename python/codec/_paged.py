"""The machinery both wrappers share (decode.py, prefill.py): the workspace
and its engine, the planner made for a shape, a plan's upload, and run."""

from __future__ import annotations

import math
import os
from typing import Any, Optional, Tuple, Union

from . import _codec
from ._plan_slots import PlanSlot
from ._tensors import (FP8, current_stream, device_of, dtype_name, empty_like_rows, host_int32, host_scale,
                       is_torch, nbytes)

_COST_TABLES = os.path.join(os.path.dirname(__file__), "data", "cost_tables")  # the wheel's measured tables


def lse_base2(lse_base: Union[str, float]) -> bool:
    if lse_base in ("e", math.e):
        return False
    if lse_base in (2, 2.0, "2"):
        return True
    raise ValueError(f"lse_base {lse_base!r} is not 'e' (natural log) or 2")


def require(condition: bool, message: str) -> None:
    if not condition:
        raise ValueError(message)


_require = require


class PagedWrapper:
    """A workspace and the plans written into it: the CPU engine for a host
    workspace, the CUDA engine for a device one. ``run`` computes the rows of
    the current plan: a row per request, or per query token of a batch of
    several a request."""

    def __init__(self, workspace_buffer: Any, kv_layout: str, use_cuda_graph: bool, backend: str,
                 max_batch_size: Optional[int], max_num_pages: Optional[int], num_threads: int,
                 max_query_tokens: Optional[int] = None, max_mask_bytes: int = 0) -> None:
        _require(kv_layout in ("NHD", "HND"), f"kv_layout {kv_layout!r} is not 'NHD' or 'HND'")
        _require(backend == "auto", f"backend {backend!r}: CoDec has one backend, 'auto'")
        shape = getattr(workspace_buffer, "shape", None)
        if shape is None or len(shape) != 1:
            raise ValueError(f"workspace_buffer must be a 1-D uint8 tensor or array, not {shape}")
        self._device = device_of(workspace_buffer)
        if use_cuda_graph:
            _require(self._device[0] == "cuda", "use_cuda_graph needs a CUDA workspace_buffer")
            _require(isinstance(max_batch_size, int) and max_batch_size >= 1,
                     f"use_cuda_graph needs max_batch_size >= 1 (got {max_batch_size!r})")
            _require(isinstance(max_num_pages, int) and max_num_pages >= 1,
                     f"use_cuda_graph needs max_num_pages >= 1 (got {max_num_pages!r})")
            _require(max_query_tokens is None or (isinstance(max_query_tokens, int) and
                                                  max_query_tokens >= max_batch_size),
                     f"max_query_tokens {max_query_tokens!r} must be >= max_batch_size {max_batch_size} (or None)")
            _require(isinstance(max_mask_bytes, int) and max_mask_bytes >= 0,
                     f"max_mask_bytes {max_mask_bytes!r} must be an int >= 0")
        self._workspace = workspace_buffer
        self._hnd = kv_layout == "HND"
        self._kv_layout = kv_layout
        self._use_cuda_graph = bool(use_cuda_graph)
        self._max_batch_size = max_batch_size if use_cuda_graph else 0
        self._max_num_pages = max_num_pages if use_cuda_graph else 0
        # Query tokens of CUDA-graph mode: None until the first plan fixes them (FlashInfer's convention)
        self._max_query_tokens = max_query_tokens
        self._max_mask_bytes = max_mask_bytes if use_cuda_graph else 0
        self._num_threads = int(num_threads)
        self._planner = None
        self._config = None
        # The current plan, where run and the torch custom op (which takes the slot's handle) find it
        self._slot = PlanSlot(self._num_threads)
        self._handle = self._slot.handle
        self._planned = False
        self._window_left = -1  # the planned sliding window (QueryBatch::window_left)
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
                   rope_scale=None, rope_theta=None, query_tokens=0, o_data_type=None, fixed_split_size=None,
                   disable_split_kv=False) -> int:
        """Checks plan's arguments and makes the planner for them (kept while they stay the same); returns
        the window, which becomes the wrapper's once its plan is made (_plan_pages).
        query_tokens: the maximum of query tokens a CUDA-graph wrapper takes
        unless it was given one (0: one a request). o_data_type, fixed_split_size,
        disable_split_kv: FlashInfer's, accepted at q's dtype and their defaults only."""
        _require(pos_encoding_mode == "NONE",
                 f"pos_encoding_mode {pos_encoding_mode!r}: CoDec takes RoPE applied before the cache ('NONE')")
        window = -1 if window_left is None else window_left
        _require(isinstance(window, int) and window >= -1, f"window_left {window_left!r} must be an int >= -1")
        _require(fixed_split_size in (None, -1) and not disable_split_kv,
                 f"fixed_split_size {fixed_split_size}, disable_split_kv {disable_split_kv}: CoDec's planner "
                 "chooses the KV splits (only the defaults None and False are accepted)")
        cap = 0.0 if logits_soft_cap is None else float(logits_soft_cap)
        _require(math.isfinite(cap) and cap >= 0, f"logits_soft_cap {logits_soft_cap} must be None or finite >= 0")
        _require(rope_scale is None and rope_theta is None, "rope_scale and rope_theta: CoDec applies no RoPE")
        q_dtype = dtype_name(q_data_type, "q_data_type")
        kv_source = kv_data_type if kv_data_type is not None else data_type
        kv_dtype = q_dtype if kv_source is None else dtype_name(kv_source, "kv_data_type")
        _require(q_dtype not in FP8, f"q_data_type {q_dtype}: fp8 is a KV cache dtype; q is float16 or bfloat16 "
                 "(or float32 on the CPU engine)")
        _require(o_data_type is None or dtype_name(o_data_type, "o_data_type") == q_dtype,
                 f"o_data_type {o_data_type} differs from q's {q_dtype}")
        _require(q_dtype == kv_dtype or kv_dtype in FP8, f"q_data_type {q_dtype} and kv_data_type {kv_dtype} "
                 "differ: q and KV share one dtype but under an fp8 cache")
        for name, value in (("num_qo_heads", num_qo_heads), ("num_kv_heads", num_kv_heads),
                            ("head_dim", head_dim), ("page_size", page_size)):
            if not isinstance(value, int) or isinstance(value, bool):
                raise TypeError(f"{name} must be an int, not {type(value).__name__}")
        scale = 1.0 / math.sqrt(head_dim) if sm_scale is None else float(sm_scale)
        config = (num_qo_heads, num_kv_heads, head_dim, page_size, kv_dtype, scale, q_dtype, cap)
        if self._planner is None or config != self._config:
            _require(not (self._use_cuda_graph and self._planner is not None),
                     f"this CUDA-graph wrapper was planned for (num_qo_heads, num_kv_heads, head_dim, page_size, "
                     f"kv dtype, sm_scale, q dtype, soft-cap) = {self._config}; a graph cannot change them: got "
                     f"{config}")
            if self._use_cuda_graph and self._max_query_tokens is None:
                # a window's per-row key intervals are masks, which a capacity carries from a query token a row
                self._max_query_tokens = query_tokens or (self._max_batch_size if window >= 0 else 0)
            tokens = (self._max_query_tokens or 0) if self._use_cuda_graph else 0
            # The library picks the cost model: the table measured for this GPU (the package's copies first), else
            # the roofline.
            self._planner = _codec.Planner(
                self._device[0], self._device[1], num_qo_heads, num_kv_heads, head_dim, page_size,
                kv_dtype, scale, nbytes(self._workspace), self._max_batch_size, self._max_num_pages or 0,
                self._num_threads, cost_table_dirs=[_COST_TABLES], max_query_tokens=tokens,
                max_mask_bytes=self._max_mask_bytes if tokens else 0, q_dtype=q_dtype, logits_soft_cap=cap)
            self._config = config
        return window

    def _plan_pages(self, indptr: Any, indices: Any, last_page_len: Any, num_pages: Optional[int], window: int,
                    qo_indptr: Any = None, mask: str = "causal", mask_bits: Any = None) -> None:
        """Plans the page table (host copies of any tensors) under `window` (_configure's), with qo_indptr
        several query tokens a request under `mask`, and uploads the plan."""
        indptr_h = host_int32(indptr, "indptr")
        indices_h = host_int32(indices, "indices")
        last_h = host_int32(last_page_len, "last_page_len")
        qo_h = None if qo_indptr is None else host_int32(qo_indptr, "qo_indptr")
        if num_pages is None:
            num_pages = int(indices_h.max()) + 1 if indices_h.size else 1
        plan = self._planner.plan(indptr_h, indices_h, last_h, int(num_pages), qo_h, mask, mask_bits, window)
        self._planner.upload(plan, self._workspace, current_stream(self._workspace))
        self._slot.plan = plan
        self._window_left = window
        self._planned = True
        self._in_stream = False

    def _check_in_stream(self, *tensors: Any) -> None:
        """What an in-stream plan needs before _configure: a CUDA-graph wrapper and torch tensors (None: absent)."""
        _require(self._use_cuda_graph, "plan_block_table_in_stream needs a CUDA-graph wrapper (use_cuda_graph=True)")
        _require(all(t is None or is_torch(t) for t in tensors),
                 "plan_block_table_in_stream takes torch tensors on the wrapper's device")

    def _plan_in_stream(self, block_table: Any, seq_lens: Any, cumulative: bool, num_pages: int, window: int,
                        rows: int, qo_indptr: Any = None, mask: str = "causal", mask_bits: Any = None) -> None:
        """Enqueues the plan of a device block table on the current stream (CudaStreamPlanner) under `window`
        (_configure's); run then checks q against `rows` and the cache against num_pages, all it can see of
        plans the host never sees."""
        self._planned = False  # a call that fails leaves no plan to run
        self._planner.stream_plan(block_table, seq_lens, bool(cumulative), int(num_pages), self._workspace,
                                  current_stream(self._workspace), qo_indptr, window, mask, mask_bits)
        self._window_left = window
        self._stream_rows = rows
        self._stream_pages = int(num_pages)
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
        sinks: Any = None,
    ) -> Union[Any, Tuple[Any, Any]]:
        """Attention of every request's query rows over its KV.

        Uses the caller's current CUDA stream, allocates nothing but out and
        lse when they are not passed, never synchronises, and can be captured
        in a CUDA graph; the plan serves every layer.

        Args:
            q: (rows, num_qo_heads, head_dim) in the planned q dtype, a row per
                request, or per query token where the plan has several a
                request; any row and head strides with a contiguous last
                dimension.
            paged_kv_cache: FlashInfer's single tensor (pages, 2, page_size,
                num_kv_heads, head_dim) for NHD or (pages, 2, num_kv_heads,
                page_size, head_dim) for HND, or a (k_cache, v_cache) tuple of
                (pages, page_size, num_kv_heads, head_dim) / (pages,
                num_kv_heads, page_size, head_dim) tensors with equal strides
                (vLLM's (2, blocks, ...) cache as (kv[0], kv[1])). Any page,
                token and head strides; the last dimension contiguous.
            out: (rows, num_qo_heads, head_dim), q's dtype (float32 too on
                the CPU engine); allocated when None.
            lse: (rows, num_qo_heads) float32; allocated when None and
                return_lse.
            lse_base: "e" (default: the natural log of this library's C++ API
                and vLLM's merge_attn_states) or 2 (what FlashInfer's wrappers
                return).
            sinks: attention sinks (gpt-oss): (num_qo_heads,) float32 logits,
                unscaled, added to every row's softmax denominator (no value);
                the lse includes them; on a CUDA device a tensor there (its
                values are not checked: a NaN or +inf sink makes the rows NaN).
            k_scale, v_scale: an fp8 (or any) cache's scales, FlashInfer's and
                vLLM's: the stored value times its scale is the real value; a
                float, a 0-d tensor or array, or a float32 one of num_kv_heads
                values (None: 1). On a CUDA device (an fp8 cache's only) a
                float becomes a device scalar in the stream (capture-safe), a
                host tensor is copied there (not in a graph), and a device
                tensor is read as it is (its values are not checked there).
            window_left: FlashInfer's override, accepted only equal to the
                planned window (None: the planned one).
            q_scale, enable_pdl: FlashInfer's; q_scale is not supported, PDL
                is always on where the GPU has it.

        Returns:
            out, or (out, lse) when return_lse.
        """
        if args:
            raise TypeError(f"run() takes q and paged_kv_cache positionally, not {len(args)} more arguments")
        _require(q_scale is None, "q_scale: CoDec takes unscaled q (fold a scale into sm_scale)")
        _require(window_left is None or window_left == self._window_left, f"window_left {window_left} differs "
                 f"from the planned {self._window_left}: plan again with it (the window shapes the plan)")
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
                     f"{self._stream_rows} rows plans made in the stream may cover (the block table's, or with "
                     "query tokens max_query_tokens)")
            _require(pool >= self._stream_pages, f"the KV cache has {pool} pages, fewer than the num_pages "
                     f"{self._stream_pages} planned in the stream")
        if out is None:
            out = empty_like_rows(q, (q.shape[0], q.shape[1], q.shape[2]))
        if return_lse and lse is None:
            lse = empty_like_rows(q, (q.shape[0], q.shape[1]), "float32")
        if is_torch(q):  # through the custom op, which finds the plan by the slot's handle
            from . import _torch_ops  # torch is optional: loaded once a torch tensor shows up
            scales = [_torch_ops.scale(x, name, q.device)
                      for x, name in ((k_scale, "k_scale"), (v_scale, "v_scale"), (sinks, "sinks"))]
            _torch_ops.decode(q, k, v, self._workspace, out, lse, self._handle, self._hnd, base2, *scales)
        else:
            self._slot.run(q, k, v, self._hnd, out, lse, self._workspace, base2, current_stream(q),
                           host_scale(k_scale, "k_scale"), host_scale(v_scale, "v_scale"), host_scale(sinks, "sinks"))
        return (out, lse) if return_lse else out

    forward = run  # FlashInfer's older name
