"""The transformers backend (codec.integrations.transformers): the page
tables it derives from the engine's read slots and the shared prefixes'
warm-up waves (numpy only, run on CI), `paged|codec` against the engine's
own `paged|sdpa` on a tiny random Qwen3 in transformers' continuous
batching (where torch and transformers are installed: on the CPU engine in
fp32, and on the GPU in bf16), and on tiny random gpt-oss, Gemma 2 and
Gemma 3 (sliding windows, sinks, soft-cap) against their eager forward (the
CPU engine in fp32, the GPU in bf16)."""

import contextlib
import copy
import importlib.util
from types import SimpleNamespace

import numpy as np
import pytest

from codec.integrations.paging import page_starts, page_tables_from_block_table, page_tables_from_slots
from codec.integrations.warm_up import prefix_waves


def engine_slots(block_tables, seq_lens, block_size):
    """The read slots transformers' FullAttentionCacheAllocator lists: token t of a
    request at block_table[t // block_size] · block_size + t % block_size."""
    return np.concatenate([np.asarray(table)[np.arange(n) // block_size] * block_size + np.arange(n) % block_size
                           for table, n in zip(block_tables, seq_lens)])


def load_backend():
    spec = importlib.util.find_spec("torch")
    if spec is None:
        pytest.skip("torch is not installed: the integration tests run where it is")
    return pytest.importorskip("codec.integrations.transformers")


@pytest.mark.parametrize("block_size", [4, 16, 256])
def test_page_tables_from_the_engines_read_slots(block_size):
    rng = np.random.default_rng(block_size)
    free = list(rng.permutation(400))
    shared = [free.pop() for _ in range(3)]  # three full blocks every request shares
    tables, lens = [], []
    for r in range(9):
        n = 3 * block_size + int(rng.integers(1, 3 * block_size))
        if r == 2:
            n = 5 * block_size  # a request whose last page is full
        own = [free.pop() for _ in range((n + block_size - 1) // block_size - 3)]
        tables.append(shared + own)
        lens.append(n)
    slots = engine_slots(tables, lens, block_size)
    cu = np.concatenate([[0], np.cumsum(lens)])
    requests = np.array([0, 2, 3, 8])  # a subset: the decode rows of a mixed step
    starts = slots[page_starts(cu, block_size, requests)]
    indptr, indices, last = page_tables_from_slots(starts, np.diff(cu)[requests], block_size)
    for i, r in enumerate(requests):
        np.testing.assert_array_equal(indices[indptr[i]:indptr[i + 1]], tables[r])
        assert (indptr[i + 1] - indptr[i] - 1) * block_size + last[i] == lens[r]
        assert 1 <= last[i] <= block_size
    assert last[1] == block_size and indptr[2] - indptr[1] == 5  # request 2, the full last page
    with pytest.raises(ValueError, match="not at the start of a cache block"):
        page_tables_from_slots(starts + 1, np.diff(cu)[requests], block_size)
    with pytest.raises(ValueError, match=f"{starts.size - 1} page starts for {starts.size} pages"):
        page_tables_from_slots(starts[:-1], np.diff(cu)[requests], block_size)
    with pytest.raises(ValueError, match="every request needs a KV token; seq_lens has 0"):
        page_tables_from_slots(starts, np.diff(cu)[requests] * np.array([1, 1, 0, 1]), block_size)


def test_page_tables_from_the_engines_block_table():
    block_size = 16
    lens = np.array([1, 16, 17, 70, 33])
    pages = -(-lens // block_size)
    rng = np.random.default_rng(3)
    table = np.full((lens.size, 8), -1, dtype=np.int32)  # the engine pads rows with -1
    for r, n in enumerate(pages):
        table[r, :n] = rng.permutation(100)[:n]
    table[3, :2] = table[4, :2] = [7, 9]  # two shared blocks
    indptr, indices, last = page_tables_from_block_table(table, lens, block_size)
    for r in range(lens.size):
        np.testing.assert_array_equal(indices[indptr[r]:indptr[r + 1]], table[r, :pages[r]])
        assert (pages[r] - 1) * block_size + last[r] == lens[r]
    with pytest.raises(ValueError, match="needs 5 blocks; block_table has 4 columns"):
        page_tables_from_block_table(table[:, :4], lens, block_size)
    with pytest.raises(ValueError, match="negative id"):
        page_tables_from_block_table(table, lens + np.array([0, 0, 0, 0, 16]), block_size)
    with pytest.raises(ValueError, match="every request needs a KV token"):
        page_tables_from_block_table(table, lens * 0, block_size)


# Tiny random models of each family: few layers, heads and experts, the real models' head_dim and GQA (Qwen3:
# its own; gpt-oss: 64, 8 query heads a KV head; Gemma 2 and 3: 256, Gemma 2 2B's and Gemma 3 1B's heads), their
# layers' kinds (gpt-oss and Gemma 2: sliding and full alternate; Gemma 3: five sliding, then a full one) and a
# window of 8 tokens, so that it cuts.
TINY = {
    "qwen3": ("Qwen3", dict(hidden_size=256, intermediate_size=512, num_hidden_layers=2, num_attention_heads=8,
                            num_key_value_heads=2, head_dim=64)),
    "gpt-oss": ("GptOss", dict(hidden_size=128, intermediate_size=128, num_hidden_layers=4, num_attention_heads=16,
                               num_key_value_heads=2, head_dim=64, num_local_experts=4, num_experts_per_tok=2,
                               sliding_window=8)),
    "gemma2": ("Gemma2", dict(hidden_size=128, intermediate_size=256, num_hidden_layers=4, num_attention_heads=8,
                              num_key_value_heads=4, head_dim=256, sliding_window=8, attn_logit_softcapping=50.0,
                              query_pre_attn_scalar=144)),  # Gemma 2 27B's scale, not 1/sqrt(head_dim)
    "gemma3": ("Gemma3", dict(hidden_size=128, intermediate_size=256, num_hidden_layers=6, num_attention_heads=4,
                              num_key_value_heads=1, head_dim=256, sliding_window=8, query_pre_attn_scalar=168)),
}


def tiny_model(device, dtype, kind="qwen3"):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers", reason="transformers is not installed")
    if not hasattr(transformers.Qwen3ForCausalLM, "generate_batch"):
        pytest.skip("this transformers has no continuous batching")
    family, shape = TINY[kind]
    config = getattr(transformers, family + ("TextConfig" if kind == "gemma3" else "Config"))(
        vocab_size=1000, max_position_embeddings=4096, **shape)
    torch.manual_seed(0)
    model = getattr(transformers, family + "ForCausalLM")(config).to(device=device, dtype=dtype).eval()
    if kind == "gemma2":  # random weights give logits near 0, which a soft-cap of 50 leaves alone: make it bite
        # in fp32; in bf16 the rounding of logits that large moves a logprob as much as the cap does (on the CPU
        # engine in bf16, against fp32 eager: q and k × 8 err by 0.037 where the cap makes 0.05, × 20 by 0.23 where
        # it makes 0.33), so bf16 models keep them moderate and the fp32 run checks the cap
        factor = 20 if dtype == torch.float32 else 4
        with torch.no_grad():
            for layer in model.model.layers:
                layer.self_attn.q_proj.weight.mul_(factor)
                layer.self_attn.k_proj.weight.mul_(factor)
    return model


def engine_setup(device, monkeypatch, kind="qwen3"):
    """torch, the backend's module and a tiny model of `kind` on `device`
    (fp32 on the CPU, bf16 on the GPU), or a skip where one of them is missing."""
    torch = pytest.importorskip("torch")
    ctf = load_backend()
    import codec
    if device == "cuda" and not (torch.cuda.is_available() and codec.cuda_available()):
        pytest.skip("no CUDA device")
    model = tiny_model(device, torch.float32 if device == "cpu" else torch.bfloat16, kind)
    if device == "cpu":  # the engine sizes its cache from GPU memory; give the CPU a budget
        import transformers.generation.continuous_batching.cache as cb_cache
        monkeypatch.setattr(cb_cache, "get_device_and_memory_breakdown", lambda: (torch.device("cpu"), 8 << 30, 0, 0))
    return torch, ctf, model


def generate(model, impl, inputs, device, block_tables=None, shared_prefixes=None, cuda_graph=False,
             async_batching=None, max_batch_tokens=1024, num_return_sequences=1):
    """The engine's generate_batch, or with block_tables True/False codec's (which raises on errors): greedy,
    or with num_return_sequences > 1 sampled (no top-k: logprobs are the model's own)."""
    from transformers import GenerationConfig
    from transformers.generation.configuration_utils import ContinuousBatchingConfig
    model.set_attn_implementation(impl)
    sampled = dict(do_sample=True, top_k=0, top_p=1.0, num_return_sequences=num_return_sequences)
    gen = GenerationConfig(max_new_tokens=10, eos_token_id=-1, pad_token_id=0,
                           **(sampled if num_return_sequences > 1 else dict(do_sample=False)))
    cb = ContinuousBatchingConfig(block_size=16, num_blocks=256, max_batch_tokens=max_batch_tokens,
                                  return_logprobs=True, use_cuda_graph=cuda_graph, use_async_batching=async_batching)
    if block_tables is None:
        out = model.generate_batch(inputs=inputs, generation_config=gen, continuous_batching_config=cb)
    else:
        from codec.integrations.transformers import generate_batch
        out = generate_batch(model, inputs, gen, cb, block_tables=block_tables, shared_prefixes=shared_prefixes)
    errors = [o.error for o in out.values() if o.error]
    assert not errors, errors  # generate_batch only logs exceptions
    return {k: (list(o.generated_tokens), np.array(o.logprobs)) for k, o in out.items()}


def shared_prompts(seed):
    rng = np.random.default_rng(seed)
    doc = [int(x) for x in rng.integers(1, 999, 70)]  # 4 full blocks of 16 shared, then a partial one
    return [doc + [int(x) for x in rng.integers(1, 999, int(rng.integers(2, 40)))] for _ in range(6)] + \
        [[int(x) for x in rng.integers(1, 999, 33)]]  # and one request sharing nothing


def assert_same_generations(got, ref, device):
    """The requests of two runs in submission order (their ids count up): fp32 on the
    CPU, the same tokens and logprobs to rounding; bf16, the first decode step's
    logprobs within 2e-2 relative and most requests greedy-decoding the same tokens."""
    order = lambda run: [run[k] for k in sorted(run, key=lambda k: int(k.rpartition("_")[2]))]  # noqa: E731
    got, ref = order(got), order(ref)
    assert len(got) == len(ref)
    if device == "cpu":
        for i, (g, r) in enumerate(zip(got, ref)):
            assert g[0] == r[0], i
            np.testing.assert_allclose(g[1], r[1], atol=1e-4)
    else:
        first_ref = np.array([r[1][1] for r in ref])
        first_got = np.array([g[1][1] for g in got])
        assert np.linalg.norm(first_got - first_ref) / np.linalg.norm(first_ref) <= 2e-2
        same = np.mean([g[0] == r[0] for g, r in zip(got, ref)])
        assert same >= 0.85, f"only {same:.0%} of the requests generated the reference's tokens"


def prefill_recorder(ctf):
    """A CodecDecode that records the (query tokens, KV tokens) of every
    prefill chunk it plans (once a step), and the list it records into."""
    chunks = []

    class Recording(ctf.CodecDecode):
        def plan(self, cache, step, query, scale):
            if step.qo_indptr is not None:
                kv = (np.diff(step.indptr) - 1) * cache.block_size + step.last_page_len
                chunks.extend((int(q), int(k)) for q, k in zip(np.diff(step.qo_indptr), kv) if q > 1)
            super().plan(cache, step, query, scale)

    return chunks, Recording()


@pytest.mark.transformers
@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_prefill_chunks_and_mixed_steps_run_on_codec(device, monkeypatch):
    """On a budget of 48 tokens a step the engine cuts the prompts into
    chunks and mixes them with other requests' decode rows: CoDec plans every
    row of those steps, causally over the cached KV (no chunk reaches SDPA),
    and the generations equal paged|sdpa's."""
    torch, ctf, model = engine_setup(device, monkeypatch)
    kinds = []

    class Recording(ctf.CodecDecode):  # (decode rows, prefill chunks) of every eager step
        def plan(self, cache, step, query, scale):
            q_lens = np.diff(step.cu_q)
            kinds.append((bool((q_lens == 1).any()), bool((q_lens > 1).any())))
            super().plan(cache, step, query, scale)

    def no_sdpa(*args):
        raise AssertionError("a prefill chunk ran on SDPA")

    monkeypatch.setattr(ctf.attention, "causal_attention", no_sdpa)
    name = ctf.register("paged|codec_mixed", ctf.PagedAttention(Recording()))
    inputs = shared_prompts(3)
    ref = generate(model, "paged|sdpa", inputs, device, max_batch_tokens=48)
    got = generate(model, name, inputs, device, block_tables=True, max_batch_tokens=48)
    assert (True, True) in kinds and (False, True) in kinds and (True, False) in kinds, kinds
    assert_same_generations(got, ref, device)


@pytest.mark.transformers
@pytest.mark.parametrize("block_tables", [False, True], ids=["read-index", "block-table"])
@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_paged_codec_equals_paged_sdpa_in_continuous_batching(device, block_tables, monkeypatch):
    torch, ctf, model = engine_setup(device, monkeypatch)
    paths = []

    class Recording(ctf.CodecDecode):  # which decode path each decode step took
        def plan(self, cache, step, query, scale):
            paths.append(step.write_slots is not None)
            super().plan(cache, step, query, scale)

    name = ctf.register("paged|codec_test", ctf.PagedAttention(Recording()))
    inputs = shared_prompts(1)
    ref = generate(model, "paged|sdpa", inputs, device)
    got = generate(model, name, inputs, device, block_tables=block_tables)
    assert paths and (any(paths) if block_tables else not any(paths)), paths
    assert_same_generations(got, ref, device)


@pytest.mark.transformers
def test_a_failed_graph_plan_is_raised_for_its_cache():
    """Replays never call Python: an error their in-stream plans met waits in
    the graph wrapper until an eager step or generate_batch asks, and comes
    out as a RuntimeError naming the backend (runs without a GPU: the
    wrapper is a stand-in)."""
    ctf = load_backend()

    class Cache:  # a weak-referenceable key, as the engine's cache is
        pass

    class Wrapper:
        def __init__(self, error):
            self.error = error

        def check_stream_plans(self):
            if self.error:
                error, self.error = self.error, None
                raise ValueError(f"an in-stream plan failed: {error}")

    attention, good, bad = ctf.PagedAttention(), Cache(), Cache()
    attention.decode_backend._graph_wrappers[good] = Wrapper(None)
    attention.decode_backend._graph_wrappers[bad] = Wrapper("block table row 0 column 0 holds page 99")
    attention.check_stream_plans(good)
    with pytest.raises(RuntimeError, match=r"paged\|codec in a CUDA graph: an in-stream plan failed: .*page 99"):
        attention.check_stream_plans()
    attention.check_stream_plans()  # taken
    from codec.integrations.transformers.attention import _ATTENTIONS
    assert attention in _ATTENTIONS  # what generate_batch checks after its requests finish


@pytest.mark.transformers
@pytest.mark.parametrize("async_batching", [False, True])
def test_decode_graphs_plan_every_replay_in_the_stream(async_batching, monkeypatch):
    """The engine's CUDA graphs of decode steps (use_cuda_graph=(False,
    True)): the batch is captured once (once per IO pair with asynchronous
    batching, where the host prepares the next step during this one), with
    CoDec's plan made in the stream, and every replay re-plans it on the
    device's own block table. Its decode steps match eager CoDec's on their
    shared token history, far longer than those of a graph whose attention
    is zeros (the negative control: random weights make tokens alone a weak
    test). Graphs of prefill steps are refused: their chunks need the host's
    lengths."""
    torch, ctf, model = engine_setup("cuda", monkeypatch)
    captured, wrappers = [], []

    class Recording(ctf.CodecDecode):
        def plan_in_stream(self, cache, step, query, scale):
            captured.append(step.block_table.shape[0])  # the graph's batch
            super().plan_in_stream(cache, step, query, scale)
            wrappers.append(self.graph_wrapper(cache, step.block_table))

    class Zeros(ctf.CodecDecode):
        def run(self, cache, step, q, pages, out):
            out.zero_()

    name = ctf.register("paged|codec_graphs", ctf.PagedAttention(Recording()))
    inputs = shared_prompts(3)
    eager = generate(model, name, inputs, "cuda", block_tables=True)
    assert not captured
    got = generate(model, name, inputs, "cuda", block_tables=True, cuda_graph=(False, True),
                   async_batching=async_batching)
    assert captured == [len(inputs)] * (1 + async_batching), captured  # the batch of all requests, per IO pair
    stats = wrappers[-1].plan_stats
    assert stats["plans"] >= 8 and stats["num_requests"] == len(inputs), stats  # every replay planned
    wrappers[-1].check_stream_plans()
    zeros = generate(model, ctf.register("paged|codec_graph_zeros", ctf.PagedAttention(Zeros())), inputs, "cuda", block_tables=True,
                     cuda_graph=(False, True), async_batching=async_batching)
    from bench.e2e_check import compare_on_shared_history
    same, control = compare_on_shared_history(eager, got), compare_on_shared_history(eager, zeros)
    assert same["mean_shared_steps"] >= 7 and same["logprob_rel_l2"] <= 2e-2, same  # of 10 tokens per request
    assert control["mean_shared_steps"] < 0.5 * same["mean_shared_steps"], (control, same)
    with pytest.raises(ValueError, match="graphs of prefill steps"):
        generate(model, name, inputs, "cuda", block_tables=True, cuda_graph=True)
    wrappers.clear()  # the registered backend outlives the test: let the wrapper go with it


@pytest.mark.parametrize("budget,count", [(1024, 3), (1024, 70), (100, 2)])
def test_async_warm_up_waves_never_split_a_prompt(budget, count):
    """With asynchronous batching the shared prefixes warm up in waves: each
    wave fits one step's token budget (no prompt chunked), extends each
    prefix by whole blocks, and the last covers every prefix whole; without
    it, one wave of the whole prefixes."""
    rng = np.random.default_rng(count)
    prefixes = [[k + 1] * int(rng.integers(1, 3000)) for k in range(count)]  # prefix k holds token k + 1
    block = 16
    assert prefix_waves(prefixes, block, budget, async_batching=False) == [prefixes]
    assert prefix_waves(prefixes, block, block - 1, async_batching=True) == [prefixes]  # a step under a block
    assert prefix_waves([], block, budget, async_batching=True) == []
    waves = prefix_waves(prefixes, block, budget, async_batching=True)
    assert len(waves) > 1
    done = [0] * count  # tokens of each prefix warmed so far
    for wave in waves:
        new = 0
        for p in wave:
            k = p[0] - 1
            assert p == prefixes[k][:len(p)] and len(p) > done[k], (k, done[k], len(p))
            assert len(p) % block == 0 or len(p) == len(prefixes[k]), (k, len(p))  # whole blocks, or the whole prefix
            new += len(p) - done[k]
            done[k] = len(p)
        assert new <= budget, (new, budget)  # one step prefills the whole wave
    assert done == [len(p) for p in prefixes]


@pytest.mark.transformers
def test_warm_up_waves_read_the_managers_engine():
    """The backend's waves take the block size, the step's tokens and the
    async flag from the manager's batch processor."""
    load_backend()
    from codec.integrations.transformers.driver import _prefix_waves
    prefixes = [[1] * 100, [2] * 40]

    def manager(use_async):
        cache = SimpleNamespace(block_size=16, max_batch_tokens=64)
        return SimpleNamespace(batch_processor=SimpleNamespace(use_async_batching=use_async, cache=cache))

    assert _prefix_waves(manager(False), prefixes) == [prefixes]
    assert _prefix_waves(manager(True), prefixes) == prefix_waves(prefixes, 16, 64, async_batching=True)
    assert _prefix_waves(manager(True), []) == []


@pytest.mark.transformers
def test_async_batching_keeps_a_chunked_prefix_shared(monkeypatch):
    """With the engine's asynchronous batching, a shared prefix longer than
    one step's tokens (its prefill chunked) still prefills once: the
    requests that share it prefill as many tokens as without it."""
    torch, ctf, model = engine_setup("cuda", monkeypatch)
    chunks, backend = prefill_recorder(ctf)
    rng = np.random.default_rng(5)
    doc = [int(x) for x in rng.integers(1, 999, 2500)]  # past the step's 1024 tokens: prefilled in chunks
    inputs = [doc + [int(x) for x in rng.integers(1, 999, 5 + i)] for i in range(4)]
    name = ctf.register("paged|codec_async_prefix", ctf.PagedAttention(backend))
    prefilled = {}
    for async_batching in (False, True):
        chunks.clear()
        generate(model, name, inputs, "cuda", block_tables=True, shared_prefixes=[doc], async_batching=async_batching)
        prefilled[async_batching] = sum(q for q, _ in chunks)
    assert prefilled[True] == prefilled[False] < 2 * len(doc), prefilled


@pytest.mark.transformers
@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_shared_prefixes_prefill_once(device, monkeypatch):
    """With the documents' prefix prefilled first (shared_prefixes), the
    requests that share it prefill only their own tokens, on the prefill
    path's causal attention past a cache (rows aligned to the keys' end),
    and generate what paged|sdpa generates without it."""
    torch, ctf, model = engine_setup(device, monkeypatch)
    chunks, backend = prefill_recorder(ctf)
    inputs = shared_prompts(2)
    ref = generate(model, "paged|sdpa", inputs, device)
    name = ctf.register("paged|codec_prefixes", ctf.PagedAttention(backend))
    got = generate(model, name, inputs, device, block_tables=True, shared_prefixes=[inputs[0][:70]])
    assert chunks[0] == (70, 70), chunks  # the prefix alone, first
    reused = [(lq, lk) for lq, lk in chunks[1:] if lk - lq >= 64]  # its 4 full blocks read from the cache
    assert len(reused) >= 6, chunks
    assert_same_generations(got, ref, device)
    with pytest.raises(ValueError, match="shared_prefixes holds an empty prompt"):
        generate(model, name, inputs, device, block_tables=True, shared_prefixes=[[]])


@pytest.mark.transformers
@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_requests_past_the_block_tables_decode_on_the_slot_list(device, monkeypatch):
    """Block tables sized for 64 tokens (enable_block_tables(manager, 20)): a
    request growing past them sends its steps back to the slot-list path,
    with the same tokens as paged|sdpa either way."""
    torch, ctf, model = engine_setup(device, monkeypatch)
    from transformers import GenerationConfig
    from transformers.generation.configuration_utils import ContinuousBatchingConfig
    paths = []

    class Recording(ctf.CodecDecode):
        def plan(self, cache, step, query, scale):
            paths.append(step.write_slots is not None)
            super().plan(cache, step, query, scale)

    rng = np.random.default_rng(5)
    inputs = [[int(x) for x in rng.integers(1, 999, n)] for n in (40, 58)]  # the second passes 64 tokens
    ref = generate(model, "paged|sdpa", inputs, device)
    model.set_attn_implementation(ctf.register("paged|codec_fallback", ctf.PagedAttention(Recording())))
    gen = GenerationConfig(max_new_tokens=10, do_sample=False, eos_token_id=-1, pad_token_id=0)
    cb = ContinuousBatchingConfig(block_size=16, num_blocks=256, max_batch_tokens=1024, return_logprobs=True,
                                  use_cuda_graph=False)
    manager = model.init_continuous_batching(generation_config=gen, continuous_batching_config=cb)
    ctf.enable_block_tables(manager, 20)  # ceil(20 / 16) + 1 = 3, rounded up to 4 blocks of 16
    with pytest.raises(ValueError, match="max_sequence_length 0 must be >= 1"):
        ctf.enable_block_tables(manager, 0)
    manager.start()
    try:
        with pytest.raises(ValueError, match="has started or warmed up"):
            ctf.enable_block_tables(manager, 20)
        ids = manager.add_requests(inputs=inputs, max_new_tokens=10)
        got = {}
        while len(got) < len(ids):
            r = manager.get_result(timeout=1)
            if r is not None and r.is_finished():
                got[r.request_id] = r
            assert r is not None or manager.is_running(), "the generation thread stopped"
    finally:
        manager.stop(block=True, timeout=60)
        manager.destroy()
    assert True in paths and False in paths, paths  # both decode paths ran
    assert [got[k].error for k in ids] == [None] * len(ids)
    assert_same_generations({k: (list(got[k].generated_tokens), np.array(got[k].logprobs)) for k in ids}, ref, device)


@contextlib.contextmanager
def without(model, feature):
    """The model with one feature of its attention turned off, for an eager control: its sliding window
    ("window"), its sinks ("sinks"), its soft-cap ("soft-cap"), its query scale (1/sqrt(head_dim): "scale")."""
    torch = pytest.importorskip("torch")
    attention = [layer.self_attn for layer in model.model.layers]
    changes = {"window": lambda: [(model.config, "sliding_window", 1 << 20)],  # the eager masks read the config's
               "sinks": lambda: [(a, "sinks", torch.nn.Parameter(torch.full_like(a.sinks, -torch.inf)))
                                 for a in attention],
               "soft-cap": lambda: [(a, "attn_logit_softcapping", None) for a in attention],
               "scale": lambda: [(a, "scaling", a.head_dim ** -0.5) for a in attention]}[feature]()
    saved = [(obj, name, getattr(obj, name)) for obj, name, _ in changes]
    for obj, name, value in changes:
        setattr(obj, name, value)
    try:
        yield
    finally:
        for obj, name, value in saved:
            setattr(obj, name, value)


def eager_error(model, inputs, generated):
    """The largest difference between the logprob of each generated token and
    the model's eager forward over the request's whole sequence
    (bench.e2e_check.eager_logprobs; the requests of `inputs` come first in
    `generated`, in order, their other sequences after them)."""
    from bench.e2e_check import eager_logprobs
    prompts = dict(zip(generated, inputs))
    return max(float(np.abs(eager_logprobs(model, prompts[request.split("__child")[0]], tokens) - logprobs).max())
               for request, (tokens, logprobs) in generated.items())


@pytest.mark.transformers
@pytest.mark.parametrize("kind,features", [("gpt-oss", ["window", "sinks"]),
                                           ("gemma2", ["window", "soft-cap", "scale"]),
                                           ("gemma3", ["window", "scale"])], ids=["gpt-oss", "gemma2", "gemma3"])
@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_sliding_windows_sinks_and_soft_cap_equal_the_eager_forward(device, kind, features, monkeypatch):
    """Tiny gpt-oss, Gemma 2 and Gemma 3 on paged|codec (the CPU engine in
    fp32, the CUDA engine in bf16): prompts of 3 to 45 tokens under windows
    of 8, prefilled in chunks of a 24-token budget mixed with decode rows,
    each sampled three ways (num_return_sequences: the engine forks a
    prompt, sharing its full blocks on the full-attention layers). Every
    sampled token's logprob equals the eager forward's over its sequence
    (on the GPU an fp32 copy's), to 1e-4 in fp32 and 5e-2 in bf16, and the
    same comparison against eager without the window, the sinks, the soft-cap
    (in fp32: tiny_model says why) or the model's query scale is off by more
    than 1e-2 and 3 times CoDec's error: each reaches CoDec. The sliding
    layers' plans read their ring in place, one token a page, or under the
    window where a chunk outgrows the ring; one plan a layer group a step."""
    torch, ctf, model = engine_setup(device, monkeypatch, kind)
    tolerance = 1e-4 if device == "cpu" else 5e-2
    plans = []

    class Recording(ctf.CodecDecode):
        def plan(self, cache, step, query, scale):
            _, shared = np.unique(step.indices, return_counts=True)
            plans.append(dict(group=step.group, ring=step.page_size == 1, gathered=step.gathered,
                              window_left=step.window_left, cap=step.logits_soft_cap, shared=int(shared.max()),
                              decode=step.decode.size > 0, chunks=step.qo_indptr is not None))
            super().plan(cache, step, query, scale)

    name = ctf.register(f"paged|codec_{kind}", ctf.PagedAttention(Recording()))
    rng = np.random.default_rng(7)
    inputs = [[int(x) for x in rng.integers(1, 999, n)] for n in (3, 14, 30, 6, 45)]
    torch.manual_seed(0)
    got = generate(model, name, inputs, device, block_tables=False, max_batch_tokens=24, num_return_sequences=3)
    assert len(got) == 3 * len(inputs)
    # eager in fp32 (a copy on the GPU), free of bf16's rounding of its own (on the CPU engine in bf16, tiny
    # gpt-oss is 0.034 off bf16 eager and 0.006 off fp32 eager)
    reference = model if device == "cpu" else copy.deepcopy(model).float()
    error = eager_error(reference, inputs, got)
    controls = {}
    for feature in features if device == "cpu" else [f for f in features if f != "soft-cap"]:  # see tiny_model
        with without(reference, feature):
            controls[feature] = eager_error(reference, inputs, got)
    print(f"{kind} on {device}: error {error:.3g}, without each feature {controls}")
    assert error < tolerance, error
    assert all(c > max(1e-2, 3 * error) for c in controls.values()), (controls, error)

    groups = len({p["group"] for p in plans})
    assert groups == {"gpt-oss": 2, "gemma2": 2, "gemma3": 6}[kind]
    assert len(plans) % groups == 0  # one plan a group a step
    ring, full = [p for p in plans if p["ring"]], [p for p in plans if not p["ring"]]
    assert {p["window_left"] for p in ring if p["gathered"]} == {7}
    assert {p["window_left"] for p in ring if not p["gathered"]} | {p["window_left"] for p in full} == {-1}
    assert any(p["chunks"] and p["decode"] for p in plans)  # mixed steps
    assert max(p["shared"] for p in full) == 3 and max(p["shared"] for p in ring) == 1  # forks share full blocks
    assert {p["cap"] for p in plans} == {50.0 if kind == "gemma2" else None}
    # Chunks that fit their ring read it in place; a step gathers where any of its chunks outgrows the ring, which
    # the engine's admission (its thread takes the requests as they come) may make every step above: prompts
    # within the ring alone make such chunks whatever the timing.
    plans.clear()
    got = generate(model, name, [inputs[0], inputs[3]], device, block_tables=False, max_batch_tokens=24)
    assert any(p["chunks"] and not p["gathered"] for p in plans if p["ring"])
    assert eager_error(reference, [inputs[0], inputs[3]], got) < tolerance


@pytest.mark.transformers
def test_a_layers_sinks_are_cast_to_float32_once():
    """gpt-oss's sinks, a parameter in the model's dtype, reach CoDec as float32, cast once a layer (not at
    every layer of every step), and again after the parameter changes in place."""
    torch = pytest.importorskip("torch")
    ctf = load_backend()
    attention = ctf.PagedAttention()
    sinks = torch.nn.Parameter(torch.tensor([0.5, -1.0, 3.25], dtype=torch.bfloat16))
    first = attention._float_sinks(sinks)
    assert first.dtype == torch.float32 and first.tolist() == [0.5, -1.0, 3.25] and not first.requires_grad
    assert attention._float_sinks(sinks) is first
    with torch.no_grad():
        sinks.add_(1)
    assert attention._float_sinks(sinks).tolist() == [1.5, 0.0, 4.25]


@pytest.mark.transformers
def test_layers_it_cannot_serve_are_refused_by_name(monkeypatch):
    """A sliding window other than the engine's ring, a layer that is not
    causal, layers of one group (one plan) that differ in their soft-cap,
    and a backend that would leave a sliding model's prefill chunks to SDPA
    raise, naming the layer and the values."""
    torch, ctf, model = engine_setup("cpu", monkeypatch, "gemma2")
    cache = SimpleNamespace(layer_index_to_group_indices={3: (0, 1)}, sliding_windows={3: 8})
    q, kv = torch.zeros(1, 8, 1, 256), torch.zeros(1, 4, 1, 256)
    attention = ctf.PagedAttention()
    with pytest.raises(ValueError, match="layer 3 has sliding_window 4, but the engine keeps a ring of 8 tokens"):
        attention(SimpleNamespace(layer_idx=3, scaling=0.1), q, kv, kv, None, cache=cache, sliding_window=4)
    with pytest.raises(ValueError, match="layer 3 is not causal"):
        attention(SimpleNamespace(layer_idx=3, scaling=0.1, is_causal=False), q, kv, kv, None, cache=cache)
    inputs = [[5, 6, 7] * 6]
    model.model.layers[2].self_attn.attn_logit_softcapping = 30.0  # layers 0 and 2: the sliding layers' group
    with pytest.raises(RuntimeError, match=r"layer 2's \(scaling, window_left, softcap\) \(.*, 7, 30.0\) differ "
                                           r"from \(.*, 7, 50.0\), its layer group's first layer's"):
        generate(model, ctf.register(), inputs, "cpu", block_tables=False)
    model.model.layers[2].self_attn.attn_logit_softcapping = 50.0

    class DecodeOnly(ctf.CodecDecode):
        prefill = False

    with pytest.raises(RuntimeError, match="layer 0 has a sliding window, soft-cap or sinks, which the causal SDPA "
                                           "that DecodeOnly leaves prefill chunks to has not"):
        generate(model, ctf.register("paged|codec_decode_only", ctf.PagedAttention(DecodeOnly())), inputs, "cpu",
                 block_tables=False)
