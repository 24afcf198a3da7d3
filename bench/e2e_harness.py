"""The harness of bench/e2e_decode.py: one backend's generation through
transformers' continuous batching and the row of numbers it gives (``run``),
the scheduler it runs under (``admit_first_scheduler``), and a workload's
rows summed up against the reference and the floor (``summary``)."""

import contextlib
import gc
import json
import os
import time

import numpy as np
import torch

import codec.integrations.transformers as codec_tf

from .e2e_check import compare_on_shared_history
from .e2e_profile import StepProfile, before_each_forward

# Steps with prefill chunks, by kind (e2e_attention.step_kind), each with its attention's GPU time in a run's row
STEP_KINDS = ("prompt", "prefill", "mixed")


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
        scheduler="fifo", cache_blocks=None, async_batching=False, step_profile=False, max_batch_tokens=None):
    """One backend's generation; greedy, or with samples > 1 that many
    sequences sampled per prompt from the model's own distribution (no
    top-k or top-p: the logprobs are the model's, as an eager forward's;
    the same seed for every backend)."""
    from transformers import GenerationConfig
    from transformers.generation.configuration_utils import ContinuousBatchingConfig
    model.set_attn_implementation(impl)
    sampling = dict(do_sample=True, top_k=0, top_p=1.0) if samples > 1 else dict(do_sample=False)
    gen = GenerationConfig(max_new_tokens=new_tokens, num_return_sequences=samples, eos_token_id=-1, pad_token_id=0,
                           **sampling)
    # Graph mode: on the block-table path graphs of decode steps alone (codec.integrations.transformers plans
    # them in the stream; prefill chunks need host lengths), on the slot-list path the engine's own choice.
    graphs = (False, True) if cuda_graph and block_tables else cuda_graph
    cb = ContinuousBatchingConfig(block_size=block_size, return_logprobs=True, use_cuda_graph=graphs,
                                  max_requests_per_batch=len(inputs) * samples, scheduler_type=scheduler,
                                  num_blocks=cache_blocks, max_batch_tokens=max_batch_tokens,
                                  use_async_batching=True if async_batching else None)  # None: the engine's choice
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
                                      shared_prefixes=prefixes,
                                      prefixes_cached=None if attention is None else attention.prefixes_cached)
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
    if attention is not None and attention.errors:  # the first planned steps' rows checked against float64
        row["attention_rel_l2_max"] = max(attention.errors)
        row["attention_rel_l2_min"] = min(attention.errors)
        row["attention_rows_checked"] = len(attention.errors)
    if attention is not None and attention.variant_effects:  # what ignoring the window, soft-cap, sinks would cost
        row["attention_variant_effect_min"] = min(attention.variant_effects)
        row["attention_variant_effect_max"] = max(attention.variant_effects)
    if attention is not None:  # steps with prefill chunks: eager in either mode, their whole attention timed
        for kind in STEP_KINDS:
            ms = attention.chunk_step_ms(kind)
            if ms:
                row.update({f"{kind}_steps": len(ms), f"{kind}_step_attention_gpu_ms_median": float(np.median(ms)),
                            f"{kind}_step_attention_gpu_ms_mean": float(np.mean(ms)),
                            f"{kind}_step_attention_gpu_ms_total": float(np.sum(ms))})
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
        row["decode_steps_planned"] = len(attention.plan_ms)  # decode-only steps
        row["heads"] = attention.heads  # query and kv heads of the process (a rank's slice under --tp)
        row["decode_requests_per_step_median"] = float(np.median(attention.rows))
        row["decode_requests_per_step_max"] = int(np.max(attention.rows))
        steps = attention.decode_step_ms()
        if steps:  # the TPOT: decode-only steps alone, prefill chunks and mixed steps left out
            row["decode_step_ms_median"] = float(np.median(steps))
            row["decode_only_steps"] = len(steps)
        host = attention.decode_host_ms()
        if host:
            row["attention_host_ms_median"] = float(np.median(host))  # all layers' calls of a decode-only step
        gpu = attention.attention_ms()
        if gpu:
            row["attention_gpu_ms_median"] = float(np.median(gpu))  # all layers of a step
            row["attention_gpu_ms_mean"] = float(np.mean(gpu))
            row["attention_gpu_share"] = row["attention_gpu_ms_median"] / tpot
        if len(attention.groups) > 1:  # sliding and full layers: each group's plan and attention
            row["layer_groups"] = attention.group_summary()
    return row, trace


def trace_prompt(inputs, request):
    """The prompt of a trace's request (run's names: prompt_<i>, and its sequences prompt_<i>__child#<k>)."""
    return inputs[int(request.partition("__")[0].removeprefix("prompt_"))]


def result_tag(a):
    """The name of a run's files: e2e_[<model>_]<workload>[_tp<N>].json (the
    model named unless it is qwen3-4b, the default) and ..._traces.json."""
    model = "" if a.model == "qwen3-4b" else f"{a.model}_"
    return f"e2e_{model}{a.workload.replace(':', '_')}" + (f"_tp{a.tp}" if a.tp > 1 else "")


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
        if "attention_gpu_ms_median" in floor and "attention_gpu_ms_median" in rows[b]:
            rows[b]["attention_gpu_minus_floor_ms"] = \
                rows[b]["attention_gpu_ms_median"] - floor["attention_gpu_ms_median"]
    # issue 53's measure: a backend's TPOT less the floor over CoDec's, on the same decode path; and the same of
    # attention's GPU time a step, which holds where the model's own time and its noise dwarf attention (an eager
    # MoE: gpt-oss-20b's TPOT ~94 ms on an H100, CoDec's attention ~2 ms of it)
    for b in traces:
        codec = rows.get("codec@ri" if b.endswith("@ri") else "codec", {})
        for measure in ("tpot_minus_floor", "attention_gpu_minus_floor"):
            if codec.get(f"{measure}_ms", 0.0) > 0 and f"{measure}_ms" in rows[b]:
                rows[b][f"{measure}_over_codec"] = rows[b][f"{measure}_ms"] / codec[f"{measure}_ms"]
    result = {"model": a.model, "workload": a.workload, "requests": requests, "prompts": prompts,
              "shared_prefixes_prefilled_first": prefixes,
              "layers": a.layers, "block_size": a.block_size, "scheduler": a.scheduler,
              "max_batch_tokens": a.max_batch_tokens,
              "async_batching": a.async_batching,
              "new_tokens": a.new_tokens, "cuda_graph": a.cuda_graph, "rounds": a.rounds, "tp": a.tp,
              "device": torch.cuda.get_device_name() if device == "cuda" else "cpu",
              "step_kinds": STEP_KINDS, "rows": rows}
    if write:
        os.makedirs(a.out, exist_ok=True)
        with open(os.path.join(a.out, result_tag(a) + ".json"), "w") as f:
            json.dump(result, f, indent=2)
        with open(os.path.join(a.out, result_tag(a) + "_traces.json"), "w") as f:
            json.dump(traces, f)
    return result


def print_table(rows):
    """A workload's rows (summary's) as a table on stdout: `/codec` is the
    backend's TPOT less the floor over CoDec's, `attn /codec` the same of
    attention's GPU time a step, `attn err` the float64
    check's largest error, `logprob err` and `centered` those against the
    reference run, `eager` the centered one against the model's eager
    forward (vs_eager)."""
    nan = float("nan")
    print(f"{'backend':>13} {'TPOT ms':>9} {'p90 ms':>8} {'- floor':>8} {'/codec':>7} {'step ms':>8} {'- floor':>8} "
          f"{'attn ms':>8} {'attn /codec':>11} {'plan ms':>8} {'tok/s':>7} {'GB':>6} {'attn err':>9} "
          f"{'logprob err':>12} {'centered':>9} {'steps':>6} {'eager':>9}")
    for b, r in rows.items():
        if "tpot_ms" not in r:
            print(f"{b:>13} failed: {r['error'][:300]}")
            continue
        check, eager = r.get("vs_reference", {}), r.get("vs_eager", {})
        print(f"{b:>13} {r['tpot_ms']:9.2f} {r['tpot_p90_ms']:8.2f} {r.get('tpot_minus_floor_ms', nan):8.2f} "
              f"{r.get('tpot_minus_floor_over_codec', nan):7.2f} "
              f"{r.get('decode_step_ms_median', nan):8.2f} {r.get('decode_step_minus_floor_ms', nan):8.2f} "
              f"{r.get('attention_gpu_ms_median', nan):8.3f} "
              f"{r.get('attention_gpu_minus_floor_over_codec', nan):11.2f} "
              f"{r.get('plan_ms_median', nan):8.3f} "
              f"{r['tokens_per_s']:7.1f} {r['peak_gpu_gb']:6.1f} {r.get('attention_rel_l2_max', nan):9.2e} "
              f"{check.get('logprob_rel_l2', nan):12.2e} {check.get('logprob_rel_l2_centered', nan):9.2e} "
              f"{check.get('steps_compared', 0):6d} {eager.get('logprob_rel_l2_centered', nan):9.2e}")
