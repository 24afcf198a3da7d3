// The CUDA engine's workspace sizes (cuda_engine.hpp): host arithmetic over
// the plan's packed arrays, in every build.
#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>

#include "codec/core/error.hpp"
#include "codec/engine/cuda_engine.hpp"
#include "engine/cuda_layout.hpp"

namespace codec {

std::size_t cuda_workspace_bytes(const Plan& plan) { return cuda_plan_region_bytes(plan.bytes().size()) + plan.workspace().bytes; }

std::size_t cuda_workspace_bytes(const PlanCapacity& capacity, int head_dim) {
  return cuda_plan_region_bytes(Plan::packed_bytes(capacity)) + Plan::workspace_for(capacity.slots, head_dim).bytes;
}

PlanCapacity cuda_plan_capacity(std::size_t bytes, int max_requests, std::int64_t max_page_entries,
                                const HeadConfig& heads, const PlannerOptions& options,
                                const QueryCapacity& queries) {
  options.validate();
  auto capacity = [&](std::int64_t slots) {
    return PlanCapacity::for_batches(max_requests, max_page_entries, heads, options.max_tile_rows, options.num_blocks,
                                     slots, options.wide_blocks(), options.max_tail_tokens(), queries);
  };
  const std::size_t fixed = cuda_workspace_bytes(capacity(0), heads.head_dim);
  CODEC_CHECK(fixed < bytes, "workspace of ", bytes, " bytes is too small: the plan arrays for ", max_requests,
              " requests", queries.tokens > 0 ? " (" + std::to_string(queries.tokens) + " query tokens)" : "", " and ",
              max_page_entries, " page-table entries alone take ", fixed, " bytes");
  // The bytes grow with the slots: bisect for the most that fit (at most 2^31 − 1).
  std::int64_t lo = 0, hi = std::min<std::int64_t>(std::int64_t(bytes / (4 * (heads.head_dim + 1))) + 1,
                                                   std::numeric_limits<std::int32_t>::max());
  while (hi - lo > 1) {
    const std::int64_t mid = lo + (hi - lo) / 2;
    (cuda_workspace_bytes(capacity(mid), heads.head_dim) <= bytes ? lo : hi) = mid;
  }
  return capacity(lo);
}

}  // namespace codec
