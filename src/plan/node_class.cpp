#include "plan/node_class.hpp"

#include <algorithm>

namespace codec::planning {

// Not inlined: prices() is, at every one of the search's many lookups.
[[gnu::noinline]] void fill_prices(const NodeClass& c, int splits, const CostModel& cost, int align, int busy,
                                   NodeClass::Prices& p) {
  const Chunking k = chunking(c.tokens, splits, align);
  const std::int64_t tail = (c.tail_tokens + k.count - 1) / k.count;  // each chunk's share (PlanView::task_tails)
  auto price = [&](int rows, std::int64_t len) {
    len += tail;
    if (c.wide) return cost.wide_cost_us(rows, len, c.span);
    return busy ? cost.cost_busy_us(rows, c.priced(len), busy) : cost.cost_us(rows, c.priced(len));
  };
  p.tasks.clear();
  const int hi = c.tiling.rows_hi, tiles = c.tiling.hi + c.tiling.lo;
  if (c.seen_indptr.empty()) {  // every tile reads whole chunks
    for (const bool hi_tiles : {true, false}) {
      const int n = hi_tiles ? c.tiling.hi : c.tiling.lo, first = hi_tiles ? 0 : c.tiling.hi;
      if (n == 0) continue;
      if (k.count > 1) p.tasks.push_back({price(hi_tiles ? hi : hi - 1, k.len), 0, k.count - 1, first, n});
      p.tasks.push_back({price(hi_tiles ? hi : hi - 1, k.last), k.count - 1, 1, first, n});
    }
  } else {  // each tile reads what its rows see of a chunk: runs of tiles at one price
    int last_rows = 0;
    std::int64_t last_len = -1;
    double x = 0;
    std::size_t prev = 0;  // the previous chunk's runs: p.tasks[prev .. this chunk's first)
    for (int chunk = 0; chunk < k.count; ++chunk) {
      const auto chunk_begin = std::int32_t(chunk * k.len);
      const auto chunk_end = std::int32_t(std::min<std::int64_t>(c.tokens, chunk_begin + k.len));
      const std::size_t first = p.tasks.size();
      for (int t = 0; t < tiles; ++t) {
        std::int32_t b = chunk_begin, e = chunk_end;
        cut_to_seen(c.seen.data() + c.seen_indptr[t], c.seen.data() + c.seen_indptr[t + 1], align, b, e);
        const int rows = t < c.tiling.hi ? hi : hi - 1;
        if (rows != last_rows || e - b != last_len) last_rows = rows, last_len = e - b, x = price(rows, e - b);
        if (p.tasks.size() > first && p.tasks.back().cost == x) ++p.tasks.back().tiles;
        else p.tasks.push_back({x, chunk, 1, t, 1});
      }
      // runs equal to the previous chunk's (the chunks every row sees whole, as without masks): one rectangle
      const auto same = [](const PricedTasks& u, const PricedTasks& v) {
        return u.cost == v.cost && u.tile_begin == v.tile_begin && u.tiles == v.tiles;
      };
      if (chunk > 0 && p.tasks.size() - first == first - prev &&
          std::equal(p.tasks.begin() + std::ptrdiff_t(first), p.tasks.end(), p.tasks.begin() + std::ptrdiff_t(prev),
                     same)) {
        p.tasks.resize(first);
        for (std::size_t i = prev; i < first; ++i) ++p.tasks[i].chunks;
      } else {
        prev = first;
      }
    }
  }
  p.dearest = 0, p.total = 0;
  for (const PricedTasks& t : p.tasks) p.dearest = std::max(p.dearest, t.cost), p.total += t.cost * t.per_member();
  p.busy = busy;
  p.chunks = k.count;
}

void task_groups(const std::vector<NodeClass>& classes, const std::vector<int>& splits, const CostModel& cost,
                 int align, int kv_heads, int busy, std::vector<TaskGroup>& groups) {
  groups.clear();
  for (std::size_t ci = 0; ci < classes.size(); ++ci) {
    const NodeClass& c = classes[ci];
    const std::int64_t members = std::int64_t(c.nodes.size()) * kv_heads;
    for (const PricedTasks& t : prices(c, splits[ci], cost, align, busy).tasks)
      groups.push_back({t.cost, int(ci), c.wide, t.chunk_begin, t.chunks, t.tile_begin, t.tiles,
                        members * t.per_member(), int(groups.size())});
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
