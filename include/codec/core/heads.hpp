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

  int group() const { return num_qo_heads / num_kv_heads; }  // G = Hq / Hkv
  float scale() const { return sm_scale > 0.f ? sm_scale : 1.f / std::sqrt(float(head_dim)); }
  void validate() const;  // throws codec::Error naming the offending field
};

// Model shapes of docs/BENCHMARKS.md by name ("qwen3-4b", "llama3.2-1b", ...).
HeadConfig model_heads(const std::string& name);
const char* const* model_names();  // null-terminated list

}  // namespace codec
