// The planner's LPT scheduler (src/plan/lpt.hpp) on its own: its fast paths
// (a merge of sorted slots for groups of fewer items than blocks, water
// filling for larger ones) against the textbook greedy, item by item onto the
// least-loaded block, over random groups; its early stop at a limit; and
// blocks that start loaded.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <tuple>
#include <vector>

#include "plan/lpt.hpp"

namespace codec::planning {
namespace {

using Assignment = std::tuple<int, std::int64_t, int>;  // (group seq, item, block)

// The greedy LPT the scheduler must equal: groups by cost, dearest first (ties
// in seq order); each item onto the least-loaded block (ties to the lower
// block); a group's items numbered round by round over the blocks that took them.
double greedy(std::vector<TaskGroup> groups, int blocks, std::vector<double> load,
              std::vector<Assignment>& assigned) {
  std::stable_sort(groups.begin(), groups.end(), [](const TaskGroup& a, const TaskGroup& b) {
    return a.cost > b.cost || (a.cost == b.cost && a.seq < b.seq);
  });
  double peak = load.empty() ? 0 : *std::max_element(load.begin(), load.end());
  for (const TaskGroup& g : groups) {
    std::vector<std::int64_t> take(blocks, 0);
    for (std::int64_t i = 0; i < g.count; ++i) {
      int best = 0;
      for (int b = 1; b < blocks; ++b) best = load[b] < load[best] ? b : best;
      load[best] += g.cost;
      ++take[best];
      peak = std::max(peak, load[best]);
    }
    std::int64_t item = 0;
    for (std::int64_t round = 0; round < *std::max_element(take.begin(), take.end()); ++round)
      for (int b = 0; b < blocks; ++b)
        if (take[b] > round) assigned.emplace_back(g.seq, item++, b);
  }
  return peak;
}

std::vector<TaskGroup> random_groups(std::mt19937& rng, int blocks) {
  std::vector<TaskGroup> groups;
  const int n = 1 + int(rng() % 12);
  std::uniform_int_distribution<int> level(1, 6);  // few distinct costs: ties between groups and blocks
  for (int g = 0; g < n; ++g) {
    // Groups of fewer items than blocks and of more (up to 3 rounds).
    const std::int64_t count = 1 + std::int64_t(rng() % (3 * blocks));
    groups.push_back({level(rng) * 0.25, g, false, 0, 1, 0, 1, count, g});
  }
  return groups;
}

TEST(Lpt, EqualsTheGreedyItemByItem) {
  std::mt19937 rng(7);
  Lpt lpt;  // one scheduler for every case: its buffers are reused, as the planner's are
  for (int trial = 0; trial < 400; ++trial) {
    const int blocks = 1 + int(rng() % 40);
    const std::vector<TaskGroup> groups = random_groups(rng, blocks);
    std::vector<double> start;
    if (trial % 3 == 0) {  // blocks that start loaded (after a plan's wide blocks)
      std::uniform_int_distribution<int> at(0, 8);
      for (int b = 0; b < blocks; ++b) start.push_back(at(rng) * 0.5);
    }
    std::vector<Assignment> want, got;
    const double expect = greedy(groups, blocks, start.empty() ? std::vector<double>(blocks, 0.0) : start, want);
    std::vector<TaskGroup> work = groups;
    const double makespan =
        lpt(work, blocks, [&](const TaskGroup& g, std::int64_t item, int b) { got.emplace_back(g.seq, item, b); },
            INFINITY, start.empty() ? nullptr : &start);
    ASSERT_DOUBLE_EQ(makespan, expect) << "trial " << trial << ", " << blocks << " blocks";
    ASSERT_EQ(got, want) << "trial " << trial << ", " << blocks << " blocks";
    // Without an assign callback: the same makespan.
    work = groups;
    EXPECT_DOUBLE_EQ(lpt(work, blocks, NoAssign{}, INFINITY, start.empty() ? nullptr : &start), expect);
  }
}

TEST(Lpt, StopsOnceABlockReachesTheLimit) {
  // 10 items of 1.0 on 3 blocks: loads 4, 3, 3. A limit of 2 stops early
  // with a load of at least 2, never below it; a limit above the makespan
  // changes nothing.
  Lpt lpt;
  std::vector<TaskGroup> groups = {{1.0, 0, false, 0, 1, 0, 1, 10, 0}};
  EXPECT_DOUBLE_EQ(lpt(groups, 3, NoAssign{}), 4.0);
  EXPECT_GE(lpt(groups, 3, NoAssign{}, 2.0), 2.0);
  EXPECT_DOUBLE_EQ(lpt(groups, 3, NoAssign{}, 100.0), 4.0);
  const std::vector<double> start = {5.0, 0.0, 0.0};
  EXPECT_DOUBLE_EQ(lpt(groups, 3, NoAssign{}, 5.0, &start), 5.0);  // a start load already at the limit
  EXPECT_DOUBLE_EQ(lpt(groups, 3, NoAssign{}, INFINITY, &start), 5.0);  // 10 items: 5 and 5 beside the 5
  EXPECT_EQ(lpt.loads(), (std::vector<double>{5.0, 5.0, 5.0}));
}

TEST(Lpt, NeighbouringItemsGoToDifferentBlocks) {
  // The row tiles of one chunk are neighbouring items: handed out round by
  // round, they run at the same time on different blocks (and share the
  // chunk through L2).
  Lpt lpt;
  std::vector<TaskGroup> groups = {{2.0, 0, false, 0, 1, 0, 1, 8, 0}};
  std::vector<int> block_of;
  lpt(groups, 4, [&](const TaskGroup&, std::int64_t item, int b) {
    EXPECT_EQ(item, std::int64_t(block_of.size()));
    block_of.push_back(b);
  });
  EXPECT_EQ(block_of, (std::vector<int>{0, 1, 2, 3, 0, 1, 2, 3}));
}

}  // namespace
}  // namespace codec::planning
