"""The per-layer attention of ``paged|codec`` (``PagedAttention``, what
``register`` gives transformers): each layer writes the new tokens' K and V
into the engine's paged cache and runs the step's rows through its
``DecodeBackend`` (CoDec's by default: decode rows and prefill chunks, with
a causal mask, in one plan), planned once a step at the first layer of each
of the engine's layer groups (``steps.build_step``) for the group's
attention: the layer's scale, sliding window and logit soft-cap, as the
model passes them (``scaling``, ``sliding_window``, ``softcap``); its
attention sinks (gpt-oss's ``s_aux``) go to every layer's run. A backend
that takes decode rows alone leaves the prefill chunks to a causal
``scaled_dot_product_attention`` over the request's own KV (the engine
passes no mask to implementations outside its own names), for layers
without any of these."""

from __future__ import annotations

import weakref
from typing import Any, Callable, Dict, Optional, Tuple, Union

import torch
from torch.nn.attention.bias import causal_lower_right

from .codec_decode import NAME, CodecDecode
from .steps import DecodeBackend, GraphStep, Step, build_step

_ATTENTIONS: "weakref.WeakSet[PagedAttention]" = weakref.WeakSet()  # whose graph plans generate_batch checks


def causal_attention(q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, scale: float) -> torch.Tensor:
    """Attention of a prefill chunk's rows q (Hq, Lq, D), the last Lq of the
    request's Lk tokens, over keys and values (Hkv, Lk, D), causally: row i
    sees keys up to Lk - Lq + i (torch's lower-right causal bias, which runs
    the fused kernels without a mask in memory)."""
    lq, lk = q.shape[1], keys.shape[1]
    mask = None if lq == lk else causal_lower_right(lq, lk)
    return torch.nn.functional.scaled_dot_product_attention(
        q[None], keys[None], values[None], attn_mask=mask, is_causal=mask is None, scale=scale, enable_gqa=True)[0]


class PagedAttention:
    """The attention function that ``register`` gives transformers: the rows
    of every step on ``decode_backend`` (``CodecDecode()`` by default, which
    takes prefill chunks too; a benchmark passes its own to compare backends
    in the same engine), a causal SDPA for the prefill chunks of a backend
    that takes decode rows alone."""

    def __init__(self, decode_backend: Optional[DecodeBackend] = None) -> None:
        _ATTENTIONS.add(self)
        self.decode_backend = decode_backend if decode_backend is not None else CodecDecode()
        # per engine cache: the current step of each layer group, and the attention it was planned for
        self._steps: "weakref.WeakKeyDictionary[Any, Dict[int, Tuple[Union[Step, GraphStep], tuple]]]" = \
            weakref.WeakKeyDictionary()
        # each layer's sinks as CoDec takes them (float32, no autograd), made once: a model in bf16 would
        # otherwise cast them at every layer of every step. By the parameter's id (a tensor compares by value),
        # with a weak reference that tells a new tensor at a reused id.
        self._sinks: Dict[int, Tuple["weakref.ref[torch.Tensor]", int, torch.Tensor]] = {}

    def _float_sinks(self, s_aux: torch.Tensor) -> torch.Tensor:
        cached = self._sinks.get(id(s_aux))
        if cached is None or cached[0]() is not s_aux or cached[1] != s_aux._version:  # changed in place: again
            cached = self._sinks[id(s_aux)] = (weakref.ref(s_aux), s_aux._version,
                                               s_aux.detach().to(torch.float32).contiguous())
        return cached[2]

    def current_step(self, cache: Any, group: int = 0) -> Optional[Union[Step, GraphStep]]:
        """The step a layer group of an engine cache is running (None before its first)."""
        entry = self._steps.get(cache, {}).get(group)
        return None if entry is None else entry[0]

    def check_stream_plans(self, cache: Any = None) -> None:
        """The decode backend's ``check_stream_plans``: RuntimeError for an
        error a graph replay's plan met, for one engine cache or all."""
        self.decode_backend.check_stream_plans(cache)

    def __call__(self, module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                 attention_mask: Any, scaling: Optional[float] = None, cache: Any = None,
                 cu_seq_lens_q: torch.Tensor = None, cu_seq_lens_k: Any = None, read_index: Any = None,
                 write_index: Any = None, block_table: Optional[torch.Tensor] = None,
                 sliding_window: Optional[int] = None, softcap: Optional[float] = None,
                 s_aux: Optional[torch.Tensor] = None, **kwargs: Any) -> Tuple[torch.Tensor, None]:
        """query (1, Hq, T, D), key and value (1, Hkv, T, D) of the step's T new tokens; returns (T, Hq, D)."""
        if cache is None:
            raise ValueError(f"`{NAME}` needs the paged cache of continuous batching; use `sdpa` for a plain forward")
        layer = module.layer_idx
        if not getattr(module, "is_causal", True):
            raise ValueError(f"{NAME}: layer {layer} is not causal (is_causal False); its steps are causal")
        group, layer_in_group = cache.layer_index_to_group_indices[layer]
        ring = cache.sliding_windows[layer]  # the engine keeps a sliding layer's KV in a ring of its window; else 1
        ring = 0 if ring == 1 else ring
        if ring and sliding_window not in (None, ring):
            raise ValueError(f"{NAME}: layer {layer} has sliding_window {sliding_window}, but the engine keeps a "
                             f"ring of {ring} tokens for it")
        window = sliding_window or ring  # 0: none, so that window - 1 is FlashInfer's window_left
        scale, window_left, soft_cap = module.scaling if scaling is None else scaling, window - 1, softcap or None
        attention = (scale, window_left, soft_cap)
        if isinstance(cu_seq_lens_k, dict):
            cu_seq_lens_k = cu_seq_lens_k["sliding_attention" if ring else "full_attention"]
        k_cache, v_cache = cache.key_cache[layer_in_group], cache.value_cache[layer_in_group]
        read_slots = read_index[group] if read_index else None
        steps = self._steps.get(cache)
        if layer == 0 or steps is None:  # a new step
            steps = self._steps[cache] = {}
        if group not in steps:  # the group's first layer: its rows, and the plan its layers share
            steps[group] = (build_step(self.decode_backend, cache, query, scale, cu_seq_lens_q, cu_seq_lens_k,
                                       read_slots, None if block_table is None else block_table[group],
                                       write_index[group] if write_index else None, group, ring, window_left,
                                       soft_cap),
                            attention)
        step, planned = steps[group]
        if attention != planned:
            raise ValueError(f"{NAME}: layer {layer}'s (scaling, window_left, softcap) {attention} differ from "
                             f"{planned}, its layer group's first layer's: one plan serves the group")
        if step.prefill and (window or softcap or s_aux is not None):
            raise ValueError(f"{NAME}: layer {layer} has a sliding window, soft-cap or sinks, which the causal SDPA "
                             f"that {type(self.decode_backend).__name__} leaves prefill chunks to has not: "
                             "use a backend that takes them (DecodeBackend.prefill)")
        shape = (-1, step.page_size, cache.num_key_value_heads, cache.head_dim)
        if step.gathered:  # a chunk longer than its ring's room: the engine's gather of the KV, ring written after
            keys, values = cache.update(key, value, layer, read_index, write_index)
            pages = (keys.contiguous().view(shape), values.contiguous().view(shape))  # K and V of one layout
        else:
            # The new tokens' KV into the cache, at their slots: the engine's, or on
            # the block-table path (which lists none) the step's
            slots = write_index[group] if step.write_slots is None else step.write_slots
            k_cache.index_copy_(0, slots, key[0].transpose(0, 1))
            v_cache.index_copy_(0, slots, value[0].transpose(0, 1))
            pages = (k_cache.view(shape), v_cache.view(shape))
        out = torch.empty((query.shape[2], query.shape[1], query.shape[3]), dtype=query.dtype, device=query.device)
        q = query[0].transpose(0, 1)  # (T, Hq, D), a view: CoDec takes its strides
        # the layer's sinks, passed only where it has them: a backend of a model without keeps its signature
        sinks = {} if s_aux is None else {"sinks": self._float_sinks(s_aux)}
        if step.requests.size:
            if step.all_rows:
                self.decode_backend.run(cache, step, q, pages, out, **sinks)
            else:
                rows = torch.empty((step.rows.numel(),) + tuple(q.shape[1:]), dtype=q.dtype, device=q.device)
                self.decode_backend.run(cache, step, q[step.rows], pages, rows, **sinks)
                out[step.rows] = rows
        for q0, q1, k0, k1 in step.prefill:  # the prefill chunks the backend left: causal SDPA over their own KV
            if read_slots is None or read_slots.numel() == 0:  # no cache read this step: the new tokens are all
                keys, values = key[0, :, q0:q1], value[0, :, q0:q1]
            else:
                keys = k_cache[read_slots[k0:k1]].transpose(0, 1)  # (Hkv, Lk, D)
                values = v_cache[read_slots[k0:k1]].transpose(0, 1)
            out[q0:q1] = causal_attention(query[0, :, q0:q1], keys, values, scale).transpose(0, 1)
        return out, None


def register(name: str = NAME, attention: Optional[Callable[..., Tuple[torch.Tensor, None]]] = None) -> str:
    """Registers the CoDec attention with transformers under ``name`` (keep
    "flash" out of it) and returns the name for
    ``model.set_attn_implementation``. ``attention`` is what the engine
    calls per layer: a ``PagedAttention()`` by default, or one with another
    decode backend, or a callable that wraps one."""
    if "flash" in name:
        raise ValueError(f"{name!r}: a name containing 'flash' turns on the engine's flash-only paths")
    if not name.startswith("paged|"):
        raise ValueError(f"{name!r}: continuous batching runs 'paged|...' implementations only")
    from transformers import AttentionInterface
    AttentionInterface.register(name, attention if attention is not None else PagedAttention())
    return name
