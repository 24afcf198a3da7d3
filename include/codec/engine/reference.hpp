#pragma once
// Ground truth: naive fp64 attention of each request alone, straight from the
// page tables (no forest, no planner), and the comparison of an output with it.
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "codec/core/heads.hpp"
#include "codec/forest/page_table.hpp"
#include "codec/plan/queries.hpp"

namespace codec {

struct ReferenceResult {
  std::vector<double> out;  // [rows, Hq, D]
  std::vector<double> lse;  // [rows, Hq], natural log
};

// q: [num_queries, Hq, D] in kv.dtype (or q_dtype where given: under an fp8
// cache, fp16, bf16 or fp32), contiguous: a row per request, or with several
// query tokens a request (`queries`) a row per token, each seeing the keys its
// mask leaves it (QueryBatch::sees); a row that sees none gets o = 0 and lse
// = −inf. K and V are the stored values times kv's scales (host memory);
// heads.logits_soft_cap caps the logits; `sinks` ([Hq], or empty) adds each
// head's sink to every row's denominator (a row that sees no key: o = 0, lse
// = the sink). out and lse have q's rows. Multithreaded over (row, head).
ReferenceResult reference_attention(const PageTable& table, const PagedKV& kv, const HeadConfig& heads,
                                    const void* q, const QueryBatch& queries = {},
                                    std::optional<DType> q_dtype = std::nullopt, std::span<const float> sinks = {});

struct ErrorStats {
  double rel_l2 = 0;   // ‖out − ref‖₂ / ‖ref‖₂
  double max_abs = 0;  // max |out − ref|
  bool has_nan = false;
  std::int64_t worst_index = -1;  // element of max_abs
  bool within(double tol) const { return !has_nan && rel_l2 <= tol; }
  std::string describe() const;
};
// An infinite reference element (an empty row's lse) matches only itself.
ErrorStats compare(const float* out, const std::vector<double>& ref);

// Relative L2 tolerance of docs/BENCHMARKS.md for outputs computed from `dtype` inputs.
double tolerance(DType dtype);

}  // namespace codec
