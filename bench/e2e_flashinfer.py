"""FlashInfer's decode, cascade, prefill and attention-sink wrappers as
in-engine backends of bench/e2e_decode.py, siblings of CoDec's and the
floor's (e2e_attention.py): eager, planned once per step and layer group on
its page tables (a sliding group's pages of one token, as the library's),
with the group's ``window_left`` and ``logits_soft_cap`` at plan and the
layer's sinks at run; in the engine's graphs of decode steps (full-attention
models of one layer group), a CUDA-graph wrapper per graph, planned on the
host before every replay (``plan_before_forward``, which the harness calls
before each of the engine's forwards), the way serving engines run them.
Whether a kernel honours a window, soft-cap or sinks it is given is the
float64 check's to tell (``attention_rel_l2_max``)."""

import functools
import time
import weakref

import numpy as np
import torch

from codec.integrations.paging import page_tables_from_block_table
from codec.integrations.transformers import GraphStep

from .e2e_attention import InEngineAttention
from .e2e_batches import cascade_step_levels, padded_page_tables
from .e2e_models import VARIANTS


def host(x):
    return torch.from_numpy(np.ascontiguousarray(x, dtype=np.int32))


def workspace(cache, spaces):
    """A 256 MB FlashInfer workspace per engine cache (its layer groups' wrappers share it: they run in turn)."""
    if cache not in spaces:
        spaces[cache] = torch.empty(256 << 20, dtype=torch.uint8, device=cache.device)
    return spaces[cache]


def prefill_plan_args(cache, step, query):
    """The positional arguments of a FlashInfer prefill wrapper's plan for a
    step's rows (a row a request without prefill chunks): qo_indptr, the page
    tables, the heads, head_dim and the step's page size (1 on a sliding
    layer group's ring)."""
    qo = step.qo_indptr if step.qo_indptr is not None else np.arange(step.indptr.size)
    return (host(qo), host(step.indptr), host(step.indices), host(step.last_page_len), query.shape[1],
            cache.num_key_value_heads, cache.head_dim, step.page_size)


def variant_plan_kwargs(step, query, scale):
    """The keyword arguments of a FlashInfer decode or prefill plan for the
    step's layer group: dtypes, scale, window_left and logits_soft_cap."""
    return dict(q_data_type=query.dtype, kv_data_type=query.dtype, sm_scale=scale, window_left=step.window_left,
                logits_soft_cap=step.logits_soft_cap)


def sink_kwargs(sinks):
    """run()'s sinks argument of a FlashInfer decode or prefill wrapper: the layer's, float32 (none: none)."""
    return {} if sinks is None else {"sinks": sinks.float()}


class GraphPlan:
    """A FlashInfer CUDA-graph wrapper of one engine graph (its batch of
    `rows` requests and IO pair: the wrapper's buffers are fixed), the event
    its last plan's copies record, and for the cascade its node count per
    level and its request order on the device."""

    def __init__(self, rows, wrapper, nodes=None, order=None):
        self.rows, self.wrapper, self.copied = rows, wrapper, torch.cuda.Event()
        self.nodes, self.order = nodes, order


class FlashInferGraphs(InEngineAttention):
    """The FlashInfer backends. In the engine's graphs of decode steps, one
    CUDA-graph wrapper per graph (GraphPlan), planned on the host before
    every replay and capture (plan_before_forward; the capture's eager
    warm-up runs the eager wrapper), the way serving engines run them."""

    def __init__(self) -> None:
        super().__init__()
        self._spaces = weakref.WeakKeyDictionary()
        self._fi_graphs, self._graph, self._replay_ms = {}, None, []  # GraphPlans by (pair, rows), the step's
        self._graph_plan_args = None  # the model's heads, dtypes and scale, read at a run's first graph plan

    def clear(self):
        super().clear()
        self._fi_graphs, self._graph, self._replay_ms, self._graph_plan_args = {}, None, [], None

    def plan_before_forward(self, runner, model):
        """Before a decode graph's replay or capture (the engine's host inputs
        hold this step's batch): its page tables, read from the engine's block
        table, planned into the wrapper of its graph (batch size and, with
        asynchronous batching, the IO pair whose graphs run it), on the stream
        the graph runs on. A wrapper is planned again only once the copies of
        its last plan have run: its pinned plan buffer is reused. The host
        time is on the step's critical path, and reported (`replay_plan_ms`)."""
        io, cache = runner.inputs_and_outputs, runner.cache
        if not (io.use_block_table and runner.use_cuda_graph_decode):
            return
        t0 = time.perf_counter()
        pair = getattr(io, "current_pair", 0)  # asynchronous batching: two IO pairs, each with its graphs
        batch = io.io_pairs[pair].host_io if hasattr(io, "io_pairs") else io
        n, rows, bs = batch.num_request_in_batch, min(batch.num_q_tokens, batch.max_requests_per_batch), cache.block_size
        lens = np.diff(batch.cumulative_seqlens_k["full_attention"][:n + 1].cpu().numpy().astype(np.int64))
        table = batch.block_table[0, :n, :int(-(-lens.max() // bs))].cpu().numpy()
        if self._graph_plan_args is None:
            attn = next(m for m in model.modules() if hasattr(m, "scaling") and hasattr(m, "layer_idx"))
            heads = cache.num_key_value_heads * (model.config.num_attention_heads // model.config.num_key_value_heads)
            self._graph_plan_args = ((heads, cache.num_key_value_heads, cache.head_dim, bs),
                                     dict(q_data_type=model.dtype, kv_data_type=cache.key_cache[0].dtype,
                                          sm_scale=attn.scaling))
        graph = self._fi_graphs.get((pair, rows))
        if graph is not None:
            graph.copied.synchronize()
        stream = io.compute_stream if io.compute_stream is not None else torch.cuda.current_stream()
        with torch.cuda.stream(stream):
            graph = self.plan_graph(graph, cache, table, lens, rows, rows * batch.block_table.shape[2])
            graph.copied.record(stream)
        self._fi_graphs[(pair, rows)] = self._graph = graph
        self._replay_ms.append((time.perf_counter() - t0) * 1e3)

    def plan_graph(self, graph, cache, table, lens, rows, max_pages):
        """Plans the graph's wrapper (made first if `graph` is None, with
        buffers for `max_pages` page ids) for the step's block table and
        lengths, and returns its GraphPlan."""
        raise NotImplementedError

    def plan_captured(self, cache, step, query, scale):
        """A capture: planned before it (plan_before_forward), for its batch size."""
        if self._graph is None or self._graph.rows != step.decode.size:
            raise RuntimeError(f"{type(self).__name__}: a decode graph of {step.decode.size} requests captured "
                               "without its plan (plan_before_forward runs before the engine's forwards)")

    def finish(self):
        super().finish()
        if self._replay_ms:
            # the first includes FlashInfer's JIT build of its kernels (the engine captures before any step)
            self.replay_plans = {"plans": len(self._replay_ms), "plan_ms_mean": float(np.mean(self._replay_ms)),
                                 "plan_ms_median": float(np.median(self._replay_ms)),
                                 "plan_ms_max": float(np.max(self._replay_ms))}


def device_ints(values, device):
    """int32 values on the device, copied from pinned memory without blocking
    the host: from a host tensor FlashInfer's plan copies page ids blocking,
    which under asynchronous batching would wait for the forward in flight."""
    return host(values).pin_memory().to(device, non_blocking=True)


class FlashInferDecode(FlashInferGraphs):
    """FlashInfer's batch decode (tensor cores) on the step's page tables, a
    wrapper a layer group; in graphs its CUDA-graph wrapper, padding requests
    appended (padded_page_tables). Prefill chunks go to the library's SDPA,
    but on models with a window, soft-cap or sinks, which SDPA has not, to
    FlashInfer's prefill wrapper (causal), with the step's decode rows."""

    variants = frozenset(VARIANTS)

    def __init__(self) -> None:
        super().__init__()
        self._eager, self._planned = {}, {}  # eager wrappers by (kind, layer group); each group's planned one

    def serve(self, variants):
        self.prefill = bool(variants)

    def clear(self):
        super().clear()
        self._eager, self._planned = {}, {}  # they hold the last run's workspace: the next cache is sized without it

    def eager_wrapper(self, cache, kind, group):
        """The eager "decode" or "prefill" wrapper of a layer group, made at its first use."""
        import flashinfer
        if (kind, group) not in self._eager:
            ws = workspace(cache, self._spaces)
            self._eager[(kind, group)] = (
                flashinfer.BatchDecodeWithPagedKVCacheWrapper(ws, "NHD", use_tensor_cores=True) if kind == "decode"
                else flashinfer.BatchPrefillWithPagedKVCacheWrapper(ws, "NHD"))
        return self._eager[(kind, group)]

    def plan_step(self, cache, step, query, scale):
        if step.qo_indptr is not None:  # prefill chunks (serve: a model with variants)
            self.plan_prefill(cache, step, query, scale)
            return
        w = self._planned[step.group] = self.eager_wrapper(cache, "decode", step.group)
        w.plan(host(step.indptr), host(step.indices), host(step.last_page_len), query.shape[1],
               cache.num_key_value_heads, cache.head_dim, step.page_size, **variant_plan_kwargs(step, query, scale))

    def plan_prefill(self, cache, step, query, scale):
        """The step's rows on the layer group's prefill wrapper, causal."""
        w = self._planned[step.group] = self.eager_wrapper(cache, "prefill", step.group)
        w.plan(*prefill_plan_args(cache, step, query), causal=True, **variant_plan_kwargs(step, query, scale))

    def plan_graph(self, graph, cache, table, lens, rows, max_pages):
        import flashinfer
        indptr, indices, last = padded_page_tables(table, lens, rows, cache.block_size)
        if graph is None:
            ints = functools.partial(torch.empty, dtype=torch.int32, device=cache.device)
            graph = GraphPlan(rows, flashinfer.BatchDecodeWithPagedKVCacheWrapper(
                workspace(cache, self._spaces), "NHD", use_cuda_graph=True, use_tensor_cores=True,
                paged_kv_indptr_buffer=ints(rows + 1), paged_kv_indices_buffer=ints(max_pages),
                paged_kv_last_page_len_buffer=ints(rows)))
        shape, kinds = self._graph_plan_args
        graph.wrapper.plan(host(indptr), device_ints(indices, cache.device), host(last), *shape, **kinds)
        return graph

    def attend(self, cache, step, q, pages, out, sinks):
        w = self._graph.wrapper if isinstance(step, GraphStep) else self._planned[step.group]
        out.copy_(w.run(q.contiguous(), pages, **sink_kwargs(sinks)))


class FlashInferPrefill(FlashInferDecode):
    """FlashInfer's batch prefill wrapper (causal) on every eager step's page
    tables, prefill chunks and decode rows in one plan, as engines that run
    mixed batches through it do; in graphs of decode steps its decode
    wrapper (FlashInferDecode's)."""

    prefill = True

    def serve(self, variants):
        pass  # its plan takes the prefill chunks whatever the model

    def plan_step(self, cache, step, query, scale):
        self.plan_prefill(cache, step, query, scale)


class FlashInferSink(InEngineAttention):
    """FlashInfer's BatchAttentionWithAttentionSinkWrapper (its prefill
    wrapper with a sink variant, JIT-built; no soft-cap) on every eager
    step, decode rows and prefill chunks in one causal plan a layer group,
    the layer's sinks and the scale at run. The variant is built with a
    window or without: a wrapper a layer group and window kind. Eager steps
    only (models with sinks have sliding layers, which keep the engine off
    its block tables and the benchmark off graphs)."""

    prefill = True
    variants = frozenset({"window", "sinks"})
    requires = frozenset({"sinks"})
    limits = "FlashInfer's attention-sink wrapper: models with sinks, no soft-cap"

    def __init__(self) -> None:
        super().__init__()
        self._spaces = weakref.WeakKeyDictionary()
        self._wrappers, self._planned = {}, {}  # by (layer group, windowed); each group's planned one and its scale

    def clear(self):
        super().clear()
        self._wrappers, self._planned = {}, {}  # as FlashInferDecode's

    def plan_step(self, cache, step, query, scale):
        import flashinfer
        key = (step.group, step.window_left >= 0)
        if key not in self._wrappers:
            self._wrappers[key] = flashinfer.BatchAttentionWithAttentionSinkWrapper(
                workspace(cache, self._spaces), "NHD", q_data_type=query.dtype, kv_data_type=query.dtype,
                head_dim_qk=cache.head_dim, head_dim_vo=cache.head_dim, window_left=step.window_left)
        w = self._wrappers[key]
        w.plan(*prefill_plan_args(cache, step, query), causal=True, window_left=step.window_left,
               q_data_type=query.dtype, kv_data_type=query.dtype)
        self._planned[step.group] = w, scale

    def plan_captured(self, cache, step, query, scale):
        raise RuntimeError("FlashInferSink runs eager steps only")

    def attend(self, cache, step, q, pages, out, sinks):
        w, scale = self._planned[step.group]
        out.copy_(w.run(q.contiguous(), pages, sinks.float(), scale))


class FlashInferCascade(FlashInferGraphs):
    """FlashInfer's multi-level cascade (cascade_step_levels), requests
    reordered so that every node's are contiguous. In graphs its CUDA-graph
    wrapper fixes the levels and each one's node count: those of the
    capture's forest, and a node for the padding, as requests finish. A
    replay whose forest needs more is refused, the backend's error recorded:
    a forest deeper than two levels can gain nodes at a level as requests
    finish (a path that loses its branch is cut anew). Counts of `rows` per
    level would always fit, but FlashInfer sizes its query tile from them,
    which would read a shared node's KV once per 16 rows."""

    limits = ("a level sees its own positions (no window), it has no sinks, and it leaves prefill chunks to the "
              "library's SDPA (no soft-cap)")

    def __init__(self) -> None:
        super().__init__()
        self._wrappers = {}  # eager: one per number of levels, each allocating its buffers once

    def plan_step(self, cache, step, query, scale):
        import flashinfer
        n = step.indptr.size - 1
        order, qo, kp, ki, kl = cascade_step_levels(step.indptr, step.indices, step.last_page_len, cache.block_size, n)
        self.order = torch.tensor(order, dtype=torch.int64, device=query.device)
        if len(qo) not in self._wrappers:
            self._wrappers[len(qo)] = flashinfer.MultiLevelCascadeAttentionWrapper(
                len(qo), workspace(cache, self._spaces), "NHD")
        self.cascade = self._wrappers[len(qo)]
        self.cascade.plan([host(x) for x in qo], [host(x) for x in kp], [host(x) for x in ki], [host(x) for x in kl],
                          query.shape[1], cache.num_key_value_heads, cache.head_dim, cache.block_size, causal=False,
                          sm_scale=scale, q_data_type=query.dtype, kv_data_type=query.dtype)

    def plan_graph(self, graph, cache, table, lens, rows, max_pages):
        import flashinfer
        bs = cache.block_size
        tables = page_tables_from_block_table(table, lens, bs)
        if graph is None:  # each level's nodes at the capture, and one for the padding as requests finish
            nodes = tuple(len(q) for q in cascade_step_levels(*tables, bs, tables[0].size - 1)[1])
            ints = functools.partial(torch.empty, dtype=torch.int32, device=cache.device)
            graph = GraphPlan(rows, flashinfer.MultiLevelCascadeAttentionWrapper(
                len(nodes), workspace(cache, self._spaces), "NHD", use_cuda_graph=True,
                qo_indptr_buf_arr=[ints(m + 1) for m in nodes], paged_kv_indptr_buf_arr=[ints(m + 1) for m in nodes],
                paged_kv_indices_buf_arr=[ints(max_pages + m) for m in nodes],
                paged_kv_last_page_len_buf_arr=[ints(m) for m in nodes]),
                nodes=nodes, order=torch.empty(rows, dtype=torch.int64, device=cache.device))
        order, qo, kp, ki, kl = cascade_step_levels(*tables, bs, rows, graph.nodes)
        graph.order.copy_(torch.tensor(order, dtype=torch.int64).pin_memory(), non_blocking=True)
        shape, kinds = self._graph_plan_args
        graph.wrapper.plan([host(x) for x in qo], [host(x) for x in kp], [device_ints(x, cache.device) for x in ki],
                           [host(x) for x in kl], *shape, causal=False, **kinds)
        return graph

    def attend(self, cache, step, q, pages, out, sinks):
        captured = isinstance(step, GraphStep)
        order, cascade = (self._graph.order, self._graph.wrapper) if captured else (self.order, self.cascade)
        out[order] = cascade.run(q[order], pages)
