// make_plan's steps over one forest (docs/DESIGN.md §4): node classes, the
// lower bound, the split counts, the node tables, the tasks (LPT on the
// chosen splits), the reduction schedule.
#include "plan/planning.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <set>
#include <unordered_map>
#include <utility>
#include <vector>

#include "codec/core/error.hpp"
#include "plan/bound_search.hpp"
#include "plan/lpt.hpp"
#include "plan/merge_price.hpp"
#include "plan/node_class.hpp"
#include "plan/query_forest.hpp"
#include "plan/slice_schedule.hpp"

namespace codec::planning {

namespace {

constexpr double kCapFactor = 8;  // see Planning::choose_splits
// Classes the final pattern search may change, those with the dearest chunks.
// On the 32 built-in workloads (qwen3-4b, the H200 table, `codec plan
// --workload all`) the makespan over the bound is 1.0351 (geomean) with no
// polish, 1.0287 with 1 class, 1.0285–1.0286 with 2, 4 or 8, 1.0283 with all,
// which takes 2.5× the time on loogle:16 (4.5 ms against 1.7): 4 keeps the
// gain with a margin (8d7f05d; docs/DESIGN_NOTES.md, Planner 5).
constexpr std::size_t kPolishClasses = 4;
// The second descent of the adaptive search (Planning::search_adaptively)
// runs only where the first one's makespan is priced more than this fraction
// above the lower bound: where it runs it adds 20-35% to the planning time
// (ratio:0.05, depth:6 at 2 tokens), and loogle:16, within 1.5% of its bound,
// would pay 14% for nothing.
constexpr double kSecondDescentGap = 0.02;
// The second descent's plan replaces the first's only where the model prices
// it this much lower: ratio:0.05 at one token, 0.3% lower in the model under
// the H100 table, ran 0.9% slower on the H100, with 2% more tasks.
constexpr double kSecondDescentGain = 0.01;
// How much dearer the model may price a plan whose long wide chunks are cut
// (Planning::cut_long_wide_chunks): where it prices chunk counts alike
// (batch:64 at 8 tokens, +0.2%), the cut pays; where the cut plan packs worse
// (+63%), not.
constexpr double kLongChunkSlack = 0.02;

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
  //
  // In a plan with masks, nodes whose row tiles see less than all of them
  // (seen_by_tiles) fall into classes by what each tile sees, too.
  void classify(const PlanArrays& a) {
    find_tails();
    struct Shape {
      std::int64_t tokens;
      int rows, tail, seen;  // seen: the id of its tiles' ranges, 0 where every row sees the whole node
      bool operator==(const Shape&) const = default;
    };
    struct ShapeHash {
      std::size_t operator()(const Shape& s) const {
        return ((std::size_t(s.tokens) << 32 ^ std::size_t(s.rows)) * 0x9e3779b97f4a7c15ull) ^
               (std::size_t(s.tail) << 20 ^ std::size_t(s.seen));
      }
    };
    std::unordered_map<Shape, int, ShapeHash> class_of_shape;
    using TileRanges = std::pair<std::vector<std::int32_t>, std::vector<KeyRange>>;
    std::map<TileRanges, int> seen_id;
    TileRanges ranges;
    node_class_.assign(forest_.num_nodes(), -1);
    for (int i = 0; i < forest_.num_nodes(); ++i) {
      const ForestNode& n = forest_.nodes[i];
      if (n.num_tokens == 0 || n.num_reqs == 0 || taken_in(i)) continue;
      const int rows = n.num_reqs * G_;
      const std::int64_t tokens = aligned(n.num_tokens);
      const int tail = node_tail_.empty() ? 0 : node_tail_[i];
      const bool node_masked = masked(a, i);
      const bool wide = goes_wide(rows, tokens, node_masked);
      const RowTiling tiling = RowTiling::of(rows, wide ? opt_.wide_tile_rows : opt_.max_tile_rows);
      int seen = 0;
      if (node_masked && seen_by_tiles(a, i, tiling, ranges.first, ranges.second))
        seen = seen_id.try_emplace(ranges, int(seen_id.size()) + 1).first->second;
      auto [it, added] = class_of_shape.try_emplace(Shape{tokens, rows, tail, seen}, int(classes_.size()));
      if (added) {
        NodeClass c;
        c.tokens = tokens;
        c.rows = rows;
        c.wide = wide;
        c.span = c.wide ? opt_.wide_span : 1;
        c.tiling = tiling;
        c.max_splits = int(tokens / align_);
        c.tail_tokens = tail;
        c.price_tile = c.wide ? 0 : opt_.price_tile_tokens;
        if (seen) c.seen_indptr = ranges.first, c.seen = ranges.second;
        c.unsplit_cost = prices(c, 1, cost_, align_).dearest;
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
    schedule_.configure(slice_blocks_, wide_, opt_.wide_span, opt_.beside_wide_price);
    if (cost_.prices_merge()) merge_price_.build(forest_, node_class_);
  }

  // The keys each row tile of node i sees (a plan with masks), as disjoint
  // ascending ranges of node positions: tile t's are seen[indptr[t] ..
  // indptr[t + 1]). False where every row sees the whole node (no mask, or
  // one that cuts only other nodes).
  bool seen_by_tiles(const PlanArrays& a, int i, const RowTiling& tiling, std::vector<std::int32_t>& indptr,
                     std::vector<KeyRange>& seen) const {
    if (a.query_lo.empty()) return false;
    const ForestNode& n = forest_.nodes[i];
    const std::int64_t first = a.node_kv_begin[i];
    bool whole = true;
    indptr.assign(1, 0);
    seen.clear();
    for (int tile = 0; tile < tiling.hi + tiling.lo; ++tile) {
      const std::size_t from = seen.size();
      for (int q = tiling.begin(tile) / G_; q <= (tiling.end(tile) - 1) / G_; ++q) {
        const std::int32_t token = forest_.reqs[n.req_begin + q];
        const auto b = std::int32_t(std::max<std::int64_t>(0, a.query_lo[token] - first));
        const auto e = std::int32_t(std::min<std::int64_t>(n.num_tokens, a.query_hi[token] - first));
        whole = whole && b == 0 && e == n.num_tokens;
        if (e > b) seen.push_back({b, e});
      }
      std::sort(seen.begin() + std::ptrdiff_t(from), seen.end());
      std::size_t kept = from;  // merge the rows' ranges where they overlap or touch
      for (std::size_t j = from; j < seen.size(); ++j) {
        if (kept > from && seen[j].begin <= seen[kept - 1].end)
          seen[kept - 1].end = std::max(seen[kept - 1].end, seen[j].end);
        else
          seen[kept++] = seen[j];
      }
      seen.resize(kept);
      indptr.push_back(std::int32_t(seen.size()));
    }
    return !whole;
  }

  static int row_tiles(int rows, int tile_rows) { return (rows + tile_rows - 1) / tile_rows; }
  std::int64_t aligned(std::int64_t tokens) const { return (tokens + align_ - 1) / align_ * align_; }
  bool goes_wide(int rows, std::int64_t tokens, bool masked) const {
    return opt_.wide_tile_rows > 0 && rows > opt_.max_tile_rows && wide_pays(rows, tokens, masked);
  }
  // Whether some row of node i sees less than all of it (PlanView::masked,
  // over the whole node): a key range short of it, or mask bits over it.
  bool masked(const PlanArrays& a, int i) const {
    if (a.query_lo.empty()) return false;
    const ForestNode& n = forest_.nodes[i];
    const std::int64_t first = a.node_kv_begin[i];
    return !seen_by_all(a, forest_.reqs.data() + n.req_begin, n.num_reqs).covers(first, first + n.num_tokens);
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
      if (p.num_tokens == 0 || !goes_wide(p.num_reqs * G_, aligned(p.num_tokens), false)) continue;
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
  // wide_min_rows rows, it has at least wide_min_tokens tokens and, if
  // masked, at most wide_max_masked_rows rows (where that is set), and its wide
  // tasks take no more block time (each on span blocks) than its tasks
  // would, unsplit; on a tie wide, which reads the KV once per wide tile
  // rather than once per tile. Without a measured wide grid a wide task is
  // priced as two tasks of half its rows at span blocks' pace: a tie.
  bool wide_pays(int rows, std::int64_t tokens, bool masked) const {
    const int narrow = row_tiles(rows, opt_.max_tile_rows), wide = row_tiles(rows, opt_.wide_tile_rows);
    const int wide_rows = (rows + wide - 1) / wide;
    return wide_rows >= opt_.wide_min_rows && tokens >= opt_.wide_min_tokens &&
           (opt_.wide_max_masked_rows == 0 || !masked || rows <= opt_.wide_max_masked_rows) &&
           double(wide) * opt_.wide_span * cost_.wide_cost_us(wide_rows, tokens, opt_.wide_span) <=
               double(narrow) * cost_.cost_us((rows + narrow - 1) / narrow, tokens);
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
    cut_long_wide_chunks();
  }

  // Wide chunks longer than wide_max_chunk_tokens in the searched vector are
  // cut to that length where the workspace holds the chunks and the model
  // prices the cut vector within kLongChunkSlack of the searched one; every
  // other count stays as the search chose it, since the model misprices the
  // other classes' counts where it misprices long chunks (docs/DESIGN_NOTES.md,
  // Planner 13).
  void cut_long_wide_chunks() {
    if (opt_.wide_max_chunk_tokens <= 0) return;
    std::vector<int> s = splits_;
    for (std::size_t ci = 0; ci < classes_.size(); ++ci) {
      const NodeClass& c = classes_[ci];
      if (!c.wide) continue;
      const std::int64_t fewest = (c.tokens + opt_.wide_max_chunk_tokens - 1) / opt_.wide_max_chunk_tokens;
      s[ci] = std::max(s[ci], int(std::min<std::int64_t>(fewest, c.max_splits)));
    }
    if (s != splits_ && fits(s) && objective(s) <= objective(splits_) * (1 + kLongChunkSlack)) splits_ = s;
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
      std::int64_t rest = item;  // see TaskGroup
      const int tile = grp.tile_begin + int(rest % grp.tiles);
      rest /= grp.tiles;
      const int chunk = grp.chunk_begin + int(rest % grp.chunks);
      rest /= grp.chunks;
      const int head = int(rest % slice_heads_);
      const int member = int(rest / slice_heads_);
      const int row_begin = c.tiling.begin(tile), row_end = c.tiling.end(tile);
      const int node = c.nodes[member];
      auto kv_begin = std::int32_t(chunk * k.len);  // < the node's tokens: chunk < k.count
      auto kv_end = std::int32_t(std::min<std::int64_t>(forest_.nodes[node].num_tokens, kv_begin + k.len));
      if (!c.seen_indptr.empty())
        cut_to_seen(c.seen.data() + c.seen_indptr[tile], c.seen.data() + c.seen_indptr[tile + 1], align_, kv_begin,
                    kv_end);
      const SlotLayout slots{a.node_slot_base[node], kv_heads_, (a.node_req_begin[node + 1] - a.node_req_begin[node]) * G_};
      for (int slice = 0; slice < slices_; ++slice) {
        const int kv_head = slice * slice_heads_ + head;
        into.push_back({wide_ ? block * slices_ + slice : slice * slice_size + block,
                        Task{node, kv_head, chunk, kv_begin, kv_end, row_begin, row_end, a.node_page_begin[node],
                             a.node_req_begin[node], slots.at(chunk, kv_head, 0)}});
      }
      kv_tokens_read_ += std::int64_t(kv_end - kv_begin) * slices_;
    };
    makespan_ = schedule_(
        groups, [&](const TaskGroup& g, std::int64_t item, int b) { expand(placed, slice_blocks_, g, item, b); },
        [&](const TaskGroup& g, std::int64_t item, int b) { expand(placed_wide, schedule_.wide_blocks(), g, item, b); });
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

  PlanStats stats(const PlanArrays& a) {
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
  double makespan_of(const std::vector<int>& s, int busy, double limit = INFINITY) {
    return schedule_.makespan(classes_, s, cost_, align_, slice_heads_, busy, limit);
  }
  // The merge's price under split vector s (0 when the model prices none).
  double merge_of(const std::vector<int>& s) { return merge_price_(classes_, s, cost_, align_, G_, kv_heads_); }
  // What the search minimises: the makespan and the merge it causes
  // (infinity when that is no less than limit, so that an abandoned LPT
  // cannot pass for a better plan by a rounding). LPT's makespan is no less
  // than the mean load and the dearest task, so a vector whose bound already
  // reaches the limit skips the schedule (most of the search's vectors: 1.5×
  // less planning at 64 and 1,024 requests, the same plans); the margin
  // covers the sums' different rounding, as the adaptive search's bar does.
  double objective(const std::vector<int>& s, double limit = INFINITY) {
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
      dearest = std::max(dearest, prices(c, s[ci], cost_, align_, busy).dearest);
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
    // Targets span 2·cost_l (small trees: fewer, larger chunks may pack
    // better) down to cost_l / 16, below the finest capped chunk (~cost_l / 8).
    // The makespan is not unimodal in tau, so the whole grid is tried:
    // ln(32) / ln(1 / 0.92) = 42 targets, each cheap after slicing.
    for (double tau = 2 * cost_l_; tau > cost_l_ / (2 * kCapFactor); tau *= 0.92) {
      for (std::size_t ci = 0; ci < classes_.size(); ++ci) {
        by_chunk[ci] = std::min(cap[ci], search_.min_splits(classes_[ci], tau));
        by_cost[ci] = std::clamp(int(std::ceil(classes_[ci].unsplit_cost / tau)), 1, cap[ci]);
      }
      improve(by_chunk, splits_, best, tried);
      improve(by_cost, splits_, best, tried);
    }
    polish(cap, splits_, best, tried);
    // A second descent, from the unsplit vector: the grid's vectors split
    // every class toward one target chunk, and single moves from the best of
    // them rarely reach a vector that splits a few classes and leaves the rest
    // whole. It also moves the classes of most load, which need not have the
    // dearest chunks (depth:6 at 2 tokens, H100 table: the grid's descent
    // ends 11% above the exhaustive search's plan, which splits one class of
    // six, the 2-request nodes; this one finds that plan).
    // Not where some class is wide: the table prices a shared node's wide
    // tasks less truly than PAC's, and on the H100 the plans this descent
    // found there ran slower than the first's (batch:16 at 2 tokens +3%,
    // batch:4 at 8 +4%) for all the model's 3-6% gain.
    if (wide_ || best - merge_of(splits_) <= lower_bound_ * (1 + kSecondDescentGap)) return;
    std::vector<int> ones(classes_.size(), 1);
    double ones_cost = objective(ones);
    std::set<std::vector<int>> tried_from_ones = {ones};
    polish(cap, ones, ones_cost, tried_from_ones, /*by_load=*/true);
    if (ones_cost < best * (1 - kSecondDescentGain)) splits_ = ones;
  }

  // Whether t, not in `tried` (which takes it), fits and prices below cost
  // beyond rounding; then s and cost become t and its price.
  bool improve(const std::vector<int>& t, std::vector<int>& s, double& cost, std::set<std::vector<int>>& tried) {
    if (!tried.insert(t).second || !fits(t)) return false;
    const double bar = cost * (1 - 1e-9);  // better beyond rounding
    const double x = objective(t, bar);
    if (x >= bar) return false;
    s = t, cost = x;
    return true;
  }

  // Pattern search from s (whose objective is cost), coarse moves first: from
  // kCapFactor, how far a class's split count may range beyond the paper's
  // cap, halving down to 1, over the kPolishClasses classes with the dearest
  // chunks under s and, by_load, those with the most load (chunk price times
  // members) too. s and cost become the best vector found; `tried` holds the
  // vectors already priced against a bar no higher than cost.
  void polish(const std::vector<int>& cap, std::vector<int>& s, double& cost, std::set<std::vector<int>>& tried,
              bool by_load = false) {
    // the kPolishClasses classes of the greatest key, in its order
    auto greatest = [&](auto&& key) {
      std::vector<int> classes(classes_.size());
      std::iota(classes.begin(), classes.end(), 0);
      std::sort(classes.begin(), classes.end(), [&](int a, int b) { return key(a) > key(b); });
      classes.resize(std::min<std::size_t>(classes.size(), kPolishClasses));
      return classes;
    };
    std::vector<int> order = greatest([&](int c) { return search_.chunk_cost(classes_[c], s[c]); });
    if (by_load) {
      const auto load = [&](int c) {
        return search_.member_cost(classes_[c], s[c]) * double(classes_[c].nodes.size());
      };
      for (const int c : greatest(load))
        if (std::find(order.begin(), order.end(), c) == order.end()) order.push_back(c);
    }
    for (int step = int(kCapFactor); step >= 1; step /= 2) {
      for (bool improved = true; improved;) {
        improved = false;
        for (const int ci : order) {
          for (const int delta : {step, -step}) {
            std::vector<int> t = s;
            t[ci] += delta;
            if (t[ci] < 1 || t[ci] > cap[ci]) continue;
            improved = improve(t, s, cost, tried) || improved;
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
  BoundSearch search_;
  SliceSchedule schedule_;  // one head slice's LPT (configured by classify)
  MergePrice merge_price_;  // the merge's price of a split vector (built by classify)
  std::vector<NodeClass> classes_;
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

PlanStats plan_arrays(const Forest& forest, const HeadConfig& heads, const CostModel& cost, const PlannerOptions& opt,
                      PlanArrays& a, const QueryBatch& queries) {
  heads.validate();
  opt.validate();
  forest.validate();
  queries.validate(request_lengths(forest));
  // Several tokens a request: the forest of the query tokens. Masks first:
  // with them no wide task takes in a tail (its rows see every tail token).
  const Forest expanded = queries.one_token_each() ? Forest() : query_forest(forest, queries);
  query_masks(forest, queries, a, opt.capacity && opt.capacity->masks);
  // A node's head that no row sees (sliding windows) is neither read nor priced.
  const Forest& requested = queries.one_token_each() ? forest : expanded;
  const std::optional<Forest> trimmed = trim_unseen_heads(requested, a);
  const Forest& rows = trimmed ? *trimmed : requested;
  PlannerOptions options = opt;
  if (!a.query_lo.empty()) options.wide_tail_tokens = 0;
  // The beside price is for batches of one query token a request: with more,
  // every plan measured ran as fast or faster priced at 1 (docs/DESIGN_NOTES.md,
  // Planner 13).
  if (queries.num_queries(forest.num_requests()) > forest.num_requests()) options.beside_wide_price = 1;
  Planning planning(rows, heads, cost, options);
  planning.classify(a);
  planning.bound();
  planning.choose_splits();
  planning.node_tables(a);
  planning.place_tasks(a);
  planning.reduction_schedule(a);
  PlanStats stats = planning.stats(a);
  stats.batch_requests = forest.num_requests();
  return stats;
}

}  // namespace codec::planning
