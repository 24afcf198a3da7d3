#pragma once
// The planner (docs/DESIGN.md §4): a pure host function from a prefix forest, a head
// configuration and a cost model to a Plan.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "codec/cost/cost_model.hpp"
#include "codec/forest/forest.hpp"
#include "codec/plan/plan.hpp"
#include "codec/plan/queries.hpp"

namespace codec {

enum class SplitPolicy {
  adaptive,  // the paper's search over per-node split counts b_k
  fixed,     // every node split into the same number of chunks (ablation)
  none,      // one chunk per node (ablation: sharing without partitioning)
  // Every split vector within the caps, the least makespan kept: the yardstick
  // for the adaptive search on small trees. Throws when there are more than
  // kMaxExhaustivePlans vectors to try.
  exhaustive,
  // PlannerOptions::given_splits, one count per forest node (StepPlanner's
  // reuse of an earlier search); a vector beyond the workspace falls back to
  // the adaptive search.
  given,
};
inline constexpr long kMaxExhaustivePlans = 200000;
// Least PlannerOptions::beside_wide_price: 4× a task's speed with every
// block busy, past the 1.65-2.3× a task gained with 1/64 of the blocks busy
// (b0d6d8e; docs/DESIGN_NOTES.md, Planner 11); lower prices only distort
// the schedule.
inline constexpr double kMinBesideWidePrice = 0.25;

struct PlannerOptions {
  int num_blocks = 0;        // m: blocks that run concurrently (GPU: SMs × blocks per SM; CPU: threads)
  int max_tile_rows = 64;    // query rows one task holds; more rows make several row tiles
  // Wide tasks (the CUDA engine's wide kernel): a node with more than
  // max_tile_rows rows (per kv head) is cut into row tiles of at most
  // wide_tile_rows rows instead, each run by a wide block, which takes the
  // place of wide_span blocks (one SM's). Wide blocks run first; the blocks
  // then start as they leave (docs/DESIGN_NOTES.md, Planner 13). 0: none.
  int wide_tile_rows = 0;
  int wide_span = 2;
  // Fewest rows a wide task must hold (its node's rows over its wide tiles),
  // and fewest tokens its node must have, or the node keeps tasks of
  // max_tile_rows; most rows its node may have where some of them see less
  // than all of it (0: any), past which a masked node (a long causal chunk)
  // may run faster on the PAC kernel.
  int wide_min_rows = 0;
  int wide_min_tokens = 0;
  int wide_max_masked_rows = 0;
  // Most KV tokens of a wide task's chunk in plans the adaptive and
  // exhaustive searches choose (0: any): after the search a wide node of n
  // tokens takes at least ceil(n / wide_max_chunk_tokens) chunks where the
  // workspace holds them. Fixed, given and unsplit plans keep their counts.
  int wide_max_chunk_tokens = 0;
  // Tails: a request's last node, when it holds that request alone and at
  // most this many tokens and its parent's tasks are wide, has no tasks of
  // its own; the parent's chunks attend each of their rows to an equal share
  // of the row's tail (PlanView::task_tails). The tail's tasks, a DRAM round
  // trip chain each, and, where the parent is one chunk, the merge of its
  // rows go away; a wide task computes the tails of all its rows against
  // every row, masked (docs/DESIGN_NOTES.md, Planner 14). 0: none.
  int wide_tail_tokens = 0;
  // The price of a block's tasks while wide blocks still run, relative to the
  // cost table's (timed with every block busy), until the last wide block
  // ends: a compute-bound wide phase leaves DRAM bandwidth to the blocks that
  // start beside it, on the SMs of wide blocks without a task. Batches of
  // one query token a request only: with more, tasks beside wide ones take
  // the table's price. In [kMinBesideWidePrice, 1]; 1: priced as with every
  // block busy (docs/DESIGN_NOTES.md, Planner 13).
  double beside_wide_price = 1;
  int wide_blocks() const { return wide_tile_rows > 0 ? num_blocks / wide_span : 0; }
  // Tail tokens a request may bring (PlanCapacity::for_batches).
  int max_tail_tokens() const { return wide_tile_rows > 0 ? wide_tail_tokens : 0; }
  int chunk_align = 16;      // KV chunk boundaries fall on multiples of this many tokens
  // The kernel's KV tile: a task longer than one tile is priced at its length
  // rounded up to whole tiles, since a short task's time steps with each tile
  // it streams (a tile's load is a DRAM round trip) where the cost table's
  // points, whole tiles, would interpolate linearly between them. 0: tasks
  // are priced at their length.
  int price_tile_tokens = 0;
  SplitPolicy split = SplitPolicy::adaptive;
  int fixed_splits = 1;      // b_k for SplitPolicy::fixed
  // b_k of each forest node for SplitPolicy::given (a plan's node_splits): a
  // class of nodes takes its first node's, clamped to [1, the class's most].
  std::vector<int> given_splits;
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
// (one per qo head of each query token on each node with tokens).
std::int64_t min_slots(const Forest& forest, const HeadConfig& heads, const QueryBatch& queries = {});

// `dtype` is that of the KV cache and queries the plan will run on; a run checks it.
// With several query tokens a request (`queries`), the plan's requests are
// the query tokens (q's and out's rows), and a token that sees less than its
// request's path is masked (PlanView::masks).
Plan make_plan(const Forest& forest, const HeadConfig& heads, DType dtype, const CostModel& cost,
               const PlannerOptions& options, const QueryBatch& queries = {});

// Plans an engine's successive batches (its decode steps), searching split
// counts only when the forest changes shape. As every request grows by a
// token a step, the forest keeps its nodes, their parents and their requests,
// and the split counts of the last search stay close to what a new search
// would pick: they are reused (SplitPolicy::given), with every plan's tasks
// re-balanced over the blocks, until the work (Σ node tokens × requests)
// drifts from that search's by more than `drift` (relative), or the shape
// changes (a request joins, leaves or forks, or its query tokens or their
// mask change kind or count). Every plan is exact. Options other than
// adaptive plan every batch as make_plan does.
class StepPlanner {
 public:
  StepPlanner(const HeadConfig& heads, DType dtype, std::shared_ptr<const CostModel> cost, PlannerOptions options,
              double drift = 0.05);
  Plan plan(const Forest& forest, const QueryBatch& queries = {});
  // The same plan packed at the options' capacity straight into `out`
  // (Plan::pack_into: only what a run reads is written); its stats.
  PlanStats plan_into(const Forest& forest, std::span<std::byte> out, const QueryBatch& queries = {});
  std::int64_t searches() const { return searches_; }  // plans whose split counts were searched
  std::int64_t plans() const { return plans_; }

 private:
  PlannerOptions options_for(const Forest& forest, const QueryBatch& queries) const;
  void commit(const Forest& forest, const QueryBatch& queries, const PlannerOptions& used, const PlanArrays& a);
  bool same_shape(const Forest& forest, const QueryBatch& queries) const;
  HeadConfig heads_;
  DType dtype_;
  std::shared_ptr<const CostModel> cost_;
  PlannerOptions options_;
  double drift_;
  Forest searched_;          // the forest of the last search (its shape and tokens)
  std::vector<std::int32_t> searched_qo_;  // and its query tokens (QueryBatch::qo_indptr) and mask
  QueryMask searched_mask_ = QueryMask::causal;
  std::vector<int> splits_;  // that search's node_splits
  PlanArrays scratch_;       // plan_into's arrays, their capacity kept across steps
  std::int64_t searches_ = 0, plans_ = 0;
};

}  // namespace codec
