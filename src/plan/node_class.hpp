#pragma once
// Node classes and their pricing: the planner searches split counts over
// classes of nodes that behave alike (equal tokens, rows and tails), and
// prices a class's tasks under a split count through the cost model, once
// per count (a memo). Internal to the planner (src/plan/).
#include <algorithm>
#include <cmath>
#include <compare>
#include <cstdint>
#include <vector>

#include "codec/cost/cost_model.hpp"
#include "plan/lpt.hpp"

namespace codec::planning {

// How b_k chunks cut a node of n tokens: equal chunks of `len` tokens, a
// multiple of the alignment, and a shorter last chunk. Token counts are 64-bit
// here: a node of nearly 2^31 tokens, rounded up to the alignment, must not wrap.
struct Chunking {
  int count;          // chunks actually made (≤ b_k asked for)
  std::int64_t len;   // tokens of every chunk but the last
  std::int64_t last;  // tokens of the last chunk
};
inline Chunking chunking(std::int64_t n, int splits, int align) {
  const std::int64_t per = (n + splits - 1) / splits;
  const std::int64_t len = std::min(n, (per + align - 1) / align * align);
  const std::int64_t count = (n + len - 1) / len;
  return {int(count), len, n - (count - 1) * len};
}

// How a node's rows are cut into row tiles of at most tile_rows: hi tiles of
// rows_hi rows, then lo tiles of rows_hi − 1, so that all differ by ≤ 1 row.
struct RowTiling {
  int hi, lo, rows_hi;
  static RowTiling of(int rows, int tile_rows) {
    const int tiles = (rows + tile_rows - 1) / tile_rows, rows_hi = (rows + tiles - 1) / tiles;
    return {tiles - (rows_hi * tiles - rows), rows_hi * tiles - rows, rows_hi};
  }
  int begin(int tile) const { return tile < hi ? tile * rows_hi : hi * rows_hi + (tile - hi) * (rows_hi - 1); }
  int end(int tile) const { return begin(tile) + (tile < hi ? rows_hi : rows_hi - 1); }
};

// Node positions [begin, end) of the keys some rows see.
struct KeyRange {
  std::int32_t begin = 0, end = 0;
  auto operator<=>(const KeyRange&) const = default;
};

// A task's chunk [begin, end) cut to the keys some row of its tile sees, given
// as the disjoint ranges its rows see of the node (a plan with masks: the
// causal rows of a prefill chunk, windows): its start kept on the chunk
// alignment; one aligned step where no row sees any of it, whose rows then
// write empty partials as masked rows do.
inline void cut_to_seen(const KeyRange* seen, const KeyRange* seen_end, int align, std::int32_t& begin,
                        std::int32_t& end) {
  std::int32_t lo = end, hi = begin;
  for (; seen != seen_end; ++seen) {
    const std::int32_t b = std::max(begin, seen->begin), e = std::min(end, seen->end);
    if (e > b) lo = std::min(lo, b), hi = std::max(hi, e);
  }
  if (hi > lo) begin = lo / align * align, end = hi;
  else end = std::min(end, begin + align);
}

// The same chunk-and-tile rectangle of a class's tasks, at one price: the
// tasks of chunks [chunk_begin, + chunks) and row tiles [tile_begin, + tiles)
// of each member and kv head.
struct PricedTasks {
  double cost;
  int chunk_begin, chunks, tile_begin, tiles;
  std::int64_t per_member() const { return std::int64_t(chunks) * tiles; }
};

// Nodes of the same size and sharing degree (and tails, if any, and keys
// their tiles see, if masked) behave identically: the search runs over these
// classes (1,024 equal leaves are one class).
struct NodeClass {
  std::int64_t tokens = 0;  // its nodes' tokens rounded up to the chunk alignment
  int rows = 0;       // n_q · G
  bool wide = false;  // its tasks are wide (PlannerOptions::wide_tile_rows)
  int span = 1;       // blocks one of its tasks takes the place of: wide_span if wide
  RowTiling tiling{};  // its row tiles (of at most wide_tile_rows rows if wide, else max_tile_rows)
  int max_splits = 1;  // ceil(tokens / align): finer chunks would break alignment
  int tail_tokens = 0;  // tails its row tiles take in, at most (PlannerOptions::wide_tail_tokens)
  int price_tile = 0;   // PlannerOptions::price_tile_tokens if narrow, else 0
  // Where some tile's rows see less than the whole node (masks): the ranges
  // row tile t sees, seen[seen_indptr[t] .. seen_indptr[t + 1]), the same for
  // every member; empty where every row sees every key. A task is priced at
  // the keys it reads (cut_to_seen), so a causal chunk's tiles cost what
  // their rows see rather than the whole chunk.
  std::vector<std::int32_t> seen_indptr;
  std::vector<KeyRange> seen;
  // The tokens a task of len tokens is priced at: whole tiles past the first.
  std::int64_t priced(std::int64_t len) const {
    return price_tile > 0 && len > price_tile ? (len + price_tile - 1) / price_tile * price_tile : len;
  }
  double unsplit_cost = 0;  // its dearest task, unsplit
  mutable double finest = NAN;  // its dearest task at max_splits (finest_cost below), once asked for
  std::vector<int> nodes;   // members, ascending
  // The predicted cost of a member's tasks under a split count, in
  // rectangles of equal price: without masks four (full chunks and the last,
  // tiles of rows_hi rows and of rows_hi − 1), with them runs of tiles within
  // a chunk, consecutive chunks of equal runs as one. The search prices the same split counts over and over (the
  // cost model's interpolation was a sixth of a plan's time at 64 requests),
  // so prices() fills them once: with every block busy, and, where the model
  // prices contention, at the busy count of the split vector last asked for.
  struct Prices {
    std::vector<PricedTasks> tasks;
    double dearest = NAN;  // the dearest task's price
    double total = 0;      // Σ of one member's tasks' prices, one kv head
    int busy = 0;
    int chunks = 0;  // chunking(tokens, splits, align).count, asked for as often
  };
  // The memo: where each split count's prices are in `memo` (−1: not yet), with every block busy and at the
  // busy count last asked for; a few hundred of a node's thousands of counts are ever asked for.
  mutable std::vector<std::int32_t> memo_at, busy_memo_at;
  mutable std::vector<Prices> memo;
  mutable Prices spill_prices;  // the prices of the last split count past the memo (prices below)
};

// Fills p, the prices of split count `splits`, at `busy` (prices below).
void fill_prices(const NodeClass& c, int splits, const CostModel& cost, int align, int busy, NodeClass::Prices& p);

// The dearest task of class c at max_splits, every chunk `align` tokens:
// fill_prices' dearest there, without walking every chunk of every tile
// (640 chunks × 256 tiles for a causal 8,192-token prefill chunk; the bounds
// of the search ask for it, the plan seldom takes it). With masks a tile's
// chunk is shorter than `align` only where the tile sees some of its keys
// and not its last, and each such chunk holds the end of a range the tile sees.
double finest_cost(const NodeClass& c, const CostModel& cost, int align);

// busy: the blocks a plan keeps busy, if fewer than all and the model prices
// contention (CostModel::cost_busy_us); else 0. A chunk is priced with its
// share of the class's tails. The search asks for the same prices thousands of
// times a plan: the memo's lookup is inlined, the pricing is not. The memo
// holds split counts below kMemoSplits (a 65,536-token node at an alignment
// of 16 has 4,096), so that its size does not grow with a node's tokens; a
// larger count is priced afresh into the class's spill entry. As with the
// memo, whose growth moves its entries, a caller reads the prices it gets
// before asking for others.
constexpr int kMemoSplits = 4096;
[[gnu::always_inline]] inline const NodeClass::Prices& prices(const NodeClass& c, int splits, const CostModel& cost,
                                                              int align, int busy = 0) {
  if (splits >= kMemoSplits) [[unlikely]] {
    fill_prices(c, splits, cost, align, busy, c.spill_prices);
    return c.spill_prices;
  }
  std::vector<std::int32_t>& at = busy ? c.busy_memo_at : c.memo_at;
  if (splits >= int(at.size())) [[unlikely]]  // once: every split count the search may ask for
    at.resize(std::size_t(std::min(std::max(splits, c.max_splits) + 1, kMemoSplits)), -1);
  if (at[splits] < 0) [[unlikely]] {
    at[splits] = std::int32_t(c.memo.size());
    fill_prices(c, splits, cost, align, busy, c.memo.emplace_back());
  } else if (c.memo[at[splits]].busy != busy) [[unlikely]] {
    fill_prices(c, splits, cost, align, busy, c.memo[at[splits]]);
  }
  return c.memo[at[splits]];
}

// The task groups of a split vector (one split count per class), into `groups`.
void task_groups(const std::vector<NodeClass>& classes, const std::vector<int>& splits, const CostModel& cost,
                 int align, int kv_heads, int busy, std::vector<TaskGroup>& groups);

// Partial slots and tasks a split vector makes: each chunk of a member gives
// one task per row tile and kv head and one slot per row and kv head.
struct Footprint {
  std::int64_t slots = 0, tasks = 0;
};
Footprint footprint(const std::vector<NodeClass>& classes, const std::vector<int>& splits, int align, int kv_heads);

}  // namespace codec::planning
