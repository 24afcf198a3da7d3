#include "plan/node_class.hpp"

namespace codec::planning {

// Not inlined: prices() is, at every one of the search's many lookups.
[[gnu::noinline]] void fill_prices(const NodeClass& c, int splits, const CostModel& cost, int align, int busy,
                                   NodeClass::Prices& p) {
  const Chunking k = chunking(c.tokens, splits, align);
  auto price = [&](int rows, std::int64_t len) {
    if (c.wide) return cost.wide_cost_us(rows, len, c.span);
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

void task_groups(const std::vector<NodeClass>& classes, const std::vector<int>& splits, const CostModel& cost,
                 int align, int kv_heads, int busy, std::vector<TaskGroup>& groups) {
  groups.clear();
  for (std::size_t ci = 0; ci < classes.size(); ++ci) {
    const NodeClass& c = classes[ci];
    const NodeClass::Prices& p = prices(c, splits[ci], cost, align, busy);
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

}  // namespace codec::planning
