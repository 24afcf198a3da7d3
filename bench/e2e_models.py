"""The models of bench/e2e_decode.py: each one's shape as its published
config has it (random weights), the transformers classes that build it, and
the attention variants its layers need, which decide the backends that can
serve it (e2e_decode.check_args refuses the others before any model exists).

Variants (``VARIANTS``): ``window`` (sliding-window layers, which the engine
keeps in rings of their window: gpt-oss, Gemma 2 and 3), ``soft_cap`` (a
logit soft-cap: Gemma 2's ``attn_logit_softcapping``) and ``sinks`` (a
learned sink logit a query head: gpt-oss's ``sinks``). The query scale
(Gemma's ``query_pre_attn_scalar``) is no variant: every backend takes the
scale the model passes.

Memory on the GPU (bf16): gpt-oss-20b holds 20.9 B parameters (41.8 GB;
built in float32 first, as every model here, 84 GB at the peak, cast a
parameter at a time), gemma3-12b 11.8 B (23.5 GB), gemma2-9b 9.2 B
(18.5 GB), qwen3-4b 4.4 B (its embeddings untied here): each fits an H200
at its full layer count with the engine's cache beside it."""

from typing import NamedTuple

VARIANTS = ("window", "soft_cap", "sinks")


class Model(NamedTuple):
    family: str  # transformers' <family>Config and <family>ForCausalLM (Gemma 3: its text model alone)
    shape: dict  # the config's arguments; the class's defaults for the rest
    sinks: bool = False  # its attention layers have sinks (a parameter, not a config field)


QWEN3_4B = dict(vocab_size=151936, hidden_size=2560, intermediate_size=9728, num_hidden_layers=36,
                num_attention_heads=32, num_key_value_heads=8, head_dim=128, max_position_embeddings=65536)

# openai/gpt-oss-20b: 24 layers alternating sliding (window 128, the even ones) and full attention, 64 query heads
# on 8 kv heads of 64, sinks in every layer, 32 experts of which 4 a token (GptOssConfig's defaults are the 120b's
# 36 layers and 128 experts).
GPT_OSS_20B = dict(vocab_size=201088, hidden_size=2880, intermediate_size=2880, num_hidden_layers=24,
                   num_attention_heads=64, num_key_value_heads=8, head_dim=64, sliding_window=128,
                   num_local_experts=32, num_experts_per_tok=4, max_position_embeddings=131072)

# google/gemma-2-9b: 42 layers alternating sliding (window 4,096) and full attention, 16 query heads on 8 kv heads
# of 256, scale 256^-1/2, attention logits soft-capped at 50 (and the final logits at 30). Its context is 8,192
# tokens: the samples workload's 8,192-token prompt runs past it by its new tokens (random weights: no matter).
GEMMA2_9B = dict(vocab_size=256000, hidden_size=3584, intermediate_size=14336, num_hidden_layers=42,
                 num_attention_heads=16, num_key_value_heads=8, head_dim=256, query_pre_attn_scalar=256,
                 sliding_window=4096, attn_logit_softcapping=50.0, final_logit_softcapping=30.0,
                 max_position_embeddings=8192)

# google/gemma-3-12b's text model: 48 layers, five sliding (window 1,024) then one full, 16 query heads on 8 kv
# heads of 256, scale 256^-1/2, no soft-cap; RoPE 10^4 on the sliding layers, 10^6 scaled linearly by 8 on the full.
GEMMA3_12B = dict(vocab_size=262208, hidden_size=3840, intermediate_size=15360, num_hidden_layers=48,
                  num_attention_heads=16, num_key_value_heads=8, head_dim=256, query_pre_attn_scalar=256,
                  sliding_window=1024, max_position_embeddings=131072,
                  rope_parameters={"full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1e6},
                                   "sliding_attention": {"rope_type": "default", "rope_theta": 1e4}})

MODELS = {"qwen3-4b": Model("Qwen3", QWEN3_4B), "gpt-oss-20b": Model("GptOss", GPT_OSS_20B, sinks=True),
          "gemma2-9b": Model("Gemma2", GEMMA2_9B), "gemma3-12b": Model("Gemma3Text", GEMMA3_12B)}


def model_config(name, layers=None):
    """The transformers config of MODELS[name], its first `layers` layers
    (None: all), which keep the model's pattern of sliding and full layers."""
    import transformers
    model = MODELS[name]
    shape = dict(model.shape)
    if layers is not None:
        shape["num_hidden_layers"] = layers
    return getattr(transformers, model.family + "Config")(**shape)


def model_class(name):
    """The transformers class of MODELS[name]'s causal LM."""
    import transformers
    return getattr(transformers, MODELS[name].family.removesuffix("Text") + "ForCausalLM")


def build_model(name, config, device):
    """Random weights (torch's current seed) drawn in bf16 on `device`, in
    eval mode, with weigh_variants' sinks and query scale. Drawn in bf16,
    not float32 and cast: gpt-oss-20b's 21 B parameters take 84 GB in
    float32, more than an H100 holds."""
    import torch
    default = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)
    try:
        with torch.device(device):
            model = model_class(name)(config).eval()
    finally:
        torch.set_default_dtype(default)
    weigh_variants(model)
    return model


def weigh_variants(model):
    """Sinks and a soft-cap that change the attention, which transformers'
    initialisation leaves them hardly doing: so that the float64 check of
    every backend's outputs tells one that ignores them (the kernels' work
    is the same whatever the values). gpt-oss's sinks, drawn near 0, would
    take under 1% of a row's softmax over its 128-key window (its logits'
    standard deviation is ~1.1): drawn from U(ln w, ln w + 4) instead, w
    the window, they take a third to nearly all of it there, and 1-30% over
    8,192 keys. Gemma 2's logits (~1.4 at 9B) stay far below its cap of 50,
    where it bends nothing: its query projections are scaled by 4, so that
    the largest logits of a long context reach the cap's bend."""
    import math

    import torch
    config = model.config
    with torch.no_grad():
        for layer in model.model.layers:
            attention = layer.self_attn
            if hasattr(attention, "sinks"):
                low = math.log(config.sliding_window)
                attention.sinks.uniform_(low, low + 4)
            if getattr(config, "attn_logit_softcapping", None):
                attention.q_proj.weight.mul_(4)


def variants(name, config):
    """The attention variants (VARIANTS) the layers of MODELS[name] under `config` need."""
    found = {"window"} if sliding(config) else set()
    if getattr(config, "attn_logit_softcapping", None):
        found.add("soft_cap")
    if MODELS[name].sinks:
        found.add("sinks")
    return found


def sliding(config):
    """Whether the model has sliding-window layers: transformers 5.17 then
    keeps its prefix cache and its block tables off (the slot-list decode
    path), and shares only the full-attention layers' identical complete
    blocks (those of the sequences it forks from a prompt, and of requests
    with a common prefix once each has prefilled it)."""
    return "sliding_attention" in (getattr(config, "layer_types", None) or ())
