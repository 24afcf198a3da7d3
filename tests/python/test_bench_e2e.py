"""bench/e2e_decode.py on the CPU engine before any GPU time goes to it: a
run through transformers' continuous batching on a tiny Qwen3 whose step
records (decode-only steps, requests per step, plans) add up, its rounds and
rows, graphs and tensor parallelism. Where torch and transformers are
installed; its workloads and page tables, which need neither, are
test_bench_e2e_batches.py's."""

import json

import pytest

pytestmark = pytest.mark.transformers
torch = pytest.importorskip("torch", reason="torch is not installed: the benchmark is torch code")
transformers = pytest.importorskip("transformers", reason="transformers is not installed")
import codec.integrations.transformers as codec_tf  # noqa: E402  (torch first: these import it)
from bench import e2e_attention, e2e_decode, e2e_harness  # noqa: E402


def cpu_memory():
    """The memory the engine may size its cache from on the CPU (it reads GPU memory otherwise)."""
    return torch.device("cpu"), 8 << 30, 0, 0


def cpu_engine(monkeypatch):
    """Continuous batching on the CPU, with a cache budget (the engine sizes its cache from GPU memory)."""
    if not hasattr(transformers.Qwen3ForCausalLM, "generate_batch"):
        pytest.skip("this transformers has no continuous batching")
    import transformers.generation.continuous_batching.cache as cb_cache
    monkeypatch.setattr(cb_cache, "get_device_and_memory_breakdown", cpu_memory)


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


def test_main_runs_rounds_of_backends_and_writes_their_rows(monkeypatch, tmp_path):
    """The whole benchmark on the CPU engine: a narrow 2-layer model of the
    vocabulary the prompts need, two backends, two rounds."""
    cpu_engine(monkeypatch)
    monkeypatch.setattr(e2e_decode, "QWEN3_4B", {**e2e_decode.QWEN3_4B, "hidden_size": 64, "intermediate_size": 128,
                                                 "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64})
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
    assert check["logprob_rel_l2_centered"] < 0.25 * control["logprob_rel_l2_centered"], (check, control)
    assert check["logprob_rel_l2"] < 2e-3
    # the decode outputs against float64 attention over the engine's cache: bf16 rounding, and zeros' 1
    assert result["rows"]["codec"]["attention_rel_l2_max"] < 1e-2
    assert result["rows"]["noop"]["attention_rel_l2_max"] == 1.0
    # the first three planned steps, two layers each: the prefix's prefill (its one request's last token), the
    # warm-up's decode step, the three requests' prefill chunks over the cached prefix (on CoDec, each last row)
    assert result["rows"]["codec"]["attention_rows_checked"] == 2 * (1 + 1 + 3)
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
    monkeypatch.setattr(e2e_decode, "QWEN3_4B", {**e2e_decode.QWEN3_4B, "hidden_size": 128, "intermediate_size": 256,
                                                 "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64,
                                                 "vocab_size": 151936})
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
