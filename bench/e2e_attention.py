"""The attention backends of bench/e2e_decode.py, measured alike in the
engine: a backend-neutral base (``InEngineAttention``) and its siblings,
CoDec (``CodecAttention``), the no-op floor (``NoopAttention``) and its
busy-GPU variant (``BusyAttention``); FlashInfer's decode, cascade and
prefill are siblings too (e2e_flashinfer.py).

Each is the callable registered with the engine for its name. It composes
the library's per-layer attention (``codec.integrations.transformers.
PagedAttention``: the new tokens' KV into the cache, then the step's rows)
and is that attention's backend: the library calls ``plan`` at a step's
first layer and ``run`` at every layer, and the base times them and checks
the outputs before a subclass's ``plan_step``, ``plan_captured`` and
``attend`` do the work. A backend with ``prefill`` takes a step's prefill
chunks in the same plan (CoDec, the floor, which skips them, and FlashInfer's
prefill wrapper); the others leave them to the library's causal SDPA.

Models with sliding-window layers have several layer groups, each planned
once a step (``codec.integrations.transformers.Step``: its page tables, its
``window_left`` and ``logits_soft_cap``; the layer's sinks at ``run``). A
backend says which of those attention variants it computes (``variants``,
e2e_models.VARIANTS); the benchmark refuses the others by name before any
model exists, and ``plan`` and ``run`` refuse a step or layer they would
get wrong."""

import time

import numpy as np
import torch

from codec.integrations.transformers import CodecDecode, GraphStep, PagedAttention, Step

from .e2e_models import VARIANTS


def step_kind(step):
    """"decode" (every row decodes), "mixed" (some do), and where none does
    "prefill" (some chunk attends to KV the cache held before the step: a
    question over its cached document) or "prompt" (whole prompts, their
    new tokens' KV alone)."""
    if step.all_decode:
        return "decode"
    if step.decode.size:
        return "mixed"
    return "prefill" if np.any(np.diff(step.cu_k) > np.diff(step.cu_q)) else "prompt"


class InEngineAttention:
    """One attention backend in the engine, with what the benchmark records
    of it: the host time of each decode-only step's plans, all layer groups
    (``plan_ms``; each group's apart in ``groups``), and of all its layers'
    attention calls (``host_ms``), when each step starts and whether all its
    rows decode (``starts``), the decode requests per step (``rows``), the
    GPU time of every layer's backend call on decode-only steps (CUDA events
    around it, by layer group: kernels and any gaps between them), the GPU
    time of every layer's whole attention but the first on steps with
    prefill chunks (``chunk_events``: the cache write, the backend and any
    SDPA, by step kind), and the outputs of the first planned decode-only
    steps and steps with prefill chunks (each request's last token, every
    layer) against attention in float64 over the engine's own cache, with
    the layer group's window, soft-cap and scale and the layer's sinks
    (``errors``). Steps captured in a CUDA graph are not recorded: their
    replays run without Python."""

    prefill = False  # takes a step's prefill chunks in its plan (DecodeBackend.prefill)
    variants = frozenset()  # the attention variants (e2e_models.VARIANTS) it computes
    requires = frozenset()  # the variants a model must have for it to run
    limits = ""  # why it computes no other variants, for its refusal
    checked_steps = 3  # planned steps of each kind (decode-only, with prefill chunks) checked against float64
    checked_requests = 8  # of each, at most this many requests, spread over the batch

    def __init__(self) -> None:
        self.layer = PagedAttention(self)  # the library's per-layer attention, its rows handed to this
        self.plan_ms, self.events, self.rows, self.starts, self.errors, self.host_ms = [], [], [], [], [], []
        self.chunk_events = []  # (kind, [(start, end) of each layer's attention]) of each step with prefill chunks
        self.variant_effects = []  # the checked rows' reference without their window, soft-cap and sinks, relative
        self.groups = {}  # layer group: whether it slides, and its plan's host time on each decode-only step
        self.planned, self.checked = 0, {True: 0, False: 0}  # steps planned; checked, by all_decode
        self._new_step = False  # a step's first layer has run, and no layer group of it has planned yet
        self._check_step = False  # the current step's rows are checked against float64
        self.stream_plans, self.replay_plans = {}, {}  # a run's plans made in graphs' streams, before their replays
        self.scales, self.heads = {}, None  # the scale each layer group was planned with

    def clear(self):
        """Before a run: no records."""
        for x in (self.plan_ms, self.events, self.rows, self.starts, self.errors, self.host_ms, self.chunk_events,
                  self.variant_effects):
            x.clear()
        self.groups = {}
        self.planned, self.checked = 0, {True: 0, False: 0}
        self.stream_plans, self.replay_plans = {}, {}

    def prefixes_cached(self):
        """Once the shared prefixes are prefilled, before the measured requests: their prompt steps, and the
        chunks of long ones over their own first chunks, are not the workload's steps with prefill chunks."""
        self.chunk_events.clear()

    def serve(self, variants):
        """Before a model's runs: the attention variants its layers need (a
        set of VARIANTS, which check_args found this backend computes)."""

    def finish(self):
        """After a run: what the backend has to add to its records (stream_plans, replay_plans)."""

    # What the engine calls: the library's layer, timed.
    def __call__(self, module, *args, **kwargs):
        t = time.perf_counter()
        cache = kwargs["cache"]
        if module.layer_idx == 0:  # a new step: its first plan opens its records
            self._new_step = True
        # The GPU time of the whole layer on steps with prefill chunks, from the
        # second layer on: the first one's call also builds and plans the step,
        # whose waits on the host would count (chunk_step_ms scales for it).
        step = self.layer.current_step(cache) if module.layer_idx else None
        timed = isinstance(step, Step) and not step.all_decode and args[0].is_cuda
        if timed:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
        out = self.layer(module, *args, **kwargs)
        if timed:
            end.record()
            self.chunk_events[-1][1].append((start, end))
        step = self.layer.current_step(cache)
        if isinstance(step, GraphStep):  # a capture: no step of its own
            return out
        if module.layer_idx == 0:  # a step starts: when, and whether all its rows decode
            self.starts.append((t, step.all_decode))
            self.host_ms.append(0.0)
            if not step.all_decode:
                self.chunk_events.append((step_kind(step), []))
        self.host_ms[-1] += (time.perf_counter() - t) * 1e3
        return out

    # The library's backend (codec.integrations.transformers.DecodeBackend).
    def plan(self, cache, step, query, scale):
        sliding = step.page_size != cache.block_size  # a ring of one-token pages, or the gather of one
        if ((sliding or step.window_left >= 0) and "window" not in self.variants
                or step.logits_soft_cap and "soft_cap" not in self.variants):
            raise ValueError(f"{type(self).__name__} computes no sliding window or soft-cap (layer group "
                             f"{step.group}: pages of {step.page_size} tokens, window_left {step.window_left}, "
                             f"soft-cap {step.logits_soft_cap}): {self.limits}")
        self.scales[step.group], self.heads = scale, [query.shape[1], cache.num_key_value_heads]  # a rank's, --tp
        t0 = time.perf_counter()
        self.plan_step(cache, step, query, scale)
        ms = (time.perf_counter() - t0) * 1e3
        if self._new_step:  # the step's first layer group
            self._new_step = False
            self.planned += 1
            self._check_step = self.checked[step.all_decode] < self.checked_steps
            self.checked[step.all_decode] += 1
            if step.all_decode:
                self.plan_ms.append(0.0)
                self.rows.append(int(step.decode.size))
            self.events.append([] if step.all_decode else None)  # the backend's GPU time: decode-only steps'
        group = self.groups.setdefault(step.group, {"sliding": sliding, "plan_ms": [], "page_reuse": []})
        if step.all_decode:
            self.plan_ms[-1] += ms
            group["plan_ms"].append(ms)
            if self._check_step:  # how many requests read a page: the engine's sharing (checked steps: host time)
                group["page_reuse"].append(step.indices.size / np.unique(step.indices).size)

    def plan_in_stream(self, cache, step, query, scale):
        self.scales[step.group], self.heads = scale, [query.shape[1], cache.num_key_value_heads]
        self.plan_captured(cache, step, query, scale)

    def run(self, cache, step, q, pages, out, sinks=None):
        if sinks is not None and "sinks" not in self.variants or sinks is None and "sinks" in self.requires:
            raise ValueError(f"{type(self).__name__} got a layer {'with' if sinks is not None else 'without'} "
                             f"attention sinks: {self.limits}")
        # captured (replays run without Python), the CPU engine, or a step with prefill chunks (timed whole)
        if isinstance(step, GraphStep) or not q.is_cuda or self.events[-1] is None:
            self.attend(cache, step, q, pages, out, sinks)
        else:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            self.attend(cache, step, q, pages, out, sinks)
            end.record()
            self.events[-1].append((step.group, start, end))
        if not isinstance(step, GraphStep) and self._check_step:
            self.check(step, q, pages, out, sinks)

    def check_stream_plans(self, cache=None):
        """Errors of plans made in a graph's stream (none but CoDec's are)."""

    # What a backend says: how it plans a step and computes its decode rows.
    def plan_step(self, cache, step, query, scale):
        """Plans an eager step's rows (the step's page tables; with prefill,
        its qo_indptr too) for every layer."""
        raise NotImplementedError

    def plan_captured(self, cache, step, query, scale):
        """Plans a decode step the engine captures in a CUDA graph, for every replay."""
        raise NotImplementedError

    def attend(self, cache, step, q, pages, out, sinks):
        """The step's planned rows q (n, Hq, D) over the layer's cache pages
        into out (n, Hq, D), with the layer's sinks ((Hq,), or None)."""
        raise NotImplementedError

    # The records, read after a run.
    def check(self, step, q, pages, out, sinks):
        """The relative L2 error of each request's last row (which sees all
        of its KV, or under the group's window its last window_left + 1
        keys) against attention in float64 over the engine's own cache, its
        logits scaled and soft-capped as planned and the layer's sinks in
        the denominator, for a few requests of the step: unlike the logprobs
        of a random model, it tells a wrong attention. Where the row has a
        window, soft-cap or sinks, also how far the same attention without
        them lies (``variant_effects``): what a backend that ignored them
        would be off by."""
        n = step.indptr.size - 1
        scale, cap = self.scales[step.group], step.logits_soft_cap
        for r in np.unique(np.linspace(0, n - 1, min(n, self.checked_requests)).astype(np.int64)):
            row = r if step.qo_indptr is None else int(step.qo_indptr[r + 1]) - 1
            ids = torch.from_numpy(step.indices[step.indptr[r]:step.indptr[r + 1]].astype(np.int64)).to(q.device)
            length = (ids.numel() - 1) * step.page_size + int(step.last_page_len[r])
            first = max(0, length - 1 - step.window_left) if step.window_left >= 0 else 0
            k, v = (p[ids].flatten(0, 1)[:length].double() for p in pages)  # (L, Hkv, D)
            group = q.shape[1] // k.shape[1]
            qr = q[row].double().view(k.shape[1], group, -1)  # (Hkv, group, D)
            s = torch.einsum("hgd,lhd->hgl", qr, k) * scale
            ref = float64_attention(s[..., first:], v[first:], cap, sinks)
            self.errors.append(relative_l2(out[row].double().view(ref.shape), ref))
            if first or cap or sinks is not None:
                self.variant_effects.append(relative_l2(float64_attention(s, v), ref))

    def decode_step_ms(self):
        """The host interval from each decode-only step's first layer to the next step's."""
        return [(b[0] - a[0]) * 1e3 for a, b in zip(self.starts, self.starts[1:]) if a[1]]

    def decode_host_ms(self):
        """The host time of each decode-only step's attention calls, all layers (the plan included)."""
        return [h for h, (_, decode_only) in zip(self.host_ms, self.starts) if decode_only]

    def attention_ms(self, group=None):
        """The decode attention's GPU time of each planned decode-only step,
        all layers or a layer group's (after a synchronize)."""
        return [sum(a.elapsed_time(b) for g, a, b in step if group in (None, g)) for step in self.events if step]

    def group_summary(self):
        """Each layer group's kind and medians over the decode-only steps:
        its plan's host time, its layers' decode attention GPU time, and
        over the checked ones its page reads per distinct page (1: no
        sharing; the sequences forked from a prompt share its full layers'
        blocks)."""
        summary = {}
        for g, info in sorted(self.groups.items()):
            row = summary[str(g)] = {"sliding": info["sliding"]}
            for key, values in (("plan_ms_median", info["plan_ms"]), ("page_reuse_median", info["page_reuse"])):
                if values:
                    row[key] = float(np.median(values))
            gpu = self.attention_ms(g)
            if gpu:
                row["attention_gpu_ms_median"] = float(np.median(gpu))
        return summary

    def chunk_step_ms(self, kind):
        """The whole attention's GPU time (cache write, backend, any SDPA) of
        each step of `kind` ("prompt", "prefill" or "mixed"), all L layers: the L − 1
        timed ones' × L / (L − 1)."""
        return [sum(a.elapsed_time(b) for a, b in events) * (len(events) + 1) / len(events)
                for k, events in self.chunk_events if k == kind and events]


def float64_attention(s, v, cap=None, sinks=None):
    """Attention of rows of logits s (Hkv, group, L) over values v (L, Hkv,
    D): soft-capped (cap · tanh(s / cap)), and each query head's sink logit
    (sinks: (Hkv · group,)) in its denominator with no value."""
    if cap:
        s = cap * torch.tanh(s / cap)
    if sinks is not None:
        s = torch.cat([s, sinks.double().view(*s.shape[:2], 1)], dim=-1)
    return torch.einsum("hgl,lhd->hgd", torch.softmax(s, dim=-1)[..., :v.shape[0]], v)


def relative_l2(x, ref):
    return float(torch.linalg.vector_norm(x - ref) / torch.linalg.vector_norm(ref))


class CodecAttention(InEngineAttention):
    """paged|codec's attention: the library's CodecDecode (decode rows and
    prefill chunks in one plan), planned on the host for eager steps and in
    the stream for captured ones."""

    prefill = True
    variants = frozenset(VARIANTS)

    def __init__(self) -> None:
        super().__init__()
        self.codec = CodecDecode()
        self.graph_wrapper_used = None

    def clear(self):
        super().clear()
        self.graph_wrapper_used = None

    def plan_step(self, cache, step, query, scale):
        self.codec.plan(cache, step, query, scale)

    def plan_captured(self, cache, step, query, scale):
        self.codec.plan_in_stream(cache, step, query, scale)
        self.graph_wrapper_used = self.codec.graph_wrapper(cache, step.block_table)

    def attend(self, cache, step, q, pages, out, sinks):
        self.codec.run(cache, step, q, pages, out, sinks=sinks)

    def check_stream_plans(self, cache=None):
        self.codec.check_stream_plans(cache)

    def finish(self):
        """The count and host time of the plans its graphs made in the stream, which the GPU waits for."""
        if self.graph_wrapper_used is not None:
            self.graph_wrapper_used.check_stream_plans()
            stats = self.graph_wrapper_used.plan_stats
            self.stream_plans = {"plans": stats["plans"], "searches": stats["searches"],  # the others reused splits
                                 "plan_ms_mean": stats["plan_ms_total"] / max(stats["plans"], 1),
                                 "plan_ms_max": stats["plan_ms_max"]}
            self.graph_wrapper_used = None


class NoopAttention(InEngineAttention):
    """No attention (rows of zeros, no plan), prefill chunks' included: the
    engine's cost without it, so that a step's time less the floor's is
    attention (every layer's: sliding ones too)."""

    prefill = True
    variants = frozenset(VARIANTS)

    def plan_step(self, cache, step, query, scale):
        pass

    def plan_captured(self, cache, step, query, scale):
        pass

    def attend(self, cache, step, q, pages, out, sinks):
        out.zero_()


class BusyAttention(NoopAttention):
    """noop with the GPU kept busy: a spin kernel (torch.cuda._sleep) of `us`
    microseconds per layer in place of the decode attention, no memory read;
    prefill chunks on the library's SDPA."""

    prefill = False
    variants = frozenset()
    limits = "it leaves prefill chunks to the library's SDPA, which has no window, soft-cap or sinks"

    def __init__(self, us) -> None:
        super().__init__()
        self.us, self.cycles_per_us = us, None

    def attend(self, cache, step, q, pages, out, sinks):
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
