"""BatchPrefixPrefillWrapper: attention of several query tokens a request
over paged KV (draft tokens to verify, a draft tree, a chunk of a prompt over
its cached prefix) in the shape of FlashInfer's
BatchPrefillWithPagedKVCacheWrapper, where requests that share KV pages read
them once per batch."""

from __future__ import annotations

from typing import Any, Optional

import numpy as np

from ._paged import PagedWrapper, require as _require
from ._tensors import host_array, host_int32


def _packed(bits: Any, name: str) -> np.ndarray:
    """A packed mask as uint8 bytes on the host."""
    packed = host_array(bits)
    _require(packed.dtype == np.uint8 and packed.ndim == 1, f"{name} must be a 1-D uint8 tensor or array, not "
             f"{packed.dtype} of shape {packed.shape}")
    return np.ascontiguousarray(packed)


def _pack_rows(mask: Any, sizes: np.ndarray, name: str) -> np.ndarray:
    """Bool matrices of `sizes` elements each, flattened and concatenated, to
    FlashInfer's packed layout: each in little bit order from a byte boundary."""
    flat = host_array(mask).reshape(-1)
    _require(flat.dtype == np.bool_, f"{name} must be bool, not {flat.dtype} (a packed mask goes in packed_custom_mask)")
    _require(flat.size == int(sizes.sum()), f"{name} has {flat.size} elements; the requests' matrices take "
             f"{int(sizes.sum())}")
    ends = np.cumsum(sizes)
    return np.concatenate([np.packbits(flat[e - n:e], bitorder="little") for n, e in zip(sizes, ends)] or
                          [np.zeros(0, np.uint8)])


def _check_head_dims(head_dim_qk: int, head_dim_vo: Optional[int]) -> None:
    _require(head_dim_vo in (None, head_dim_qk), f"head_dim_vo {head_dim_vo} differs from head_dim_qk "
             f"{head_dim_qk}: V and K of different widths are not supported yet")


class BatchPrefixPrefillWrapper(PagedWrapper):
    """Attention of several query tokens a request over a paged KV cache, with
    every KV page that several requests share read once per batch (CoDec).
    The interface is FlashInfer's ``BatchPrefillWithPagedKVCacheWrapper``:
    ``plan`` once per batch (every layer reuses it), then ``run`` per layer;
    an engine switches by import and class name.

    Request r's query tokens are rows ``qo_indptr[r]:qo_indptr[r+1]`` of q and
    out, and the last of its KV (write them into the cache first). Which keys
    a token sees: all (``causal=False``, the default as in FlashInfer), those
    up to its own position (``causal=True``: token i of a request of kv_len
    keys and q_len tokens sees key j iff j <= kv_len - q_len + i), a custom
    mask over every key, or a draft mask over the request's own new tokens.
    A shared node is read once for every token of every request through it;
    masks cost only in the tasks they cut.

    The lse that ``run`` returns is in natural log by default; FlashInfer's
    wrappers and ``merge_state`` use base 2, so code that merges lse the
    FlashInfer way passes ``run(..., lse_base=2)``.

    Args:
        float_workspace_buffer: a uint8 tensor or array: on the host the CPU
            engine, on a CUDA device the CUDA engine.
        kv_layout: "NHD" or "HND", as the decode wrapper's.
        use_cuda_graph: every plan is laid out in the workspace for the
            maxima below, so a CUDA graph captured around ``run`` replays the
            exact result of each later ``plan`` without re-capture.
        qo_indptr_buf, paged_kv_indptr_buf, paged_kv_indices_buf,
        paged_kv_last_page_len_buf, custom_mask_buf, mask_indptr_buf,
        backend: FlashInfer's: in CUDA-graph mode their lengths give the
            maxima (requests, page-table entries, packed mask bytes); CoDec
            reads plans from its workspace, not from them.
        jit_args, jit_kwargs: FlashInfer's custom JIT variants; refused
            unless None.
        max_batch_size, max_num_pages, max_query_tokens, max_mask_bytes: the
            maxima of CUDA-graph mode where no buffer gives them: requests,
            page-table entries, query tokens in all (q's and out's rows; by
            default the first ``plan``'s, as FlashInfer fixes its rows) and
            bytes of a packed custom or draft mask (0: causal only).
        num_threads: CPU engine threads (0: OpenMP's default).
    """

    def __init__(
        self,
        float_workspace_buffer: Any,
        kv_layout: str = "NHD",
        use_cuda_graph: bool = False,
        qo_indptr_buf: Any = None,
        paged_kv_indptr_buf: Any = None,
        paged_kv_indices_buf: Any = None,
        paged_kv_last_page_len_buf: Any = None,
        custom_mask_buf: Any = None,
        mask_indptr_buf: Any = None,
        backend: str = "auto",
        jit_args: Any = None,
        jit_kwargs: Any = None,
        *,
        max_batch_size: Optional[int] = None,
        max_num_pages: Optional[int] = None,
        max_query_tokens: Optional[int] = None,
        max_mask_bytes: Optional[int] = None,
        num_threads: int = 0,
    ) -> None:
        del paged_kv_indptr_buf, mask_indptr_buf
        _require(jit_args is None and jit_kwargs is None, "jit_args, jit_kwargs: FlashInfer's JIT attention "
                 "variants are not supported (CoDec's kernels are compiled with the package)")
        if max_batch_size is None:
            if paged_kv_last_page_len_buf is not None:
                max_batch_size = len(paged_kv_last_page_len_buf)
            elif qo_indptr_buf is not None:
                max_batch_size = len(qo_indptr_buf) - 1
        if max_num_pages is None and paged_kv_indices_buf is not None:
            max_num_pages = len(paged_kv_indices_buf)
        if max_mask_bytes is None:
            max_mask_bytes = 0 if custom_mask_buf is None else int(np.prod(custom_mask_buf.shape))
        super().__init__(float_workspace_buffer, kv_layout, use_cuda_graph, backend, max_batch_size, max_num_pages,
                         num_threads, max_query_tokens, max_mask_bytes)

    def plan(
        self,
        qo_indptr: Any,
        paged_kv_indptr: Any,
        paged_kv_indices: Any,
        paged_kv_last_page_len: Any,
        num_qo_heads: int,
        num_kv_heads: int,
        head_dim_qk: int,
        page_size: int,
        head_dim_vo: Optional[int] = None,
        custom_mask: Any = None,
        packed_custom_mask: Any = None,
        causal: bool = False,
        pos_encoding_mode: str = "NONE",
        use_fp16_qk_reduction: bool = False,
        sm_scale: Optional[float] = None,
        window_left: int = -1,
        logits_soft_cap: Optional[float] = None,
        rope_scale: Optional[float] = None,
        rope_theta: Optional[float] = None,
        q_data_type: Any = "float16",
        kv_data_type: Any = None,
        o_data_type: Any = None,
        non_blocking: bool = True,
        prefix_len_ptr: Any = None,
        token_pos_in_items_ptr: Any = None,
        token_pos_in_items_len: int = 0,
        max_item_len_ptr: Any = None,
        seq_lens: Any = None,
        seq_lens_q: Any = None,
        block_tables: Any = None,
        max_token_per_sequence: Optional[int] = None,
        max_sequence_kv: Optional[int] = None,
        fixed_split_size: Optional[int] = None,
        disable_split_kv: bool = False,
        *,
        draft_mask: Any = None,
        num_pages: Optional[int] = None,
    ) -> None:
        """Plans the batch.

        Args:
            qo_indptr: (batch + 1,) int32 from 0, increasing: request r's query
                tokens are rows qo_indptr[r]:qo_indptr[r+1] (at most its KV).
            paged_kv_indptr, paged_kv_indices, paged_kv_last_page_len: the
                page table in CSR form, as the decode wrapper's.
            num_qo_heads, num_kv_heads, head_dim_qk, page_size: the shape;
                head_dim_vo must equal head_dim_qk (or be None).
            custom_mask: bool, each request's (q_len, kv_len) matrix
                flattened row-major, requests concatenated; True keeps a key.
                It overrides ``causal``, as in FlashInfer.
            packed_custom_mask: the same bits packed, uint8: each request's
                matrix in little bit order from a byte boundary (FlashInfer's
                ``segment_packbits`` layout; its mask_indptr is implied by
                the lengths and not taken).
            causal: each token sees the keys up to its own position.
            draft_mask: a draft tree: bool, each request's (q_len, q_len)
                matrix over its own new tokens (True: token i sees new token
                j), every earlier key seen; what engines build for tree
                verification. Not with custom masks.
            q_data_type, kv_data_type, o_data_type, sm_scale, num_pages: as
                the decode wrapper's; o_data_type must be q's (or None).
            logits_soft_cap, window_left: as the decode wrapper's; the
                window applies with any mask.
            pos_encoding_mode, use_fp16_qk_reduction, rope_scale,
            rope_theta: FlashInfer's; CoDec supports their defaults only.
            prefix_len_ptr, token_pos_in_items_ptr, token_pos_in_items_len,
            max_item_len_ptr: FlashInfer's multi-item scoring, not supported
                (refused unless at their defaults).
            seq_lens, seq_lens_q, block_tables, max_token_per_sequence,
            max_sequence_kv: the same batch in the forms FlashInfer's
                trtllm-gen and cuDNN backends take; accepted and not read:
                CoDec plans from the CSR tables, as FlashInfer's fa2 does.
            fixed_split_size, disable_split_kv: FlashInfer's split-KV
                controls; CoDec's planner chooses the splits, so only their
                defaults (None or -1, False) are accepted.
        """
        _check_head_dims(head_dim_qk, head_dim_vo)
        _require(not use_fp16_qk_reduction, "use_fp16_qk_reduction: CoDec accumulates in fp32")
        items = {"prefix_len_ptr": prefix_len_ptr, "token_pos_in_items_ptr": token_pos_in_items_ptr,
                 "max_item_len_ptr": max_item_len_ptr}
        _require(all(x is None for x in items.values()) and token_pos_in_items_len == 0,
                 f"{', '.join(k for k, x in items.items() if x is not None) or 'token_pos_in_items_len'}: "
                 "FlashInfer's multi-item scoring is not supported")
        del seq_lens, seq_lens_q, block_tables, max_token_per_sequence, max_sequence_kv  # CSR tables instead
        qo = host_int32(qo_indptr, "qo_indptr")
        # a CUDA-graph wrapper's first plan fixes its query tokens where no maximum was given
        tokens = max(int(qo[-1]) if qo.size else 0, self._max_batch_size, 1)
        _require(sum(m is not None for m in (custom_mask, packed_custom_mask, draft_mask)) <= 1,
                 "give one of custom_mask, packed_custom_mask and draft_mask")
        window = self._configure(num_qo_heads, num_kv_heads, head_dim_qk, page_size, pos_encoding_mode, window_left,
                                 logits_soft_cap, q_data_type, kv_data_type, None, sm_scale, rope_scale, rope_theta,
                                 tokens, o_data_type, fixed_split_size, disable_split_kv)
        del non_blocking
        indptr = host_int32(paged_kv_indptr, "paged_kv_indptr")
        last = host_int32(paged_kv_last_page_len, "paged_kv_last_page_len")
        _require(qo.size == indptr.size, f"qo_indptr has {qo.size} entries, paged_kv_indptr {indptr.size}: one "
                 "per request and one more each")
        q_len = np.diff(qo.astype(np.int64))
        kv_len = (np.diff(indptr.astype(np.int64)) - 1) * page_size + last
        if custom_mask is not None or packed_custom_mask is not None:
            mask = "custom"
            bits = (_packed(packed_custom_mask, "packed_custom_mask") if packed_custom_mask is not None
                    else _pack_rows(custom_mask, q_len * kv_len, "custom_mask"))
        elif draft_mask is not None:
            mask, bits = "draft", _pack_rows(draft_mask, q_len * q_len, "draft_mask")
        else:
            mask, bits = ("causal" if causal else "none"), None
        self._plan_pages(indptr, paged_kv_indices, last, num_pages, window, qo, mask, bits)

    def plan_block_table_in_stream(self, qo_indptr: Any, block_table: Any, seq_lens: Any, num_qo_heads: int,
                                   num_kv_heads: int, head_dim_qk: int, page_size: int, *, num_pages: int,
                                   cumulative: bool = False, causal: bool = False, packed_custom_mask: Any = None,
                                   packed_draft_mask: Any = None, head_dim_vo: Optional[int] = None,
                                   **kwargs: Any) -> None:
        """Plans from device tensors without the host waiting, as the decode
        wrapper's method of this name does: on the current CUDA stream the
        tensors are copied to pinned host memory, a host function the stream
        runs plans them, and the plan is copied into the workspace. Captured
        in a CUDA graph, every replay plans the batch the tensors then hold
        (a verification step whose draft trees change shape every step).

        Needs a CUDA-graph wrapper with max_query_tokens (q and out hold that
        many rows; those past the batch's tokens come out as zeros).
        ``qo_indptr`` (batch + 1,) int32, ``block_table`` (batch, max_blocks)
        int32 and ``seq_lens`` (batch,) int32 (with ``cumulative`` the prefix
        sums, cu_seq_lens) on the device; rows without tokens (a padded
        batch's tail, qo_indptr repeating its last entry) come last.

        Masks as ``plan``'s, packed: ``packed_custom_mask`` (each request's
        (q_len, kv_len) matrix in little bit order from a byte boundary) or
        ``packed_draft_mask`` (each request's (q_len, q_len) over its new
        tokens, packed the same way): a device uint8 tensor of at most the
        wrapper's max_mask_bytes, copied whole every step, of which the
        batch's matrices take what they need. Without one, ``causal``. A
        batch that cannot be planned (a page id outside ``num_pages``, more
        than the maxima, a mask shorter than the batch's matrices) runs as
        zeros, and ``check_stream_plans`` raises its error.

        Other arguments as ``plan``'s (window_left, logits_soft_cap,
        sm_scale, q_data_type, kv_data_type, ...)."""
        self._check_in_stream(qo_indptr, block_table, seq_lens, packed_custom_mask, packed_draft_mask)
        _check_head_dims(head_dim_qk, head_dim_vo)
        _require(self._max_query_tokens is not None, "plan_block_table_in_stream needs the wrapper's "
                 "max_query_tokens (the host never sees the tokens to fix it)")
        _require(packed_custom_mask is None or packed_draft_mask is None,
                 "give one of packed_custom_mask and packed_draft_mask")
        for name in ("custom_mask", "draft_mask"):
            _require(kwargs.get(name) is None, f"{name}: in the stream masks come packed (packed_{name}); the "
                     "host cannot pack what it never sees")
            kwargs.pop(name, None)
        kwargs.pop("non_blocking", None)
        window = self._configure(num_qo_heads, num_kv_heads, head_dim_qk, page_size, **kwargs,
                                 query_tokens=self._max_query_tokens)
        if packed_custom_mask is not None:
            mask, bits = "custom", packed_custom_mask
        elif packed_draft_mask is not None:
            mask, bits = "draft", packed_draft_mask
        else:
            mask, bits = ("causal" if causal else "none"), None
        self._plan_in_stream(block_table, seq_lens, cumulative, num_pages, window, self._max_query_tokens,
                             qo_indptr, mask, bits)
