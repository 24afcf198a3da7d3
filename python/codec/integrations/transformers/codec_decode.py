"""CoDec as the ``DecodeBackend`` of ``paged|codec``, decode rows and
prefill chunks alike: per engine cache and layer group (the layers that
share page tables) one ``BatchPrefixDecodeWrapper`` for decode-only steps
and one ``BatchPrefixPrefillWrapper`` for steps with prefill chunks
(causal), sharing the group's workspace (a step plans one of them), each
planned once per step for every layer of the group; for steps captured in
the engine's CUDA graphs, a CUDA-graph wrapper that plans every replay in
the stream."""

from __future__ import annotations

import weakref
from typing import Any, Dict, Optional, Tuple, Type, Union

import torch

from ...decode import BatchPrefixDecodeWrapper
from ...prefill import BatchPrefixPrefillWrapper
from .steps import GraphStep, Step

NAME = "paged|codec"  # keeps "flash" out of the name: the engine turns on flash-only paths for such names
WORKSPACE_BYTES = 256 << 20

Wrapper = Union[BatchPrefixDecodeWrapper, BatchPrefixPrefillWrapper]


class CodecDecode:
    """Every row of every step on CoDec (``steps.DecodeBackend``): a step's
    decode rows and prefill chunks in one plan, so that the questions of a
    document prefill over its cached pages reading them once."""

    prefill = True
    workspace_bytes = WORKSPACE_BYTES
    # A graph's plan is copied whole every replay, its arrays sized by the capacity this workspace gives:
    # 64 MiB holds ~120k partial slots (loogle:8 plans need ~30-65k) in a ~2 MB plan (256 MiB: ~6.5 MB).
    graph_workspace_bytes = 64 << 20

    def __init__(self) -> None:
        # per engine cache: the wrappers by (class, layer group), the workspaces by group, the wrapper planned
        # for each group's current step
        self._wrappers: "weakref.WeakKeyDictionary[Any, Dict[Tuple[type, int], Wrapper]]" = \
            weakref.WeakKeyDictionary()
        self._workspaces: "weakref.WeakKeyDictionary[Any, Dict[int, torch.Tensor]]" = weakref.WeakKeyDictionary()
        self._planned: "weakref.WeakKeyDictionary[Any, Dict[int, Wrapper]]" = weakref.WeakKeyDictionary()
        self._graph_wrappers: "weakref.WeakKeyDictionary[Any, BatchPrefixDecodeWrapper]" = weakref.WeakKeyDictionary()

    def wrapper(self, cache: Any, group: int = 0) -> BatchPrefixDecodeWrapper:
        """The decode wrapper of an engine cache's layer group, made at its first use."""
        return self._wrapper(cache, group, BatchPrefixDecodeWrapper)

    def prefill_wrapper(self, cache: Any, group: int = 0) -> BatchPrefixPrefillWrapper:
        """The wrapper of an engine cache's layer group for steps with prefill chunks, made at its first use."""
        return self._wrapper(cache, group, BatchPrefixPrefillWrapper)

    def _wrapper(self, cache: Any, group: int, kind: Type[Wrapper]) -> Wrapper:
        wrappers = self._wrappers.setdefault(cache, {})
        if (kind, group) not in wrappers:
            workspaces = self._workspaces.setdefault(cache, {})
            if group not in workspaces:
                workspaces[group] = torch.empty(self.workspace_bytes, dtype=torch.uint8, device=cache.device)
            wrappers[(kind, group)] = kind(workspaces[group])
        return wrappers[(kind, group)]

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
        """Plans the step's requests once, for every layer of its group:
        decode-only on the decode wrapper, with prefill chunks on the prefill
        wrapper (causal)."""
        shape = (query.shape[1], cache.num_key_value_heads, cache.head_dim, step.page_size)
        attention = dict(q_data_type=query.dtype, sm_scale=scale, window_left=step.window_left,
                         logits_soft_cap=step.logits_soft_cap, num_pages=step.num_pages(cache))
        if step.qo_indptr is None:
            w = self.wrapper(cache, step.group)
            w.plan(step.indptr, step.indices, step.last_page_len, *shape, **attention)
        else:
            w = self.prefill_wrapper(cache, step.group)
            w.plan(step.qo_indptr, step.indptr, step.indices, step.last_page_len, *shape, causal=True, **attention)
        self._planned.setdefault(cache, {})[step.group] = w

    def plan_in_stream(self, cache: Any, step: GraphStep, query: torch.Tensor, scale: float) -> None:
        """Plans a captured step in the stream, from its device block table: every replay re-plans."""
        w = self.graph_wrapper(cache, step.block_table)
        w.plan_block_table_in_stream(step.block_table, step.cu_seq_lens_k, query.shape[1], cache.num_key_value_heads,
                                     cache.head_dim, cache.block_size, num_pages=cache.num_blocks + 2,
                                     cumulative=True, q_data_type=query.dtype, sm_scale=scale,
                                     window_left=step.window_left, logits_soft_cap=step.logits_soft_cap)

    def run(self, cache: Any, step: Union[Step, GraphStep], q: torch.Tensor,
            pages: Tuple[torch.Tensor, torch.Tensor], out: torch.Tensor,
            sinks: Optional[torch.Tensor] = None) -> None:
        """Attention of the planned rows q (n, Hq, D) into out (n, Hq, D), with the layer's sinks."""
        w = self._graph_wrappers[cache] if isinstance(step, GraphStep) else self._planned[cache][step.group]
        w.run(q, pages, out=out, sinks=sinks)

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
