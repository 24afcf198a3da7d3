#include "codec/plan/planner.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>
#include <set>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

#include "codec/core/error.hpp"

namespace codec {

void PlannerOptions::validate() const {
  CODEC_CHECK(num_blocks >= 1, "planner num_blocks ", num_blocks, " must be >= 1");
  CODEC_CHECK(max_tile_rows >= 1, "planner max_tile_rows ", max_tile_rows, " must be >= 1");
  CODEC_CHECK(chunk_align >= 1, "planner chunk_align ", chunk_align, " must be >= 1");
  CODEC_CHECK(fixed_splits >= 1, "planner fixed_splits ", fixed_splits, " must be >= 1");
  CODEC_CHECK(max_slots >= 0, "planner max_slots ", max_slots, " must be >= 0");
  CODEC_CHECK(wide_tile_rows == 0 || wide_tile_rows >= max_tile_rows, "planner wide_tile_rows ", wide_tile_rows,
              " must be 0 or >= max_tile_rows ", max_tile_rows);
  CODEC_CHECK(wide_tile_rows == 0 || (wide_span >= 1 && num_blocks % wide_span == 0), "planner wide_span ",
              wide_span, " must be >= 1 and divide num_blocks ", num_blocks);
  CODEC_CHECK(wide_min_rows >= 0 && wide_min_tokens >= 0, "planner wide_min_rows ", wide_min_rows,
              " and wide_min_tokens ", wide_min_tokens, " must be >= 0");
  CODEC_CHECK(wide_tail_tokens >= 0, "planner wide_tail_tokens ", wide_tail_tokens, " must be >= 0");
  CODEC_CHECK(beside_wide_price >= kMinBesideWidePrice && beside_wide_price <= 1, "planner beside_wide_price ",
              beside_wide_price, " must be in [", kMinBesideWidePrice, ", 1]");
  CODEC_CHECK(price_tile_tokens >= 0, "planner price_tile_tokens ", price_tile_tokens, " must be >= 0");
  if (capacity) {
    capacity->validate();
    CODEC_CHECK(capacity->blocks == num_blocks, "planner capacity of ", capacity->blocks,
                " blocks differs from num_blocks ", num_blocks);
    CODEC_CHECK(capacity->wide_blocks == wide_blocks(), "planner capacity of ", capacity->wide_blocks,
                " wide blocks differs from the options' ", wide_blocks());
  }
}

std::int64_t min_slots(const Forest& forest, const HeadConfig& heads) {
  std::int64_t rows = 0;
  for (const ForestNode& n : forest.nodes)
    if (n.num_tokens > 0) rows += n.num_reqs;
  return rows * heads.num_qo_heads;
}

namespace {

constexpr double kCapFactor = 8;  // see Planning::choose_splits
// Classes the final pattern search may change, those with the dearest chunks.
// On the 32 built-in workloads (qwen3-4b, the H200 table, `codec plan
// --workload all`) the makespan over the bound is 1.0351 (geomean) with no
// polish, 1.0287 with 1 class, 1.0285–1.0286 with 2, 4 or 8, 1.0283 with all,
// which takes 2.5× the time on loogle:16 (4.5 ms against 1.7): 4 keeps the
// gain with a margin (results/cpu/planner_constants).
constexpr std::size_t kPolishClasses = 4;
// Blocks per head slice up to which the packing bound's knapsack is exact
// (places × bundles additions); beyond, its fractional relaxation. The H200's
// slices have 33 places for 8 or 32 KV heads and 264 for MQA, where exact and
// relaxed bounds agree to 0.02% (geomean) at the same planning time; the cap
// only keeps a --blocks of millions from an outsized table.
constexpr double kExactPlaces = 128;

// How b_k chunks cut a node of n tokens: equal chunks of `len` tokens, a
// multiple of the alignment, and a shorter last chunk. Token counts are 64-bit
// here: a node of nearly 2^31 tokens, rounded up to the alignment, must not wrap.
struct Chunking {
  int count;          // chunks actually made (≤ b_k asked for)
  std::int64_t len;   // tokens of every chunk but the last
  std::int64_t last;  // tokens of the last chunk
};
Chunking chunking(std::int64_t n, int splits, int align) {
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

// Nodes of the same size and sharing degree (and tails, if any) behave
// identically: the search runs over these classes (1,024 equal leaves are
// one class).
struct NodeClass {
  std::int64_t tokens = 0;  // its nodes' tokens rounded up to the chunk alignment
  int rows = 0;       // n_q · G
  bool wide = false;  // its tasks are wide (PlannerOptions::wide_tile_rows)
  int span = 1;       // blocks one of its tasks takes the place of: wide_span if wide
  RowTiling tiling{};  // its row tiles (of at most wide_tile_rows rows if wide, else max_tile_rows)
  int max_splits = 1;  // ceil(tokens / align): finer chunks would break alignment
  int tail_tokens = 0;  // tails its row tiles take in, at most (PlannerOptions::wide_tail_tokens)
  int price_tile = 0;   // PlannerOptions::price_tile_tokens if narrow, else 0
  // The tokens a task of len tokens is priced at: whole tiles past the first.
  std::int64_t priced(std::int64_t len) const {
    return price_tile > 0 && len > price_tile ? (len + price_tile - 1) / price_tile * price_tile : len;
  }
  double unsplit_cost = 0;  // C(rows_hi, tokens + tail_tokens)
  std::vector<int> nodes;   // members, ascending
  // The predicted cost of one task under a split count: a full chunk and the
  // last, of a tile of rows_hi rows and of rows_hi − 1. The search prices the
  // same split counts over and over (the cost model's interpolation was a
  // sixth of a plan's time at 64 requests), so prices() fills them once: with
  // every block busy, and, where the model prices contention, at the busy
  // count of the split vector last asked for.
  struct Prices {
    double full_hi = NAN, last_hi = 0, full_lo = 0, last_lo = 0;
    int busy = 0;
    int chunks = 0;  // chunking(tokens, splits, align).count, asked for as often
  };
  mutable std::vector<Prices> prices_by_splits, busy_prices_by_splits;
};

// Fills p, the prices of split count `splits`, at `busy` (prices below).
[[gnu::noinline]] void fill_prices(const NodeClass& c, int splits, const CostModel& cost, int align, int busy,
                                   NodeClass::Prices& p) {
  const Chunking k = chunking(c.tokens, splits, align);
  auto price = [&](int rows, std::int64_t len) {
    if (c.wide) return cost.wide_cost_us(rows, len);
    return busy ? cost.cost_busy_us(rows, c.priced(len), busy) : cost.cost_us(rows, c.priced(len));
  };
  const std::int64_t tail = (c.tail_tokens + k.count - 1) / k.count;  // each chunk's share (PlanView::task_tails)
  const int hi = c.tiling.rows_hi;
  p.full_hi = price(hi, k.len + tail);
  p.last_hi = price(hi, k.last + tail);
  if (c.tiling.lo) p.full_lo = price(hi - 1, k.len + tail), p.last_lo = price(hi - 1, k.last + tail);
  p.busy = busy;
  p.chunks = k.count;
}

// busy: the blocks a plan keeps busy, if fewer than all and the model prices
// contention (CostModel::cost_busy_us); else 0. A chunk is priced with its
// share of the class's tails. The search asks for the same prices thousands of
// times a plan: the memo's lookup is inlined, the pricing is not. The memo
// holds split counts below kMemoSplits (a 65,536-token node at an alignment
// of 16 has 4,096), so that its size does not grow with a node's tokens; the
// rare larger count is priced afresh each time.
constexpr int kMemoSplits = 4096;
[[gnu::always_inline]] inline NodeClass::Prices prices(const NodeClass& c, int splits, const CostModel& cost,
                                                       int align, int busy = 0) {
  if (splits >= kMemoSplits) [[unlikely]] {
    NodeClass::Prices p;
    fill_prices(c, splits, cost, align, busy, p);
    return p;
  }
  std::vector<NodeClass::Prices>& memo = busy ? c.busy_prices_by_splits : c.prices_by_splits;
  if (splits >= int(memo.size())) [[unlikely]]
    memo.resize(std::min<std::size_t>(std::max<std::size_t>(splits + 1, 2 * memo.size()), kMemoSplits));
  NodeClass::Prices& p = memo[splits];
  if (std::isnan(p.full_hi) || p.busy != busy) [[unlikely]]
    fill_prices(c, splits, cost, align, busy, p);
  return p;
}

class Search {
 public:
  Search(const CostModel& cost, int align, int kv_heads, int blocks)
      : cost_(cost), align_(align), kv_heads_(kv_heads), blocks_(blocks) {}
  // The head slice searched: kv_heads heads on `blocks` blocks.
  void slice(int kv_heads, int blocks) { kv_heads_ = kv_heads, blocks_ = blocks; }

  double chunk_cost(const NodeClass& c, int splits) const { return prices(c, splits, cost_, align_).full_hi; }
  // Σ over one member's tasks (all kv heads) of their predicted cost, times
  // the blocks each takes the place of: the block time the member takes.
  double member_cost(const NodeClass& c, int splits, int busy = 0) const {
    const NodeClass::Prices p = prices(c, splits, cost_, align_, busy);
    const int full = p.chunks - 1;
    double total = c.tiling.hi * (full * p.full_hi + p.last_hi);
    if (c.tiling.lo) total += c.tiling.lo * (full * p.full_lo + p.last_lo);
    return total * kv_heads_ * c.span;
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
  bool may_finish_within(const std::vector<NodeClass>& classes, double t) const {
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

 private:
  // Places (blocks) taken by the chunks of one member (all its row tiles and
  // kv heads) dearer than limit: a wide chunk takes span of them.
  double dear_chunks(const NodeClass& c, int splits, double limit) const {
    const NodeClass::Prices p = prices(c, splits, cost_, align_);
    const int full = p.chunks - 1;
    double n = c.tiling.hi * (full * (p.full_hi > limit) + (p.last_hi > limit));
    if (c.tiling.lo) n += c.tiling.lo * (full * (p.full_lo > limit) + (p.last_lo > limit));
    return n * kv_heads_ * c.span;
  }

  const CostModel& cost_;
  int align_, kv_heads_, blocks_;
};

// Identical tasks: `count` of them cost `cost` each. Items are numbered
// member-major, then row tile, kv head, chunk (see expand below).
struct TaskGroup {
  double cost;
  int cls;
  bool wide;        // its class's tasks are wide
  bool hi_tiles;    // tiles of rows_hi rows (else rows_hi − 1)
  bool last_chunk;  // the shorter last chunk (else the full ones)
  std::int64_t count;
  int seq;          // its place in task_groups' order: among equal costs, the earlier goes first
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

// The task groups of a split vector, into `groups`.
void task_groups(const std::vector<NodeClass>& classes, const std::vector<int>& splits, const CostModel& cost,
                 int align, int kv_heads, int busy, std::vector<TaskGroup>& groups) {
  groups.clear();
  for (std::size_t ci = 0; ci < classes.size(); ++ci) {
    const NodeClass& c = classes[ci];
    const NodeClass::Prices p = prices(c, splits[ci], cost, align, busy);
    const std::int64_t members = std::int64_t(c.nodes.size()) * kv_heads;
    for (const bool hi : {true, false}) {
      const int tiles = hi ? c.tiling.hi : c.tiling.lo;
      if (tiles == 0) continue;
      const int seq = int(groups.size());
      if (p.chunks > 1)
        groups.push_back(
            {hi ? p.full_hi : p.full_lo, int(ci), c.wide, hi, false, members * tiles * (p.chunks - 1), seq});
      groups.push_back({hi ? p.last_hi : p.last_lo, int(ci), c.wide, hi, true, members * tiles, int(groups.size())});
    }
  }
}

// Partial slots and tasks a split vector makes: each chunk of a member gives
// one task per row tile and kv head and one slot per row and kv head.
struct Footprint {
  std::int64_t slots = 0, tasks = 0;
};
Footprint footprint(const std::vector<NodeClass>& classes, const std::vector<int>& splits, int align, int kv_heads) {
  Footprint f;
  for (std::size_t ci = 0; ci < classes.size(); ++ci) {
    const NodeClass& c = classes[ci];
    const std::int64_t chunks = std::int64_t(chunking(c.tokens, splits[ci], align).count) * c.nodes.size() * kv_heads;
    f.slots += chunks * c.rows;
    f.tasks += chunks * (c.tiling.hi + c.tiling.lo);
  }
  return f;
}

// make_plan's steps over one forest, in order; each step's products are
// members the later steps read.
class Planning {
 public:
  Planning(const Forest& forest, const HeadConfig& heads, const CostModel& cost, const PlannerOptions& opt)
      : forest_(forest), cost_(cost), opt_(opt), G_(heads.group()), kv_heads_(heads.num_kv_heads),
        m_(opt.num_blocks), align_(opt.chunk_align), slices_(std::gcd(m_, kv_heads_)),
        slice_heads_(kv_heads_ / slices_), slice_blocks_(m_ / slices_),
        search_(cost, align_, slice_heads_, slice_blocks_) {}

  // 1. Classes of nodes with work, by (tokens rounded up to the chunk
  // alignment, rows). Rounding keeps every member's chunk count equal to its
  // class's (chunk lengths are multiples of the alignment) and only prices a
  // last chunk up to align − 1 tokens high; it keeps the search small when
  // lengths are all different (1,024 questions of 30–456 tokens: ~27 classes).
  //
  // A node of more than max_tile_rows rows is wide where the options allow
  // (wide_tile_rows) and it pays (wide_pays): its row tiles are wide tasks.
  // Then the wide blocks take a head slice's place of span blocks each, so
  // the slices are cut so that each holds whole wide blocks: g = gcd(m /
  // span, Hkv).
  void classify() {
    find_tails();
    struct Shape {
      std::int64_t tokens;
      int rows, tail;
      bool operator==(const Shape&) const = default;
    };
    struct ShapeHash {
      std::size_t operator()(const Shape& s) const {
        return ((std::size_t(s.tokens) << 32 ^ std::size_t(s.rows)) * 0x9e3779b97f4a7c15ull) ^ std::size_t(s.tail);
      }
    };
    std::unordered_map<Shape, int, ShapeHash> class_of_shape;
    node_class_.assign(forest_.num_nodes(), -1);
    for (int i = 0; i < forest_.num_nodes(); ++i) {
      const ForestNode& n = forest_.nodes[i];
      if (n.num_tokens == 0 || n.num_reqs == 0 || taken_in(i)) continue;
      const int rows = n.num_reqs * G_;
      const std::int64_t tokens = aligned(n.num_tokens);
      const int tail = node_tail_.empty() ? 0 : node_tail_[i];
      auto [it, added] = class_of_shape.try_emplace(Shape{tokens, rows, tail}, int(classes_.size()));
      if (added) {
        NodeClass c;
        c.tokens = tokens;
        c.rows = rows;
        c.wide = goes_wide(rows, tokens);
        c.span = c.wide ? opt_.wide_span : 1;
        c.tiling = RowTiling::of(rows, c.wide ? opt_.wide_tile_rows : opt_.max_tile_rows);
        c.max_splits = int(tokens / align_);
        c.tail_tokens = tail;
        c.price_tile = c.wide ? 0 : opt_.price_tile_tokens;
        c.unsplit_cost = c.wide ? cost_.wide_cost_us(c.tiling.rows_hi, c.tokens + tail)
                                : cost_.cost_us(c.tiling.rows_hi, c.priced(c.tokens));
        wide_ = wide_ || c.wide;
        classes_.push_back(std::move(c));
      }
      node_class_[i] = it->second;
      classes_[it->second].nodes.push_back(i);
    }
    if (wide_) {
      slices_ = std::gcd(m_ / opt_.wide_span, kv_heads_);
      slice_heads_ = kv_heads_ / slices_;
      slice_blocks_ = m_ / slices_;
      search_.slice(slice_heads_, slice_blocks_);
    }
    if (cost_.prices_merge()) merge_paths();
  }

  static int row_tiles(int rows, int tile_rows) { return (rows + tile_rows - 1) / tile_rows; }
  std::int64_t aligned(std::int64_t tokens) const { return (tokens + align_ - 1) / align_ * align_; }
  bool goes_wide(int rows, std::int64_t tokens) const {
    return opt_.wide_tile_rows > 0 && rows > opt_.max_tile_rows && wide_pays(rows, tokens);
  }

  // Tails (PlannerOptions::wide_tail_tokens): request r's last node is a tail
  // when it holds r alone, has 1 .. wide_tail_tokens tokens and its parent's
  // rows go wide; then the parent takes it in (tail_of_[r] is it, else −1),
  // and node_tail_[parent] is the most tail tokens one of its row tiles gets
  // (a tile takes the tail of every request with a row in it). At a capacity
  // the tails must fit its tail tokens, or none is taken in.
  void find_tails() {
    if (opt_.max_tail_tokens() == 0) return;
    const int batch = forest_.num_requests();
    tail_of_.assign(batch, -1);
    std::int64_t total = 0;
    for (int r = 0; r < batch; ++r) {
      const int x = forest_.request_node[r];
      const ForestNode& n = forest_.nodes[x];
      if (n.num_reqs != 1 || n.num_tokens < 1 || n.num_tokens > opt_.wide_tail_tokens || n.parent < 0) continue;
      const ForestNode& p = forest_.nodes[n.parent];
      if (p.num_tokens == 0 || !goes_wide(p.num_reqs * G_, aligned(p.num_tokens))) continue;
      tail_of_[r] = x;
      total += n.num_tokens;
    }
    if (total == 0 || (opt_.capacity && total > opt_.capacity->tail_tokens)) {
      tail_of_.clear();
      return;
    }
    tail_count_ = 0;
    node_tail_.assign(forest_.num_nodes(), 0);
    for (int r = 0; r < batch; ++r) {
      if (tail_of_[r] < 0) continue;
      ++tail_count_;
      const int parent = forest_.nodes[tail_of_[r]].parent;
      if (node_tail_[parent] > 0) continue;  // done
      const ForestNode& p = forest_.nodes[parent];
      const RowTiling tiling = RowTiling::of(p.num_reqs * G_, opt_.wide_tile_rows);
      for (int tile = 0; tile < tiling.hi + tiling.lo; ++tile) {
        int sum = 0;
        for (int k = tiling.begin(tile) / G_; k <= (tiling.end(tile) - 1) / G_; ++k) sum += tail_length(parent, k);
        node_tail_[parent] = std::max(node_tail_[parent], sum);
      }
    }
  }
  // Tokens of the tail that node `parent` takes in for its request k (0: none).
  int tail_length(int parent, int k) const {
    const int x = tail_of_[forest_.reqs[forest_.nodes[parent].req_begin + k]];
    return x >= 0 && forest_.nodes[x].parent == parent ? forest_.nodes[x].num_tokens : 0;
  }
  bool taken_in(int node) const {
    const ForestNode& n = forest_.nodes[node];
    return !tail_of_.empty() && n.num_reqs == 1 && tail_of_[forest_.reqs[n.req_begin]] == node;
  }
  // Whether a node's rows go wide: its wide tasks hold at least
  // wide_min_rows rows, it has at least wide_min_tokens tokens, and its wide
  // tasks take no more block time (each on span blocks) than its tasks
  // would, unsplit; on a tie wide, which reads the KV once per wide tile
  // rather than once per tile. Without a measured wide grid a wide task is
  // priced as two tasks of half its rows: a tie.
  bool wide_pays(int rows, std::int64_t tokens) const {
    const int narrow = row_tiles(rows, opt_.max_tile_rows), wide = row_tiles(rows, opt_.wide_tile_rows);
    const int wide_rows = (rows + wide - 1) / wide;
    return wide_rows >= opt_.wide_min_rows && tokens >= opt_.wide_min_tokens &&
           double(wide) * opt_.wide_span * cost_.wide_cost_us(wide_rows, tokens) <=
               double(narrow) * cost_.cost_us((rows + narrow - 1) / narrow, tokens);
  }

  // The classes on each request's path, as a count per class, and how many
  // requests share each such path: what the merge's price depends on.
  struct PathHash {
    std::size_t operator()(const std::vector<std::pair<int, int>>& v) const {
      std::size_t h = v.size();
      for (const auto& [c, k] : v) h = (h ^ std::size_t(c)) * 0x100000001b3ull ^ std::size_t(k) * 0x9e3779b97f4a7c15ull;
      return h;
    }
  };
  void merge_paths() {
    std::unordered_map<std::vector<std::pair<int, int>>, std::int64_t, PathHash> requests_of;
    std::vector<int> on_path;
    std::vector<std::pair<int, int>> counts;
    for (int r = 0; r < forest_.num_requests(); ++r) {
      on_path.clear();
      for (int x = forest_.request_node[r]; x >= 0; x = forest_.nodes[x].parent)
        if (node_class_[x] >= 0) on_path.push_back(node_class_[x]);
      std::sort(on_path.begin(), on_path.end());
      counts.clear();
      for (const int c : on_path) {
        if (counts.empty() || counts.back().first != c) counts.push_back({c, 0});
        ++counts.back().second;
      }
      ++requests_of[counts];
    }
    paths_.assign(requests_of.begin(), requests_of.end());  // any order: merge_of sums and takes a max
  }

  // 2. Lower bound (the paper's cost_l). A plan whose dearest chunk costs tau
  // takes ≥ max(tau, mean_load(tau)): mean_load falls as tau grows, so the
  // bound is least where the two cross; bisect tau geometrically (to 0.2%: it
  // sets the search grid below, which steps by 8%). KV heads are
  // interchangeable: with g = gcd(m, Hkv), a schedule of Hkv/g heads on m/g
  // blocks, repeated for each of g head slices on its own m/g blocks, has the
  // same makespan, and searching the slice is g times cheaper (qwen3-4b on 264
  // blocks: g = 8). The packing argument of may_finish_within then raises the
  // reported bound where few large units meet many blocks; cost_l (the mean
  // bound) still sets the caps and the search grid, as in the paper.
  void bound() {
    if (classes_.empty()) return;
    double tau_min = 0, tau_max = 0;
    for (const NodeClass& c : classes_) {
      tau_min = std::max(tau_min, search_.chunk_cost(c, c.max_splits));
      tau_max = std::max(tau_max, c.unsplit_cost);
    }
    if (const double f = search_.mean_load(classes_, tau_max); f >= tau_max) {
      lower_bound_ = f;
    } else if (search_.mean_load(classes_, tau_min) <= tau_min) {
      lower_bound_ = tau_min;
    } else {  // mean_load(lo) > lo, mean_load(hi) ≤ hi
      double lo = tau_min, hi = tau_max, f_hi = search_.mean_load(classes_, tau_max);
      while (hi > lo * 1.002) {
        const double mid = std::sqrt(lo * hi), f = search_.mean_load(classes_, mid);
        if (f > mid) lo = mid; else hi = mid, f_hi = f;
      }
      lower_bound_ = std::max(lo, f_hi);
    }
    cost_l_ = lower_bound_;
    if (!search_.may_finish_within(classes_, lower_bound_)) {
      // Gallop up by 25% until a time passes (40 steps reach 7,500× the mean
      // bound), then bisect to 0.1%: the bound is reported, not acted on.
      double lo = lower_bound_, hi = lower_bound_ * 1.25;
      for (int i = 0; i < 40 && !search_.may_finish_within(classes_, hi); ++i) lo = hi, hi *= 1.25;
      while (hi > lo * 1.001) {
        const double mid = std::sqrt(lo * hi);
        (search_.may_finish_within(classes_, mid) ? hi : lo) = mid;
      }
      lower_bound_ = lo;
    }
  }

  // 3. Split counts. Adaptive: the paper caps every class at ceil(C / cost_l)
  // chunks; we cap at kCapFactor times that, because with the paper's cap a
  // few long units cannot be cut fine enough to pack (ratio:0.05 on the H200
  // model: 128 units of ~2,100 µs against cost_l ≈ 1,070 µs may take only 2
  // chunks each, and LPT ends at 1.65× the bound; 8× reaches 1.05×). Within
  // the caps, targets tau on a geometric grid around cost_l each propose two
  // split vectors (fewest chunks whose dearest costs ≤ tau, and C / tau
  // rounded up); the one whose LPT makespan is least wins, then a pattern
  // search on the classes with the dearest chunks polishes it. The workspace
  // bounds the slots (and a capacity the tasks) of every vector the search
  // may pick; the unsplit one must fit.
  void choose_splits() {
    max_slots_ = opt_.max_slots;
    if (opt_.capacity) {
      max_slots_ = max_slots_ > 0 ? std::min(max_slots_, opt_.capacity->slots) : opt_.capacity->slots;
      max_tasks_ = opt_.capacity->tasks;
    }
    splits_.assign(classes_.size(), 1);
    const Footprint unsplit = footprint(classes_, splits_, align_, kv_heads_);
    CODEC_CHECK(max_slots_ == 0 || unsplit.slots <= max_slots_, "the batch needs ", unsplit.slots,
                " partial slots even unsplit, more than the ", max_slots_, " the workspace holds");
    CODEC_CHECK(max_tasks_ == 0 || unsplit.tasks <= max_tasks_, "the batch needs ", unsplit.tasks,
                " tasks even unsplit, more than the capacity's ", max_tasks_);
    if (opt_.split == SplitPolicy::fixed) {
      for (std::size_t ci = 0; ci < classes_.size(); ++ci)
        splits_[ci] = std::min(opt_.fixed_splits, classes_[ci].max_splits);
      const Footprint f = footprint(classes_, splits_, align_, kv_heads_);
      CODEC_CHECK(fits(splits_), "fixed:", opt_.fixed_splits, " splits need ", f.slots, " partial slots and ",
                  f.tasks, " tasks, more than the workspace holds (", max_slots_, " slots, ", max_tasks_, " tasks)");
      return;
    }
    if (classes_.empty() || opt_.split == SplitPolicy::none) return;
    if (opt_.split == SplitPolicy::given) {
      CODEC_CHECK(opt_.given_splits.size() == std::size_t(forest_.num_nodes()), "given_splits has ",
                  opt_.given_splits.size(), " counts for a forest of ", forest_.num_nodes(), " nodes");
      for (std::size_t ci = 0; ci < classes_.size(); ++ci)
        splits_[ci] = std::clamp(opt_.given_splits[classes_[ci].nodes.front()], 1, classes_[ci].max_splits);
      if (fits(splits_)) return;
      splits_.assign(classes_.size(), 1);  // beyond the workspace: search as adaptive does
    }
    std::vector<int> cap(classes_.size());
    for (std::size_t ci = 0; ci < classes_.size(); ++ci)
      cap[ci] = std::clamp(int(std::ceil(kCapFactor * classes_[ci].unsplit_cost / cost_l_)), 1,
                           classes_[ci].max_splits);
    if (opt_.split == SplitPolicy::exhaustive) search_exhaustively(cap);
    else search_adaptively(cap);
  }

  // 4. Node tables: pages, requests, splits, slot bases, tails. A plan at a
  // capacity that holds tails has tail_indptr whether or not it has any.
  void node_tables(PlanArrays& a) {
    const int num_nodes = forest_.num_nodes();
    const bool tails = opt_.capacity ? opt_.capacity->tail_tokens > 0 : !tail_of_.empty();
    if (tails) a.tail_indptr.assign(1, 0);
    a.node_page_begin.resize(num_nodes + 1);
    a.node_req_begin.resize(num_nodes + 1);
    a.node_splits.assign(num_nodes, 0);
    a.node_slot_base.assign(num_nodes, 0);
    for (int i = 0; i < num_nodes; ++i) {
      const ForestNode& n = forest_.nodes[i];
      a.node_page_begin[i] = std::int32_t(a.node_pages.size());
      a.node_pages.insert(a.node_pages.end(), forest_.pages.begin() + n.page_begin,
                          forest_.pages.begin() + n.page_begin + n.num_pages);
      a.node_req_begin[i] = std::int32_t(a.node_reqs.size());
      a.node_reqs.insert(a.node_reqs.end(), forest_.reqs.begin() + n.req_begin,
                         forest_.reqs.begin() + n.req_begin + n.num_reqs);
      for (int k = 0; tails && k < n.num_reqs; ++k) {
        if (const int len = tail_of_.empty() ? 0 : tail_length(i, k); len > 0) {
          const ForestNode& x = forest_.nodes[tail_of_[forest_.reqs[n.req_begin + k]]];
          for (int t = 0; t < len; ++t)
            a.tail_tokens.push_back({forest_.pages[x.page_begin + t / forest_.page_size], t % forest_.page_size});
        }
        a.tail_indptr.push_back(std::int32_t(a.tail_tokens.size()));
      }
      if (node_class_[i] >= 0) {
        const int b = chunking(classes_[node_class_[i]].tokens, splits_[node_class_[i]], align_).count;
        a.node_splits[i] = b;
        a.node_slot_base[i] = std::int32_t(slots_);
        slots_ += std::int64_t(b) * kv_heads_ * n.num_reqs * G_;
        max_splits_ = std::max(max_splits_, b);
      }
    }
    a.node_page_begin[num_nodes] = std::int32_t(a.node_pages.size());
    a.node_req_begin[num_nodes] = std::int32_t(a.node_reqs.size());
    CODEC_CHECK(slots_ < (std::int64_t(1) << 31), "plan needs ", slots_, " partial slots, more than 2^31");
  }

  // 5. Tasks: replay LPT on the chosen splits for one head slice, expanding
  // each group's items into every slice. Blocks (and wide blocks) of a slice
  // are numbered slice by slice, or, in a plan with wide blocks, slice-minor
  // (block j of slice k is j · slices + k): blocks start in the order of
  // their index as wide blocks leave (schedule), and so every slice's block
  // j starts with the same wide load before it.
  void place_tasks(PlanArrays& a) {
    std::vector<TaskGroup> groups;
    task_groups(classes_, splits_, cost_, align_, slice_heads_, busy_of(splits_), groups);
    std::vector<std::pair<int, Task>> placed, placed_wide;  // (block, task) in the order LPT hands them out
    placed.reserve(std::size_t(footprint(classes_, splits_, align_, kv_heads_).tasks));
    auto expand = [&](std::vector<std::pair<int, Task>>& into, int slice_size, const TaskGroup& grp,
                      std::int64_t item, int block) {
      const NodeClass& c = classes_[grp.cls];
      const Chunking k = chunking(c.tokens, splits_[grp.cls], align_);
      const std::int64_t tiles = grp.hi_tiles ? c.tiling.hi : c.tiling.lo;
      const std::int64_t chunks = grp.last_chunk ? 1 : k.count - 1;
      // item = ((member · slice_heads + head) · chunks + chunk) · tiles + tile:
      // the row tiles of one chunk are neighbours (see Lpt)
      std::int64_t rest = item;
      const int tile = int(rest % tiles) + (grp.hi_tiles ? 0 : c.tiling.hi);
      rest /= tiles;
      const int chunk = int(rest % chunks) + (grp.last_chunk ? k.count - 1 : 0);
      rest /= chunks;
      const int head = int(rest % slice_heads_);
      const int member = int(rest / slice_heads_);
      const int row_begin = c.tiling.begin(tile), row_end = c.tiling.end(tile);
      const int node = c.nodes[member];
      const auto kv_begin = std::int32_t(chunk * k.len);  // < the node's tokens: chunk < k.count
      const auto kv_end = std::int32_t(std::min<std::int64_t>(forest_.nodes[node].num_tokens, kv_begin + k.len));
      const SlotLayout slots{a.node_slot_base[node], kv_heads_, (a.node_req_begin[node + 1] - a.node_req_begin[node]) * G_};
      for (int slice = 0; slice < slices_; ++slice) {
        const int kv_head = slice * slice_heads_ + head;
        into.push_back({wide_ ? block * slices_ + slice : slice * slice_size + block,
                        Task{node, kv_head, chunk, kv_begin, kv_end, row_begin, row_end, a.node_page_begin[node],
                             a.node_req_begin[node], slots.at(chunk, kv_head, 0)}});
      }
      kv_tokens_read_ += std::int64_t(kv_end - kv_begin) * slices_;
    };
    makespan_ = schedule(
        groups, [&](const TaskGroup& g, std::int64_t item, int b) { expand(placed, slice_blocks_, g, item, b); },
        [&](const TaskGroup& g, std::int64_t item, int b) { expand(placed_wide, slice_wide(), g, item, b); });
    // block by block, each in the order handed out, then the wide blocks: counting sorts
    auto sort_into = [&](std::vector<std::int32_t>& indptr, int blocks, const std::vector<std::pair<int, Task>>& from) {
      const auto first = std::int32_t(a.tasks.size());
      indptr.assign(std::size_t(blocks) + 1, first);
      for (const auto& [block, task] : from) ++indptr[block + 1];
      for (int b = 0; b < blocks; ++b) indptr[b + 1] += indptr[b] - first;
      std::vector<std::int32_t> cursor(indptr.begin(), indptr.end() - 1);
      a.tasks.resize(a.tasks.size() + from.size());
      for (const auto& [block, task] : from) a.tasks[cursor[block]++] = task;
    };
    a.tasks.clear();
    sort_into(a.block_indptr, m_, placed);
    // A task a block at most: the blocks that have one come first, in order,
    // so that each finds its task by its own index (PlanView::single_task_blocks).
    bool single = !wide_;
    for (int b = 0; b < m_ && single; ++b) single = a.block_indptr[b + 1] - a.block_indptr[b] <= 1;
    if (single)
      for (int b = 0; b <= m_; ++b) a.block_indptr[b] = std::min(b, a.block_indptr[m_]);
    num_wide_tasks_ = int(placed_wide.size());
    const int wide_blocks = opt_.capacity ? opt_.capacity->wide_blocks : wide_ ? opt_.wide_blocks() : 0;
    if (wide_blocks > 0) sort_into(a.wide_indptr, wide_blocks, placed_wide);
  }

  // 6. Reduction schedule: each request's partials, every chunk of every node
  // on its path from the root down. A node at depth d is entry d of the path
  // of each of its requests; k is the request's index in the node's list.
  void reduction_schedule(PlanArrays& a) const {
    const int num_nodes = forest_.num_nodes(), batch = forest_.num_requests();
    std::vector<int> depth(num_nodes);
    for (int i = 0; i < num_nodes; ++i) depth[i] = forest_.nodes[i].parent < 0 ? 0 : depth[forest_.nodes[i].parent] + 1;
    std::vector<int> path_begin(batch + 1, 0);
    for (int r = 0; r < batch; ++r) path_begin[r + 1] = path_begin[r] + depth[forest_.request_node[r]] + 1;
    std::vector<std::pair<int, int>> path(path_begin[batch]);  // (node, k)
    for (int i = 0; i < num_nodes; ++i) {
      const ForestNode& n = forest_.nodes[i];
      for (int k = 0; k < n.num_reqs; ++k) path[path_begin[forest_.reqs[n.req_begin + k]] + depth[i]] = {i, k};
    }
    a.partial_indptr.assign(batch + 1, 0);
    for (int r = 0; r < batch; ++r) {
      for (int e = path_begin[r]; e < path_begin[r + 1]; ++e) {
        const auto [i, k] = path[e];
        const SlotLayout slots{a.node_slot_base[i], kv_heads_, forest_.nodes[i].num_reqs * G_};
        for (int c = 0; c < a.node_splits[i]; ++c) a.partials.push_back({slots.at(c, 0, k * G_), slots.rows});
      }
      a.partial_indptr[r + 1] = std::int32_t(a.partials.size());
    }
  }

  PlanStats stats(const PlanArrays& a) const {
    PlanStats st;
    st.num_nodes = forest_.num_nodes();
    st.num_requests = forest_.num_requests();
    for (const NodeClass& c : classes_) st.num_units += int(c.nodes.size()) * (c.tiling.hi + c.tiling.lo) * kv_heads_;
    st.num_tasks = int(a.tasks.size());
    st.num_wide_tasks = num_wide_tasks_;
    st.num_blocks = m_;
    st.max_splits = max_splits_;
    st.num_slots = int(slots_);
    for (int r = 0; r < st.num_requests; ++r)
      st.merged_requests += a.partial_indptr[r + 1] - a.partial_indptr[r] > 1;
    st.num_tails = tail_count_;
    st.makespan_us = makespan_;
    st.merge_us = merge_of(splits_);
    st.lower_bound_us = lower_bound_;
    st.cost_l_us = cost_l_;
    st.kv_tokens_read = kv_tokens_read_;
    st.unique_kv_tokens = forest_.unique_tokens() * kv_heads_;
    return st;
  }

 private:
  bool fits(const std::vector<int>& s) const {
    if (max_slots_ == 0 && max_tasks_ == 0) return true;  // no workspace bound: nothing to count
    const Footprint f = footprint(classes_, s, align_, kv_heads_);
    return (max_slots_ == 0 || f.slots <= max_slots_) && (max_tasks_ == 0 || f.tasks <= max_tasks_);
  }
  // The blocks split vector s keeps busy where the model prices contention:
  // its tasks if fewer than the blocks (then all run at once), else the
  // blocks (which may be fewer than those the model's `us` had busy); 0 when
  // the model does not price it.
  int busy_of(const std::vector<int>& s) const {
    if (!cost_.prices_contention() || wide_) return 0;
    return int(std::min<std::int64_t>(footprint(classes_, s, align_, kv_heads_).tasks, m_));
  }
  // The makespan of split vector s, or a time ≥ limit when it is no less.
  double makespan_of(const std::vector<int>& s, int busy, double limit = INFINITY) const {
    task_groups(classes_, s, cost_, align_, slice_heads_, busy, groups_);
    return schedule(groups_, NoAssign{}, NoAssign{}, limit);
  }
  int slice_wide() const { return slice_blocks_ / opt_.wide_span; }  // wide blocks of a head slice
  // LPT of one head slice's groups. With wide tasks, in two phases as the
  // kernels run: the wide groups on the slice's wide blocks, then the other
  // groups on its blocks, block j starting at the (j / span)-th earliest end
  // of a wide block: the blocks' kernel is a dependent launch of the wide one,
  // and its blocks take each SM as its wide block leaves, in index order.
  // Until the last wide block ends (W) a block's tasks take
  // beside_wide_price (p) of their price: LPT runs on a clock of work,
  // u(t) = t / p before W and t + (W / p − W) after, on which every task
  // takes its price; u is increasing, so the least-loaded block is the same
  // on both clocks.
  template <typename Assign, typename AssignWide>
  double schedule(std::vector<TaskGroup>& groups, Assign&& assign, AssignWide&& assign_wide,
                  double limit = INFINITY) const {
    if (!wide_) return lpt_(groups, slice_blocks_, assign, limit);
    wide_groups_.clear();
    block_groups_.clear();
    for (const TaskGroup& g : groups) (g.wide ? wide_groups_ : block_groups_).push_back(g);
    const double wide_peak = lpt_(wide_groups_, slice_wide(), assign_wide, limit);
    if (wide_peak >= limit) return wide_peak;
    ends_.assign(lpt_.loads().begin(), lpt_.loads().end());
    std::sort(ends_.begin(), ends_.end());
    // After W the clocks differ by a constant, 0 exactly when p = 1.
    const double p = opt_.beside_wide_price, ahead = wide_peak / p - wide_peak;
    auto work = [&](double t) { return t < wide_peak ? t / p : t + ahead; };
    start_.resize(slice_blocks_);
    for (int j = 0; j < slice_blocks_; ++j) start_[j] = work(ends_[j / opt_.wide_span]);
    const double peak = lpt_(block_groups_, slice_blocks_, assign, work(limit), &start_);
    return std::max(wide_peak, peak - ahead);  // a peak before W (under W on both clocks) leaves W
  }
  // The cost model's price of the merge under split vector s: its rows with
  // more than one partial, and the most partials a row has (0 when the model
  // prices no merge).
  double merge_of(const std::vector<int>& s) const {
    if (paths_.empty()) return 0;
    chunks_.resize(classes_.size());
    for (std::size_t ci = 0; ci < classes_.size(); ++ci)
      chunks_[ci] = prices(classes_[ci], s[ci], cost_, align_).chunks;
    std::int64_t requests = 0;
    int most = 0;
    for (const auto& [counts, n] : paths_) {
      int partials = 0;
      for (const auto& [c, k] : counts) partials += k * chunks_[c];
      if (partials > 1) requests += n;
      most = std::max(most, partials);
    }
    return requests ? cost_.merge_us(requests * G_ * kv_heads_, most) : 0;
  }
  // What the search minimises: the makespan and the merge it causes
  // (infinity when that is no less than limit, so that an abandoned LPT
  // cannot pass for a better plan by a rounding). LPT's makespan is no less
  // than the mean load and the dearest task, so a vector whose bound already
  // reaches the limit skips the schedule (most of the search's vectors: 1.5×
  // less planning at 64 and 1,024 requests, the same plans); the margin
  // covers the sums' different rounding, as the adaptive search's bar does.
  double objective(const std::vector<int>& s, double limit = INFINITY) const {
    const double merge = merge_of(s);
    if (merge >= limit) return INFINITY;
    const int busy = busy_of(s);
    if (limit < INFINITY && (merge + pac_bound(s, busy)) * (1 - 1e-9) >= limit) return INFINITY;
    const double pac = makespan_of(s, busy, limit - merge);
    return pac >= limit - merge ? INFINITY : merge + pac;
  }
  // max(mean block load, dearest task) of one head slice under s, its tasks priced at `busy`
  double pac_bound(const std::vector<int>& s, int busy) const {
    double load = 0, dearest = 0;
    for (std::size_t ci = 0; ci < classes_.size(); ++ci) {
      const NodeClass& c = classes_[ci];
      load += search_.member_cost(c, s[ci], busy) * double(c.nodes.size());
      const NodeClass::Prices p = prices(c, s[ci], cost_, align_, busy);
      dearest = std::max({dearest, p.full_hi, p.last_hi});
    }
    return std::max(load / slice_blocks_, dearest);
  }

  // Every split vector within the caps that fits, the least objective kept.
  void search_exhaustively(const std::vector<int>& cap) {
    double vectors = 1;
    for (const int c : cap) vectors *= c;
    CODEC_CHECK(vectors <= double(kMaxExhaustivePlans), "exhaustive split search: ", vectors, " split vectors over ",
                classes_.size(), " node classes exceed ", kMaxExhaustivePlans);
    std::vector<int> s(classes_.size(), 1);
    double best = objective(s);
    while (true) {  // odometer over s[ci] ∈ [1, cap[ci]]
      std::size_t ci = 0;
      while (ci < s.size() && s[ci] == cap[ci]) s[ci++] = 1;
      if (ci == s.size()) break;
      ++s[ci];
      if (!fits(s)) continue;
      if (const double t = objective(s, best); t < best) best = t, splits_ = s;
    }
  }

  void search_adaptively(const std::vector<int>& cap) {
    double best = objective(splits_);
    std::vector<int> by_cost(classes_.size()), by_chunk(classes_.size());
    // Targets and pattern moves often propose a vector already tried (at 64
    // requests 16 of 81): a second look cannot change the best.
    std::set<std::vector<int>> tried = {splits_};
    auto consider = [&](const std::vector<int>& s) {
      if (!tried.insert(s).second) return;
      if (!fits(s)) return;
      const double bar = best * (1 - 1e-9);  // better beyond rounding
      if (const double t = objective(s, bar); t < bar) best = t, splits_ = s;
    };
    // Targets span 2·cost_l (small trees: fewer, larger chunks may pack
    // better) down to cost_l / 16, below the finest capped chunk (~cost_l / 8).
    // The makespan is not unimodal in tau, so the whole grid is tried:
    // ln(32) / ln(1 / 0.92) = 42 targets, each cheap after slicing.
    for (double tau = 2 * cost_l_; tau > cost_l_ / (2 * kCapFactor); tau *= 0.92) {
      for (std::size_t ci = 0; ci < classes_.size(); ++ci) {
        by_chunk[ci] = std::min(cap[ci], search_.min_splits(classes_[ci], tau));
        by_cost[ci] = std::clamp(int(std::ceil(classes_[ci].unsplit_cost / tau)), 1, cap[ci]);
      }
      consider(by_chunk);
      consider(by_cost);
    }
    std::vector<int> order(classes_.size());
    for (std::size_t ci = 0; ci < classes_.size(); ++ci) order[ci] = int(ci);
    std::sort(order.begin(), order.end(), [&](int a, int b) {
      return search_.chunk_cost(classes_[a], splits_[a]) > search_.chunk_cost(classes_[b], splits_[b]);
    });
    order.resize(std::min<std::size_t>(order.size(), kPolishClasses));
    // pattern search, coarse moves first: from kCapFactor, how far a class's
    // split count may range beyond the paper's cap, halving down to 1
    for (int step = int(kCapFactor); step >= 1; step /= 2) {
      for (bool improved = true; improved;) {
        improved = false;
        for (const int ci : order) {
          for (const int delta : {step, -step}) {
            std::vector<int> s = splits_;
            s[ci] += delta;
            if (s[ci] < 1 || s[ci] > cap[ci]) continue;
            const double before = best;
            consider(s);
            improved = improved || best < before;
          }
        }
      }
    }
  }

  const Forest& forest_;
  const CostModel& cost_;
  const PlannerOptions& opt_;
  const int G_, kv_heads_, m_, align_;
  bool wide_ = false;  // some class is wide (classify)
  int slices_, slice_heads_, slice_blocks_;  // head slices (classify may recut them for wide blocks)
  Search search_;
  mutable Lpt lpt_;                         // scratch of makespan_of and place_tasks
  mutable std::vector<TaskGroup> groups_;  // scratch of makespan_of
  mutable std::vector<TaskGroup> wide_groups_, block_groups_;  // scratch of schedule
  mutable std::vector<double> ends_, start_;                   // scratch of schedule
  mutable std::vector<int> chunks_;        // scratch of merge_of
  std::vector<NodeClass> classes_;
  // merge_paths: each distinct path as (class, nodes of it) pairs, and its requests
  std::vector<std::pair<std::vector<std::pair<int, int>>, std::int64_t>> paths_;
  std::vector<int> node_class_;  // class of each node, −1 for a node without work or a tail taken in
  std::vector<int> tail_of_, node_tail_;  // find_tails (both empty: no tails)
  int tail_count_ = 0;
  double lower_bound_ = 0, cost_l_ = 0;
  std::int64_t max_slots_ = 0, max_tasks_ = 0;  // 0: no limit
  std::vector<int> splits_;                     // b_k of each class
  std::int64_t slots_ = 0;
  int max_splits_ = 0;
  double makespan_ = 0;
  std::int64_t kv_tokens_read_ = 0;
  int num_wide_tasks_ = 0;
};

}  // namespace

namespace {

// The plan's arrays into `a`, and its stats.
PlanStats plan_arrays(const Forest& forest, const HeadConfig& heads, const CostModel& cost, const PlannerOptions& opt,
                      PlanArrays& a) {
  heads.validate();
  opt.validate();
  forest.validate();
  Planning planning(forest, heads, cost, opt);
  planning.classify();
  planning.bound();
  planning.choose_splits();
  planning.node_tables(a);
  planning.place_tasks(a);
  planning.reduction_schedule(a);
  return planning.stats(a);
}

double ms_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

Plan make_plan(const Forest& forest, const HeadConfig& heads, DType dtype, const CostModel& cost,
               const PlannerOptions& opt) {
  const auto start = std::chrono::steady_clock::now();
  PlanArrays a;
  const PlanStats stats = plan_arrays(forest, heads, cost, opt, a);
  Plan plan(heads, dtype, forest.page_size, a, stats, opt.capacity ? &*opt.capacity : nullptr);
  plan.stats().plan_ms = ms_since(start);
  return plan;
}

StepPlanner::StepPlanner(const HeadConfig& heads, DType dtype, std::shared_ptr<const CostModel> cost,
                         PlannerOptions options, double drift)
    : heads_(heads), dtype_(dtype), cost_(std::move(cost)), options_(std::move(options)), drift_(drift) {
  CODEC_CHECK(cost_ != nullptr, "StepPlanner: cost model must not be null");
  CODEC_CHECK(drift_ >= 0, "StepPlanner: drift ", drift_, " must be >= 0");
  options_.validate();
}

// Same nodes, parents and requests, and the work (Σ tokens × requests over
// nodes) moved by at most drift of the searched forest's: LPT re-balances
// every plan, only the split counts are the search's. A node with tokens where
// that one had none, or none where it had some, is a change of shape.
bool StepPlanner::same_shape(const Forest& f) const {
  const Forest& s = searched_;
  if (f.num_nodes() != s.num_nodes() || f.num_requests() != s.num_requests() || f.reqs != s.reqs) return false;
  double moved = 0, work = 0;
  for (int i = 0; i < f.num_nodes(); ++i) {
    const ForestNode &a = f.nodes[i], &b = s.nodes[i];
    if (a.parent != b.parent || a.req_begin != b.req_begin || a.num_reqs != b.num_reqs) return false;
    if ((a.num_tokens == 0) != (b.num_tokens == 0)) return false;
    moved += std::abs(double(a.num_tokens) - b.num_tokens) * b.num_reqs;
    work += double(b.num_tokens) * b.num_reqs;
  }
  return moved <= drift_ * work;
}

// The options of the forest's plan: the last search's split counts while
// the forest keeps that search's shape, else the search (or another policy).
PlannerOptions StepPlanner::options_for(const Forest& forest) const {
  if (options_.split != SplitPolicy::adaptive || splits_.empty() || !same_shape(forest)) return options_;
  PlannerOptions reuse = options_;
  reuse.split = SplitPolicy::given;
  reuse.given_splits = splits_;
  return reuse;
}

// Counted once the plan is packed: one that does not fit is no plan, and no search to reuse.
void StepPlanner::commit(const Forest& forest, const PlannerOptions& used, const PlanArrays& a) {
  ++plans_;
  if (used.split != SplitPolicy::adaptive) return;
  splits_.assign(a.node_splits.begin(), a.node_splits.end());
  searched_ = forest;
  ++searches_;
}

Plan StepPlanner::plan(const Forest& forest) {
  const auto start = std::chrono::steady_clock::now();
  const PlannerOptions used = options_for(forest);
  PlanArrays a;
  const PlanStats stats = plan_arrays(forest, heads_, *cost_, used, a);
  Plan plan(heads_, dtype_, forest.page_size, a, stats, options_.capacity ? &*options_.capacity : nullptr);
  commit(forest, used, a);
  plan.stats().plan_ms = ms_since(start);
  return plan;
}

PlanStats StepPlanner::plan_into(const Forest& forest, std::span<std::byte> out) {
  const auto start = std::chrono::steady_clock::now();
  CODEC_CHECK(options_.capacity.has_value(), "StepPlanner::plan_into: the options need a capacity to pack at");
  const PlannerOptions used = options_for(forest);
  scratch_.clear();
  PlanStats stats = plan_arrays(forest, heads_, *cost_, used, scratch_);
  Plan::pack_into(scratch_, *options_.capacity, out);
  commit(forest, used, scratch_);
  stats.plan_ms = ms_since(start);
  return stats;
}

}  // namespace codec
