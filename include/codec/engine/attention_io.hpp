#pragma once
// The query-side buffers of a run, shared by every engine: q, out and lse,
// each with its sizes and strides, so that a run checks them against the plan
// (a mismatch is an error naming both values, never garbage) and takes views
// such as transformers' q, a slice of (1, Hq, total_q, D), without a copy.
#include <cstdint>

#include "codec/core/dtype.hpp"
#include "codec/core/hd.hpp"

namespace codec {

// Where row (b, h) of a [batch, heads, ...] tensor starts, in elements; what
// the kernels take of a RowTensor or LseRows.
struct RowStrides {
  std::int64_t batch = 0;
  std::int64_t head = 0;
  CODEC_HD std::int64_t at(int b, int h) const { return b * batch + h * head; }
};

// A [batch, heads, dim] tensor with unit stride along dim: element (b, h, d)
// is at data + b·stride_batch + h·stride_head + d, in elements of dtype.
template <typename Pointer>
struct RowTensor {
  Pointer data = nullptr;
  DType dtype = DType::bf16;
  int batch = 0;
  int heads = 0;
  int dim = 0;
  std::int64_t stride_batch = 0;
  std::int64_t stride_head = 0;

  static RowTensor contiguous(Pointer data, DType dtype, int batch, int heads, int dim) {
    return {data, dtype, batch, heads, dim, std::int64_t(heads) * dim, dim};
  }
  std::int64_t offset(int b, int h) const { return b * stride_batch + h * stride_head; }
  RowStrides strides() const { return {stride_batch, stride_head}; }
};
using QueryRows = RowTensor<const void*>;  // q: read only
using OutputRows = RowTensor<void*>;       // out

// lse [batch, heads] fp32: element (b, h) at data + b·stride_batch + h·stride_head.
struct LseRows {
  float* data = nullptr;  // null: lse is not written
  int batch = 0;
  int heads = 0;
  std::int64_t stride_batch = 0;
  std::int64_t stride_head = 0;

  static LseRows contiguous(float* data, int batch, int heads) { return {data, batch, heads, heads, 1}; }
  std::int64_t offset(int b, int h) const { return b * stride_batch + h * stride_head; }
  RowStrides strides() const { return {stride_batch, stride_head}; }
};

// The base of the lse a run writes: natural log (this library's partial-state
// contract, vLLM's merge_attn_states) or base 2 (what FlashInfer's wrappers return).
enum class LseBase : std::uint8_t { e, two };

inline constexpr float kLog2E = 1.4426950408889634f;  // log2(x) = ln(x) · log2(e)
inline float lse_scale(LseBase base) { return base == LseBase::two ? kLog2E : 1.f; }

// A run reads q rows [0, plan batch) and writes out and lse rows [0, out.batch):
// out.batch is the planned batch, or up to the plan's capacity for a plan
// packed at one (PlanCapacity), whose rows past its batch come out as the
// empty state (o = 0, lse = −inf). q.batch equals out.batch.
struct AttentionIO {
  QueryRows q;    // in the plan's dtype (under an fp8 cache fp16, bf16 or on the CPU fp32)
  OutputRows out; // q's dtype, or on the CPU fp32
  LseRows lse;    // optional (data null)
  LseBase lse_base = LseBase::e;
  // Attention sinks (gpt-oss): one logit a qo head, [Hq] fp32 in the engine's
  // memory, not scaled, added to every row's softmax denominator (exp(sink −
  // m), no value) once its partials have merged; the lse includes it. null: none.
  const float* sinks = nullptr;
};

}  // namespace codec
