#include "codec/core/heads.hpp"

#include <array>
#include <iterator>
#include <sstream>

#include "codec/core/error.hpp"

namespace codec {

void HeadConfig::validate_counts() const {
  CODEC_CHECK(num_qo_heads >= 1, "num_qo_heads ", num_qo_heads, " must be >= 1");
  CODEC_CHECK(num_kv_heads >= 1, "num_kv_heads ", num_kv_heads, " must be >= 1");
  CODEC_CHECK(num_qo_heads % num_kv_heads == 0, "num_qo_heads ", num_qo_heads,
              " is not a multiple of num_kv_heads ", num_kv_heads);
}

void HeadConfig::validate() const {
  validate_counts();
  CODEC_CHECK(head_dim == 64 || head_dim == 128 || head_dim == 256, "unsupported head_dim ",
              head_dim, " (supported: 64, 128, 256)");
  CODEC_CHECK(std::isfinite(sm_scale) && sm_scale >= 0.f, "sm_scale ", sm_scale,
              " must be finite and >= 0 (0 means 1/sqrt(head_dim))");
  CODEC_CHECK(std::isfinite(logits_soft_cap) && logits_soft_cap >= 0.f, "logits_soft_cap ", logits_soft_cap,
              " must be finite and >= 0 (0: none)");
}

HeadSlice tensor_parallel_slice(const HeadConfig& model, int tp_size, int rank) {
  model.validate_counts();  // head_dim and scale pass through: a slice is about head counts
  CODEC_CHECK(tp_size >= 1, "tensor-parallel size ", tp_size, " must be >= 1");
  CODEC_CHECK(rank >= 0 && rank < tp_size, "rank ", rank, " is outside [0, ", tp_size, ")");
  CODEC_CHECK(model.num_qo_heads % tp_size == 0, "tensor-parallel size ", tp_size,
              " does not divide num_qo_heads ", model.num_qo_heads);
  const int hkv = model.num_kv_heads;
  CODEC_CHECK(hkv % tp_size == 0 || tp_size % hkv == 0, "tensor-parallel size ", tp_size,
              " and num_kv_heads ", hkv, ": neither divides the other");
  HeadSlice slice;
  slice.heads = model;
  slice.heads.num_qo_heads = model.num_qo_heads / tp_size;
  slice.qo_begin = rank * slice.heads.num_qo_heads;
  if (hkv >= tp_size) {
    slice.heads.num_kv_heads = hkv / tp_size;
    slice.kv_begin = rank * slice.heads.num_kv_heads;
  } else {  // each kv head on tp_size / hkv ranks
    slice.heads.num_kv_heads = 1;
    slice.kv_begin = rank / (tp_size / hkv);
  }
  return slice;
}

namespace {

struct NamedModel {
  const char* name;
  HeadConfig heads;
};

// The attention shapes of docs/BENCHMARKS.md's models (their windows, sinks
// and soft-caps are the commands' own flags).
constexpr NamedModel kModels[] = {
    {"qwen3-4b", {32, 8, 128, 0.f}},   {"llama3.2-1b", {32, 8, 64, 0.f}},
    {"mistral-7b", {32, 8, 128, 0.f}}, {"llama4-scout", {40, 8, 128, 0.f}},
    {"mha", {32, 32, 128, 0.f}},       {"mqa", {32, 1, 128, 0.f}},
    {"gemma2-9b", {16, 8, 256, 0.f}},  {"gpt-oss-20b", {64, 8, 64, 0.f}},
    {"gemma3-12b", {16, 8, 256, 0.f}},
};

// model_names()'s null-terminated list, from the table
constexpr auto kModelNames = [] {
  std::array<const char*, std::size(kModels) + 1> names{};
  for (std::size_t i = 0; i < std::size(kModels); ++i) names[i] = kModels[i].name;
  return names;
}();

}  // namespace

HeadConfig model_heads(const std::string& name) {
  for (const NamedModel& model : kModels)
    if (name == model.name) return model.heads;
  std::ostringstream known;
  for (const NamedModel& model : kModels) known << (&model == kModels ? "" : ", ") << model.name;
  CODEC_FAIL("unknown model '", clip(name), "' (known: ", known.str(), ")");
}

const char* const* model_names() { return kModelNames.data(); }

}  // namespace codec
