#include "plan/bound_search.hpp"

#include <algorithm>

namespace codec::planning {

namespace {

// Blocks per head slice up to which the packing bound's knapsack is exact
// (places × bundles additions); beyond, its fractional relaxation. The H200's
// slices have 33 places for 8 or 32 KV heads and 264 for MQA, where exact and
// relaxed bounds agree to 0.02% (geomean) at the same planning time; the cap
// only keeps a --blocks of millions from an outsized table.
constexpr double kExactPlaces = 128;

}  // namespace

bool BoundSearch::may_finish_within(const std::vector<NodeClass>& classes, double t) const {
  struct Option {
    double saving, places, members;
  };
  std::vector<Option> options;
  double load = 0, places = blocks_;
  for (const NodeClass& c : classes) {
    if (chunk_cost(c, c.max_splits) > t) return false;
    const double members = double(c.nodes.size());
    const int coarse = min_splits(c, t);
    const double coarse_load = member_cost(c, coarse), dear = dear_chunks(c, coarse, t / 2);
    if (chunk_cost(c, c.max_splits) > t / 2) {  // cannot avoid dear chunks
      load += coarse_load * members;
      places -= dear * members;
      continue;
    }
    const double fine_load = member_cost(c, min_splits(c, t / 2));
    load += fine_load * members;
    if (dear > 0 && fine_load > coarse_load) options.push_back({fine_load - coarse_load, dear, members});
  }
  if (places < 0) return false;
  if (places <= kExactPlaces) {  // 0/1 knapsack over the places, members in binary bundles
    std::vector<double> best(int(places) + 1, 0.0);  // best[p]: most load saved within p places
    for (const Option& o : options)
      for (double left = o.members, bundle = 1; left > 0; left -= bundle, bundle *= 2) {
        const double n = std::min(bundle, left);
        const int w = int(n * o.places);
        for (int p = int(places); p >= w; --p) best[p] = std::max(best[p], best[p - w] + n * o.saving);
      }
    return load - best.back() <= blocks_ * t;
  }
  std::sort(options.begin(), options.end(),
            [](const Option& a, const Option& b) { return a.saving * b.places > b.saving * a.places; });
  for (const Option& o : options) {
    const double take = std::min(o.members, places / o.places);
    load -= take * o.saving;
    places -= take * o.places;
    if (places <= 0) break;
  }
  return load <= blocks_ * t;
}

}  // namespace codec::planning
