"""CoDec as the decode attention of Hugging Face transformers' continuous
batching: ``register()`` adds the attention implementation ``paged|codec``.

    import codec.integrations.transformers as codec_tf
    codec_tf.register()
    model.set_attn_implementation("paged|codec")
    outputs = model.generate_batch(inputs, generation_config, continuous_batching_config=...)

What it does per forward pass (one engine step):

- writes the new tokens' K and V into the engine's paged cache, in place (the
  cache is read where it lies: no gather of the context);
- at the first layer, derives the page tables of the step's decode requests
  (one query token each) from the engine's read slots and plans them once:
  every layer then runs the same plan (``BatchPrefixDecodeWrapper``);
- computes the rows of prefill chunks (several query tokens) with a causal
  ``scaled_dot_product_attention`` over the request's own KV, since the
  engine passes no mask to implementations outside its own names.

The engine shares full blocks between requests with a common prefix
(``allow_block_sharing``), so shared prefixes are shared pages, which CoDec
reads once per step. Models with sliding-window layers are refused.
"""

from __future__ import annotations

import weakref
from typing import Any, Optional, Tuple

import numpy as np
import torch

from ..decode import BatchPrefixDecodeWrapper
from .paging import page_starts, page_tables_from_slots

NAME = "paged|codec"  # keeps "flash" out of the name: the engine turns on flash-only paths for such names
WORKSPACE_BYTES = 256 << 20


class _Step:
    """One engine step's attention setup, made at its first layer and used by every layer."""

    def __init__(self, cache: Any, wrapper: BatchPrefixDecodeWrapper, module: Any, q: torch.Tensor,
                 cu_seq_lens_q: torch.Tensor, cu_seq_lens_k: torch.Tensor, read_slots: torch.Tensor,
                 scaling: float) -> None:
        # The step's lengths on the host: two small copies (the engine made them from host lists).
        cu_q = cu_seq_lens_q.to("cpu").numpy().astype(np.int64)
        cu_k = cu_seq_lens_k.to("cpu").numpy().astype(np.int64)
        q_lens = np.diff(cu_q)
        self.decode = np.flatnonzero(q_lens == 1)
        self.prefill = [(int(cu_q[r]), int(cu_q[r + 1]), int(cu_k[r]), int(cu_k[r + 1]))
                        for r in np.flatnonzero(q_lens > 1)]
        self.all_decode = self.decode.size == q_lens.size and self.decode.size == q.shape[2]
        self.decode_rows = None if self.all_decode else torch.from_numpy(cu_q[self.decode]).to(q.device)
        if self.decode.size:
            bs = cache.block_size
            positions = torch.from_numpy(page_starts(cu_k, bs, self.decode)).to(read_slots.device)
            starts = read_slots[positions].to("cpu").numpy()  # one small gather, not the whole context
            indptr, indices, last = page_tables_from_slots(starts, cu_k[self.decode + 1] - cu_k[self.decode], bs)
            wrapper.plan(indptr, indices, last, q.shape[1], cache.num_key_value_heads, cache.head_dim, bs,
                         q_data_type=q.dtype, sm_scale=scaling, num_pages=cache.num_blocks + 2)


class _CacheState:
    """What the backend keeps per engine cache: the wrapper (and its workspace) and the current step."""

    def __init__(self, cache: Any, workspace_bytes: int) -> None:
        if getattr(cache, "num_sliding_attention_groups", 0):
            raise ValueError(f"{NAME}: models with sliding-window layers are not supported")
        workspace = torch.empty(workspace_bytes, dtype=torch.uint8, device=cache.device)
        self.wrapper = BatchPrefixDecodeWrapper(workspace)
        self.step: Optional[_Step] = None


_STATES: "weakref.WeakKeyDictionary[Any, _CacheState]" = weakref.WeakKeyDictionary()


def codec_paged_attention_forward(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor,
                                  value: torch.Tensor, attention_mask: Any, scaling: Optional[float] = None,
                                  cache: Any = None, cu_seq_lens_q: torch.Tensor = None,
                                  cu_seq_lens_k: Any = None, read_index: Any = None, write_index: Any = None,
                                  **kwargs: Any) -> Tuple[torch.Tensor, None]:
    """The ``paged|codec`` attention: query (1, Hq, T, D), key and value (1,
    Hkv, T, D) of the step's T new tokens; returns (T, Hq, D)."""
    if cache is None:
        raise ValueError(f"`{NAME}` needs the paged cache of continuous batching; use `sdpa` for a plain forward")
    if isinstance(cu_seq_lens_k, dict):
        cu_seq_lens_k = cu_seq_lens_k["full_attention"]
    state = _STATES.get(cache)
    if state is None:
        state = _STATES[cache] = _CacheState(cache, WORKSPACE_BYTES)
    group, layer_in_group = cache.layer_index_to_group_indices[module.layer_idx]
    k_cache, v_cache = cache.key_cache[layer_in_group], cache.value_cache[layer_in_group]
    # The new tokens' KV into the cache (the engine's slots for them)
    slots = write_index[group]
    k_cache.index_copy_(0, slots, key[0].transpose(0, 1))
    v_cache.index_copy_(0, slots, value[0].transpose(0, 1))
    scale = module.scaling if scaling is None else scaling
    if module.layer_idx == 0 or state.step is None:
        state.step = _Step(cache, state.wrapper, module, query, cu_seq_lens_q, cu_seq_lens_k, read_index[group],
                           scale)
    step = state.step
    total = query.shape[2]
    out = torch.empty((total, query.shape[1], query.shape[3]), dtype=query.dtype, device=query.device)
    q = query[0].transpose(0, 1)  # (T, Hq, D), a view: CoDec takes its strides
    if step.decode.size:
        pages = (k_cache.view(-1, cache.block_size, cache.num_key_value_heads, cache.head_dim),
                 v_cache.view(-1, cache.block_size, cache.num_key_value_heads, cache.head_dim))
        if step.all_decode:
            state.wrapper.run(q, pages, out=out)
        else:
            out[step.decode_rows] = state.wrapper.run(q[step.decode_rows], pages)
    read_slots = read_index[group] if read_index else None
    for q0, q1, k0, k1 in step.prefill:  # prefill chunks: causal attention over the request's own KV
        if read_slots is None or read_slots.numel() == 0:  # no cache read in this step: the new tokens are all
            keys, values = key[0, :, q0:q1], value[0, :, q0:q1]
        else:
            keys = k_cache[read_slots[k0:k1]].transpose(0, 1)  # (Hkv, Lk, D)
            values = v_cache[read_slots[k0:k1]].transpose(0, 1)
        lq, lk = q1 - q0, k1 - k0
        causal = torch.ones((lq, lk), dtype=torch.bool, device=query.device).tril(lk - lq)
        rows = torch.nn.functional.scaled_dot_product_attention(
            query[0, :, q0:q1], keys, values, attn_mask=causal, scale=scale, enable_gqa=True)
        out[q0:q1] = rows.transpose(0, 1)
    return out, None


def register(name: str = NAME) -> str:
    """Registers the CoDec attention with transformers under ``name`` (keep
    "flash" out of it) and returns the name for ``model.set_attn_implementation``."""
    if "flash" in name:
        raise ValueError(f"{name!r}: a name containing 'flash' turns on the engine's flash-only paths")
    if not name.startswith("paged|"):
        raise ValueError(f"{name!r}: continuous batching runs 'paged|...' implementations only")
    from transformers import AttentionInterface
    AttentionInterface.register(name, codec_paged_attention_forward)
    return name
