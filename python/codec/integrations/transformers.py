"""CoDec as the decode attention of Hugging Face transformers' continuous
batching: ``register()`` adds the attention implementation ``paged|codec``.

    import codec.integrations.transformers as codec_tf
    codec_tf.register()
    model.set_attn_implementation("paged|codec")
    outputs = codec_tf.generate_batch(model, inputs, generation_config, continuous_batching_config)

What it does per forward pass (one engine step):

- writes the new tokens' K and V into the engine's paged cache, in place (the
  cache is read where it lies: no gather of the context);
- at the first layer, takes the page tables of the step's decode requests
  (one query token each) and plans them once: every layer then runs the same
  plan (``BatchPrefixDecodeWrapper``);
- computes the rows of prefill chunks (several query tokens) with a causal
  ``scaled_dot_product_attention`` over the request's own KV, since the
  engine passes no mask to implementations outside its own names.

The page tables come from one of the engine's two decode paths. On its
default path the engine lists every KV token's cache slot for every request
each step (``read_index``); the page tables are then the slots of each
page's first token, one small gather. That list costs the engine ~90 ns per
context token of host time per step (412k tokens: ~37 ms). Its block-table
path, which the engine turns on only for flash-named implementations, hands
the attention each request's block ids instead (``block_table``) and builds
no slot list; ``generate_batch`` and ``enable_block_tables`` here turn it on
for ``paged|codec`` through the manager's public configuration, before the
manager starts. Steps with prefill rows take the slot-list path either way.

The engine shares full blocks between requests with a common prefix
(``allow_block_sharing``), so shared prefixes are shared pages, which CoDec
reads once per step. Models with sliding-window layers are refused.

CUDA graphs: with ``use_cuda_graph=(False, True)`` the engine captures each
decode batch size once and replays the whole forward without calling
Python. A captured step plans in the stream instead
(``BatchPrefixDecodeWrapper.plan_block_table_in_stream``): the replay copies
the engine's block table to pinned memory, a host function plans it, and the
plan reaches the workspace before the first layer's attention, so every
replay runs the exact plan of its own batch. The new tokens' cache slots are
computed on the device. Prefill steps stay eager (their chunks need the
host's lengths), and graphs of them are refused. With the engine's
asynchronous batching (the next step scheduled during this one's forward)
each IO pair has its graphs, all planned in the stream the same way.
"""

from __future__ import annotations

import math
import time
import weakref
from typing import Any, Dict, List, Optional, Tuple, Union

import numpy as np
import torch
from torch.nn.attention.bias import causal_lower_right

from ..decode import BatchPrefixDecodeWrapper
from .paging import page_starts, page_tables_from_block_table, page_tables_from_slots
from .warm_up import prefix_waves

NAME = "paged|codec"  # keeps "flash" out of the name: the engine turns on flash-only paths for such names
WORKSPACE_BYTES = 256 << 20
_ATTENTIONS: "weakref.WeakSet[PagedAttention]" = weakref.WeakSet()  # whose graph plans generate_batch checks


class Step:
    """One engine step's rows, read at its first layer: which requests decode
    (one query token) and which run prefill chunks, and the decode requests'
    page tables (CSR: ``indptr``, ``indices``, ``last_page_len``). On the
    block-table path it also holds the cache slots of the new tokens, which
    the engine then leaves to the attention to write."""

    def __init__(self, query: torch.Tensor, cu_seq_lens_q: torch.Tensor, cu_seq_lens_k: torch.Tensor,
                 block_size: int, read_slots: Optional[torch.Tensor], block_table: Optional[torch.Tensor],
                 write_trash: int) -> None:
        # The step's lengths on the host: two small copies (the engine made them from host lists).
        self.cu_q = cu_seq_lens_q.to("cpu").numpy().astype(np.int64)
        self.cu_k = cu_seq_lens_k.to("cpu").numpy().astype(np.int64)
        q_lens = np.diff(self.cu_q)
        self.decode = np.flatnonzero(q_lens == 1)
        self.prefill = [(int(self.cu_q[r]), int(self.cu_q[r + 1]), int(self.cu_k[r]), int(self.cu_k[r + 1]))
                        for r in np.flatnonzero(q_lens > 1)]
        self.all_decode = self.decode.size == q_lens.size and self.decode.size == query.shape[2]
        self.decode_rows = None if self.all_decode else torch.from_numpy(self.cu_q[self.decode]).to(query.device)
        self.write_slots = None
        if not self.decode.size:
            return
        seq_lens = self.cu_k[self.decode + 1] - self.cu_k[self.decode]
        if block_table is not None:  # decode-only, and in graph mode padded with rows of no tokens
            pages = -(-seq_lens // block_size)
            table = block_table[:, :int(pages.max())].to("cpu").numpy()[self.decode]  # one copy of the columns in use
            self.indptr, self.indices, self.last_page_len = page_tables_from_block_table(table, seq_lens, block_size)
            last = seq_lens - 1  # the new token: the last of each request
            slots = np.full(query.shape[2], write_trash, dtype=np.int64)  # padding tokens write where nothing reads
            slots[self.cu_q[self.decode]] = (table[np.arange(seq_lens.size), last // block_size].astype(np.int64)
                                             * block_size + last % block_size)
            self.write_slots = torch.from_numpy(slots).to(query.device)
        else:  # the slots of the pages' first tokens: one small gather
            positions = torch.from_numpy(page_starts(self.cu_k, block_size, self.decode)).to(read_slots.device)
            starts = read_slots[positions].to("cpu").numpy()
            self.indptr, self.indices, self.last_page_len = page_tables_from_slots(starts, seq_lens, block_size)


class GraphStep:
    """A decode-only step captured in one of the engine's CUDA graphs: its
    rows (the batch padded to the graph's size; padding rows hold no tokens)
    and the new tokens' slots are tensors on the device, which each replay
    refills, and the plan is made in the stream (``plan_in_stream``). The
    engine's block table may have fewer rows than the step has tokens (its
    padding caps the sequences at its most requests): the tokens past its
    rows are padding too."""

    prefill: List[Tuple[int, int, int, int]] = []

    def __init__(self, block_table: torch.Tensor, cu_seq_lens_k: torch.Tensor, tokens: int, block_size: int,
                 write_trash: int) -> None:
        rows = min(tokens, block_table.shape[0])
        self.decode = np.arange(rows)
        self.all_decode = rows == tokens
        self.decode_rows = None if self.all_decode else torch.arange(rows, device=block_table.device)
        self.block_table, self.cu_seq_lens_k = block_table[:rows], cu_seq_lens_k[:rows + 1]
        lens = self.cu_seq_lens_k[1:] - self.cu_seq_lens_k[:-1]
        last = (lens - 1).clamp_(min=0)
        page = self.block_table.gather(1, (last // block_size).long()[:, None])[:, 0].long()
        # padding writes into the engine's write-trash slot, which nothing reads
        self.write_slots = torch.full((tokens,), write_trash, dtype=torch.long, device=block_table.device)
        self.write_slots[:rows] = torch.where(lens > 0, page * block_size + last % block_size, write_trash)


def _causal_attention(q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, scale: float) -> torch.Tensor:
    """Attention of a prefill chunk's rows q (Hq, Lq, D), the last Lq of the
    request's Lk tokens, over keys and values (Hkv, Lk, D), causally: row i
    sees keys up to Lk - Lq + i (torch's lower-right causal bias, which runs
    the fused kernels without a mask in memory)."""
    lq, lk = q.shape[1], keys.shape[1]
    mask = None if lq == lk else causal_lower_right(lq, lk)
    return torch.nn.functional.scaled_dot_product_attention(
        q[None], keys[None], values[None], attn_mask=mask, is_causal=mask is None, scale=scale, enable_gqa=True)[0]


class PagedAttention:
    """The attention function that ``register`` gives transformers: CoDec for
    the decode rows of every step, a causal SDPA for prefill chunks. ``plan``
    and ``decode`` are the decode path's two halves (a subclass may replace
    them, as bench/e2e_decode.py's no-op floor does)."""

    workspace_bytes = WORKSPACE_BYTES
    # A graph's plan is copied whole every replay, its arrays sized by the capacity this workspace gives:
    # 64 MiB holds ~120k partial slots (loogle:8 plans need ~30-65k) in a ~2 MB plan (256 MiB: ~6.5 MB).
    graph_workspace_bytes = 64 << 20

    def __init__(self) -> None:
        _ATTENTIONS.add(self)
        self._wrappers: "weakref.WeakKeyDictionary[Any, BatchPrefixDecodeWrapper]" = weakref.WeakKeyDictionary()
        self._graph_wrappers: "weakref.WeakKeyDictionary[Any, BatchPrefixDecodeWrapper]" = weakref.WeakKeyDictionary()
        self._steps: "weakref.WeakKeyDictionary[Any, Union[Step, GraphStep]]" = weakref.WeakKeyDictionary()

    def wrapper(self, cache: Any) -> BatchPrefixDecodeWrapper:
        """The wrapper (and workspace) of an engine cache, made at its first use."""
        w = self._wrappers.get(cache)
        if w is None:
            if getattr(cache, "num_sliding_attention_groups", 0):
                raise ValueError(f"{NAME}: models with sliding-window layers are not supported")
            workspace = torch.empty(self.workspace_bytes, dtype=torch.uint8, device=cache.device)
            w = self._wrappers[cache] = BatchPrefixDecodeWrapper(workspace)
        return w

    def graph_wrapper(self, cache: Any, block_table: torch.Tensor) -> BatchPrefixDecodeWrapper:
        """The CUDA-graph wrapper of an engine cache, for steps its graphs capture: plans
        packed at a capacity of the engine's block table (every row and column it has)."""
        w = self._graph_wrappers.get(cache)
        if w is None:
            cols = block_table.shape[-1]
            # the rows of the engine's whole table (this step's is a view of its first rows)
            rows = block_table.untyped_storage().nbytes() // (4 * cache.num_groups * cols)
            workspace = torch.empty(self.graph_workspace_bytes, dtype=torch.uint8, device=cache.device)
            w = self._graph_wrappers[cache] = BatchPrefixDecodeWrapper(
                workspace, use_cuda_graph=True, max_batch_size=rows, max_num_pages=rows * cols)
        return w

    def plan(self, cache: Any, step: Step, query: torch.Tensor, scale: float) -> None:
        """Plans the step's decode requests once, for every layer."""
        self.wrapper(cache).plan(step.indptr, step.indices, step.last_page_len, query.shape[1],
                                 cache.num_key_value_heads, cache.head_dim, cache.block_size, q_data_type=query.dtype,
                                 sm_scale=scale, num_pages=cache.num_blocks + 2)

    def check_stream_plans(self, cache: Any = None) -> None:
        """Raises RuntimeError with the first error a graph replay's plan met
        (its step's decode rows ran as zeros) since the last check, for one
        engine cache or all. Replays never call Python: eager steps and
        ``generate_batch`` check."""
        caches = list(self._graph_wrappers.keys()) if cache is None else [cache]
        for c in caches:
            w = self._graph_wrappers.get(c)
            if w is not None:
                try:
                    w.check_stream_plans()
                except ValueError as e:
                    raise RuntimeError(f"{NAME} in a CUDA graph: {e}") from None

    def plan_in_stream(self, cache: Any, step: GraphStep, query: torch.Tensor, scale: float) -> None:
        """Plans a captured step in the stream, from its device block table: every replay re-plans."""
        w = self.graph_wrapper(cache, step.block_table)
        w.plan_block_table_in_stream(step.block_table, step.cu_seq_lens_k, query.shape[1], cache.num_key_value_heads,
                                     cache.head_dim, cache.block_size, num_pages=cache.num_blocks + 2,
                                     cumulative=True, q_data_type=query.dtype, sm_scale=scale)

    def decode(self, cache: Any, q: torch.Tensor, pages: Tuple[torch.Tensor, torch.Tensor], out: torch.Tensor) -> None:
        """Attention of the planned decode rows q (n, Hq, D) into out (n, Hq, D)."""
        wrappers = self._graph_wrappers if isinstance(self._steps[cache], GraphStep) else self._wrappers
        wrappers[cache].run(q, pages, out=out)

    def __call__(self, module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                 attention_mask: Any, scaling: Optional[float] = None, cache: Any = None,
                 cu_seq_lens_q: torch.Tensor = None, cu_seq_lens_k: Any = None, read_index: Any = None,
                 write_index: Any = None, block_table: Optional[torch.Tensor] = None,
                 **kwargs: Any) -> Tuple[torch.Tensor, None]:
        """query (1, Hq, T, D), key and value (1, Hkv, T, D) of the step's T new tokens; returns (T, Hq, D)."""
        if cache is None:
            raise ValueError(f"`{NAME}` needs the paged cache of continuous batching; use `sdpa` for a plain forward")
        if isinstance(cu_seq_lens_k, dict):
            cu_seq_lens_k = cu_seq_lens_k["full_attention"]
        group, layer_in_group = cache.layer_index_to_group_indices[module.layer_idx]
        k_cache, v_cache = cache.key_cache[layer_in_group], cache.value_cache[layer_in_group]
        scale = module.scaling if scaling is None else scaling
        read_slots = read_index[group] if read_index else None
        step = self._steps.get(cache)
        if module.layer_idx == 0 or step is None:  # a new step: its rows, and the plan every layer shares
            if block_table is not None and query.is_cuda and torch.cuda.is_current_stream_capturing():
                # captured in a graph: nothing may wait for the device, and every replay must re-plan
                step = self._steps[cache] = GraphStep(block_table[group], cu_seq_lens_k, query.shape[2],
                                                      cache.block_size, cache.write_trash_index)
                self.plan_in_stream(cache, step, query, scale)
            else:
                self.check_stream_plans(cache)  # the replays since the last eager step
                step = self._steps[cache] = Step(query, cu_seq_lens_q, cu_seq_lens_k, cache.block_size, read_slots,
                                                 None if block_table is None else block_table[group],
                                                 cache.write_trash_index)
                if step.decode.size:
                    self.plan(cache, step, query, scale)
        # The new tokens' KV into the cache, at their slots: the engine's, or on
        # the block-table path (which lists none) the step's
        slots = write_index[group] if step.write_slots is None else step.write_slots
        k_cache.index_copy_(0, slots, key[0].transpose(0, 1))
        v_cache.index_copy_(0, slots, value[0].transpose(0, 1))
        out = torch.empty((query.shape[2], query.shape[1], query.shape[3]), dtype=query.dtype, device=query.device)
        q = query[0].transpose(0, 1)  # (T, Hq, D), a view: CoDec takes its strides
        if step.decode.size:
            shape = (-1, cache.block_size, cache.num_key_value_heads, cache.head_dim)
            pages = (k_cache.view(shape), v_cache.view(shape))
            if step.all_decode:
                self.decode(cache, q, pages, out)
            else:
                rows = torch.empty((step.decode.size,) + tuple(q.shape[1:]), dtype=q.dtype, device=q.device)
                self.decode(cache, q[step.decode_rows], pages, rows)
                out[step.decode_rows] = rows
        for q0, q1, k0, k1 in step.prefill:  # prefill chunks: causal attention over the request's own KV
            if read_slots is None or read_slots.numel() == 0:  # no cache read this step: the new tokens are all
                keys, values = key[0, :, q0:q1], value[0, :, q0:q1]
            else:
                keys = k_cache[read_slots[k0:k1]].transpose(0, 1)  # (Hkv, Lk, D)
                values = v_cache[read_slots[k0:k1]].transpose(0, 1)
            out[q0:q1] = _causal_attention(query[0, :, q0:q1], keys, values, scale).transpose(0, 1)
        return out, None


def register(name: str = NAME, attention: Optional[PagedAttention] = None) -> str:
    """Registers the CoDec attention (``attention``, a ``PagedAttention`` by
    default) with transformers under ``name`` (keep "flash" out of it) and
    returns the name for ``model.set_attn_implementation``."""
    if "flash" in name:
        raise ValueError(f"{name!r}: a name containing 'flash' turns on the engine's flash-only paths")
    if not name.startswith("paged|"):
        raise ValueError(f"{name!r}: continuous batching runs 'paged|...' implementations only")
    from transformers import AttentionInterface
    AttentionInterface.register(name, attention if attention is not None else PagedAttention())
    return name


def enable_block_tables(manager: Any, max_sequence_length: int) -> None:
    """Turns on the engine's block-table decode path for a continuous-batching
    manager made by ``model.init_continuous_batching`` and not yet started:
    decode-only steps then pass ``block_table`` instead of listing every
    context token's slot. The engine sizes each request's block table from
    the manager's ``max_blocks_per_request``, which it sets to 0 for
    implementations without "flash" in their name; this sets it, as its
    workload hints would, for requests of up to ``max_sequence_length`` tokens
    (prompt and generated: longer ones decode on the slot-list path)."""
    if manager.is_running() or manager.batch_processor is not None:
        raise ValueError("enable_block_tables: the manager has started or warmed up (its cache and block tables "
                         "exist); call it right after model.init_continuous_batching")
    if max_sequence_length < 1:
        raise ValueError(f"enable_block_tables: max_sequence_length {max_sequence_length} must be >= 1")
    config = manager.continuous_batching_config
    varlen_graphs, _ = config.cuda_graph_booleans
    if varlen_graphs or config.varlen_compile_config or config.decode_compile_config:
        raise ValueError("enable_block_tables: paged|codec takes the engine's graphs of decode steps "
                         "(use_cuda_graph=(False, True)), where it plans every replay in the stream, but not "
                         f"graphs of prefill steps or compilation (this manager: CUDA graphs "
                         f"{config.cuda_graph_booleans}): their chunks need the host's lengths")
    blocks = math.ceil(max_sequence_length / config.block_size) + 1
    config.max_blocks_per_request = max(config.max_blocks_per_request, blocks + blocks % 2)


def _wait(manager: Any, ids: List[str], count: int) -> Dict[str, Any]:
    """The manager's next ``count`` finished requests (``ids`` and their other sequences)."""
    results: Dict[str, Any] = {}
    while len(results) < count:
        result = manager.get_result(timeout=1)
        if result is not None and result.is_finished():
            results[result.request_id] = result
        elif result is None and not manager.is_running():
            raise RuntimeError(f"the generation thread stopped with {len(results)} of {count} requests finished "
                               "(its log says why)")
    failed = {k: r.error for k, r in results.items() if r.error is not None}
    if failed:
        raise RuntimeError(f"{len(failed)} requests failed, e.g. {next(iter(failed.items()))}")
    parents = set(ids)
    return {**{k: results[k] for k in ids}, **{k: r for k, r in results.items() if k not in parents}}


def _prefix_waves(manager: Any, prefixes: List[List[int]]) -> List[List[List[int]]]:
    """``warm_up.prefix_waves`` for this manager's engine, once its
    generation thread has made the batch processor."""
    if not prefixes:
        return []
    while manager.batch_processor is None:  # made by the generation thread as it starts
        if not manager.is_running():
            raise RuntimeError("the generation thread stopped before it made its batch processor (its log says why)")
        time.sleep(0.005)
    processor = manager.batch_processor
    return prefix_waves(prefixes, processor.cache.block_size, processor.cache.max_batch_tokens,
                        getattr(processor, "use_async_batching", False))


def generate_batch(model: Any, inputs: List[List[int]], generation_config: Any = None,
                   continuous_batching_config: Any = None, record_timestamps: bool = False,
                   block_tables: bool = True, shared_prefixes: Optional[List[List[int]]] = None) -> Dict[str, Any]:
    """``model.generate_batch`` (transformers' continuous batching, eager
    or with graphs of decode steps), with the engine's block-table decode path
    on (``block_tables``):
    a dict of request id to GenerationOutput, the requests of ``inputs`` in
    their order, then (with ``num_return_sequences`` > 1) their other
    sequences. Unlike the engine's own, it raises when the generation thread
    stops, a request fails or a CUDA graph's in-stream plan failed, rather
    than only logging it.

    ``shared_prefixes`` (token lists) are prefilled first, on the same
    manager, two generated tokens each: their full blocks stay in the
    engine's prefix cache, so the requests of ``inputs`` that start with one
    prefill only the rest, and all of them can decode together. Submitted at
    once without it, requests with a common prefix prefill it each."""
    from transformers.generation.continuous_batching.utils import WorkloadHints

    if not inputs:
        return {}
    config = model.generation_config if generation_config is None else generation_config
    new_tokens = config.max_new_tokens  # None: no limit, as for the engine
    prefixes = [list(p) for p in shared_prefixes or []]
    if any(not p for p in prefixes):
        raise ValueError("generate_batch: shared_prefixes holds an empty prompt")
    hints = WorkloadHints(max_prompt_length=max(map(len, inputs + prefixes)), max_generated_length=new_tokens or 0,
                          num_requests=len(inputs) * (config.num_return_sequences or 1))
    manager = model.init_continuous_batching(generation_config=generation_config,
                                             continuous_batching_config=continuous_batching_config,
                                             workload_hints=hints)
    if block_tables:  # sized as the hints would size it (without a generation limit: the prompts)
        enable_block_tables(manager, hints.max_prompt_length + hints.max_generated_length)
    manager.start()
    try:
        sequences = manager.num_return_sequences
        for wave in _prefix_waves(manager, prefixes):
            # One sequence each (a request to fork prefills all but its last token first, a split again), and two
            # tokens: a request that ends with its prefill step is finished before the engine marks its blocks full.
            manager.num_return_sequences = 1
            try:
                warm = manager.add_requests(inputs=wave, max_new_tokens=2)
            finally:
                manager.num_return_sequences = sequences
            _wait(manager, warm, len(warm))
        ids = manager.add_requests(inputs=inputs, max_new_tokens=new_tokens, record_timestamps=record_timestamps)
        results = _wait(manager, ids, hints.num_requests)
        for attention in list(_ATTENTIONS):  # replays' plans, which no Python saw
            attention.check_stream_plans()
        return results
    finally:
        manager.stop(block=True, timeout=60)
        manager.destroy()
