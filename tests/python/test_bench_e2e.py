"""bench/e2e_decode.py on the CPU engine before any GPU time goes to it: a
run through transformers' continuous batching on a tiny Qwen3 whose step
records (decode-only steps, requests per step, plans) add up, its rounds and
rows, graphs and tensor parallelism; tiny gpt-oss- and Gemma-2-shaped models
(sliding windows, sinks, soft-cap: a plan a layer group) through CoDec and
the floor, checked against float64 attention and the model's eager forward,
the backends that cannot serve them refused by name, and FlashInfer's
backends' plans and runs (a stand-in records them: FlashInfer needs a GPU).
Where torch and transformers are installed; its workloads and page tables,
which need neither, are test_bench_e2e_batches.py's."""

import json
import sys
import time

import numpy as np
import pytest

pytestmark = pytest.mark.transformers
torch = pytest.importorskip("torch", reason="torch is not installed: the benchmark is torch code")
transformers = pytest.importorskip("transformers", reason="transformers is not installed")
import codec.integrations.transformers as codec_tf  # noqa: E402  (torch first: these import it)
from bench import e2e_attention, e2e_decode, e2e_harness, e2e_models  # noqa: E402


def cpu_memory():
    """The memory the engine may size its cache from on the CPU (it reads GPU memory otherwise)."""
    return torch.device("cpu"), 8 << 30, 0, 0


def cpu_engine(monkeypatch):
    """Continuous batching on the CPU, with a cache budget (the engine sizes its cache from GPU memory)."""
    if not hasattr(transformers.Qwen3ForCausalLM, "generate_batch"):
        pytest.skip("this transformers has no continuous batching")
    import transformers.generation.continuous_batching.cache as cb_cache
    monkeypatch.setattr(cb_cache, "get_device_and_memory_breakdown", cpu_memory)


def shrink(monkeypatch, model, **shape):
    """e2e_models.MODELS[model] with a CPU engine's shape, its other fields as they are."""
    entry = e2e_models.MODELS[model]
    monkeypatch.setitem(e2e_models.MODELS, model, entry._replace(shape={**entry.shape, **shape}))


def tiny_qwen3(hidden, layers, heads):
    """A random Qwen3 of head_dim 64 and 2 kv heads (seed 0), for the CPU engine."""
    cfg = transformers.Qwen3Config(vocab_size=1000, hidden_size=hidden, intermediate_size=2 * hidden,
                                   num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=2,
                                   head_dim=64, max_position_embeddings=4096)
    torch.manual_seed(0)
    return transformers.Qwen3ForCausalLM(cfg).eval()


DOC = list(range(1, 71))  # 4 full blocks of 16 shared, then a partial one
DOC_REQUESTS = [DOC + [100 + i, 200 + i, 300 + i] for i in range(5)]  # five requests that share DOC


def test_an_unknown_workload_is_refused_before_any_model_exists():
    with pytest.raises(SystemExit, match="unknown workload 'loogle:0'"):
        e2e_decode.main(["--out", "unused", "--workload", "sysprompt:2,loogle:0"])


def test_a_run_records_its_decode_steps(monkeypatch):
    cpu_engine(monkeypatch)
    model = tiny_qwen3(hidden=256, layers=2, heads=8)
    doc, inputs = DOC, DOC_REQUESTS
    attention = e2e_attention.CodecAttention()
    name = codec_tf.register("paged|e2e_test", attention)
    row, trace = e2e_harness.run(model, name, attention, inputs, [doc], new_tokens=6, block_size=16,
                                 block_tables=True, cuda_graph=False, step_profile=True)
    assert set(trace) == {f"prompt_{i}" for i in range(5)} and all(len(t[0]) == 6 for t in trace.values())
    phases = row["step_host_ms_median"]
    assert set(phases) == {"decode_only_steps", "prefill_tokens", "schedule", "forward", "gpu_wait", "update"}, \
        phases  # no GPU span
    # the prefix whole once, then each request past its 4 shared full blocks
    assert phases["prefill_tokens"] == len(doc) + sum(len(r) - 64 for r in inputs), phases
    assert row["async_batching"] is False  # as the profile saw the engine choose (no graphs: synchronous)
    assert phases["decode_only_steps"] == row["decode_only_steps"] + 1  # the last step has no successor to time
    assert phases["schedule"] > 0 and phases["update"] > 0 and phases["gpu_wait"] >= 0
    assert 0 < row["attention_host_ms_median"] < phases["forward"]
    from transformers.generation.continuous_batching.model_runner import ModelRunner
    assert ModelRunner.compute_batch.__qualname__ == "ModelRunner.compute_batch"  # unwrapped after the run
    assert row["decode_requests_per_step_max"] == 5  # prefilled past the shared prefix, they decode together
    assert 4 <= row["decode_only_steps"] <= row["decode_steps_planned"]
    assert row["decode_step_ms_median"] > 0 and row["plan_ms_median"] > 0
    assert attention.planned > row["decode_steps_planned"]  # the prefill chunks' steps planned on CoDec too
    assert "attention_gpu_ms_median" not in row and "prefill_steps" not in row  # no GPU: no GPU time
    # the requests over the prefix's cached blocks (recorded, untimed on the CPU); the prefix's own prompt step,
    # before them, dropped from the records
    assert [kind for kind, events in attention.chunk_events] == ["prefill"], attention.chunk_events


def test_a_small_step_budget_mixes_prefill_chunks_with_decode_rows_after_the_prefix(monkeypatch):
    """FIFO in steps of 16 tokens: the requests' 9 uncached tokens each
    prefill over several steps, the later ones beside decode rows; the
    prefix's own prompt step before them is dropped from the records."""
    cpu_engine(monkeypatch)
    model = tiny_qwen3(hidden=128, layers=2, heads=4)
    attention = e2e_attention.CodecAttention()
    name = codec_tf.register("paged|e2e_test_budget", attention)
    row, trace = e2e_harness.run(model, name, attention, DOC_REQUESTS, [DOC], new_tokens=4, block_size=16,
                                 block_tables=False, cuda_graph=False, scheduler="fifo", max_batch_tokens=16)
    assert all(len(t[0]) == 4 for t in trace.values())
    kinds = [kind for kind, events in attention.chunk_events]
    assert "mixed" in kinds and "prompt" not in kinds and kinds[0] == "prefill", kinds


def test_the_engine_schedules_requests_once_all_are_queued(monkeypatch):
    """A submission that stalls after its first request, for longer than
    the idle engine waits for new ones (0.1 s), leaves the steps as they
    are without the stall: the engine takes none of the measured requests
    until all are queued (once it began with however many had arrived)."""
    cpu_engine(monkeypatch)
    from transformers.generation.continuous_batching import continuous_api
    add = continuous_api.ContinuousBatchingManager.add_request
    submission = {"stall": False, "gated": []}

    def add_request(self, *args, **kwargs):
        measured = kwargs.get("max_new_tokens") != 2  # the prefix's warm-up requests take 2 tokens
        if measured:
            submission["gated"].append(self.batch_processor.scheduler.block_new_requests)
        request_id = add(self, *args, **kwargs)
        if measured and submission["stall"] and len(submission["gated"]) == 1:
            time.sleep(0.3)
        return request_id

    monkeypatch.setattr(continuous_api.ContinuousBatchingManager, "add_request", add_request)
    model = tiny_qwen3(hidden=128, layers=2, heads=4)
    attention = e2e_attention.CodecAttention()
    name = codec_tf.register("paged|e2e_test_gate", attention)
    steps = {}
    for stall in (False, True):
        submission["stall"], submission["gated"] = stall, []
        row, _ = e2e_harness.run(model, name, attention, DOC_REQUESTS, [DOC], new_tokens=4, block_size=16,
                                 block_tables=False, cuda_graph=False, scheduler="fifo", max_batch_tokens=16)
        assert submission["gated"] == [True] * len(DOC_REQUESTS), submission
        steps[stall] = ([kind for kind, _ in attention.chunk_events], row["decode_only_steps"],
                        row["decode_requests_per_step_max"])
    assert steps[True] == steps[False], steps


def test_flashinfer_backends_let_a_runs_wrappers_go():
    """A run's FlashInfer wrappers hold that run's cache's 256 MB workspace:
    clear(), before the next run, drops them, so that the next backend's
    cache, sized from free GPU memory, is not smaller for them."""
    from bench import e2e_flashinfer
    for cls in (e2e_flashinfer.FlashInferDecode, e2e_flashinfer.FlashInferPrefill, e2e_flashinfer.FlashInferSink):
        backend = cls()
        wrappers = backend._wrappers if cls is e2e_flashinfer.FlashInferSink else backend._eager
        wrappers[("decode", 0)], backend._planned[0] = object(), object()
        backend.clear()
        wrappers = backend._wrappers if cls is e2e_flashinfer.FlashInferSink else backend._eager
        assert not wrappers and not backend._planned, cls


def test_a_step_is_a_prompt_a_prefill_over_the_cache_or_mixed():
    from types import SimpleNamespace

    def step(q_lens, k_lens):
        q_lens = np.asarray(q_lens)
        decode = np.flatnonzero(q_lens == 1)
        return SimpleNamespace(all_decode=decode.size == q_lens.size, decode=decode,
                               cu_q=np.concatenate([[0], np.cumsum(q_lens)]),
                               cu_k=np.concatenate([[0], np.cumsum(k_lens)]))

    assert e2e_attention.step_kind(step([1, 1], [40, 9])) == "decode"
    assert e2e_attention.step_kind(step([7, 1], [7, 9])) == "mixed"
    assert e2e_attention.step_kind(step([7, 5], [7, 5])) == "prompt"
    assert e2e_attention.step_kind(step([7, 5], [7, 70])) == "prefill"  # one chunk over cached KV


def test_main_runs_rounds_of_backends_and_writes_their_rows(monkeypatch, tmp_path):
    """The whole benchmark on the CPU engine: a narrow 2-layer model of the
    vocabulary the prompts need, two backends, two rounds."""
    cpu_engine(monkeypatch)
    shrink(monkeypatch, "qwen3-4b", hidden_size=64, intermediate_size=128, num_attention_heads=4,
           num_key_value_heads=2, head_dim=64)
    e2e_decode.main(["--out", str(tmp_path), "--workload", "sysprompt:3", "--backends", "codec,noop,sdpa@ri",
                     "--layers", "2", "--new-tokens", "4", "--rounds", "2", "--sdpa-new-tokens", "3"])
    result = json.loads((tmp_path / "e2e_sysprompt_3.json").read_text())
    assert result["requests"] == 3 and result["rounds"] == 2 and result["shared_prefixes_prefilled_first"] == 1
    for b in ("codec", "noop"):
        row = result["rows"][b]
        assert len(row["tpot_ms_rounds"]) == 2 and row["decode_requests_per_step_max"] == 3, row
    assert "decode_step_minus_floor_ms" in result["rows"]["codec"]
    assert result["rows"]["sdpa@ri"]["new_tokens"] == 3 and result["rows"]["codec"]["new_tokens"] == 4
    # bf16: CoDec's logprobs far closer to the reference's than the negative control's (zeros for attention)
    check, control = result["rows"]["codec"]["vs_reference"], result["rows"]["noop"]["vs_reference"]
    assert check["reference"] == "sdpa@ri" and check["steps_compared"] >= 3 * 3
    # the control parts from the reference sooner (one shared step leaves no spread to measure), or, where
    # it keeps up, lies ≥ 4× further from it
    assert control["steps_compared"] < check["steps_compared"], (check, control)
    assert control["steps_compared"] <= 3 or \
        check["logprob_rel_l2_centered"] < 0.25 * control["logprob_rel_l2_centered"], (check, control)
    assert check["logprob_rel_l2"] < 2e-3
    # the decode outputs against float64 attention over the engine's cache: bf16 rounding, and zeros' 1
    assert result["rows"]["codec"]["attention_rel_l2_max"] < 1e-2
    # every row the floor computed is zeros, the prefill chunks' included (it skips them too)
    assert result["rows"]["noop"]["attention_rel_l2_max"] == result["rows"]["noop"]["attention_rel_l2_min"] == 1.0
    # the first three planned steps of each kind, two layers each: with prefill chunks the prefix's prefill (its
    # one request's last token) and the three requests' chunks over the cached prefix (on CoDec, each last row);
    # decode-only the warm-up's step, then two of the three requests'
    assert result["rows"]["codec"]["attention_rows_checked"] == 2 * (1 + 3 + 1 + 3 + 3)
    assert result["rows"]["noop"]["attention_rows_checked"] == result["rows"]["codec"]["attention_rows_checked"]
    assert "attention_variant_effect_min" not in result["rows"]["codec"]  # no window, soft-cap or sinks
    # parallel sampling: one prompt, its sequences forked after the prefill, decoding together; and a second
    # workload on the same model, with its own files
    e2e_decode.main(["--out", str(tmp_path), "--workload", "samples:3,distinct:2", "--backends", "codec",
                     "--layers", "2", "--new-tokens", "4"])
    assert json.loads((tmp_path / "e2e_distinct_2.json").read_text())["requests"] == 2
    result = json.loads((tmp_path / "e2e_samples_3.json").read_text())
    assert result["requests"] == 3 and result["prompts"] == 1
    assert result["rows"]["codec"]["decode_requests_per_step_max"] == 3 and result["rows"]["codec"]["tokens"] == 12
    traces = json.loads((tmp_path / "e2e_samples_3_traces.json").read_text())["codec"]
    assert len(traces) == 3 and "prompt_0" in traces and all(k.startswith("prompt_0__") for k in traces if k != "prompt_0")
    with pytest.raises(SystemExit, match="name each backend once"):
        e2e_decode.main(["--out", str(tmp_path), "--backends", "codec,codec"])
    if not torch.cuda.is_available():
        with pytest.raises(SystemExit, match="busy backend keeps a GPU busy"):
            e2e_decode.main(["--out", str(tmp_path), "--backends", "busy", "--layers", "1"])
    with pytest.raises(SystemExit, match="--sdpa-new-tokens 2 0"):
        e2e_decode.main(["--out", str(tmp_path), "--sdpa-new-tokens", "2"])


def test_graph_mode_plans_codec_in_the_stream(tmp_path):
    """--cuda-graph on the GPU: the engine's graphs of decode steps run
    codec (every replay planned in the stream), FlashInfer's decode (its
    graph wrapper planned on the host before every replay) and the floor;
    codec's logprobs match FlashInfer's on their shared history, far closer
    than the floor's, and so do FlashInfer cascade's (its graph wrapper
    planned likewise); the step profile times each forward on the GPU; with
    asynchronous batching codec and FlashInfer's decode again."""
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device: graph mode runs on the GPU machine")
    pytest.importorskip("flashinfer", reason="FlashInfer is not installed (scripts/fetch_peer_wheels.sh)")
    e2e_decode.main(["--out", str(tmp_path), "--workload", "sysprompt:5", "--backends",
                     "codec,fi_decode,fi_cascade,noop", "--layers", "2", "--new-tokens", "6", "--cuda-graph",
                     "--step-profile"])
    rows = json.loads((tmp_path / "e2e_sysprompt_5.json").read_text())["rows"]
    assert rows["codec"]["cuda_graph"] and rows["codec"]["in_stream_plans"] >= 4, rows["codec"]
    for fi in (rows["fi_decode"], rows["fi_cascade"]):  # every decode-only step planned before its forward
        assert fi["replay_plans"] >= fi["step_host_ms_median"]["decode_only_steps"] >= 4, fi
        assert "in_stream_plans" not in fi, fi
    assert rows["codec"]["async_batching"] is False  # the engine's choice: asynchronous for flash names only
    assert "attention_gpu_ms_median" not in rows["codec"]  # the eager steps' timings are left out in graph mode
    for b in ("codec", "fi_decode", "fi_cascade", "noop"):
        assert rows[b]["tokens"] == 30 and rows[b]["step_host_ms_median"]["forward_gpu"] > 0, rows[b]
    # the floor's tokens part from FlashInfer's after the prefill (5 steps shared); codec's and the cascade's keep to them
    control = rows["noop"]["vs_reference"]
    for b in ("codec", "fi_cascade"):
        check = rows[b]["vs_reference"]
        assert check["reference"] == "fi_decode" and check["steps_compared"] >= 2 * control["steps_compared"], check
        assert check["logprob_rel_l2"] < 2e-2, check
    # asynchronous batching: the profile finds the batches in the engine's IO pairs, and the GPU's idle gaps;
    # FlashInfer's graph wrappers, one per IO pair, planned from the pair's host inputs
    e2e_decode.main(["--out", str(tmp_path), "--workload", "sysprompt:5", "--backends", "codec,fi_decode", "--layers",
                     "2", "--new-tokens", "6", "--cuda-graph", "--async-batching", "--step-profile"])
    rows = json.loads((tmp_path / "e2e_sysprompt_5.json").read_text())["rows"]
    row = rows["codec"]
    assert row["async_batching"] and row["in_stream_plans"] >= 4, row
    profile = row["step_host_ms_median"]
    assert profile["decode_only_steps"] >= 4 and profile["gpu_idle"] >= 0 and profile["forward_gpu"] > 0, profile
    fi = rows["fi_decode"]
    assert fi["replay_plans"] >= fi["step_host_ms_median"]["decode_only_steps"] >= 4 and fi["tokens"] == 30, fi
    check = row["vs_reference"]
    assert check["reference"] == "fi_decode" and check["steps_compared"] >= 10 and check["logprob_rel_l2"] < 2e-2, check


def test_admitting_first_lets_every_request_decode_together(monkeypatch):
    """A cache whose read budget (its 256 token slots) holds four of five
    requests as the scheduler charges them (the 64 cached prefix tokens each
    finds on admission): FIFO then serves its decoding requests first and
    keeps the fifth waiting until the first four finish; admitting first
    brings all five in."""
    cpu_engine(monkeypatch)
    model = tiny_qwen3(hidden=128, layers=1, heads=4)
    doc, inputs = DOC, DOC_REQUESTS
    attention = e2e_attention.CodecAttention()
    name = codec_tf.register("paged|e2e_sched", attention)
    most = {}
    for sched in ("fifo", e2e_harness.admit_first_scheduler()):
        row, trace = e2e_harness.run(model, name, attention, inputs, [doc], new_tokens=8, block_size=16,
                                     block_tables=True, cuda_graph=False, scheduler=sched, cache_blocks=16)
        assert len(trace) == 5 and all(len(t[0]) == 8 for t in trace.values())
        most[sched] = row["decode_requests_per_step_max"]
    assert most == {"fifo": 4, "codec_e2e_admit_first": 5}


def test_admitting_first_yields_to_decoding_requests_when_the_cache_runs_low(monkeypatch):
    """16 requests that need 80 blocks in a cache of 16: the engine must run
    them in waves, and admitting past its safety margin would leave the
    decoding requests no blocks to grow into (the engine then failed)."""
    cpu_engine(monkeypatch)
    model = tiny_qwen3(hidden=128, layers=1, heads=4)
    inputs = [[(7 * i + j) % 900 + 10 for j in range(40)] for i in range(16)]
    attention = e2e_attention.CodecAttention()
    name = codec_tf.register("paged|e2e_waves", attention)
    row, trace = e2e_harness.run(model, name, attention, inputs, [], new_tokens=40, block_size=16, block_tables=True,
                                 cuda_graph=False, scheduler=e2e_harness.admit_first_scheduler(), cache_blocks=16)
    assert len(trace) == 16 and all(len(t[0]) == 40 for t in trace.values())
    assert row["decode_requests_per_step_max"] < 16


def cpu_cache_budget():
    """cpu_engine's cache budget, in a spawned tensor-parallel rank (no monkeypatch there)."""
    import transformers.generation.continuous_batching.cache as cb_cache
    cb_cache.get_device_and_memory_breakdown = cpu_memory


def test_two_tensor_parallel_ranks_decode_as_one_process(monkeypatch, tmp_path):
    """--tp 2 on the CPU engine: two gloo ranks, each with half the heads of
    the checkpoint transformers shards, decode the same tokens with the same
    logprobs as one process (bf16: to rounding), codec and the floor alike."""
    pytest.importorskip("accelerate", reason="transformers' tensor parallelism needs accelerate")
    if torch.cuda.is_available():
        pytest.skip("a GPU machine runs --tp on NCCL, one rank per GPU; this is the CPU engine's gloo rehearsal")
    import json
    cpu_engine(monkeypatch)
    monkeypatch.setattr(e2e_decode, "rank_setup", cpu_cache_budget)
    shrink(monkeypatch, "qwen3-4b", hidden_size=128, intermediate_size=256, num_attention_heads=4,
           num_key_value_heads=2, head_dim=64)
    args = ["--out", str(tmp_path), "--workload", "sysprompt:3", "--backends", "codec,noop", "--layers", "2",
            "--new-tokens", "5"]
    e2e_decode.main(args + ["--tp", "2"])
    e2e_decode.main(args)
    tp = json.loads((tmp_path / "e2e_sysprompt_3_tp2.json").read_text())
    one_row = json.loads((tmp_path / "e2e_sysprompt_3.json").read_text())["rows"]["codec"]
    assert tp["tp"] == 2 and tp["rows"]["codec"]["decode_requests_per_step_max"] == 3
    assert tp["rows"]["codec"]["heads"] == [2, 1] and one_row["heads"] == [4, 2]  # rank 0 planned half the heads
    assert tp["rows"]["codec"]["attention_rel_l2_max"] < 1e-2  # each rank's heads against float64
    from bench import e2e_check
    one, two = (str(tmp_path / f"e2e_sysprompt_3{t}_traces.json") for t in ("", "_tp2"))
    assert e2e_check.main([one, two, "--max-rel-l2", "1e-2"]) == 0
    zeros = tmp_path / "noop_as_codec.json"  # the negative control: the floor's traces in codec's place
    zeros.write_text(json.dumps({"codec": json.loads(open(one).read())["noop"]}))
    assert e2e_check.main([one, str(zeros)]) == 1
    traces = [json.loads(open(f).read()) for f in (one, two)]
    check = e2e_check.compare_on_shared_history(traces[0]["codec"], traces[1]["codec"])
    assert check["steps_compared"] >= 3 * 3, check  # the histories agree for most steps


# Tiny models of the variant shapes, their attention as the real models' (gpt-oss: 8 query heads a kv head of 64, a
# window of 128, sinks; Gemma 2: 2 query heads a kv head of 256, a window of 4,096), narrow enough for the CPU engine,
# its weights drawn 5x wider and its soft-cap at 5, so that its logits spread and reach the cap as the real model's
# do (there: ~6 against 50, weigh_variants' query scale included; a hidden size of 64 leaves them near 0).
TINY_GPT_OSS = dict(hidden_size=64, intermediate_size=64, num_attention_heads=8, num_key_value_heads=1,
                    num_local_experts=4, num_experts_per_tok=2)
TINY_GEMMA2 = dict(hidden_size=64, intermediate_size=128, num_attention_heads=2, num_key_value_heads=1,
                   initializer_range=0.1, attn_logit_softcapping=5.0)


def test_the_float64_check_applies_the_window_soft_cap_and_sinks():
    """InEngineAttention.check against the tests' own float64 reference
    (batches.masked_reference) on a step of six requests: outputs under the
    step's window, soft-cap and sinks pass to rounding; the same without
    any one of them fail, and the check records how far off ignoring them
    all would be."""
    import math
    from types import SimpleNamespace

    import numpy as np
    from batches import kv_lengths, masked_reference, random_batch
    b = random_batch(5, num_qo_heads=8, num_kv_heads=2, head_dim=64, page_size=4, requests=6)
    lengths, rows = kv_lengths(b), np.arange(b.batch_size + 1)
    window, cap, sinks = 5, 0.5, np.linspace(-1.0, 2.0, 8)
    step = SimpleNamespace(indptr=b.indptr, indices=b.indices, last_page_len=b.last_page_len, page_size=4,
                           window_left=window, logits_soft_cap=cap, qo_indptr=None, group=0)
    in_window = lambda r, i, j: j >= lengths[r] - 1 - window  # noqa: E731  (each request's last token)
    pages = torch.from_numpy(b.k), torch.from_numpy(b.v)
    outputs = {"all": masked_reference(b, b.q, rows, in_window, cap, sinks)[0],
               "no window": masked_reference(b, b.q, rows, lambda r, i, j: True, cap, sinks)[0],
               "no soft-cap": masked_reference(b, b.q, rows, in_window, 0.0, sinks)[0],
               "no sinks": masked_reference(b, b.q, rows, in_window, cap, None)[0]}
    errors = {}
    for name, out in outputs.items():
        attention = e2e_attention.NoopAttention()
        attention.scales[0] = 1 / math.sqrt(64)
        attention.check(step, torch.from_numpy(b.q), pages, torch.from_numpy(out), torch.from_numpy(sinks))
        errors[name] = max(attention.errors)
        assert len(attention.errors) == b.batch_size and min(attention.variant_effects) > 0.1, attention.variant_effects
    assert errors["all"] < 1e-12 and min(v for k, v in errors.items() if k != "all") > 1e-2, errors


def test_backends_that_cannot_serve_a_model_are_refused_by_name(tmp_path):
    """Before any model exists: a backend that does not compute a model's
    window, soft-cap or sinks (or fi_sink on a model without sinks), graph
    mode on a model with them, and bad --layers / --eager-check."""
    def refused(match, *args):
        with pytest.raises(SystemExit, match=match):
            e2e_decode.main(["--out", str(tmp_path), *args])

    refused(r"backend fi_cascade cannot serve gpt-oss-20b \(its layers need: sinks, window\): a level sees its own "
            "positions", "--model", "gpt-oss-20b", "--backends", "codec,fi_cascade")
    refused(r"backend busy cannot serve gemma2-9b \(its layers need: soft_cap, window\): it leaves prefill chunks",
            "--model", "gemma2-9b", "--backends", "busy")
    refused(r"backend sdpa@ri cannot serve gpt-oss-20b .*drops sinks and soft-cap", "--model", "gpt-oss-20b",
            "--backends", "sdpa@ri")
    refused(r"backend fi_sink cannot serve gemma3-12b \(its layers need: window\): FlashInfer's attention-sink "
            "wrapper: models with sinks", "--model", "gemma3-12b", "--backends", "fi_sink")
    refused(r"backend fi_sink cannot serve qwen3-4b \(its layers need: no window, soft-cap or sinks\)",
            "--backends", "fi_sink")
    refused(r"--cuda-graph: gemma3-12b has window", "--model", "gemma3-12b", "--backends", "codec", "--cuda-graph")
    refused(r"--layers 0 must be >= 1", "--layers", "0")
    refused(r"--eager-check -1 must be >= 0", "--eager-check", "-1")
    # accepted: the model's layers (the first 7 of Gemma 3: five sliding, one full, one sliding) and its defaults
    a = e2e_decode.parser().parse_args(["--out", "x", "--model", "gemma3-12b", "--backends", "codec,noop,fi_decode,"
                                        "fi_prefill,sdpa@ri", "--layers", "7"])
    cfg = e2e_decode.check_args(a, "cpu")
    assert cfg.layer_types == ["sliding_attention"] * 5 + ["full_attention", "sliding_attention"]
    assert a.eager_check == 2 and cfg.sliding_window == 1024 and cfg.query_pre_attn_scalar == 256
    a = e2e_decode.parser().parse_args(["--out", "x", "--model", "gpt-oss-20b", "--backends", "fi_sink,fi_decode"])
    cfg = e2e_decode.check_args(a, "cpu")
    assert a.layers == 24 and cfg.num_local_experts == 32 and cfg.layer_types[:2] == ["sliding_attention",
                                                                                       "full_attention"]
    a = e2e_decode.parser().parse_args(["--out", "x"])
    assert e2e_decode.check_args(a, "cpu").num_hidden_layers == 36 and a.eager_check == 0


def test_gpt_oss_runs_codec_and_the_floor_a_plan_a_layer_group(monkeypatch, tmp_path):
    """A tiny gpt-oss (a sliding and a full layer, sinks) on sysprompt:2:
    no prefix warm-up and no block tables (transformers 5.17 has neither for
    it), each step planned per layer group; CoDec's outputs match float64
    attention under the window and with the sinks, which the benchmark's
    weights make count; its logprobs match the eager forward's, the floor's
    do not; the floor's (zeros) attention fails the float64 check."""
    cpu_engine(monkeypatch)
    shrink(monkeypatch, "gpt-oss-20b", **TINY_GPT_OSS)
    e2e_decode.main(["--out", str(tmp_path), "--model", "gpt-oss-20b", "--workload", "sysprompt:2", "--backends",
                     "codec,noop", "--layers", "2", "--new-tokens", "4", "--eager-check", "1"])
    result = json.loads((tmp_path / "e2e_gpt-oss-20b_sysprompt_2.json").read_text())
    assert result["model"] == "gpt-oss-20b" and result["layers"] == 2 and result["shared_prefixes_prefilled_first"] == 0
    codec, noop = result["rows"]["codec"], result["rows"]["noop"]
    for row in (codec, noop):
        assert row["block_tables"] is False and row["decode_requests_per_step_max"] == 2, row
        groups = row["layer_groups"]
        assert [groups[g]["sliding"] for g in ("0", "1")] == [True, False], groups
        # the two requests' identical system-prompt blocks kept once on the full layer; a ring a request
        assert groups["0"]["page_reuse_median"] == 1.0 and groups["1"]["page_reuse_median"] > 1.9, groups
        assert groups["0"]["plan_ms_median"] > 0 and groups["1"]["plan_ms_median"] > 0, groups  # a plan each, a step
        assert row["attention_variant_effect_min"] > 0.1, row  # sinks and windows that change the attention
    assert codec["attention_rel_l2_max"] < 1e-2 and noop["attention_rel_l2_max"] == 1.0
    assert codec["attention_rows_checked"] >= 2 * (2 + 2 * 2), codec  # both layers, steps of each kind
    # a backend's TPOT less the floor over CoDec's: 1 for CoDec itself, given only where that is above 0, which
    # the timing of two tiny layers on a busy CPU does not always give
    if codec["tpot_minus_floor_ms"] > 0:
        assert codec["tpot_minus_floor_over_codec"] == 1.0
    else:
        assert "tpot_minus_floor_over_codec" not in codec and "tpot_minus_floor_over_codec" not in noop
    check, control = codec["vs_eager"], noop["vs_eager"]
    assert check["sequences_checked"] == 1 and check["steps_compared"] == 4, check
    assert check["logprob_rel_l2_centered"] < 0.25 * control["logprob_rel_l2_centered"], (check, control)


def test_gemma2_samples_share_the_full_layers_between_forks(monkeypatch, tmp_path):
    """samples:3, the issue's workload, on a tiny Gemma 2 (windows and
    soft-cap): the engine forks the prompt's sequences after its prefill;
    they decode together, share its full layer's blocks (the ring is each
    sequence's own), and CoDec's outputs match float64 attention with the
    soft-cap."""
    cpu_engine(monkeypatch)
    shrink(monkeypatch, "gemma2-9b", **TINY_GEMMA2)
    e2e_decode.main(["--out", str(tmp_path), "--model", "gemma2-9b", "--workload", "samples:3", "--backends",
                     "codec,noop", "--layers", "2", "--new-tokens", "4", "--eager-check", "0"])
    result = json.loads((tmp_path / "e2e_gemma2-9b_samples_3.json").read_text())
    assert result["requests"] == 3 and result["prompts"] == 1
    codec = result["rows"]["codec"]
    assert codec["decode_requests_per_step_max"] == 3 and codec["tokens"] == 12 and "vs_eager" not in codec
    groups = codec["layer_groups"]
    assert groups["0"]["page_reuse_median"] == 1.0 and groups["1"]["page_reuse_median"] > 2.9, groups
    assert codec["attention_rel_l2_max"] < 1e-2 < codec["attention_variant_effect_min"], codec


class StandIn:
    """FlashInfer's wrappers as the benchmark calls them, recorded (FlashInfer
    needs a GPU): each instance's construction, plans and runs; a run gives zeros."""

    calls = []

    def __init__(self, *args, **kwargs):
        self.calls.append((self, "init", args, kwargs))

    def plan(self, *args, **kwargs):
        self.calls.append((self, "plan", args, kwargs))

    def run(self, q, pages, *args, **kwargs):
        self.calls.append((self, "run", args, kwargs))
        return torch.zeros_like(q)


@pytest.mark.parametrize("kind", ["fi_decode", "fi_prefill", "fi_sink"])
def test_flashinfer_backends_plan_each_layer_group_with_its_variants(kind, monkeypatch):
    """FlashInfer's backends on a tiny gpt-oss (window 8, sinks) through a
    stand-in: a wrapper a layer group, pages of one token on the sliding
    group, window_left 7 where a chunk outgrows the ring (-1 where the ring
    is read in place, and on the full group), causal plans of the prefill
    chunks (fi_decode too: SDPA has no sinks), the sinks in float32 at
    every run; fi_sink's variant built with a window or without, its sinks
    and scale at run."""
    import types
    cpu_engine(monkeypatch)
    shrink(monkeypatch, "gpt-oss-20b", **TINY_GPT_OSS, sliding_window=8)
    monkeypatch.setattr(StandIn, "calls", [])
    names = ("BatchDecodeWithPagedKVCacheWrapper", "BatchPrefillWithPagedKVCacheWrapper",
             "BatchAttentionWithAttentionSinkWrapper")
    monkeypatch.setitem(sys.modules, "flashinfer", types.SimpleNamespace(**{n: type(n, (StandIn,), {}) for n in names}))
    cfg = e2e_models.model_config("gpt-oss-20b", 2)
    torch.manual_seed(0)
    model = e2e_models.build_model("gpt-oss-20b", cfg, "cpu")
    attention = e2e_decode.ATTENTIONS[kind]()
    attention.serve(e2e_models.variants("gpt-oss-20b", cfg))
    name = codec_tf.register(f"paged|e2e_standin_{kind}", attention)
    row, trace = e2e_harness.run(model, name, attention, DOC_REQUESTS, [], new_tokens=4, block_size=16,
                                 block_tables=False, cuda_graph=False)
    assert len(trace) == 5 and row["decode_requests_per_step_max"] == 5
    calls = StandIn.calls
    made = {id(w): (type(w).__name__, kwargs) for w, what, _, kwargs in calls if what == "init"}
    plans = [(type(w).__name__, id(w), args, kwargs) for w, what, args, kwargs in calls if what == "plan"]
    runs = [(args, kwargs) for _, what, args, kwargs in calls if what == "run"]
    page_sizes, windows = {}, set()  # each wrapper's page sizes (one layer group's); (page size, window_left)
    for cls, w, args, kwargs in plans:
        decode = cls == "BatchDecodeWithPagedKVCacheWrapper"  # the prefill wrappers take qo_indptr first
        page_sizes.setdefault(w, set()).add(args[6 if decode else 7])
        windows.add((args[6 if decode else 7], kwargs["window_left"]))
        assert kwargs["q_data_type"] == torch.bfloat16 and (decode or kwargs["causal"] is True), (cls, kwargs)
    wrappers = {"fi_decode": [1, 1, 16, 16], "fi_prefill": [1, 16], "fi_sink": [1, 1, 16]}[kind]  # groups: 1 ring
    assert sorted(size for sizes in page_sizes.values() for size in sizes) == wrappers, page_sizes
    assert windows == {(1, 7), (1, -1), (16, -1)}, windows  # chunks past the ring, rings read in place, full layers
    if kind == "fi_sink":
        assert {cls for cls, _ in made.values()} == {"BatchAttentionWithAttentionSinkWrapper"}
        assert sorted(kwargs["window_left"] for _, kwargs in made.values()) == [-1, -1, 7]  # (group, windowed)
        for (sinks, scale), _ in runs:
            assert sinks.dtype == torch.float32 and sinks.shape == (8,) and scale == pytest.approx(64 ** -0.5)
    else:
        assert all(kwargs["sinks"].dtype == torch.float32 and kwargs["sinks"].shape == (8,) for _, kwargs in runs)
        assert all(kwargs["logits_soft_cap"] is None and kwargs["sm_scale"] == pytest.approx(64 ** -0.5)
                   for _, _, _, kwargs in plans)
        kinds = sorted(cls for cls, _ in made.values())  # a wrapper a kind and layer group
        assert kinds == (["BatchDecodeWithPagedKVCacheWrapper"] * 2 if kind == "fi_decode" else []) + \
            ["BatchPrefillWithPagedKVCacheWrapper"] * 2, kinds
    assert row["attention_rel_l2_max"] == 1.0  # the stand-in's zeros: the check is the one to tell


def test_eager_logprobs_take_the_models_attention_in_float32_a_few_rows_at_a_time(monkeypatch):
    """e2e_check.eager_logprobs runs the model's own eager attention (here
    gpt-oss's sinks and window) on float32 operands, EAGER_ROWS query rows
    at a time: in a float32 model it equals the plain eager forward, and the
    model's attention implementation is put back; on bf16 operands it lies
    far closer to float64 than the model's eager attention in bf16."""
    from bench import e2e_check
    cfg = transformers.GptOssConfig(vocab_size=500, hidden_size=64, intermediate_size=64, num_hidden_layers=2,
                                    num_attention_heads=8, num_key_value_heads=2, head_dim=16, num_local_experts=4,
                                    num_experts_per_tok=2, sliding_window=6, layer_types=["sliding_attention",
                                                                                          "full_attention"])
    torch.manual_seed(0)
    model = transformers.GptOssForCausalLM(cfg).eval()
    e2e_models.weigh_variants(model)
    prompt, tokens = list(range(3, 40)), [7, 11, 13, 17, 19, 23]

    def plain(m):
        m.set_attn_implementation("eager")
        with torch.no_grad():
            ids = torch.tensor([prompt + tokens[:-1]])
            logits = m(ids, logits_to_keep=len(tokens), use_cache=False).logits[0].double()
        return torch.log_softmax(logits, dim=-1)[torch.arange(len(tokens)), torch.tensor(tokens)].numpy()

    exact = plain(model)
    monkeypatch.setattr(e2e_check, "EAGER_ROWS", 4)  # 41 rows: 11 calls, the last of one row
    got = e2e_check.eager_logprobs(model, prompt, tokens)
    assert model.config._attn_implementation == "eager"
    np.testing.assert_allclose(got, exact, rtol=0, atol=1e-5)
    # bf16 operands, 600 keys: the model's eager attention rounds logits and probabilities to bf16
    module = model.to(torch.bfloat16).model.layers[1].self_attn
    q, k, v = (3 * torch.randn(1, h, 600, 16).to(torch.bfloat16) for h in (8, 2, 2))
    attend = sys.modules[type(module).__module__].eager_attention_forward
    with torch.no_grad():
        exact = attend(module, q.double(), k.double(), v.double(), None, scaling=0.25)[0]
        fp32_attention = e2e_check.eager_fp32(module, q, k, v, None, scaling=0.25)[0]
        bf16 = attend(module, q, k, v, None, scaling=0.25)[0]
    assert fp32_attention.dtype == torch.bfloat16 and fp32_attention.shape == exact.shape == (1, 600, 8, 16)
    error = [float((x.double() - exact).norm() / exact.norm()) for x in (fp32_attention, bf16)]
    assert error[0] < 0.25 * error[1], error


def test_summary_sets_attention_gpu_time_against_the_floor_beside_tpot(capsys):
    """Rows like gpt-oss-20b's on an H100, where the eager model's TPOT and its
    noise dwarf attention: CoDec's TPOT under the floor's leaves no TPOT ratio,
    while attention's GPU time less the floor's still compares backends."""
    import types
    a = types.SimpleNamespace(out="", model="gpt-oss-20b", workload="samples:64", layers=None, block_size=16,
                              max_batch_tokens=None, scheduler="admit_first", async_batching=False, new_tokens=64, cuda_graph=False,
                              rounds=1, tp=1)
    rows = {"codec": {"tpot_ms": 157.0, "tpot_p90_ms": 170.0, "attention_gpu_ms_median": 2.7},
            "noop": {"tpot_ms": 160.0, "tpot_p90_ms": 171.0, "attention_gpu_ms_median": 0.9},
            "fi_sink": {"tpot_ms": 163.0, "tpot_p90_ms": 175.0, "attention_gpu_ms_median": 6.3}}
    for r in rows.values():
        r.update(tokens_per_s=1.0, peak_gpu_gb=1.0)
    traces = {b: {"prompt_0": ([1, 2], [-1.0, -2.0])} for b in rows}
    out = e2e_harness.summary(a, 64, 1, 0, "cpu", rows, traces, write=False)["rows"]
    assert out["fi_sink"]["attention_gpu_minus_floor_ms"] == pytest.approx(5.4)
    assert out["fi_sink"]["attention_gpu_minus_floor_over_codec"] == pytest.approx(3.0)
    assert out["codec"]["attention_gpu_minus_floor_over_codec"] == pytest.approx(1.0)
    assert out["codec"]["tpot_minus_floor_ms"] == pytest.approx(-3.0)
    assert not any("tpot_minus_floor_over_codec" in r for r in out.values())  # CoDec's TPOT − floor is not > 0
    e2e_harness.print_table(out)
    assert "3.00" in capsys.readouterr().out
