#pragma once
// The planner's scheduler: longest-processing-time-first list scheduling of
// groups of identical tasks onto blocks (docs/DESIGN.md §4). Internal to the
// planner (src/plan/); tested on its own (tests/plan/test_lpt.cpp).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>
#include <utility>
#include <vector>

namespace codec::planning {

// Identical tasks: `count` of them cost `cost` each, the tasks of chunks
// [chunk_begin, + chunks) and row tiles [tile_begin, + tiles) of each member
// and kv head of class `cls`. Item ((member · kv heads + head) · chunks +
// chunk) · tiles + tile is numbered so that the row tiles of one chunk are
// neighbours.
struct TaskGroup {
  double cost;
  int cls;
  bool wide;  // its class's tasks are wide
  int chunk_begin, chunks, tile_begin, tiles;
  std::int64_t count;
  int seq;  // its place in task_groups' order: among equal costs, the earlier goes first
};

// Longest-processing-time-first onto the least-loaded block, a group of equal
// items at a time: item i of a group goes to the block whose next free slot
// (its load plus a multiple of the item's cost) is the i-th lowest, ties to the
// lower block. Items are numbered round by round, so items next to each other
// (the row tiles of one chunk) run at the same time on different blocks and
// share the chunk through L2. assign(group, item, block), or NoAssign when only
// the makespan is wanted. Blocks start at the loads `start` gives (all 0
// without), as the blocks after a plan's wide blocks do.
//
// Two ways to find a group's slots, both exact. Fewer items than blocks (most
// groups of small trees: 3,053 of 3,089 at 64 requests): a merge of the
// blocks' first slots, kept sorted by load, with the FIFO of the slots the
// group's items open behind them (they open in increasing order), O(k + m)
// instead of a scan of the m blocks per item. More: water-filling, a
// bisection for the level below which the group has all but fewer than m of
// its slots, O(m) per step instead of a search per item (3 steps per group on
// average at 1,024 requests, whose groups hold up to thousands of items).
// The buffers are kept across the ~80 schedules a search asks for.
struct NoAssign {};

class Lpt {
 public:
  // The makespan; or, as soon as a block's load reaches `limit`, that load
  // (loads only grow, so the makespan is no less: a search rejecting plans
  // that do not beat its best stops there).
  template <typename Assign>
  double operator()(std::vector<TaskGroup>& groups, int blocks, Assign&& assign, double limit = INFINITY,
                    const std::vector<double>* start = nullptr);
  const std::vector<double>& loads() const { return load_; }  // each block's, after the last call

 private:
  using Slot = std::pair<double, int>;  // (load or slot, block), ordered as ties are broken
  std::vector<double> load_;
  std::vector<std::int64_t> take_;
  std::vector<Slot> sorted_, merged_, opened_;
  std::vector<int> order_;
};

template <typename Assign>
double Lpt::operator()(std::vector<TaskGroup>& groups, int blocks, Assign&& assign, double limit,
                       const std::vector<double>* start) {
  std::sort(groups.begin(), groups.end(), [](const TaskGroup& a, const TaskGroup& b) {
    return a.cost > b.cost || (a.cost == b.cost && a.seq < b.seq);
  });
  if (start) load_.assign(start->begin(), start->end());
  else load_.assign(blocks, 0.0);
  take_.assign(blocks, 0);
  auto lower = [](const Slot& x, const Slot& y) {
    return x.first < y.first || (x.first == y.first && x.second < y.second);
  };
  // Every block's (load, block), ascending, for the few-item groups (opened_:
  // the next slots a group's items open, ascending); a water-filled group
  // leaves it stale until the next few-item group.
  sorted_.resize(blocks);
  merged_.resize(blocks);
  for (int b = 0; b < blocks; ++b) sorted_[b] = {load_[b], b};
  if (start) std::sort(sorted_.begin(), sorted_.end(), lower);
  bool stale = false;
  order_.resize(blocks);
  double peak = start ? *std::max_element(load_.begin(), load_.end()) : 0;
  if (peak >= limit) return peak;
  auto hand_out = [&](std::size_t g) {  // group g's take_, item by item, round by round
    if constexpr (!std::is_same_v<std::remove_cvref_t<Assign>, NoAssign>) {
      std::int64_t item = 0, most = 0;
      for (int b = 0; b < blocks; ++b) most = std::max(most, take_[b]);
      for (std::int64_t round = 0; round < most; ++round)
        for (int b = 0; b < blocks; ++b)
          if (take_[b] > round) assign(groups[g], item++, b);
    }
  };
  for (std::size_t g = 0; g < groups.size(); ++g) {
    const double c = groups[g].cost, inv_c = 1.0 / c;
    const std::int64_t k = groups[g].count;
    if (k < blocks) {
      if (stale) {
        for (int b = 0; b < blocks; ++b) sorted_[b] = {load_[b], b};
        std::sort(sorted_.begin(), sorted_.end(), lower);
        stale = false;
      }
      opened_.clear();
      int touched = 0;  // sorted_[0 .. touched) take items
      std::size_t reused = 0;
      for (std::int64_t i = 0; i < k; ++i) {  // touched ≤ i < k < blocks: a first slot is always left
        const bool reuse = reused < opened_.size() && lower(opened_[reused], sorted_[touched]);
        const Slot slot = reuse ? opened_[reused++] : sorted_[touched++];
        ++take_[slot.second];
        opened_.push_back({slot.first + c, slot.second});
      }
      hand_out(g);
      for (int i = 0; i < touched; ++i) {
        const int b = sorted_[i].second;
        sorted_[i].first = load_[b] += double(take_[b]) * c;
        peak = std::max(peak, load_[b]);
        take_[b] = 0;
      }
      if (peak >= limit) return peak;
      // The untouched blocks stay in order; the touched ones are re-sorted and merged in.
      std::sort(sorted_.begin(), sorted_.begin() + touched, lower);
      std::merge(sorted_.begin(), sorted_.begin() + touched, sorted_.begin() + touched, sorted_.end(), merged_.begin(),
                 lower);
      sorted_.swap(merged_);
      continue;
    }
    // slots(level): items that fit strictly below level, over all blocks.
    auto slots = [&](double level) {
      std::int64_t n = 0;
      for (int b = 0; b < blocks; ++b) n += std::int64_t(std::ceil(std::max(0.0, (level - load_[b]) * inv_c)));
      return n;
    };
    const auto [low_it, high_it] = std::minmax_element(load_.begin(), load_.end());
    double lo = *low_it, hi = *high_it + double(k / blocks + 1) * c;
    // Once hi − lo < c, each block has at most one slot in (lo, hi], so the
    // k − slots(lo) items left are fewer than m and placed exactly below.
    while (hi - lo >= 0.5 * c) {  // slots(lo) ≤ k < slots(hi)
      const double mid = 0.5 * (lo + hi);
      (slots(mid) <= k ? lo : hi) = mid;
    }
    std::int64_t placed = 0;
    for (int b = 0; b < blocks; ++b)
      placed += take_[b] = std::int64_t(std::ceil(std::max(0.0, (lo - load_[b]) * inv_c)));
    // The remaining k − placed < m items: one each to the lowest next slots.
    for (int b = 0; b < blocks; ++b) order_[b] = b;
    const std::int64_t rest = k - placed;
    auto next_slot = [&](int b) { return load_[b] + double(take_[b]) * c; };
    std::nth_element(order_.begin(), order_.begin() + rest, order_.end(), [&](int x, int y) {
      return next_slot(x) < next_slot(y) || (next_slot(x) == next_slot(y) && x < y);
    });
    for (std::int64_t i = 0; i < rest; ++i) ++take_[order_[i]];
    hand_out(g);
    for (int b = 0; b < blocks; ++b) load_[b] += double(take_[b]) * c, take_[b] = 0, peak = std::max(peak, load_[b]);
    if (peak >= limit) return peak;
    stale = true;
  }
  return peak;
}


}  // namespace codec::planning
