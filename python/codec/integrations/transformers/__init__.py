"""CoDec as the decode attention of Hugging Face transformers' continuous
batching: ``register()`` adds the attention implementation ``paged|codec``.

    import codec.integrations.transformers as codec_tf
    codec_tf.register()
    model.set_attn_implementation("paged|codec")
    outputs = codec_tf.generate_batch(model, inputs, generation_config, continuous_batching_config)

What it does per forward pass (one engine step):

- writes the new tokens' K and V into the engine's paged cache, in place (the
  cache is read where it lies: no gather of the context, but for sliding
  layers' chunks that outgrow their ring, below);
- at the first layer of each of the engine's layer groups (the layers that
  share page tables: one group unless the model has sliding-window layers),
  takes the page tables of the step's requests and plans them once, every
  layer of the group then running the same plan: decode-only steps on a
  ``BatchPrefixDecodeWrapper``, steps with prefill chunks (several query
  tokens a request) on a ``BatchPrefixPrefillWrapper``, causally, so that
  requests sharing a cached prefix prefill over it reading it once (a
  backend of one's own without ``prefill = True`` leaves the chunks to a
  causal ``scaled_dot_product_attention``).

The page tables come from one of the engine's two decode paths. On its
default path the engine lists every KV token's cache slot for every request
each step (``read_index``); the page tables are then the slots of each
page's first token, one small gather. That list costs the engine ~90 ns per
context token of host time per step (412k tokens: ~37 ms). Its block-table
path, which the engine turns on only for flash-named implementations, hands
the attention each request's block ids instead (``block_table``) and builds
no slot list; ``generate_batch`` and ``enable_block_tables`` here turn it on
for ``paged|codec`` through the manager's public configuration, before the
manager starts. Steps with prefill rows take the slot-list path either way.

The engine shares full blocks between requests with a common prefix
(``allow_block_sharing``), so shared prefixes are shared pages, which CoDec
reads once per step.

Sliding windows, attention sinks and logit soft-caps (gpt-oss, Gemma 2 and
3; checked on the CPU engine, the GPU's check to come): a group's plan is for its attention as the
model passes it to the attention function (``scaling``, ``sliding_window``,
``softcap``), and each layer runs with its sinks (``s_aux``). The engine
keeps a sliding layer's last ``sliding_window`` tokens in a ring of slots a
request that is not block-aligned: its page tables have pages of one token,
in the tokens' order. They are read in place, the new tokens written first,
where each request's KV fits the ring (decode rows, short chunks): the ring
then holds exactly the keys its rows see, and the plan has no window. A
step with a chunk that would overwrite keys its own first rows see reads
the engine's gather of each request's cached and new KV instead, under the
window. For such models transformers 5.17 turns off its prefix cache and
its block tables (the slot-list path), but still shares the complete
blocks of full-attention layers between the sequences it forks from a
prompt (``num_return_sequences``), and keeps one copy of the identical
complete blocks of requests with a common prefix once each has prefilled
them: CoDec reads them once; the rings are copied.

CUDA graphs: with ``use_cuda_graph=(False, True)`` the engine captures each
decode batch size once and replays the whole forward without calling
Python. A captured step plans in the stream instead
(``BatchPrefixDecodeWrapper.plan_block_table_in_stream``): the replay copies
the engine's block table to pinned memory, a host function plans it, and the
plan reaches the workspace before the first layer's attention, so every
replay runs the exact plan of its own batch. The new tokens' cache slots are
computed on the device. Prefill steps stay eager (their chunks need the
host's lengths), and graphs of them are refused. With the engine's
asynchronous batching (the next step scheduled during this one's forward)
each IO pair has its graphs, all planned in the stream the same way.

The package, as vLLM splits a backend (the driver a third thing):

- ``steps.py``: the per-step builder: a step's rows, page tables and new
  tokens' slots (``Step``, ``GraphStep``), planned once by a ``DecodeBackend``;
- ``codec_decode.py``: CoDec as that backend (``CodecDecode``: wrappers per
  engine cache and layer group, plans on the host or in the stream);
- ``attention.py``: the per-layer attention (``PagedAttention``) and ``register``;
- ``driver.py``: ``generate_batch``, ``enable_block_tables`` and the shared
  prefixes' warm-up.
"""

from .attention import PagedAttention, causal_attention, register
from .codec_decode import NAME, WORKSPACE_BYTES, CodecDecode
from .driver import enable_block_tables, generate_batch
from .steps import DecodeBackend, GraphStep, Step, build_step

__all__ = ["NAME", "WORKSPACE_BYTES", "CodecDecode", "DecodeBackend", "GraphStep", "PagedAttention", "Step",
           "build_step", "causal_attention", "enable_block_tables", "generate_batch", "register"]
