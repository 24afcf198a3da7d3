#include "plan/node_class.hpp"

#include <algorithm>

namespace codec::planning {

namespace {

// The price of a task of class c of `rows` rows reading `len` keys of a node
// cut into `chunks` chunks, with its chunk's share of the class's tails
// (PlanView::task_tails).
double task_price(const NodeClass& c, const CostModel& cost, int busy, int chunks, int rows, std::int64_t len) {
  len += (c.tail_tokens + chunks - 1) / chunks;
  if (c.wide) return cost.wide_cost_us(rows, len, c.span);
  return busy ? cost.cost_busy_us(rows, c.priced(len), busy) : cost.cost_us(rows, c.priced(len));
}

}  // namespace

// Not inlined: prices() is, at every one of the search's many lookups.
[[gnu::noinline]] void fill_prices(const NodeClass& c, int splits, const CostModel& cost, int align, int busy,
                                   NodeClass::Prices& p) {
  const Chunking k = chunking(c.tokens, splits, align);
  auto price = [&](int rows, std::int64_t len) { return task_price(c, cost, busy, k.count, rows, len); };
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

double finest_cost(const NodeClass& c, const CostModel& cost, int align) {
  if (c.seen_indptr.empty()) {
    NodeClass::Prices p;
    fill_prices(c, c.max_splits, cost, align, 0, p);
    return p.dearest;
  }
  const int chunks = chunking(c.tokens, c.max_splits, align).count;
  double dearest = 0;
  for (int t = 0; t < c.tiling.hi + c.tiling.lo; ++t) {
    const int rows = t < c.tiling.hi ? c.tiling.rows_hi : c.tiling.rows_hi - 1;
    const KeyRange *seen = c.seen.data() + c.seen_indptr[t], *seen_end = c.seen.data() + c.seen_indptr[t + 1];
    // The chunks that hold a range's end short of their own: the rest are read whole or are one step of keys no
    // row sees, `align` keys either way.
    int held = 0, last = -1;  // ends ascend: a chunk's are consecutive
    for (const KeyRange* r = seen; r != seen_end; ++r) {
      if (r->end % align == 0 || r->end / align == last) continue;
      last = r->end / align;
      std::int32_t b = last * align, e = b + align;
      cut_to_seen(seen, seen_end, align, b, e);
      dearest = std::max(dearest, task_price(c, cost, 0, chunks, rows, e - b));
      ++held;
    }
    if (held < chunks) dearest = std::max(dearest, task_price(c, cost, 0, chunks, rows, align));
  }
  return dearest;
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
