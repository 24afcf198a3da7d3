// A node class's prices (src/plan/node_class.hpp) on their own: finest_cost,
// which prices the finest chunks from the ends of the ranges each row tile
// sees, against fill_prices walking every chunk of every tile, over random
// classes with and without masks, tails, wide tasks, and cost models that
// do and do not grow with the keys.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "codec/cost/cost_model.hpp"
#include "plan/node_class.hpp"

namespace codec::planning {
namespace {

// A class of `chunks` chunks of `align` tokens whose row tiles see random
// ranges: none, whole, ends on and off the chunk boundaries, several a tile.
NodeClass random_class(std::mt19937& rng, int align, int chunks) {
  auto draw = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  NodeClass c;
  c.tokens = std::int64_t(align) * chunks;
  c.max_splits = chunks;
  c.rows = draw(1, 300);
  c.wide = draw(0, 3) == 0;
  c.span = c.wide ? 2 : 1;
  c.tiling = RowTiling::of(c.rows, c.wide ? 128 : 16);
  c.tail_tokens = draw(0, 1) ? draw(1, 40) : 0;
  c.price_tile = c.wide ? 0 : 32;
  const int tokens = int(c.tokens);
  c.seen_indptr.assign(1, 0);
  for (int t = 0; t < c.tiling.hi + c.tiling.lo; ++t) {
    switch (draw(0, 5)) {
      case 0: break;  // sees nothing
      case 1: c.seen.push_back({0, tokens}); break;
      case 2: c.seen.push_back({0, draw(1, tokens)}); break;  // causal
      case 3: c.seen.push_back({draw(0, align) * draw(0, chunks - 1) / align, tokens}); break;  // on a boundary or not
      default: {  // several disjoint ranges
        for (int at = draw(0, align); at < tokens;) {
          const int end = std::min(tokens, at + draw(1, 2 * align));
          c.seen.push_back({at, end});
          at = end + draw(1, 3 * align);
        }
      }
    }
    c.seen_indptr.push_back(std::int32_t(c.seen.size()));
  }
  return c;
}

// A measured-like table that gets cheaper with more keys in places (noise),
// so that the dearest task need not be the longest.
CostTable bumpy_table() {
  CostTable t;
  t.device = "test";
  t.head_dim = 128;
  t.rows = {1, 16, 64};
  t.kv_len = {1, 8, 16, 24, 64, 256};
  t.us = {{3, 2, 4, 3.5, 6, 9}, {4, 3, 5, 4.5, 8, 12}, {6, 5, 7, 6.5, 11, 20}};
  t.wide_rows = {64, 128};
  t.wide_us = {{7, 6, 8, 7.5, 12, 21}, {9, 8, 10, 9.5, 15, 30}};
  return t;
}

TEST(NodeClass, FinestCostIsTheDearestTaskAtMaxSplits) {
  const RooflineCostModel roofline(RooflineParams::h200(), HeadConfig{32, 8, 128}, DType::bf16);
  const TableCostModel bumpy(bumpy_table());
  std::mt19937 rng(11);
  int masked = 0, short_chunks = 0;
  for (int trial = 0; trial < 600; ++trial) {
    const int align = trial % 3 == 0 ? 1 : trial % 3 == 1 ? 16 : 64;
    const int chunks = std::uniform_int_distribution<int>(1, trial % 5 == 0 ? 400 : 12)(rng);
    NodeClass c = random_class(rng, align, chunks);
    if (trial % 7 == 0) c.seen_indptr.clear(), c.seen.clear();  // unmasked
    masked += !c.seen_indptr.empty();
    for (const CostModel* cost : {static_cast<const CostModel*>(&roofline), static_cast<const CostModel*>(&bumpy)}) {
      NodeClass::Prices walked;
      fill_prices(c, c.max_splits, *cost, align, 0, walked);
      EXPECT_DOUBLE_EQ(finest_cost(c, *cost, align), walked.dearest)
          << "trial " << trial << ": align " << align << ", " << chunks << " chunks, " << c.rows << " rows";
    }
    for (std::size_t i = 0; i < c.seen.size(); ++i) short_chunks += c.seen[i].end % align != 0;
  }
  EXPECT_GT(masked, 400);  // the draws reach what the test is about
  EXPECT_GT(short_chunks, 1000);
}

}  // namespace
}  // namespace codec::planning
