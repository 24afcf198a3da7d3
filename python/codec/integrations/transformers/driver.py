"""The driver of ``paged|codec`` in transformers' continuous batching:
``generate_batch`` (the engine's, with the block-table decode path on, the
shared prefixes prefilled first, and errors raised rather than logged) and
``enable_block_tables`` for a manager of one's own."""

from __future__ import annotations

import math
import time
from typing import Any, Callable, Dict, List, Optional

from ..warm_up import prefix_waves
from .attention import _ATTENTIONS


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


def _processor(manager: Any) -> Any:
    """The manager's batch processor, once its generation thread has made it."""
    while manager.batch_processor is None:  # made by the generation thread as it starts
        if not manager.is_running():
            raise RuntimeError("the generation thread stopped before it made its batch processor (its log says why)")
        time.sleep(0.005)
    return manager.batch_processor


def _prefix_waves(manager: Any, prefixes: List[List[int]]) -> List[List[List[int]]]:
    """``warm_up.prefix_waves`` for this manager's engine."""
    if not prefixes:
        return []
    processor = _processor(manager)
    return prefix_waves(prefixes, processor.cache.block_size, processor.cache.max_batch_tokens,
                        getattr(processor, "use_async_batching", False))


def generate_batch(model: Any, inputs: List[List[int]], generation_config: Any = None,
                   continuous_batching_config: Any = None, record_timestamps: bool = False,
                   block_tables: bool = True, shared_prefixes: Optional[List[List[int]]] = None,
                   prefixes_cached: Optional[Callable[[], None]] = None) -> Dict[str, Any]:
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
    once without it, requests with a common prefix prefill it each. (Models
    with sliding-window layers have no prefix cache: there it saves nothing.)
    ``prefixes_cached`` is called once they are, before ``inputs`` are
    submitted (a benchmark drops the records of their steps there)."""
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
        if prefixes_cached is not None:
            prefixes_cached()
        # The engine schedules none of the requests until all are queued: its generation thread, running since
        # start(), would otherwise begin with however many had arrived, and the steps of one run differ from the next.
        scheduler = _processor(manager).scheduler
        scheduler.block_new_requests = True
        try:
            ids = manager.add_requests(inputs=inputs, max_new_tokens=new_tokens, record_timestamps=record_timestamps)
        finally:
            scheduler.block_new_requests = False
        results = _wait(manager, ids, hints.num_requests)
        for attention in list(_ATTENTIONS):  # replays' plans, which no Python saw
            attention.check_stream_plans()
        return results
    finally:
        manager.stop(block=True, timeout=60)
        manager.destroy()
