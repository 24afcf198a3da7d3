// make_plan and the planner's options (docs/DESIGN.md §4); the steps are
// planning.cpp's, the scheduler lpt.hpp's, the search's pieces bound_search
// and node_class, StepPlanner step_planner.cpp's.
#include "codec/plan/planner.hpp"

#include <chrono>

#include "codec/core/error.hpp"
#include "plan/planning.hpp"

namespace codec {

void PlannerOptions::validate() const {
  CODEC_CHECK(num_blocks >= 1, "planner num_blocks ", num_blocks, " must be >= 1");
  CODEC_CHECK(max_tile_rows >= 1, "planner max_tile_rows ", max_tile_rows, " must be >= 1");
  CODEC_CHECK(chunk_align >= 1, "planner chunk_align ", chunk_align, " must be >= 1");
  CODEC_CHECK(fixed_splits >= 1, "planner fixed_splits ", fixed_splits, " must be >= 1");
  CODEC_CHECK(max_slots >= 0, "planner max_slots ", max_slots, " must be >= 0");
  CODEC_CHECK(wide_tile_rows == 0 || wide_tile_rows >= max_tile_rows, "planner wide_tile_rows ", wide_tile_rows,
              " must be 0 or >= max_tile_rows ", max_tile_rows);
  CODEC_CHECK(wide_tile_rows == 0 || (wide_span >= 1 && num_blocks % wide_span == 0), "planner wide_span ",
              wide_span, " must be >= 1 and divide num_blocks ", num_blocks);
  CODEC_CHECK(wide_min_rows >= 0 && wide_min_tokens >= 0, "planner wide_min_rows ", wide_min_rows,
              " and wide_min_tokens ", wide_min_tokens, " must be >= 0");
  CODEC_CHECK(wide_max_masked_rows >= 0, "planner wide_max_masked_rows ", wide_max_masked_rows, " must be >= 0");
  CODEC_CHECK(wide_max_chunk_tokens >= 0, "planner wide_max_chunk_tokens ", wide_max_chunk_tokens, " must be >= 0");
  CODEC_CHECK(wide_tail_tokens >= 0, "planner wide_tail_tokens ", wide_tail_tokens, " must be >= 0");
  CODEC_CHECK(beside_wide_price >= kMinBesideWidePrice && beside_wide_price <= 1, "planner beside_wide_price ",
              beside_wide_price, " must be in [", kMinBesideWidePrice, ", 1]");
  CODEC_CHECK(price_tile_tokens >= 0, "planner price_tile_tokens ", price_tile_tokens, " must be >= 0");
  if (capacity) {
    capacity->validate();
    CODEC_CHECK(capacity->blocks == num_blocks, "planner capacity of ", capacity->blocks,
                " blocks differs from num_blocks ", num_blocks);
    CODEC_CHECK(capacity->wide_blocks == wide_blocks(), "planner capacity of ", capacity->wide_blocks,
                " wide blocks differs from the options' ", wide_blocks());
  }
}

std::int64_t min_slots(const Forest& forest, const HeadConfig& heads, const QueryBatch& queries) {
  std::int64_t rows = 0;  // query tokens over the nodes with tokens
  for (const ForestNode& n : forest.nodes) {
    if (n.num_tokens == 0) continue;
    if (queries.one_token_each()) rows += n.num_reqs;
    else
      for (int k = 0; k < n.num_reqs; ++k) rows += queries.q_len(forest.reqs[n.req_begin + k]);
  }
  return rows * heads.num_qo_heads;
}

Plan make_plan(const Forest& forest, const HeadConfig& heads, DType dtype, const CostModel& cost,
               const PlannerOptions& opt, const QueryBatch& queries) {
  const auto start = std::chrono::steady_clock::now();
  PlanArrays a;
  const PlanStats stats = planning::plan_arrays(forest, heads, cost, opt, a, queries);
  Plan plan(heads, dtype, forest.page_size, a, stats, opt.capacity ? &*opt.capacity : nullptr);
  plan.stats().plan_ms = planning::ms_since(start);
  return plan;
}

}  // namespace codec
