"""Decode inside a real engine: Hugging Face transformers' continuous batching
on a model's shape (--model, random bf16 weights: e2e_models.MODELS), one
attention backend at a time on the same prompts, in eager mode or with
--cuda-graph in the engine's graph mode: on the block-table path graphs of decode steps (codec, noop, busy:
CoDec plans each replay's batch in the stream; fi_decode and fi_cascade:
FlashInfer's CUDA-graph wrappers, planned on the host before each replay, as
serving engines use them),
on the slot-list path (@ri) the engine's whole-forward graphs, where a
backend that fails has its error recorded.

Backends (NAME, or NAME@ri for the engine's slot-list decode path; without
@ri the block-table path, codec.integrations.transformers.enable_block_tables):
  codec       paged|codec
  noop        paged|codec with every attention call skipped, decode rows and
              prefill chunks (zeros, no plan): the engine's floor on that path
  fi_decode   FlashInfer's BatchDecodeWithPagedKVCacheWrapper on the same page
              tables, tensor-core kernel, planned once per step and layer group
  fi_cascade  FlashInfer's MultiLevelCascadeAttentionWrapper, one level per
              depth of the step's prefix forest (codec.derive_forest), requests
              reordered per layer so that every node's requests are contiguous
  fi_prefill  FlashInfer's BatchPrefillWithPagedKVCacheWrapper (causal) on every
              eager step, prefill chunks and decode rows in one plan; its
              decode wrapper in graphs of decode steps
  fi_sink     FlashInfer's BatchAttentionWithAttentionSinkWrapper (its prefill
              wrapper with a JIT-built sink variant) on every eager step, as
              fi_prefill: models with sinks (gpt-oss-20b) alone
  busy        noop that keeps the GPU busy instead, a spin kernel of
              --busy-us per layer (a diagnostic: whether the engine's host
              time depends on the GPU's load, which made noop's steps slower
              than codec's in run 21)
  sdpa        the engine's own paged|sdpa (slot-list path only)
codec computes prefill chunks in its plan, noop skips them (zeros) and
fi_prefill and fi_sink run them in their plans; fi_decode, fi_cascade and
busy leave them to the library's causal SDPA over each request's own KV, but
fi_decode runs them on FlashInfer's prefill wrapper for models with the
variants below.

Models (--model): qwen3-4b (the default), gpt-oss-20b (sliding and full
layers, attention sinks; MoE), gemma2-9b (sliding and full layers, logit
soft-cap), gemma3-12b (five sliding layers to a full one); --layers N keeps
the first N. A model with sliding-window layers has a plan a layer group a
step (a sliding group's pages are its ring's tokens), and in transformers
5.17 neither block tables (both decode paths are the slot-list one) nor a
prefix cache: every request prefills its whole prompt, and the shared
prefixes are not prefilled first. The engine still keeps one copy of the
full-attention layers' identical complete blocks, those of the sequences it
forks from a prompt and those of requests with a common prefix once they
are prefilled (`layer_groups`' `page_reuse_median`: page reads per
distinct page, on the first decode steps). A backend that does not compute
a model's window, soft-cap or sinks is refused by name before any model
exists: busy and fi_cascade for all three, sdpa for gpt-oss-20b and
gemma2-9b (the engine's paged|sdpa drops sinks and soft-cap), fi_sink for
all but gpt-oss-20b; so is --cuda-graph (block tables, where decode graphs
plan in the stream, are off for them).

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
engine's host-time noise. Steps with prefill chunks (`prompt`: none
decodes and each chunk attends to its own new tokens alone, whole prompts;
`prefill`: none decodes and some chunk attends to KV cached before the step,
loogle's questions over their documents; `mixed`: some rows decode) have the
GPU time of all their layers' whole attention (the cache write, the backend,
any SDPA), from CUDA events around each layer's call:
`<kind>_step_attention_gpu_ms_*` (median, mean, total) and `<kind>_steps`, in eager and
graph mode alike (prefill steps always run eagerly); the first layer's call
also builds and plans the step on the host, so the other layers are timed
and scaled to all. Correctness, two ways:
each request's last row in the first three planned steps with prefill
chunks and the first three decode-only ones (up to 8 requests a step, every
layer) against attention in float64 over the engine's own cache, under the
layer group's window and soft-cap and with the layer's sinks
(`attention_rel_l2_max` and `_min`; noop's are 1, its prefill chunks' rows zeros too; `attention_variant_effect_min` and
`_max`: the least and most a backend that ignored the window, soft-cap and
sinks would be off by on a checked row, which the benchmark's weights keep
large, e2e_models.weigh_variants),
and every backend's logprobs against sdpa@ri's (or, where that did not run, fi_decode's) on the steps whose token
history both runs share (bench/e2e_check.py: L2 error relative to the
logprobs and to their spread, largest difference), noop's included as the
negative control: random weights keep every logprob near −log(vocabulary),
so only an error well under noop's says the attention is right. With
--eager-check N (default 2 for the models with variants, where sdpa is no
reference; 0 for qwen3-4b), N sequences of every backend's first round
against the model's eager forward (attention in float32) on their own
tokens (`vs_eager`, the `eager` column: error relative to the logprobs'
spread).
`tpot_minus_floor_over_codec` (`/codec`) is a backend's TPOT less the
floor over CoDec's (issue 53's target: FlashInfer's ≥ 3× CoDec's on
gpt-oss-20b's samples:64, eager), `attention_gpu_minus_floor_over_codec`
(`attn /codec`) the same of attention's GPU time a step, which an eager
MoE's noise does not hide; with several layer groups,
`layer_groups` has each group's plan and attention times.

  python3 -m bench.e2e_decode --out OUT --workload loogle:4 [--backends codec,noop,fi_decode,sdpa@ri] [--layers 36]
                               [--rounds 3] [--tp 2]
  python3 -m bench.e2e_decode --out OUT --model gpt-oss-20b --workload samples:64 \
                               --backends codec,noop,fi_sink,fi_decode,fi_prefill --rounds 3

With --tp N the model is sharded over N ranks by transformers' own tensor
parallelism (one process per GPU; the engine keeps the ranks in lockstep, and
each rank's CoDec plans its own kv heads); rank 0 writes e2e_<workload>_tpN
files, and bench/e2e_check.py compares their tokens and logprobs with a
single-GPU run's. Files of models other than qwen3-4b are named
e2e_<model>_<workload>[_tpN].

Workloads (NAME:N, e2e_batches.WORKLOADS): loogle, sysprompt, samples, distinct.

This module is the command line; beside it: e2e_attention.py (the
backend-neutral in-engine attention, CoDec's and the floor's), e2e_flashinfer.py
(FlashInfer's decode, cascade, prefill and sink wrappers), e2e_harness.py
(one backend's run and its row, the scheduler, the summary), e2e_profile.py
(the engine hooks: step phases, a call before each forward), e2e_batches.py,
e2e_check.py and e2e_models.py (the models and their attention variants).
"""

import argparse
import gc
import os
import sys

if not __package__:  # python3 bench/e2e_decode.py: its imports are the bench package's
    raise SystemExit("run it from the repository root as a module: python3 -m bench.e2e_decode ...")

import torch

import codec.integrations.transformers as codec_tf

from .e2e_attention import BusyAttention, CodecAttention, NoopAttention
from .e2e_batches import WORKLOADS, combine_rounds, parse_workload, prompts
from .e2e_check import compare_with_eager
from .e2e_flashinfer import FlashInferCascade, FlashInferDecode, FlashInferPrefill, FlashInferSink
from .e2e_harness import admit_first_scheduler, print_table, run, summary, trace_prompt
from .e2e_models import MODELS, build_model, model_class, model_config, sliding, variants

ATTENTIONS = {"codec": CodecAttention, "noop": NoopAttention, "busy": BusyAttention, "fi_decode": FlashInferDecode,
              "fi_cascade": FlashInferCascade, "fi_prefill": FlashInferPrefill, "fi_sink": FlashInferSink}
BACKENDS = tuple(ATTENTIONS) + ("sdpa",)
# the engine's own paged|sdpa: the variants it computes, and why no others
SDPA_VARIANTS = frozenset({"window"}), "the engine's paged|sdpa masks windows but drops sinks and soft-cap"


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def parser():
    """The command line's arguments (check_args checks them)."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True)
    p.add_argument("--workload", default="loogle:4",
                   help="NAME:N, NAME one of " + ", ".join(WORKLOADS) + "; or several, comma-separated, measured one "
                        "after another on one model (each its own files)")
    p.add_argument("--model", default="qwen3-4b", choices=tuple(MODELS),
                   help="the model's shape (random weights); each but qwen3-4b has sliding-window layers")
    p.add_argument("--backends", default="codec,noop,fi_decode,fi_cascade,noop@ri,sdpa@ri")
    p.add_argument("--layers", type=int, default=None, help="the model's first N layers (default: all)")
    p.add_argument("--eager-check", type=int, default=None,
                   help="sequences of each backend's first round checked against the model's eager forward "
                        "(default: 2 for models with windows, soft-cap or sinks, 0 for qwen3-4b)")
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
    p.add_argument("--max-batch-tokens", type=int, default=None,
                   help="the engine's token budget a step (default: its own, 8,192 where memory allows): below a "
                        "workload's new tokens its prefill spreads over steps that mix with decode rows")
    p.add_argument("--no-prefix-warmup", action="store_true",
                   help="submit every request at once without prefilling the shared prefixes first (each request "
                        "then prefills its whole prompt, and fewer decode together; always so for models with "
                        "sliding-window layers, which have no prefix cache)")
    p.add_argument("--tp", type=int, default=1,
                   help="tensor-parallel ranks, one process per GPU (torch.distributed: NCCL on GPUs, gloo on the "
                        "CPU engine), the model sharded by transformers' own plan (DistributedConfig, which needs "
                        "accelerate); rank 0 writes the results")
    return p


def main(argv=None):
    a = parser().parse_args(argv)
    device = "cuda" if torch.cuda.is_available() else "cpu"  # the CPU engine: tests
    cfg = check_args(a, device)
    torch.manual_seed(0)
    if a.tp == 1:
        return measure_each(a, build_model(a.model, cfg, device), device)
    # The ranks load one checkpoint of the random weights, each its shards, as transformers' TP does; the
    # weights are drawn on the same device as without --tp, so that the two runs hold the same model.
    import tempfile
    import torch.multiprocessing as mp
    with tempfile.TemporaryDirectory(prefix="codec_e2e_tp_") as model_dir:
        build_model(a.model, cfg, device).save_pretrained(model_dir)
        gc.collect()
        if device == "cuda":
            torch.cuda.empty_cache()
        mp.spawn(tp_rank, args=(a, model_dir, free_port(), device, rank_setup), nprocs=a.tp, join=True)


def check_args(a, device):
    """Refuses bad arguments, naming them, before any model exists: among
    them backends that do not compute the model's attention variants.
    Fills in the defaults that depend on the model (--layers,
    --eager-check) and returns the model's config."""
    backends = a.backends.split(",")
    if a.layers is not None and a.layers < 1:
        raise SystemExit(f"--layers {a.layers} must be >= 1")
    cfg = model_config(a.model, a.layers)
    a.layers = cfg.num_hidden_layers
    needed = variants(a.model, cfg)
    if a.eager_check is None:
        a.eager_check = 2 if needed else 0
    if a.eager_check < 0:
        raise SystemExit(f"--eager-check {a.eager_check} must be >= 0")
    if needed and a.cuda_graph:
        raise SystemExit(f"--cuda-graph: {a.model} has {', '.join(sorted(needed))}; the benchmark's graph mode "
                         "runs models without (transformers 5.17 keeps sliding-window models off the block tables "
                         "where paged|codec plans decode graphs in the stream)")
    for w in a.workload.split(","):
        parse_workload(w)
    if a.new_tokens < 3 or a.sdpa_new_tokens < 0 or 0 < a.sdpa_new_tokens < 3:
        raise SystemExit(f"--new-tokens {a.new_tokens} must be >= 3 and --sdpa-new-tokens {a.sdpa_new_tokens} 0 "
                         "(as --new-tokens) or >= 3: TPOT takes the intervals from the second generated token on")
    if a.max_batch_tokens is not None and a.max_batch_tokens < 1:
        raise SystemExit(f"--max-batch-tokens {a.max_batch_tokens} must be >= 1")
    if a.rounds < 1 or len(set(backends)) < len(backends):
        raise SystemExit(f"--rounds {a.rounds} must be >= 1, and --backends {a.backends} name each backend once")
    for b in backends:
        kind, _, path = b.partition("@")
        if kind not in BACKENDS or path not in ("", "ri") or (kind == "sdpa" and path != "ri"):
            raise SystemExit(f"unknown backend {b!r}: {', '.join(ATTENTIONS)} (each also @ri), sdpa@ri")
        computes, why = SDPA_VARIANTS if kind == "sdpa" else (ATTENTIONS[kind].variants, ATTENTIONS[kind].limits)
        requires = frozenset() if kind == "sdpa" else ATTENTIONS[kind].requires
        if needed - computes or requires - needed:
            raise SystemExit(f"backend {b} cannot serve {a.model} (its layers need: "
                             f"{', '.join(sorted(needed)) or 'no window, soft-cap or sinks'}): {why}")
        if kind == "busy" and device != "cuda":
            raise SystemExit("the busy backend keeps a GPU busy: it needs one")
    if a.tp < 1 or (device == "cuda" and a.tp > torch.cuda.device_count()):
        raise SystemExit(f"--tp {a.tp} must be >= 1 and at most the {torch.cuda.device_count()} GPUs here")
    if a.tp > 1:
        import importlib.util
        if importlib.util.find_spec("accelerate") is None:
            raise SystemExit(f"--tp {a.tp}: transformers' tensor parallelism needs accelerate (not installed)")
    return cfg


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
        model = model_class(a.model).from_pretrained(model_dir, distributed_config=DistributedConfig(tp_plan="auto"),
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
    attention = {b: cls(a.busy_us) if b == "busy" else cls() for b, cls in ATTENTIONS.items()}
    needed = variants(a.model, model.config)
    for att in attention.values():
        att.serve(needed)
    names = {b: codec_tf.register(f"paged|e2e_{b}", att) for b, att in attention.items()}
    names["sdpa"] = "paged|sdpa"
    scheduler = admit_first_scheduler() if a.scheduler == "admit_first" else "fifo"
    inputs, prefixes, samples = prompts(a.workload)
    slides = sliding(model.config)  # no block tables, no prefix cache in transformers 5.17
    if a.no_prefix_warmup or slides:
        prefixes = []
    log(f"{a.workload}: {len(inputs)} prompts ({sum(map(len, inputs))} tokens) x {samples} sequences, "
        f"{len(prefixes)} shared prefixes prefilled first, {a.model}, {a.layers} layers"
        + (", sliding-window layers: the slot-list path, no prefix cache" if slides else ""))
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
                                 a.block_size, block_tables=path != "ri" and not slides, cuda_graph=a.cuda_graph,
                                 samples=samples, scheduler="fifo" if kind == "sdpa" else scheduler,
                                 cache_blocks=a.cache_blocks, async_batching=a.async_batching,
                                 step_profile=a.step_profile, max_batch_tokens=a.max_batch_tokens)
                row["new_tokens"] = new_tokens
                if rnd == 0 and a.eager_check:  # the model itself, the reference where sdpa is none
                    try:
                        row["vs_eager"] = compare_with_eager(model, {k: trace_prompt(inputs, k) for k in trace},
                                                             trace, a.eager_check)
                    except RuntimeError as e:  # out of memory, say: the run's numbers stand, the check says why not
                        row["vs_eager"] = {"error": f"{type(e).__name__}: {e}"[:500]}
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
    print_table(result["rows"])
    if failed:
        raise SystemExit(f"backends failed: {', '.join(sorted(failed))} (their errors are in the results)")


if __name__ == "__main__":
    main()

