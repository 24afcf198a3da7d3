"""The engine hooks of bench/e2e_decode.py: ``StepProfile``, the host time
of each phase of the engine's generation loop, and ``before_each_forward``,
a call before each of its forwards (where FlashInfer's graph wrappers are
planned). Both wrap the engine's methods for the duration of a run and put
them back after it."""

import contextlib
import time

import numpy as np
import torch


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
