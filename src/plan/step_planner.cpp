#include <algorithm>
#include <chrono>
#include <cmath>

#include "codec/core/error.hpp"
#include "codec/plan/planner.hpp"
#include "plan/planning.hpp"

namespace codec {

StepPlanner::StepPlanner(const HeadConfig& heads, DType dtype, std::shared_ptr<const CostModel> cost,
                         PlannerOptions options, double drift)
    : heads_(heads), dtype_(dtype), cost_(std::move(cost)), options_(std::move(options)), drift_(drift) {
  CODEC_CHECK(cost_ != nullptr, "StepPlanner: cost model must not be null");
  CODEC_CHECK(drift_ >= 0, "StepPlanner: drift ", drift_, " must be >= 0");
  options_.validate();
}

// Same nodes, parents and requests, and the work (Σ tokens × requests over
// nodes) moved by at most drift of the searched forest's: LPT re-balances
// every plan, only the split counts are the search's. A node with tokens where
// that one had none, or none where it had some, is a change of shape.
bool StepPlanner::same_shape(const Forest& f, const QueryBatch& queries) const {
  const Forest& s = searched_;
  if (f.num_nodes() != s.num_nodes() || f.num_requests() != s.num_requests() || f.reqs != s.reqs) return false;
  if (queries.mask != searched_mask_ ||
      !std::equal(queries.qo_indptr.begin(), queries.qo_indptr.end(), searched_qo_.begin(), searched_qo_.end()))
    return false;
  double moved = 0, work = 0;
  for (int i = 0; i < f.num_nodes(); ++i) {
    const ForestNode &a = f.nodes[i], &b = s.nodes[i];
    if (a.parent != b.parent || a.req_begin != b.req_begin || a.num_reqs != b.num_reqs) return false;
    if ((a.num_tokens == 0) != (b.num_tokens == 0)) return false;
    moved += std::abs(double(a.num_tokens) - b.num_tokens) * b.num_reqs;
    work += double(b.num_tokens) * b.num_reqs;
  }
  return moved <= drift_ * work;
}

// The options of the forest's plan: the last search's split counts while
// the forest keeps that search's shape, else the search (or another policy).
PlannerOptions StepPlanner::options_for(const Forest& forest, const QueryBatch& queries) const {
  if (options_.split != SplitPolicy::adaptive || splits_.empty() || !same_shape(forest, queries)) return options_;
  PlannerOptions reuse = options_;
  reuse.split = SplitPolicy::given;
  reuse.given_splits = splits_;
  return reuse;
}

// Counted once the plan is packed: one that does not fit is no plan, and no search to reuse.
void StepPlanner::commit(const Forest& forest, const QueryBatch& queries, const PlannerOptions& used,
                         const PlanArrays& a) {
  ++plans_;
  if (used.split != SplitPolicy::adaptive) return;
  splits_.assign(a.node_splits.begin(), a.node_splits.end());
  searched_ = forest;
  searched_qo_.assign(queries.qo_indptr.begin(), queries.qo_indptr.end());
  searched_mask_ = queries.mask;
  ++searches_;
}

Plan StepPlanner::plan(const Forest& forest, const QueryBatch& queries) {
  const auto start = std::chrono::steady_clock::now();
  const PlannerOptions used = options_for(forest, queries);
  PlanArrays a;
  const PlanStats stats = planning::plan_arrays(forest, heads_, *cost_, used, a, queries);
  Plan plan(heads_, dtype_, forest.page_size, a, stats, options_.capacity ? &*options_.capacity : nullptr);
  commit(forest, queries, used, a);
  plan.stats().plan_ms = planning::ms_since(start);
  return plan;
}

PlanStats StepPlanner::plan_into(const Forest& forest, std::span<std::byte> out, const QueryBatch& queries) {
  const auto start = std::chrono::steady_clock::now();
  CODEC_CHECK(options_.capacity.has_value(), "StepPlanner::plan_into: the options need a capacity to pack at");
  const PlannerOptions used = options_for(forest, queries);
  scratch_.clear();
  PlanStats stats = planning::plan_arrays(forest, heads_, *cost_, used, scratch_, queries);
  Plan::pack_into(scratch_, *options_.capacity, out);
  commit(forest, queries, used, scratch_);
  stats.plan_ms = planning::ms_since(start);
  return stats;
}


}  // namespace codec
