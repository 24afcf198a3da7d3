#pragma once
// The bound search (docs/DESIGN.md §4, the paper's cost_l): what a split
// vector's chunks cost, the fewest chunks that meet a target, the mean block
// load at a target, and whether any plan can finish within a time. Internal
// to the planner (src/plan/).
#include <vector>

#include "codec/cost/cost_model.hpp"
#include "plan/node_class.hpp"

namespace codec::planning {

class BoundSearch {
 public:
  BoundSearch(const CostModel& cost, int align, int kv_heads, int blocks)
      : cost_(cost), align_(align), kv_heads_(kv_heads), blocks_(blocks) {}
  // The head slice searched: kv_heads heads on `blocks` blocks.
  void slice(int kv_heads, int blocks) { kv_heads_ = kv_heads, blocks_ = blocks; }

  double chunk_cost(const NodeClass& c, int splits) const {
    if (splits != c.max_splits) return prices(c, splits, cost_, align_).dearest;
    if (std::isnan(c.finest)) c.finest = finest_cost(c, cost_, align_);
    return c.finest;
  }
  // Σ over one member's tasks (all kv heads) of their predicted cost, times
  // the blocks each takes the place of: the block time the member takes.
  double member_cost(const NodeClass& c, int splits, int busy = 0) const {
    return prices(c, splits, cost_, align_, busy).total * kv_heads_ * c.span;
  }
  // Fewest chunks whose largest costs at most tau. Splitting never lowers the
  // total (b · C(r, n/b) ≥ C(r, n)), so b < C(r, n)/tau cannot meet tau: start
  // there and gallop up.
  int min_splits(const NodeClass& c, double tau) const {
    if (chunk_cost(c, c.max_splits) > tau) return c.max_splits;
    int lo = std::clamp(int(std::ceil(c.unsplit_cost / tau)), 1, c.max_splits);
    if (chunk_cost(c, lo) <= tau) return lo;
    int step = 1, hi = lo;  // invariant: lo fails
    while (true) {
      hi = std::min(c.max_splits, lo + step);
      if (chunk_cost(c, hi) <= tau) break;
      lo = hi, step *= 2;
    }
    while (hi - lo > 1) {
      const int mid = lo + (hi - lo) / 2;
      (chunk_cost(c, mid) <= tau ? hi : lo) = mid;
    }
    return hi;
  }
  // Mean block load when every class takes the fewest chunks meeting tau.
  double mean_load(const std::vector<NodeClass>& classes, double tau) const {
    double total = 0;
    for (const NodeClass& c : classes) total += member_cost(c, min_splits(c, tau)) * double(c.nodes.size());
    return total / blocks_;
  }
  // Could a plan finish within t? Two chunks dearer than t/2 cannot share a
  // block, so there are at most m of them. Each member either keeps chunks of
  // at most t (the fewest: least load, some dearer than t/2) or cuts them to
  // at most t/2 (more load, none dearer). Which members keep the dear chunks
  // is a knapsack over the m places, solved exactly for up to kExactPlaces
  // places and relaxed to fractions beyond (which overstates the load saved):
  // either way "false" proves that no plan finishes within t. Small trees
  // need it: depth:3 has 7 units per head slice for 33 blocks, and the mean
  // bound (8.96 µs) ignores that ~5 chunks per unit do not fit in 33 blocks.
  bool may_finish_within(const std::vector<NodeClass>& classes, double t) const;

 private:
  // Places (blocks) taken by the chunks of one member (all its row tiles and
  // kv heads) dearer than limit: a wide chunk takes span of them.
  double dear_chunks(const NodeClass& c, int splits, double limit) const {
    double n = 0;
    for (const PricedTasks& t : prices(c, splits, cost_, align_).tasks) n += double(t.cost > limit) * t.per_member();
    return n * kv_heads_ * c.span;
  }

  const CostModel& cost_;
  int align_, kv_heads_, blocks_;
};

}  // namespace codec::planning
