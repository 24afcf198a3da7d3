#pragma once
// The planner (docs/DESIGN.md §4): a pure host function from a prefix forest, a head
// configuration and a cost model to a Plan.
#include <cstdint>
#include <optional>

#include "codec/cost/cost_model.hpp"
#include "codec/forest/forest.hpp"
#include "codec/plan/plan.hpp"

namespace codec {

enum class SplitPolicy {
  adaptive,  // the paper's search over per-node split counts b_k
  fixed,     // every node split into the same number of chunks (ablation)
  none,      // one chunk per node (ablation: sharing without partitioning)
  // Every split vector within the caps, the least makespan kept: the yardstick
  // for the adaptive search on small trees. Throws when there are more than
  // kMaxExhaustivePlans vectors to try.
  exhaustive,
};
inline constexpr long kMaxExhaustivePlans = 200000;

struct PlannerOptions {
  int num_blocks = 0;        // m: blocks that run concurrently (GPU: SMs × blocks per SM; CPU: threads)
  int max_tile_rows = 64;    // query rows one task holds; more rows make several row tiles
  int chunk_align = 16;      // KV chunk boundaries fall on multiples of this many tokens
  SplitPolicy split = SplitPolicy::adaptive;
  int fixed_splits = 1;      // b_k for SplitPolicy::fixed
  // Most partial slots the plan may use (0: no limit), as a workspace of a
  // given size holds (cuda_plan_capacity, cpu_workspace_slots): the search
  // keeps to split vectors within it, and a forest that needs more even
  // unsplit is an error naming both counts.
  std::int64_t max_slots = 0;
  // Packs the plan at this capacity (PlanCapacity): its slots and tasks bound
  // the search as max_slots does, and a forest beyond its other sizes is an error.
  std::optional<PlanCapacity> capacity;
  void validate() const;
};

// Partial slots of the forest's unsplit plan: the fewest any plan of it uses
// (one per qo head of each request on each node with tokens).
std::int64_t min_slots(const Forest& forest, const HeadConfig& heads);

// `dtype` is that of the KV cache and queries the plan will run on; a run checks it.
Plan make_plan(const Forest& forest, const HeadConfig& heads, DType dtype, const CostModel& cost,
               const PlannerOptions& options);

}  // namespace codec
