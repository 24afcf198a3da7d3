"""Decode inside a real engine: Hugging Face transformers' continuous batching
on Qwen3-4B's shape (random bf16 weights), one attention backend at a time on
the same prompts, in eager mode or with --cuda-graph in the engine's graph
mode: on the block-table path graphs of decode steps (codec, noop, busy:
CoDec plans each replay's batch in the stream; fi_decode and fi_cascade:
FlashInfer's CUDA-graph wrappers, planned on the host before each replay, as
serving engines use them),
on the slot-list path (@ri) the engine's whole-forward graphs, where a
backend that fails has its error recorded.

Backends (NAME, or NAME@ri for the engine's slot-list decode path; without
@ri the block-table path, codec.integrations.transformers.enable_block_tables):
  codec       paged|codec
  noop        paged|codec with the decode rows' attention skipped (zeros, no
              plan; prefill as codec): the engine's floor on that path
  fi_decode   FlashInfer's BatchDecodeWithPagedKVCacheWrapper on the same page
              tables, tensor-core kernel, planned once per step
  fi_cascade  FlashInfer's MultiLevelCascadeAttentionWrapper, one level per
              depth of the step's prefix forest (codec.derive_forest), requests
              reordered per layer so that every node's requests are contiguous
  busy        noop that keeps the GPU busy instead, a spin kernel of
              --busy-us per layer (a diagnostic: whether the engine's host
              time depends on the GPU's load, which made noop's steps slower
              than codec's in run 21)
  sdpa        the engine's own paged|sdpa (slot-list path only)
All but sdpa compute prefill chunks alike (codec's causal SDPA).

The prefixes a workload's requests share (each document, the system prompt,
the sampled prompt) are prefilled first, in the same engine, so that their
full blocks sit in its prefix cache; then every request is submitted at
once, prefills only its own tokens, and the requests decode together
(--no-prefix-warmup: each request prefills its whole prompt instead, and the
engine's cache fits fewer of them at a time).

TPOT is the median interval between successive tokens of a request, over all
requests, from the second generated token on, taken from the engine's own
timestamps (`record_timestamps`); the prefills come first, so the intervals
are those of decode steps, unless prefill chunks run beside decode rows (a
workload whose requests cannot all decode at once). `decode_step_ms` is the
median host interval from one decode-only step's first layer to the next
step's, mixed steps left out (the backends but sdpa). `plan_ms` (median
and mean) is the backend's host time per decode step in its plan (planning and
upload; the step's page tables are read before it), which is on the step's
critical path. `attention_gpu_ms` (median and mean over the decode steps) is
the GPU time of a step's decode attention, all layers, from CUDA events around
each layer's call: unlike TPOT minus the floor it does not drown in the
engine's host-time noise. Correctness, two ways: the decode outputs of the
first decode steps (up to 8 requests a step, every layer) against attention
in float64 over the engine's own cache (`attention_rel_l2_max`; noop's is
1), and every backend's logprobs against sdpa@ri's (or, where that did not run, fi_decode's) on the steps whose token
history both runs share (bench/e2e_check.py: L2 error relative to the
logprobs and to their spread, largest difference), noop's included as the
negative control: random weights keep every logprob near −log(vocabulary),
so only an error well under noop's says the attention is right.

  python3 -m bench.e2e_decode --out OUT --workload loogle:4 [--backends codec,noop,fi_decode,sdpa@ri] [--layers 36]
                               [--rounds 3] [--tp 2]

With --tp N the model is sharded over N ranks by transformers' own tensor
parallelism (one process per GPU; the engine keeps the ranks in lockstep, and
each rank's CoDec plans its own kv heads); rank 0 writes e2e_<workload>_tpN
files, and bench/e2e_check.py compares their tokens and logprobs with a
single-GPU run's.

Workloads (NAME:N, e2e_batches.WORKLOADS): loogle, sysprompt, samples, distinct.
"""

import argparse
import contextlib
import functools
import gc
import json
import os
import sys
import time
import weakref

if not __package__:  # python3 bench/e2e_decode.py: its imports are the bench package's
    raise SystemExit("run it from the repository root as a module: python3 -m bench.e2e_decode ...")

import numpy as np
import torch

import codec.integrations.transformers as codec_tf
from codec.integrations.paging import page_tables_from_block_table

from .e2e_batches import WORKLOADS, cascade_step_levels, combine_rounds, padded_page_tables, parse_workload, prompts
from .e2e_check import compare_on_shared_history

QWEN3_4B = dict(vocab_size=151936, hidden_size=2560, intermediate_size=9728, num_hidden_layers=36,
                num_attention_heads=32, num_key_value_heads=8, head_dim=128, max_position_embeddings=65536)


def log(*a):
    print(*a, file=sys.stderr, flush=True)


class TimedPlans(codec_tf.PagedAttention):
    """paged|codec, recording the host time of each step's plan and, through
    CUDA events around every layer's decode call, the GPU time of the step's
    decode attention (the events' span: kernels and any gaps between them)."""

    checked_steps = 3  # decode steps checked against float64 attention (the prefixes' warm-up has one)
    checked_requests = 8  # of each, at most this many requests, spread over the batch

    def __init__(self) -> None:
        super().__init__()
        self.plan_ms, self.events, self.rows, self.starts, self.errors, self.host_ms = [], [], [], [], [], []
        self.graph_wrapper_used, self.stream_plans, self.replay_plans = None, {}, {}

    def clear(self):
        for x in (self.plan_ms, self.events, self.rows, self.starts, self.errors, self.host_ms):
            x.clear()
        self.graph_wrapper_used, self.stream_plans, self.replay_plans = None, {}, {}

    def plan_in_stream(self, cache, step, query, scale):
        self.scale, self.heads = scale, [query.shape[1], cache.num_key_value_heads]
        super().plan_in_stream(cache, step, query, scale)
        self.graph_wrapper_used = self.graph_wrapper(cache, step.block_table)

    def finish(self):
        """After a run: the count and host time of the plans its graphs made in the stream, which the GPU waits for."""
        if self.graph_wrapper_used is not None:
            self.graph_wrapper_used.check_stream_plans()
            stats = self.graph_wrapper_used.plan_stats
            self.stream_plans = {"plans": stats["plans"], "searches": stats["searches"],  # the others reused splits
                                 "plan_ms_mean": stats["plan_ms_total"] / max(stats["plans"], 1),
                                 "plan_ms_max": stats["plan_ms_max"]}
            self.graph_wrapper_used = None

    def __call__(self, module, *args, **kwargs):
        t = time.perf_counter()
        out = super().__call__(module, *args, **kwargs)
        if self.captured(kwargs["cache"]):  # a capture: no step of its own
            return out
        if module.layer_idx == 0:  # a step starts: when, and whether all its rows decode
            step = self._steps[kwargs["cache"]]
            self.starts.append((t, step.all_decode))
            self.host_ms.append(0.0)
        self.host_ms[-1] += (time.perf_counter() - t) * 1e3
        return out

    def captured(self, cache):
        """Whether this layer call is a graph's capture (its replays run without Python)."""
        return isinstance(self._steps[cache], codec_tf.GraphStep)

    def decode_step_ms(self):
        """The host interval from each decode-only step's first layer to the next step's."""
        return [(b[0] - a[0]) * 1e3 for a, b in zip(self.starts, self.starts[1:]) if a[1]]

    def decode_host_ms(self):
        """The host time of each decode-only step's attention calls, all layers (the plan included)."""
        return [h for h, (_, decode_only) in zip(self.host_ms, self.starts) if decode_only]

    def plan(self, cache, step, query, scale):
        self.scale, self.heads = scale, [query.shape[1], cache.num_key_value_heads]  # this rank's, under --tp
        t0 = time.perf_counter()
        self.plan_step(cache, step, query, scale)
        self.plan_ms.append((time.perf_counter() - t0) * 1e3)
        self.events.append([])
        self.rows.append(int(step.decode.size))

    def plan_step(self, cache, step, query, scale):
        super().plan(cache, step, query, scale)

    def decode(self, cache, q, pages, out):
        if self.captured(cache):  # captured: replays run without Python
            self.attend(cache, q, pages, out)
            return
        if not q.is_cuda:  # the CPU engine (tests): no GPU time to take
            self.attend(cache, q, pages, out)
        else:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            self.attend(cache, q, pages, out)
            end.record()
            self.events[-1].append((start, end))
        if len(self.plan_ms) <= self.checked_steps:
            self.check(self._steps[cache], q, pages, out, cache.block_size)

    def check(self, step, q, pages, out, block_size):
        """The relative L2 error of the decode rows' outputs against attention
        in float64 over the engine's own cache, for a few requests of the step:
        unlike the logprobs of a random model, it tells a wrong attention."""
        n = step.indptr.size - 1
        for r in np.unique(np.linspace(0, n - 1, min(n, self.checked_requests)).astype(np.int64)):
            ids = torch.from_numpy(step.indices[step.indptr[r]:step.indptr[r + 1]].astype(np.int64)).to(q.device)
            length = (ids.numel() - 1) * block_size + int(step.last_page_len[r])
            k, v = (p[ids].flatten(0, 1)[:length].double() for p in pages)  # (L, Hkv, D)
            group = q.shape[1] // k.shape[1]
            qr = q[r].double().view(k.shape[1], group, -1)  # (Hkv, group, D)
            p = torch.softmax(torch.einsum("hgd,lhd->hgl", qr, k) * self.scale, dim=-1)
            ref = torch.einsum("hgl,lhd->hgd", p, v).reshape(out.shape[1:])
            self.errors.append(float(torch.linalg.vector_norm(out[r].double() - ref) / torch.linalg.vector_norm(ref)))

    def attend(self, cache, q, pages, out):
        super().decode(cache, q, pages, out)

    def attention_ms(self):
        """The decode attention's GPU time of each planned step (after a synchronize)."""
        return [sum(a.elapsed_time(b) for a, b in step) for step in self.events if step]


class NoDecodeAttention(TimedPlans):
    """paged|codec with no decode attention (rows of zeros, no plan): the engine's cost without it."""

    def plan_step(self, cache, step, query, scale):
        pass

    def plan_in_stream(self, cache, step, query, scale):
        pass

    def attend(self, cache, q, pages, out):
        out.zero_()


class BusyDecodeAttention(NoDecodeAttention):
    """noop with the GPU kept busy: a spin kernel (torch.cuda._sleep) of `us`
    microseconds per layer in place of the decode attention, no memory read."""

    def __init__(self, us) -> None:
        super().__init__()
        self.us, self.cycles_per_us = us, None

    def attend(self, cache, q, pages, out):
        if self.cycles_per_us is None:  # calibrated once: the spin counts clock cycles
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda._sleep(1 << 20)
            start.record()
            torch.cuda._sleep(1 << 24)
            end.record()
            end.synchronize()
            self.cycles_per_us = (1 << 24) / (start.elapsed_time(end) * 1e3)
        torch.cuda._sleep(int(self.us * self.cycles_per_us))
        out.zero_()


def host(x):
    return torch.from_numpy(np.ascontiguousarray(x, dtype=np.int32))


def workspace(cache, spaces):
    """A 256 MB FlashInfer workspace per engine cache."""
    if cache not in spaces:
        spaces[cache] = torch.empty(256 << 20, dtype=torch.uint8, device=cache.device)
    return spaces[cache]


@contextlib.contextmanager
def before_each_forward(fn):
    """Calls fn(runner, model) before each of the engine's forwards
    (ModelRunner.compute_batch, which runs a step eagerly, captures its graph
    or replays it), for the duration of a run."""
    from transformers.generation.continuous_batching.model_runner import ModelRunner
    compute = ModelRunner.compute_batch

    def call(runner, model, *args, **kwargs):
        fn(runner, model)
        return compute(runner, model, *args, **kwargs)

    ModelRunner.compute_batch = call
    try:
        yield
    finally:
        ModelRunner.compute_batch = compute


class GraphPlan:
    """A FlashInfer CUDA-graph wrapper of one engine graph (its batch of
    `rows` requests and IO pair: the wrapper's buffers are fixed), the event
    its last plan's copies record, and for the cascade its node count per
    level and its request order on the device."""

    def __init__(self, rows, wrapper, nodes=None, order=None):
        self.rows, self.wrapper, self.copied = rows, wrapper, torch.cuda.Event()
        self.nodes, self.order = nodes, order


class FlashInferGraphs(TimedPlans):
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

    def plan_in_stream(self, cache, step, query, scale):
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
    """FlashInfer's batch decode (tensor cores) on the step's page tables; in
    graphs its CUDA-graph wrapper, padding requests appended
    (padded_page_tables)."""

    def __init__(self) -> None:
        super().__init__()
        self.wrapper = None

    def plan_step(self, cache, step, query, scale):
        import flashinfer
        if self.wrapper is None:
            self.wrapper = flashinfer.BatchDecodeWithPagedKVCacheWrapper(workspace(cache, self._spaces), "NHD",
                                                                         use_tensor_cores=True)
        self.wrapper.plan(host(step.indptr), host(step.indices), host(step.last_page_len), query.shape[1],
                          cache.num_key_value_heads, cache.head_dim, cache.block_size, q_data_type=query.dtype,
                          kv_data_type=query.dtype, sm_scale=scale)

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

    def attend(self, cache, q, pages, out):
        out.copy_((self._graph.wrapper if self.captured(cache) else self.wrapper).run(q.contiguous(), pages))


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

    def attend(self, cache, q, pages, out):
        order, cascade = (self._graph.order, self._graph.wrapper) if self.captured(cache) else (self.order, self.cascade)
        out[order] = cascade.run(q[order], pages)


class StepProfile:
    """The host time of each engine step in the phases of its generation loop
    (transformers' ContinuousBatchProcessor), read by wrapping the methods of
    the engine's classes for the duration of a run: `schedule` (scheduling
    and the step's input tensors), `forward` (the model's forward, logits and
    sampling, as launched from the host; `forward_gpu` its span on the GPU,
    from CUDA events around it), `gpu_wait` (the engine's own wait
    for the step's outputs; with asynchronous batching it is in `update`) and
    `update` (outputs to the requests). `gpu_idle` is the GPU's time between
    the end of the previous forward and the start of this one (with
    asynchronous batching: the wait for this step's inputs). Steps are told
    decode-only from the scheduled requests' query lengths; the medians are
    over those steps. `prefill_tokens` counts the query tokens of rows with
    more than one (prefill chunks, the shared prefixes' warm-up included; a
    chunk of a single token counts as a decode row)."""

    def __init__(self):
        self.steps = []  # (decode only, {phase: ms}) per step, in order
        self.gpu = []  # (step, CUDA events around its forward)
        self.async_io = None  # whether the engine ran its asynchronous batching (None: not seen)
        self.prefill_tokens = 0  # query tokens of rows with several, warm-up included: what prefix sharing saved

    def __enter__(self):
        from transformers.generation.continuous_batching.continuous_api import ContinuousBatchProcessor
        from transformers.generation.continuous_batching.input_outputs import (ContinuousBatchingAsyncIOs,
                                                                             ContinuousBatchingIOs)
        from transformers.generation.continuous_batching.model_runner import ModelRunner
        targets = ((ContinuousBatchProcessor, "prepare_next_batch", "schedule"), (ModelRunner, "compute_batch", "forward"),
                   (ContinuousBatchingIOs, "retrieve_device_outputs", "gpu_wait"),
                   (ContinuousBatchingAsyncIOs, "retrieve_device_outputs", "gpu_wait"),
                   (ContinuousBatchProcessor, "update_batch", "update"))
        self.saved = [(cls, name, getattr(cls, name)) for cls, name, _ in targets]
        for (cls, name, fn), (_, _, phase) in zip(self.saved, targets):
            setattr(cls, name, self.timed(phase, fn))
        return self

    def __exit__(self, *exc):
        for cls, name, fn in self.saved:
            setattr(cls, name, fn)

    def timed(self, phase, fn):
        def call(obj, *args, **kwargs):
            events = None
            if phase == "forward" and torch.device(obj.cache.device).type == "cuda":  # its GPU span too (graph mode:
                # the host's is a launch)
                stream = obj.inputs_and_outputs.compute_stream or torch.cuda.current_stream()
                events = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                events[0].record(stream)
            t = time.perf_counter()
            out = fn(obj, *args, **kwargs)
            ms = (time.perf_counter() - t) * 1e3
            if events is not None:
                events[1].record(stream)
                if self.steps:
                    self.gpu.append((len(self.steps) - 1, events))
            if phase == "gpu_wait":  # which IOs the engine chose: its asynchronous batching has its own
                self.async_io = type(obj).__name__ == "ContinuousBatchingAsyncIOs"
            if phase == "schedule":  # a step starts if there was a batch to prepare (the idle loop polls here too)
                if out:
                    io = obj.inputs_and_outputs  # the asynchronous IOs prepare into their current pair
                    host = io.io_pairs[io.current_pair].host_io if hasattr(io, "io_pairs") else io
                    batch = getattr(host, "requests_in_batch", None)
                    self.prefill_tokens += sum(r.query_length for r in batch or [] if r.query_length > 1)
                    self.steps.append((batch is not None and all(r.query_length == 1 for r in batch), {phase: ms}))
            elif self.steps:
                self.steps[-1][1][phase] = self.steps[-1][1].get(phase, 0.0) + ms
            return out
        return call

    def medians(self):
        """Each phase's median over the decode-only steps, and their count
        (`forward_gpu`: the forward's GPU span, after a synchronize)."""
        previous = None
        for step, (start, end) in self.gpu:
            self.steps[step][1]["forward_gpu"] = start.elapsed_time(end)
            if previous is not None:
                self.steps[step][1]["gpu_idle"] = previous.elapsed_time(start)
            previous = end
        self.gpu.clear()
        decode = [p for only, p in self.steps if only]
        phases = {k for p in decode for k in p}
        medians = {k: float(np.median([p[k] for p in decode if k in p])) for k in sorted(phases)}
        return {"decode_only_steps": len(decode), "prefill_tokens": self.prefill_tokens, **medians}


def admit_first_scheduler():
    """The name of a scheduler (registered with the engine's own) that admits
    waiting requests before it schedules decoding ones. The engine's FIFO
    scheduler charges every scheduled request its whole context against one
    read budget (the cache's token slots), a shared prefix once per request,
    and serves decoding requests first: of loogle:8's 64 requests, 36 fill the
    budget and the other 28 wait until those finish (run 20). Admitting first,
    every request prefills within the first steps and all decode together;
    the engine still does the scheduling, the same for every backend. Below
    the engine's safety margin of free blocks it schedules as FIFO does:
    admitting more there would leave the decoding requests no blocks to grow
    into (the engine then fails to offload, measured on the CPU engine)."""
    from transformers.generation.continuous_batching import scheduler
    from transformers.generation.continuous_batching.requests import RequestStatus

    class AdmitFirst(scheduler.FIFOScheduler):
        def _process_candidates(self, candidates, *args):
            if self.cache.get_num_free_blocks() >= self.safety_margin * self.cache.num_blocks:
                candidates = sorted(candidates, key=lambda s: s.status == RequestStatus.DECODING)  # a stable sort
            return super()._process_candidates(candidates, *args)

    scheduler.SCHEDULER_MAPPING.setdefault("codec_e2e_admit_first", AdmitFirst)
    return "codec_e2e_admit_first"


def run(model, impl, attention, inputs, prefixes, new_tokens, block_size, block_tables, cuda_graph, samples=1,
        scheduler="fifo", cache_blocks=None, async_batching=False, step_profile=False):
    """One backend's generation; greedy, or with samples > 1 that many sampled
    sequences per prompt (the same seed for every backend)."""
    from transformers import GenerationConfig
    from transformers.generation.configuration_utils import ContinuousBatchingConfig
    model.set_attn_implementation(impl)
    gen = GenerationConfig(max_new_tokens=new_tokens, do_sample=samples > 1, num_return_sequences=samples,
                           eos_token_id=-1, pad_token_id=0)
    # Graph mode: on the block-table path graphs of decode steps alone (codec.integrations.transformers plans
    # them in the stream; prefill chunks need host lengths), on the slot-list path the engine's own choice.
    graphs = (False, True) if cuda_graph and block_tables else cuda_graph
    cb = ContinuousBatchingConfig(block_size=block_size, return_logprobs=True, use_cuda_graph=graphs,
                                  max_requests_per_batch=len(inputs) * samples, scheduler_type=scheduler,
                                  num_blocks=cache_blocks, use_async_batching=True if async_batching else None)  # None: the engine's choice
    torch.manual_seed(0)
    cuda = model.device.type == "cuda"  # else the CPU engine (tests)
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    if attention is not None:
        attention.clear()
    gc.collect()  # the last run's cache and activations gone before this run sizes its own
    if cuda:
        torch.cuda.empty_cache()
    profile = StepProfile() if step_profile else contextlib.nullcontext()
    # a backend that plans on the host before each graph replay: outside the profile's phases, in the TPOT
    replans = cuda_graph and block_tables and hasattr(attention, "plan_before_forward")
    hook = before_each_forward(attention.plan_before_forward) if replans else contextlib.nullcontext()
    t0 = time.perf_counter()
    with profile, hook:
        out = codec_tf.generate_batch(model, inputs, gen, cb, record_timestamps=True, block_tables=block_tables,
                                      shared_prefixes=prefixes)
    if cuda:
        torch.cuda.synchronize()
    wall = time.perf_counter() - t0
    if attention is not None:
        attention.finish()
    intervals = np.concatenate([np.diff(np.asarray(o.timestamps, dtype=np.float64))[1:] for o in out.values()])
    # Named by prompt: the engine's request ids count the warm-up requests before them, which differ between
    # modes (asynchronous batching warms up in waves), and a child sequence keeps its parent's name as a prefix.
    names = {k: f"prompt_{i}" for i, k in enumerate(list(out)[:len(inputs)])}

    def name(request_id):
        parent, sep, child = request_id.partition("__")
        return names[parent] + sep + child

    trace = {name(k): (list(o.generated_tokens), [float(x) for x in o.logprobs]) for k, o in out.items()}
    tpot = float(np.median(intervals)) * 1e3
    row = {"tpot_ms": tpot, "tpot_p90_ms": float(np.percentile(intervals, 90)) * 1e3, "wall_s": wall,
           "tokens": sum(len(o.generated_tokens) for o in out.values()),
           "tokens_per_s": sum(len(o.generated_tokens) for o in out.values()) / wall,
           "decode_tokens_per_s": len(out) / (tpot / 1e3),
           "peak_gpu_gb": torch.cuda.max_memory_allocated() / 1e9 if cuda else 0.0,
           "block_tables": block_tables, "cuda_graph": cuda_graph,
           # the engine's asynchronous batching: asked for, or as the step profile saw the engine choose (None: unknown)
           "async_batching": True if async_batching else (profile.async_io if step_profile else None)}
    if step_profile:
        row["step_host_ms_median"] = profile.medians()
    if attention is not None and attention.stream_plans:  # plans the graphs' replays made in their streams
        row.update({f"in_stream_{k}": v for k, v in attention.stream_plans.items()})
    if attention is not None and attention.replay_plans:  # plans made on the host before the replays
        row.update({f"replay_{k}": v for k, v in attention.replay_plans.items()})
    # In graph mode the steps Python sees are the few that run eagerly (prefills, each capture's warm-up): the
    # per-step host and GPU timings below would describe those, so they are left out (--step-profile's
    # forward_gpu times every step's forward on the GPU).
    if attention is not None and attention.plan_ms and graphs != (False, True):
        row["plan_ms_mean"] = float(np.mean(attention.plan_ms))  # FlashInfer's first plans include its JIT builds
        row["plan_ms_median"] = float(np.median(attention.plan_ms))
        row["plan_share_of_tpot"] = row["plan_ms_mean"] / tpot
        row["decode_steps_planned"] = len(attention.plan_ms)
        row["heads"] = attention.heads  # query and kv heads of the process (a rank's slice under --tp)
        row["decode_requests_per_step_median"] = float(np.median(attention.rows))
        row["decode_requests_per_step_max"] = int(np.max(attention.rows))
        steps = attention.decode_step_ms()
        if steps:  # the TPOT: decode-only steps alone, prefill chunks and mixed steps left out
            row["decode_step_ms_median"] = float(np.median(steps))
            row["decode_only_steps"] = len(steps)
        if attention.errors:
            row["attention_rel_l2_max"] = max(attention.errors)  # the decode rows checked against float64
            row["attention_rows_checked"] = len(attention.errors)
        host = attention.decode_host_ms()
        if host:
            row["attention_host_ms_median"] = float(np.median(host))  # all layers' calls of a decode-only step
        gpu = attention.attention_ms()
        if gpu:
            row["attention_gpu_ms_median"] = float(np.median(gpu))  # all layers of a step
            row["attention_gpu_ms_mean"] = float(np.mean(gpu))
            row["attention_gpu_share"] = row["attention_gpu_ms_median"] / tpot
    return row, trace


def result_tag(a):
    """The name of a run's files: e2e_<workload>[_tp<N>].json and ..._traces.json."""
    return f"e2e_{a.workload.replace(':', '_')}" + (f"_tp{a.tp}" if a.tp > 1 else "")


def summary(a, requests, prompts, prefixes, device, rows, traces, write):
    """The workload's result (with write, into its file, with the tokens and
    logprobs of every backend's first round beside it: bench/e2e_check.py
    compares two runs' files), rewritten after every backend's run so that a
    run cut short keeps what it measured: the rows with the correctness check
    against the reference and the floor's differences added."""
    rows = {b: dict(r) for b, r in rows.items()}
    # the engine's own sdpa is the reference; where it did not run (slow at many requests), FlashInfer's decode
    reference = next((b for b in ("sdpa@ri", "fi_decode", "fi_decode@ri") if b in traces), None)
    for b in traces:  # noop too: zeros for the decode attention, the negative control of the check
        if reference and b != reference:
            rows[b]["vs_reference"] = {"reference": reference,
                                       **compare_on_shared_history(traces[reference], traces[b])}
    for b in traces:  # against the floor of the same decode path
        floor = rows.get("noop@ri" if b.endswith("@ri") else "noop", {})
        if "tpot_ms" in floor:
            rows[b]["tpot_minus_floor_ms"] = rows[b]["tpot_ms"] - floor["tpot_ms"]
            rows[b]["attention_share"] = rows[b]["tpot_minus_floor_ms"] / rows[b]["tpot_ms"]
        if "decode_step_ms_median" in floor and "decode_step_ms_median" in rows[b]:
            rows[b]["decode_step_minus_floor_ms"] = rows[b]["decode_step_ms_median"] - floor["decode_step_ms_median"]
    result = {"workload": a.workload, "requests": requests, "prompts": prompts,
              "shared_prefixes_prefilled_first": prefixes,
              "layers": a.layers, "block_size": a.block_size, "scheduler": a.scheduler,
              "async_batching": a.async_batching,
              "new_tokens": a.new_tokens, "cuda_graph": a.cuda_graph, "rounds": a.rounds, "tp": a.tp,
              "device": torch.cuda.get_device_name() if device == "cuda" else "cpu",
              "rows": rows}
    if write:
        os.makedirs(a.out, exist_ok=True)
        with open(os.path.join(a.out, result_tag(a) + ".json"), "w") as f:
            json.dump(result, f, indent=2)
        with open(os.path.join(a.out, result_tag(a) + "_traces.json"), "w") as f:
            json.dump(traces, f)
    return result


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True)
    p.add_argument("--workload", default="loogle:4",
                   help="NAME:N, NAME one of " + ", ".join(WORKLOADS) + "; or several, comma-separated, measured one "
                        "after another on one model (each its own files)")
    p.add_argument("--backends", default="codec,noop,fi_decode,fi_cascade,noop@ri,sdpa@ri")
    p.add_argument("--layers", type=int, default=36)
    p.add_argument("--new-tokens", type=int, default=64)
    p.add_argument("--block-size", type=int, default=16)
    p.add_argument("--sdpa-new-tokens", type=int, default=0,
                   help="new tokens for sdpa@ri alone (0: --new-tokens): the engine's own attention takes ~1 s a "
                        "step at 64 long requests, and a few steps give its TPOT and the reference logprobs")
    p.add_argument("--cuda-graph", action="store_true", help="the engine's CUDA-graph mode (use_cuda_graph=True)")
    p.add_argument("--rounds", type=int, default=1,
                   help="run the backend list this many times, in turn, and report each number's median over the "
                        "rounds (the engine's TPOT moves by several ms from one run to the next)")
    p.add_argument("--scheduler", choices=("admit_first", "fifo"), default="admit_first",
                   help="the engine's FIFO scheduler, or (default) FIFO that admits waiting requests before it "
                        "schedules decoding ones, so that all requests decode together (admit_first_scheduler)")
    p.add_argument("--async-batching", action="store_true",
                   help="the engine's asynchronous batching (the next step prepared while the GPU runs this one); "
                        "without it the engine chooses, which turns it on with CUDA graphs (rows record what ran "
                        "where --step-profile sees it)")
    p.add_argument("--busy-us", type=float, default=230.0,
                   help="the busy backend's spin per layer, microseconds (230: CoDec's attention per layer on "
                        "loogle:8, run 21)")
    p.add_argument("--step-profile", action="store_true",
                   help="the host time of each step's phases in the engine's loop (StepProfile)")
    p.add_argument("--cache-blocks", type=int, default=None,
                   help="the engine's cache in blocks (default: as many as free GPU memory holds)")
    p.add_argument("--no-prefix-warmup", action="store_true",
                   help="submit every request at once without prefilling the shared prefixes first (each request "
                        "then prefills its whole prompt, and fewer decode together)")
    p.add_argument("--tp", type=int, default=1,
                   help="tensor-parallel ranks, one process per GPU (torch.distributed: NCCL on GPUs, gloo on the "
                        "CPU engine), the model sharded by transformers' own plan (DistributedConfig, which needs "
                        "accelerate); rank 0 writes the results")
    a = p.parse_args(argv)
    device = "cuda" if torch.cuda.is_available() else "cpu"  # the CPU engine: tests
    check_args(a, device)
    from transformers import Qwen3Config, Qwen3ForCausalLM
    cfg = Qwen3Config(**{**QWEN3_4B, "num_hidden_layers": a.layers})
    torch.manual_seed(0)
    if a.tp == 1:
        with torch.device(device):
            model = Qwen3ForCausalLM(cfg).to(torch.bfloat16).eval()
        return measure_each(a, model, device)
    # The ranks load one checkpoint of the random weights, each its shards, as transformers' TP does; the
    # weights are drawn on the same device as without --tp, so that the two runs hold the same model.
    import tempfile
    import torch.multiprocessing as mp
    with tempfile.TemporaryDirectory(prefix="codec_e2e_tp_") as model_dir:
        with torch.device(device):
            Qwen3ForCausalLM(cfg).to(torch.bfloat16).save_pretrained(model_dir)
        gc.collect()
        if device == "cuda":
            torch.cuda.empty_cache()
        mp.spawn(tp_rank, args=(a, model_dir, free_port(), device, rank_setup), nprocs=a.tp, join=True)


BACKENDS = ("codec", "noop", "busy", "fi_decode", "fi_cascade", "sdpa")


def check_args(a, device):
    """Refuses bad arguments, naming them, before any model exists."""
    backends = a.backends.split(",")
    for w in a.workload.split(","):
        parse_workload(w)
    if a.new_tokens < 3 or a.sdpa_new_tokens < 0 or 0 < a.sdpa_new_tokens < 3:
        raise SystemExit(f"--new-tokens {a.new_tokens} must be >= 3 and --sdpa-new-tokens {a.sdpa_new_tokens} 0 "
                         "(as --new-tokens) or >= 3: TPOT takes the intervals from the second generated token on")
    if a.rounds < 1 or len(set(backends)) < len(backends):
        raise SystemExit(f"--rounds {a.rounds} must be >= 1, and --backends {a.backends} name each backend once")
    for b in backends:
        kind, _, path = b.partition("@")
        if kind not in BACKENDS or path not in ("", "ri") or (kind == "sdpa" and path != "ri"):
            raise SystemExit(f"unknown backend {b!r}: codec, noop, busy, fi_decode, fi_cascade (each also @ri), "
                             "sdpa@ri")
        if kind == "busy" and device != "cuda":
            raise SystemExit("the busy backend keeps a GPU busy: it needs one")
    if a.tp < 1 or (device == "cuda" and a.tp > torch.cuda.device_count()):
        raise SystemExit(f"--tp {a.tp} must be >= 1 and at most the {torch.cuda.device_count()} GPUs here")
    if a.tp > 1:
        import importlib.util
        if importlib.util.find_spec("accelerate") is None:
            raise SystemExit(f"--tp {a.tp}: transformers' tensor parallelism needs accelerate (not installed)")


def free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rank_setup():
    """Run in every rank before its model loads (tests replace it)."""


def tp_rank(rank, a, model_dir, port, device, setup):
    """One tensor-parallel rank: its shard of the model, the same backends and
    requests as every other rank, in lockstep through the engine's own TP
    support (its cache holds the rank's kv heads; CoDec plans them)."""
    import torch.distributed as dist
    from transformers import Qwen3ForCausalLM
    from transformers.distributed import DistributedConfig
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(a.tp),
                      LOCAL_RANK=str(rank))
    setup()
    if device == "cuda":
        torch.cuda.set_device(rank)
        dist.init_process_group("nccl", rank=rank, world_size=a.tp, device_id=torch.device("cuda", rank))
    else:
        dist.init_process_group("gloo", rank=rank, world_size=a.tp)
    try:
        model = Qwen3ForCausalLM.from_pretrained(model_dir, distributed_config=DistributedConfig(tp_plan="auto"),
                                                 dtype=torch.bfloat16).eval()
        measure_each(a, model, device, write=rank == 0)
    finally:
        dist.destroy_process_group()


def measure_each(a, model, device, write=True):
    """measure() for each workload of a.workload in turn; a workload whose
    backends failed does not stop the next, and the exit status says so."""
    failed = []
    for w in a.workload.split(","):
        try:
            measure(argparse.Namespace(**{**vars(a), "workload": w}), model, device, write)
        except SystemExit as e:
            log(f"!! {w}: {e}")
            failed.append(f"{w}: {e}")
    if failed:
        raise SystemExit("; ".join(failed))


def measure(a, model, device, write=True):
    """Every backend of a.backends on the workload, a.rounds times in turn;
    the results (and with write, their files and table)."""
    attention = {"codec": TimedPlans(), "noop": NoDecodeAttention(), "fi_decode": FlashInferDecode(),
                 "fi_cascade": FlashInferCascade(), "busy": BusyDecodeAttention(a.busy_us)}
    names = {b: codec_tf.register(f"paged|e2e_{b}", att) for b, att in attention.items()}
    names["sdpa"] = "paged|sdpa"
    scheduler = admit_first_scheduler() if a.scheduler == "admit_first" else "fifo"
    inputs, prefixes, samples = prompts(a.workload)
    if a.no_prefix_warmup:
        prefixes = []
    log(f"{a.workload}: {len(inputs)} prompts ({sum(map(len, inputs))} tokens) x {samples} sequences, "
        f"{len(prefixes)} shared prefixes prefilled first, {a.layers} layers")
    rows, traces = {}, {}
    backends = a.backends.split(",")
    runs, failed = {b: [] for b in backends}, {}
    for rnd in range(a.rounds):
        for b in backends:
            kind, _, path = b.partition("@")
            log(f"== {b}, round {rnd + 1} of {a.rounds}")
            try:
                new_tokens = a.sdpa_new_tokens if kind == "sdpa" and a.sdpa_new_tokens else a.new_tokens
                # The engine's own attention prefills through one slot list per request: admitted all at once,
                # loogle:8's 64 ran out of GPU memory (run 21); under FIFO fewer decode per step, which only
                # flatters its TPOT.
                row, trace = run(model, names[kind], attention.get(kind), inputs, prefixes, new_tokens,
                                 a.block_size, block_tables=path != "ri", cuda_graph=a.cuda_graph, samples=samples,
                                 scheduler="fifo" if kind == "sdpa" else scheduler, cache_blocks=a.cache_blocks,
                                 async_batching=a.async_batching, step_profile=a.step_profile)
                row["new_tokens"] = new_tokens
                runs[b].append(row)
                traces.setdefault(b, trace)  # the first round's tokens and logprobs
            except RuntimeError as e:  # recorded, and the other backends still run; the exit status says so
                log(f"!! {b} failed: {e}")
                failed[b] = f"round {rnd + 1}: {type(e).__name__}: {e}"[:2000]
            rows[b] = combine_rounds(runs[b]) if runs[b] else {"cuda_graph": a.cuda_graph}
            if b in failed:
                rows[b]["error"] = failed[b]
            log(rows[b])
            result = summary(a, len(inputs) * samples, len(inputs), len(prefixes), device, rows, traces, write)
    if not write:
        if failed:  # every rank says so: mp.spawn reports the first that exits with an error
            raise SystemExit(f"backends failed: {', '.join(sorted(failed))}")
        return
    rows = result["rows"]
    nan = float("nan")
    print(f"{'backend':>13} {'TPOT ms':>9} {'p90 ms':>8} {'- floor':>8} {'step ms':>8} {'- floor':>8} {'attn ms':>8} "
          f"{'plan ms':>8} {'tok/s':>7} {'GB':>6} {'attn err':>9} {'logprob err':>12} {'centered':>9} {'steps':>6}")
    for b, r in rows.items():
        if "tpot_ms" not in r:
            print(f"{b:>13} failed: {r['error'][:300]}")
            continue
        check = r.get("vs_reference", {})
        print(f"{b:>13} {r['tpot_ms']:9.2f} {r['tpot_p90_ms']:8.2f} {r.get('tpot_minus_floor_ms', nan):8.2f} "
              f"{r.get('decode_step_ms_median', nan):8.2f} {r.get('decode_step_minus_floor_ms', nan):8.2f} "
              f"{r.get('attention_gpu_ms_median', nan):8.3f} {r.get('plan_ms_median', nan):8.3f} "
              f"{r['tokens_per_s']:7.1f} {r['peak_gpu_gb']:6.1f} {r.get('attention_rel_l2_max', nan):9.2e} "
              f"{check.get('logprob_rel_l2', nan):12.2e} {check.get('logprob_rel_l2_centered', nan):9.2e} "
              f"{check.get('steps_compared', 0):6d}")
    if failed:
        raise SystemExit(f"backends failed: {', '.join(sorted(failed))} (their errors are in the results)")


if __name__ == "__main__":
    main()
