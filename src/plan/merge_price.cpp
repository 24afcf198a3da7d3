#include "plan/merge_price.hpp"

#include <algorithm>
#include <unordered_map>

namespace codec::planning {

namespace {

struct PathHash {
  std::size_t operator()(const std::vector<std::pair<int, int>>& v) const {
    std::size_t h = v.size();
    for (const auto& [c, k] : v) h = (h ^ std::size_t(c)) * 0x100000001b3ull ^ std::size_t(k) * 0x9e3779b97f4a7c15ull;
    return h;
  }
};

}  // namespace

void MergePrice::build(const Forest& forest, const std::vector<int>& node_class) {
  std::unordered_map<std::vector<std::pair<int, int>>, std::int64_t, PathHash> requests_of;
  std::vector<int> on_path;
  std::vector<std::pair<int, int>> counts;
  for (int r = 0; r < forest.num_requests(); ++r) {
    on_path.clear();
    for (int x = forest.request_node[r]; x >= 0; x = forest.nodes[x].parent)
      if (node_class[x] >= 0) on_path.push_back(node_class[x]);
    std::sort(on_path.begin(), on_path.end());
    counts.clear();
    for (const int c : on_path) {
      if (counts.empty() || counts.back().first != c) counts.push_back({c, 0});
      ++counts.back().second;
    }
    ++requests_of[counts];
  }
  paths_.assign(requests_of.begin(), requests_of.end());  // any order: the price sums and takes a max
}

double MergePrice::operator()(const std::vector<NodeClass>& classes, const std::vector<int>& s, const CostModel& cost,
                              int align, int group, int kv_heads) {
  if (paths_.empty()) return 0;
  chunks_.resize(classes.size());
  for (std::size_t ci = 0; ci < classes.size(); ++ci) chunks_[ci] = prices(classes[ci], s[ci], cost, align).chunks;
  std::int64_t requests = 0;
  int most = 0;
  for (const auto& [counts, n] : paths_) {
    int partials = 0;
    for (const auto& [c, k] : counts) partials += k * chunks_[c];
    if (partials > 1) requests += n;
    most = std::max(most, partials);
  }
  return requests ? cost.merge_us(requests * group * kv_heads, most) : 0;
}

}  // namespace codec::planning
