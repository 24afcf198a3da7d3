"""Two ways for a third-party attention (registered with AttentionInterface) to get transformers 5.17's
continuous-batching block-table decode path, without editing transformers' files.

Route "config" (run_with_block_table): any "paged|..." name. Build the manager yourself, and set
    manager.continuous_batching_config.max_blocks_per_request
after the manager resolved its config (which set it to 0: initialization.py:114-146) and before
manager.start() creates the cache, scheduler and IO tensors from it (continuous_api.py:1025-1085,
cache.py:283-294, scheduler.py:45/224, input_outputs.py:195-201). Public objects only; works on CPU.

Route "name" (register + pretend_cuda_for_decode_check): a name matching r".*flash.*[23]"
(initialization.py:122) and a non-None flash_attn_with_kvcache returned by
lazy_import_paged_flash_attention(name) (initialization.py:127). Without a hub kernel that call fails
for a custom name, so the module-level lazy-import cache of modeling_flash_attention_utils is seeded
(private globals, lines 125-133). The name also switches on flash-only defaults (see the report).
"""

import math

import torch

from transformers import AttentionInterface


# ------------------------------------------------------------------------------------ route "config"
def blocks_for(max_len, block_size):
    """What initialization.py:88-92 would pick from workload hints: ceil(len / bs) + 1, rounded up to even."""
    n = int(math.ceil(max_len / block_size)) + 1
    return n + n % 2


def run_with_block_table(model, inputs, generation_config, cb_config, max_new_tokens, record_timestamps=True):
    """generate_batch's loop (continuous_api.py:1237-1352), with max_blocks_per_request set between the
    manager's config resolution and the start of its generation thread."""
    from transformers.generation.continuous_batching.utils import WorkloadHints

    hints = WorkloadHints(max_prompt_length=max(map(len, inputs)), max_generated_length=max_new_tokens,
                          num_requests=len(inputs))
    manager = model.init_continuous_batching(generation_config=generation_config,
                                             continuous_batching_config=cb_config, workload_hints=hints)
    resolved = manager.continuous_batching_config
    if resolved.max_blocks_per_request == 0:  # what a non-flash name (or no CUDA) resolves to
        resolved.max_blocks_per_request = blocks_for(hints.max_prompt_length + max_new_tokens, resolved.block_size)
    manager.start()
    results = {}
    try:
        ids = manager.add_requests(inputs=inputs, max_new_tokens=max_new_tokens,
                                   record_timestamps=record_timestamps)
        while len(results) < len(ids):
            r = manager.get_result(timeout=1)
            if r is not None and r.is_finished():
                results[r.request_id] = r
            elif r is None and not manager.is_running():
                raise RuntimeError("generation thread stopped")
    finally:
        manager.stop(block=True, timeout=30)
        manager.destroy()
    return {i: results[i] for i in ids}


# -------------------------------------------------------------------------------------- route "name"
def _never_called(*args, **kwargs):
    raise RuntimeError("transformers only calls these from its own paged_attention_forward, not used here")


def flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, softmax_scale=None,
                           causal=False, window_size=(-1, -1)):
    """Only its signature is read (modeling_flash_attention_utils.py:224-245)."""
    _never_called()


def flash_attn_with_kvcache(q, k_cache, v_cache, k=None, v=None, cache_seqlens=None, block_table=None,
                            softmax_scale=None, causal=False, window_size=(-1, -1)):
    """Only its presence is checked (initialization.py:127-135)."""
    _never_called()


def register(name, attention):
    """Registers `attention` under `name` and seeds the lazy flash import for that name."""
    import re

    import transformers.modeling_flash_attention_utils as mfau

    if not name.startswith("paged|") or re.match(r".*flash.*[23]", name) is None:
        raise ValueError(f"{name!r}: needs 'paged|' and to match .*flash.*[23]")
    AttentionInterface.register(name, attention)
    # lazy_import_flash_attention returns these as long as _loaded_implementation == name
    # (modeling_flash_attention_utils.py:257-272); set_attn_implementation (modeling_utils.py:1826) and
    # ensure_decode_fast_path_is_available (initialization.py:127) both call it with the full "paged|..." name.
    mfau._loaded_implementation = name
    mfau._flash_fn = None
    mfau._flash_varlen_fn = flash_attn_varlen_func
    mfau._flash_with_kvcache_fn = flash_attn_with_kvcache
    mfau._pad_fn, mfau._unpad_fn = mfau._pad_input, mfau._unpad_input
    mfau._process_flash_kwargs_fn = mfau._lazy_define_process_function(flash_attn_varlen_func)
    return name


def pretend_cuda_for_decode_check():
    """CPU demo only: ensure_decode_fast_path_is_available asks torch.cuda.is_available() (initialization.py:121);
    answer True during that one call. On a CUDA machine this is not needed."""
    import transformers.generation.continuous_batching.initialization as init_mod

    orig = init_mod.ensure_decode_fast_path_is_available
    if getattr(orig, "_pretend", False):
        return

    def wrapped(config, cb_config, user_requested):
        real = torch.cuda.is_available
        torch.cuda.is_available = lambda: True
        try:
            return orig(config, cb_config, user_requested)
        finally:
            torch.cuda.is_available = real
    wrapped._pretend = True
    init_mod.ensure_decode_fast_path_is_available = wrapped
