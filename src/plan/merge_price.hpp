#pragma once
// The merge's price under a split vector: what it costs depends on the rows
// with more than one partial and the most partials a row has, so the
// requests are grouped by the classes on their paths (a count per class) and
// a split vector is priced per distinct path. Internal to the planner (src/plan/).
#include <cstdint>
#include <utility>
#include <vector>

#include "codec/cost/cost_model.hpp"
#include "codec/forest/forest.hpp"
#include "plan/node_class.hpp"

namespace codec::planning {

class MergePrice {
 public:
  // The paths of the forest's requests over the classes node_class gives
  // each node (−1: none). Without it the price is 0, as for a cost model
  // that prices no merge.
  void build(const Forest& forest, const std::vector<int>& node_class);
  // The cost model's price of the merge of split vector s, whose rows are
  // G query heads of each request on each of kv_heads heads.
  double operator()(const std::vector<NodeClass>& classes, const std::vector<int>& s, const CostModel& cost, int align,
                    int group, int kv_heads);

 private:
  // Each distinct path as (class, its nodes on the path) pairs, and its requests.
  std::vector<std::pair<std::vector<std::pair<int, int>>, std::int64_t>> paths_;
  std::vector<int> chunks_;  // a class's chunks under the split vector priced
};

}  // namespace codec::planning
