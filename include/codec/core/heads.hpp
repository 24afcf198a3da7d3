#pragma once
// Attention head configuration shared by every layer.
#include <cmath>
#include <string>

namespace codec {

struct HeadConfig {
  int num_qo_heads = 0;  // Hq
  int num_kv_heads = 0;  // Hkv; query head h reads kv head h / group()
  int head_dim = 0;      // D ∈ {64, 128, 256}
  float sm_scale = 0.f;  // 0 means 1/sqrt(head_dim)
  // > 0: every logit s = sm_scale · q·k becomes cap · tanh(s / cap) (Gemma 2's, FlashInfer's logits_soft_cap)
  float logits_soft_cap = 0.f;

  int group() const { return num_qo_heads / num_kv_heads; }  // G = Hq / Hkv
  float scale() const { return sm_scale > 0.f ? sm_scale : 1.f / std::sqrt(float(head_dim)); }
  void validate() const;         // throws codec::Error naming the offending field
  void validate_counts() const;  // the head counts alone (Hq, Hkv, Hq % Hkv)
};

// The heads one rank of a tensor-parallel group of tp_size ranks holds: its
// query heads are the model's [qo_begin, qo_begin + heads.num_qo_heads) and
// its kv heads [kv_begin, kv_begin + heads.num_kv_heads), numbered from 0 on
// the rank, with the model's head_dim and scale. With tp_size ≤ Hkv a rank
// holds Hkv / tp_size kv heads and their query heads; with tp_size > Hkv
// (MQA, or GQA on many GPUs) every kv head is replicated on tp_size / Hkv
// ranks, each holding Hq / tp_size of its query heads. The forest does not
// depend on heads, so every rank's plan of the same batch is the same plan.
struct HeadSlice {
  HeadConfig heads;
  int qo_begin = 0;
  int kv_begin = 0;
};
// Throws naming the value when tp_size does not divide Hq, or neither of
// Hkv and tp_size divides the other, or rank is outside [0, tp_size).
HeadSlice tensor_parallel_slice(const HeadConfig& model, int tp_size, int rank);

// Model shapes of docs/BENCHMARKS.md by name ("qwen3-4b", "llama3.2-1b", ...).
HeadConfig model_heads(const std::string& name);
const char* const* model_names();  // null-terminated list

}  // namespace codec
