#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <tuple>

#include "codec/core/error.hpp"
#include "codec/cost/cost_model.hpp"
#include "codec/engine/cuda_engine.hpp"
#include "codec/plan/planner.hpp"
#include "workload/workload.hpp"
#include "support/planning.hpp"
#include "support/random_batch.hpp"
#include "support/throws_with.hpp"

namespace codec {
namespace {

RooflineCostModel roofline(const HeadConfig& heads) { return {RooflineParams::h200(), heads, DType::bf16}; }

Forest random_forest(std::uint64_t seed, int page_size, const HeadConfig& heads, int nodes = 8, int requests = 9) {
  test::RandomBatchSpec spec;
  spec.seed = seed;
  spec.page_size = page_size;
  spec.num_nodes = nodes;
  spec.num_requests = requests;
  spec.max_node_pages = 40;
  spec.max_tail = 300;
  spec.heads = heads;
  return derive_forest(test::make_random_batch(spec).table());
}

// Inserts an empty node above every node: the forest stays valid and the plan
// must skip them.
Forest with_empty_nodes(const Forest& f) {
  Forest g;
  g.page_size = f.page_size;
  g.pages = f.pages;
  std::vector<int> id(f.num_nodes());
  for (int i = 0; i < f.num_nodes(); ++i) {
    ForestNode empty = f.nodes[i];
    empty.parent = f.nodes[i].parent < 0 ? -1 : id[f.nodes[i].parent];
    empty.num_tokens = 0;
    empty.num_pages = 0;
    empty.req_begin = std::int64_t(g.reqs.size());
    g.reqs.insert(g.reqs.end(), f.reqs.begin() + f.nodes[i].req_begin,
                  f.reqs.begin() + f.nodes[i].req_begin + f.nodes[i].num_reqs);
    g.nodes.push_back(empty);
    ForestNode full = f.nodes[i];
    full.parent = int(g.nodes.size()) - 1;
    full.req_begin = empty.req_begin;
    g.nodes.push_back(full);
    id[i] = int(g.nodes.size()) - 1;
  }
  for (int r : f.request_node) g.request_node.push_back(id[r]);
  return g;
}

struct Case {
  HeadConfig heads;
  int page_size, blocks, tile_rows, align;
  SplitPolicy split;
  int fixed;
};

TEST(Planner, CoversEveryTokenOfEveryRowExactlyOnce) {
  const Case cases[] = {
      {{8, 2, 64}, 16, 264, 64, 16, SplitPolicy::adaptive, 1},
      {{32, 8, 128}, 1, 7, 64, 16, SplitPolicy::adaptive, 1},
      {{5, 1, 64}, 3, 33, 4, 1, SplitPolicy::adaptive, 1},   // tiles of 4 rows, GQA 5
      {{4, 4, 128}, 7, 16, 3, 8, SplitPolicy::fixed, 5},
      {{32, 1, 256}, 16, 2, 64, 16, SplitPolicy::none, 1},   // MQA: 32 rows per request
      {{40, 8, 128}, 16, 132, 64, 64, SplitPolicy::fixed, 3},
  };
  for (const Case& c : cases) {
    for (std::uint64_t seed = 1; seed <= 6; ++seed) {
      Forest f = random_forest(seed, c.page_size, c.heads);
      if (seed % 2 == 0) f = with_empty_nodes(f);
      PlannerOptions opt;
      opt.num_blocks = c.blocks;
      opt.max_tile_rows = c.tile_rows;
      opt.chunk_align = c.align;
      opt.split = c.split;
      opt.fixed_splits = c.fixed;
      const Plan plan = make_plan(f, c.heads, DType::bf16, roofline(c.heads), opt);
      SCOPED_TRACE(testing::Message() << "seed " << seed << " heads " << c.heads.num_qo_heads << "/"
                                      << c.heads.num_kv_heads << " page " << c.page_size << " blocks " << c.blocks);
      test::expect_plan_covers_forest(plan, f);
      const PlanStats& s = plan.stats();
      EXPECT_GE(s.makespan_us, s.lower_bound_us * (1 - 1e-9));
      std::int64_t read = 0;
      for (int t = 0; t < s.num_tasks; ++t) {
        const Task& task = plan.view().tasks[t];
        read += task.kv_end - task.kv_begin;
        EXPECT_LE(task.row_end - task.row_begin, c.tile_rows);
        EXPECT_TRUE(task.kv_begin % c.align == 0) << "chunk start " << task.kv_begin << " not aligned";
      }
      EXPECT_EQ(s.kv_tokens_read, read);  // each task reads its chunk once, whatever its rows
    }
  }
}

TEST(Planner, AdaptiveSplitsRespectTheCap) {
  const HeadConfig heads{32, 8, 128};
  const RooflineCostModel cost = roofline(heads);
  // The nodes of f split up to their cap, none past it: how many reach it.
  auto nodes_at_cap = [&](const Forest& f, const std::string& what) {
    PlannerOptions opt;
    opt.num_blocks = 264;
    const Plan plan = make_plan(f, heads, DType::bf16, cost, opt);
    const PlanView p = plan.view();
    const double cost_l = plan.stats().cost_l_us;
    int at_cap = 0;
    for (int i = 0; i < f.num_nodes(); ++i) {
      const ForestNode& n = f.nodes[i];
      if (n.num_tokens == 0) continue;
      const int rows = n.num_reqs * heads.group();
      const int tiles = (rows + opt.max_tile_rows - 1) / opt.max_tile_rows;
      const int tokens = (n.num_tokens + opt.chunk_align - 1) / opt.chunk_align * opt.chunk_align;  // class tokens
      const double unsplit = cost.cost_us((rows + tiles - 1) / tiles, tokens);
      // The paper's cap ceil(C / cost_l), widened 8× (see make_plan step 3).
      const int cap = std::max(1, int(std::ceil(8 * unsplit / cost_l)));
      EXPECT_LE(p.node_splits[i], cap) << what << " node " << i;
      EXPECT_LE(p.node_splits[i], (n.num_tokens + opt.chunk_align - 1) / opt.chunk_align) << what << " node " << i;
      at_cap += p.node_splits[i] == cap;
    }
    return at_cap;
  };
  for (std::uint64_t seed = 1; seed <= 8; ++seed)
    nodes_at_cap(random_forest(seed, 16, heads, 10, 20), "seed " + std::to_string(seed));
  // ratio:0.05's 16 private nodes of ~117,000 tokens would take more chunks
  // than the cap allows (27 against 15): the cap binds there.
  const Workload w = builtin_workload("ratio:0.05");
  ASSERT_EQ(w.heads.num_qo_heads, heads.num_qo_heads);
  ASSERT_EQ(w.heads.num_kv_heads, heads.num_kv_heads);
  EXPECT_GT(nodes_at_cap(derive_forest(workload_page_tables(w).view()), "ratio:0.05"), 0);
}

TEST(Planner, SplitsALongSharedPrefixAcrossBlocks) {
  // One 120,000-token root shared by 64 requests (the batch workload shape).
  const HeadConfig heads{32, 8, 128};
  Forest f;
  f.page_size = 16;
  f.nodes.push_back({-1, 120000, 0, 7500, 0, 64});
  for (int r = 0; r < 64; ++r) f.nodes.push_back({0, 2048, 7500 + 128 * r, 128, 64 + r, 1});
  f.pages.resize(7500 + 128 * 64);
  for (std::size_t i = 0; i < f.pages.size(); ++i) f.pages[i] = int(i);
  for (int r = 0; r < 64; ++r) f.reqs.push_back(r);
  for (int r = 0; r < 64; ++r) f.reqs.push_back(r), f.request_node.push_back(1 + r);
  PlannerOptions opt;
  opt.num_blocks = 264;
  const Plan adaptive = make_plan(f, heads, DType::bf16, roofline(heads), opt);
  opt.split = SplitPolicy::none;
  const Plan none = make_plan(f, heads, DType::bf16, roofline(heads), opt);
  // 4 row tiles × 8 kv heads = 32 root units on 264 blocks: each must split several ways.
  EXPECT_GE(adaptive.view().node_splits[0], 4);
  EXPECT_LT(adaptive.stats().makespan_us, 0.5 * none.stats().makespan_us);
  EXPECT_LE(adaptive.stats().quality(), 1.05) << adaptive.stats().makespan_us << " vs " << adaptive.stats().lower_bound_us;
  // Sharing: the root's KV is read once per kv head and row tile, not per request.
  EXPECT_LT(adaptive.stats().kv_tokens_read, 8 * (4 * 120000 + 64 * 2048 + 100000));
}

TEST(Planner, IsDeterministicAndViewsACopy) {
  const HeadConfig heads{8, 2, 64};
  const Forest f = random_forest(3, 16, heads);
  PlannerOptions opt;
  opt.num_blocks = 40;
  const Plan a = make_plan(f, heads, DType::bf16, roofline(heads), opt);
  const Plan b = make_plan(f, heads, DType::bf16, roofline(heads), opt);
  ASSERT_EQ(a.bytes().size(), b.bytes().size());
  EXPECT_EQ(0, std::memcmp(a.bytes().data(), b.bytes().data(), a.bytes().size()));
  // A plan read through a copy of its bytes (as a device would) is the same plan.
  std::vector<std::byte> copy(a.bytes().begin(), a.bytes().end());
  const PlanView v = a.view(copy.data());
  const PlanView w = a.view();
  EXPECT_EQ(v.num_tasks, w.num_tasks);
  EXPECT_EQ(0, std::memcmp(v.tasks, w.tasks, sizeof(Task) * w.num_tasks));
  EXPECT_EQ(v.partial_indptr[v.num_requests], w.partial_indptr[w.num_requests]);
  EXPECT_EQ(0, std::memcmp(v.partials, w.partials, sizeof(PartialRef) * w.partial_indptr[w.num_requests]));
  // every array of the view lies in the copy, where it lies in the plan's own bytes
  auto offset = [](const void* at, const std::byte* base) {
    return at == nullptr ? std::ptrdiff_t(-1) : static_cast<const std::byte*>(at) - base;
  };
  const std::byte* own = a.bytes().data();
  const std::pair<const void*, const void*> arrays[] = {
      {v.tasks, w.tasks},           {v.block_indptr, w.block_indptr},     {v.wide_indptr, w.wide_indptr},
      {v.node_page_begin, w.node_page_begin}, {v.node_pages, w.node_pages}, {v.node_req_begin, w.node_req_begin},
      {v.node_reqs, w.node_reqs},   {v.node_splits, w.node_splits},       {v.node_slot_base, w.node_slot_base},
      {v.partial_indptr, w.partial_indptr},   {v.partials, w.partials},   {v.tail_indptr, w.tail_indptr},
      {v.tail_tokens, w.tail_tokens}};
  for (std::size_t i = 0; i < std::size(arrays); ++i)
    EXPECT_EQ(offset(arrays[i].first, copy.data()), offset(arrays[i].second, own)) << "array " << i;
  EXPECT_EQ(reinterpret_cast<const std::byte*>(v.tasks), copy.data());
}

// The extent a run checks in O(1) must equal what a pass over the arrays finds.
TEST(Planner, ExtentSummarisesTheArrays) {
  const HeadConfig heads{8, 2, 64};
  for (const std::uint64_t seed : {1u, 2u, 3u}) {
    const Forest f = random_forest(seed, 16, heads);
    PlannerOptions opt;
    opt.num_blocks = 24;
    opt.max_tile_rows = 6;
    const Plan plan = make_plan(f, heads, DType::bf16, roofline(heads), opt);
    const PlanView v = plan.view();
    const PlanExtent& e = plan.extent();
    int rows = 0, lo = 1 << 30, hi = 0;
    for (int t = 0; t < v.num_tasks; ++t) rows = std::max(rows, v.tasks[t].row_end - v.tasks[t].row_begin);
    for (int r = 0; r < v.num_requests; ++r) lo = std::min(lo, v.num_partials(r)), hi = std::max(hi, v.num_partials(r));
    const auto [plo, phi] = std::minmax_element(v.node_pages, v.node_pages + v.node_page_begin[v.num_nodes]);
    EXPECT_EQ(e.max_task_rows, rows);
    EXPECT_LE(e.max_task_rows, opt.max_tile_rows);
    EXPECT_EQ(e.min_partials, lo);
    EXPECT_EQ(e.max_partials, hi);
    EXPECT_EQ(e.min_page, *plo);
    EXPECT_EQ(e.max_page, *phi);
    EXPECT_EQ(e.needs_merge, lo != 1 || hi != 1);
    EXPECT_TRUE(e.needs_merge);  // shared nodes: some request merges several partials
  }
  // One node per request and no splitting: every request has exactly one
  // partial, and no row needs the merge.
  Forest single;
  single.page_size = 16;
  for (int r = 0; r < 3; ++r) {
    const int tokens = 40 + 30 * r, pages = (tokens + 15) / 16;
    single.nodes.push_back({-1, tokens, std::int64_t(single.pages.size()), pages, r, 1});
    for (int p = 0; p < pages; ++p) single.pages.push_back(std::int32_t(single.pages.size()));
    single.reqs.push_back(r);
    single.request_node.push_back(r);
  }
  PlannerOptions opt;
  opt.num_blocks = 8;
  opt.split = SplitPolicy::none;
  const PlanExtent e = make_plan(single, heads, DType::bf16, roofline(heads), opt).extent();
  EXPECT_EQ(e.min_partials, 1);
  EXPECT_EQ(e.max_partials, 1);
  EXPECT_FALSE(e.needs_merge);
  EXPECT_EQ(e.min_page, 0);
  EXPECT_EQ(e.max_page, int(single.pages.size()) - 1);
  const PlanExtent none = Plan().extent();  // no tasks, pages or requests
  EXPECT_LT(none.max_page, none.min_page);
  EXPECT_EQ(none.max_task_rows, 0);
  EXPECT_FALSE(none.needs_merge);
}

// With a task a block at most, block b holds task b and a PAC block reads
// no block_indptr (PlanView::single_task_blocks); never at a capacity.
TEST(Planner, SingleTaskBlocksHoldTheTaskOfTheirIndex) {
  const HeadConfig heads{8, 2, 64};
  const Forest f = random_forest(5, 16, heads);
  PlannerOptions opt;
  opt.num_blocks = 4096;
  const Plan many = make_plan(f, heads, DType::bf16, roofline(heads), opt);
  const PlanView v = many.view();
  ASSERT_LE(v.num_tasks, v.num_blocks);
  EXPECT_TRUE(v.single_task_blocks);
  for (int b = 0; b <= v.num_blocks; ++b) ASSERT_EQ(v.block_indptr[b], std::min(b, v.num_tasks)) << "block " << b;
  test::expect_plan_covers_forest(many, f);
  opt.capacity = PlanCapacity::for_batches(16, 16 * 512, heads, opt.max_tile_rows, opt.num_blocks, 1 << 16);
  const Plan at_capacity = make_plan(f, heads, DType::bf16, roofline(heads), opt);
  EXPECT_FALSE(at_capacity.view().single_task_blocks);
  EXPECT_FALSE(Plan::empty(heads, DType::bf16, 16, *opt.capacity).view().single_task_blocks);
  opt.capacity.reset();
  opt.num_blocks = 3;
  const Plan few = make_plan(f, heads, DType::bf16, roofline(heads), opt);
  EXPECT_GT(few.view().num_tasks, 3);
  EXPECT_FALSE(few.view().single_task_blocks);
}

// A capacity made for one query token a request refuses masks by name (one
// causal token each has none); its plans carry no mask arrays.
// Causal query tokens cut only the tasks whose keys reach past the first of
// them: with every request's tokens inside its own last node, no task of a
// node that some request passes through is masked (its rows see all of it),
// and a last node's tasks are masked only where they hold a query position.
TEST(Planner, CausalTokensMaskOnlyTheTasksTheyCut) {
  const HeadConfig heads{8, 2, 64};
  int masked = 0, unmasked_last = 0, shared = 0;
  for (std::uint64_t seed = 1; seed <= 6; ++seed) {
    const Forest f = random_forest(seed, 16, heads);
    std::vector<bool> last(f.nodes.size(), false);
    std::vector<std::int32_t> qo_indptr{0};
    for (int r = 0; r < f.num_requests(); ++r) {
      const int node = f.request_node[r];
      last[node] = true;
      qo_indptr.push_back(qo_indptr.back() + std::max(1, std::min(1 + r % 9, f.nodes[node].num_tokens)));
    }
    QueryBatch q;
    q.qo_indptr = qo_indptr;
    q.mask = QueryMask::causal;
    PlannerOptions opt;
    opt.num_blocks = 16;
    const Plan plan = make_plan(f, heads, DType::bf16, roofline(heads), opt, q);
    const PlanView v = plan.view();
    ASSERT_TRUE(v.masks) << "seed " << seed;
    for (int t = 0; t < plan.stats().num_tasks; ++t) {
      const Task& task = v.tasks[t];
      if (!last[task.node]) {
        EXPECT_FALSE(v.masked(task)) << "seed " << seed << ": task " << t << " of node " << task.node;
        ++shared;
        continue;
      }
      // a last node: masked exactly where some row's causal limit falls inside the task's keys
      bool cut = false;
      for (int row = task.row_begin; row < task.row_end; ++row) {
        const int token = v.node_reqs[task.req_begin + row / v.group];
        cut |= v.query_hi[token] < v.node_kv_begin[task.node] + task.kv_end;
      }
      EXPECT_EQ(v.masked(task), cut) << "seed " << seed << ": task " << t;
      masked += cut;
      unmasked_last += !cut;
    }
  }
  EXPECT_GT(shared, 0);
  EXPECT_GT(masked, 0);
  EXPECT_GT(unmasked_last, 0);  // chunks of last nodes that end before every query token
}

TEST(Planner, PrefillTasksReadOnlyTheKeysTheirRowsSee) {
  // Causal chunks of up to 120 tokens on the requests' last nodes, with and
  // without a window: every task's keys are cut to what its tile's rows see
  // (its start on the chunk alignment; one aligned step where they see none
  // of its chunk), and every row still meets each key it sees exactly once.
  const HeadConfig heads{8, 2, 64};
  for (const int window_left : {-1, 40}) {
    int cut = 0;
    for (std::uint64_t seed = 1; seed <= 6; ++seed) {
      const Forest f = random_forest(seed, 16, heads);
      std::vector<std::int32_t> qo_indptr{0};
      for (int r = 0; r < f.num_requests(); ++r)
        qo_indptr.push_back(qo_indptr.back() +
                            std::max(1, std::min(120 - r % 7, f.nodes[f.request_node[r]].num_tokens)));
      QueryBatch q;
      q.qo_indptr = qo_indptr;
      q.mask = QueryMask::causal;
      q.window_left = window_left;
      PlannerOptions opt;
      opt.num_blocks = 16;
      const Plan plan = make_plan(f, heads, DType::bf16, roofline(heads), opt, q);
      const PlanView v = plan.view();
      SCOPED_TRACE(testing::Message() << "seed " << seed << " window_left " << window_left);
      ASSERT_TRUE(v.masks);
      // keys met per (query token, qo head), against what each token sees of its path
      std::vector<std::int64_t> met(std::size_t(q.num_queries(f.num_requests())) * heads.num_qo_heads, 0);
      std::int64_t read = 0;
      std::map<std::tuple<int, int, int>, std::int32_t> chunk_len;  // (node, kv head, chunk): its longest task
      for (int t = 0; t < plan.stats().num_tasks; ++t) {
        const Task& task = v.tasks[t];
        EXPECT_EQ(task.kv_begin % opt.chunk_align, 0) << "task " << t;
        read += task.kv_end - task.kv_begin;
        int lo = task.kv_end, hi = task.kv_begin;  // the node positions the tile's rows see
        for (int row = task.row_begin; row < task.row_end; ++row) {
          const int token = v.node_reqs[task.req_begin + row / v.group];
          const PlanView::Visible seen = v.visible(task.node, token, task.kv_begin, task.kv_end);
          const int head = task.kv_head * v.group + row % v.group;
          met[std::size_t(token) * heads.num_qo_heads + head] += seen.end - seen.begin;
          if (seen.end > seen.begin) lo = std::min(lo, seen.begin), hi = std::max(hi, seen.end);
        }
        if (hi <= lo) {
          EXPECT_LE(task.kv_end - task.kv_begin, opt.chunk_align)
              << "task " << t << " reads keys none of its rows sees";
        } else {
          EXPECT_EQ(task.kv_end, hi) << "task " << t;
          EXPECT_EQ(task.kv_begin, lo / opt.chunk_align * opt.chunk_align) << "task " << t;
        }
        std::int32_t& longest = chunk_len[{task.node, task.kv_head, task.chunk}];
        longest = std::max(longest, task.kv_end - task.kv_begin);
      }
      for (int t = 0; t < plan.stats().num_tasks; ++t) {  // tiles that read less of a chunk than another tile
        const Task& task = v.tasks[t];
        cut += task.kv_end - task.kv_begin < chunk_len[{task.node, task.kv_head, task.chunk}];
      }
      EXPECT_EQ(plan.stats().kv_tokens_read, read);
      for (std::size_t i = 0; i < met.size(); ++i) {
        const int token = int(i / heads.num_qo_heads);
        EXPECT_EQ(met[i], v.query_hi[token] - v.query_lo[token])
            << "token " << token << " head " << i % heads.num_qo_heads;
      }
    }
    EXPECT_GT(cut, 0);
  }
}

// A causal prefill chunk's row tiles read what their rows see, from a few
// keys to the whole chunk: priced at that, LPT balances them. Priced whole
// (all alike), they went round robin, and a block of the last tiles ran 1.08×
// the mean. The plan's makespan is its busiest block's tasks priced at their
// keys, and within 5% of the mean load.
TEST(Planner, BalancesCausalTilesByTheKeysTheyRead) {
  const HeadConfig heads{8, 2, 64};
  const RooflineCostModel cost = roofline(heads);
  // unsplit, and in 4 chunks (those every row sees whole price as one rectangle)
  for (const auto& [cached, splits] : {std::pair{0, 0}, {160, 0}, {1600, 4}}) {
    const int len = cached + 1024, page_size = 16, pages = (len + page_size - 1) / page_size;
    std::vector<std::int32_t> indptr{0, pages}, indices(pages), last{len - (pages - 1) * page_size};
    for (int p = 0; p < pages; ++p) indices[p] = p;
    const Forest f = derive_forest({indptr, indices, last, page_size, pages});
    PlannerOptions opt;
    opt.num_blocks = 16;
    if (splits) opt.split = SplitPolicy::fixed, opt.fixed_splits = splits;
    const std::vector<std::int32_t> qo_indptr{0, 1024};
    const Plan plan = make_plan(f, heads, DType::bf16, cost, opt, {qo_indptr, QueryMask::causal, {}});
    const PlanView v = plan.view();
    double most = 0, total = 0;
    for (int b = 0; b < v.num_blocks; ++b) {
      double load = 0;
      for (int i = v.block_indptr[b]; i < v.block_indptr[b + 1]; ++i)
        load += cost.cost_us(v.tasks[i].row_end - v.tasks[i].row_begin, v.tasks[i].kv_end - v.tasks[i].kv_begin);
      most = std::max(most, load);
      total += load;
    }
    SCOPED_TRACE(testing::Message() << cached << " cached tokens, " << splits << " splits");
    EXPECT_NEAR(plan.stats().makespan_us, most, 1e-6 * most);
    EXPECT_LE(most, 1.05 * total / v.num_blocks);
  }
}

TEST(Planner, PlansAtACapacityRefuseMasksByName) {
  const HeadConfig heads{8, 2, 64};
  const Forest f = random_forest(5, 16, heads);
  PlannerOptions opt;
  opt.num_blocks = 8;
  opt.capacity = PlanCapacity::for_batches(64, 64 * 512, heads, opt.max_tile_rows, opt.num_blocks, 1 << 16);
  std::vector<std::int32_t> one{0}, two{0};
  for (int r = 0; r < f.num_requests(); ++r) one.push_back(r + 1), two.push_back(2 * (r + 1));
  EXPECT_NO_THROW(make_plan(f, heads, DType::bf16, roofline(heads), opt, {one, QueryMask::causal, {}}));
  auto masked = [&] { make_plan(f, heads, DType::bf16, roofline(heads), opt, {two, QueryMask::causal, {}}); };
  EXPECT_TRUE(test::throws_with(masked, "its capacity was made for one query token a request"));
}

// A capacity's node requests hold any batch within its maxima, those of fewer
// requests than its most included: 2 requests of 3 page entries listing 7
// node requests under a capacity of 3 requests and 4 query tokens (its
// bound's largest term is the batch of 2).
TEST(Planner, QueryCapacityHoldsBatchesOfFewerRequests) {
  const HeadConfig heads{8, 2, 64};
  const std::vector<std::int32_t> indptr{0, 1, 3}, indices{0, 0, 1}, last{2, 2};  // request 1 extends request 0
  const Forest f = derive_forest({indptr, indices, last, 2, 2});
  const std::vector<std::int32_t> qo_indptr{0, 1, 4};  // 1 token at its one node, 3 at each of two
  PlannerOptions opt;
  opt.num_blocks = 4;
  opt.capacity = PlanCapacity::for_batches(3, 3, heads, opt.max_tile_rows, opt.num_blocks, 1 << 12, 0, 0, {4, 0});
  EXPECT_EQ(opt.capacity->node_reqs, 3 + 2 * 2);
  const Plan plan = make_plan(f, heads, DType::bf16, roofline(heads), opt, {qo_indptr, QueryMask::causal, {}});
  EXPECT_EQ(plan.num_requests(), 4);
}

TEST(Planner, FlatForestReadsEveryRequestsKv) {
  const HeadConfig heads{8, 2, 64};
  const Forest f = random_forest(4, 16, heads);
  PlannerOptions opt;
  opt.num_blocks = 16;
  const Plan shared = make_plan(f, heads, DType::bf16, roofline(heads), opt);
  const Plan flat = make_plan(flatten(f), heads, DType::bf16, roofline(heads), opt);
  EXPECT_EQ(flat.stats().kv_tokens_read, f.flat_tokens() * heads.num_kv_heads);
  EXPECT_LE(shared.stats().kv_tokens_read, flat.stats().kv_tokens_read);
}

// A node of nearly 2^31 tokens, the most a request may hold: chunk arithmetic
// does not wrap (the node rounds up to 2^31 at the alignment) and the
// planner's memory does not grow with the tokens (its price memo would take
// 5 GB). Every row attends to each of its tokens once.
TEST(Planner, ANodeOfNearly2To31Tokens) {
  const HeadConfig heads{4, 2, 128};
  const std::vector<std::int32_t> indptr{0, 2, 4}, indices{0, 1, 0, 1}, last{(1 << 30) - 5, (1 << 30) - 5};
  const Forest f = derive_forest({indptr, indices, last, 1 << 30, 2});
  ASSERT_EQ(f.num_nodes(), 1);
  ASSERT_EQ(f.request_tokens(0), 2147483643);
  for (const int blocks : {1, 7, 264}) {
    PlannerOptions opt;
    opt.num_blocks = blocks;
    const Plan plan = make_plan(f, heads, DType::bf16, roofline(heads), opt);
    const PlanView p = plan.view();
    std::vector<std::int64_t> keys(2 * heads.num_qo_heads, 0);
    for (int t = 0; t < p.num_tasks; ++t) {
      const Task& task = p.tasks[t];
      ASSERT_LT(task.kv_begin, task.kv_end) << "task " << t;
      ASSERT_LE(task.kv_end, f.nodes[task.node].num_tokens) << "task " << t;
      for (int v = task.row_begin; v < task.row_end; ++v) {
        const int req = f.reqs[f.nodes[task.node].req_begin + v / p.group];
        keys[req * heads.num_qo_heads + task.kv_head * p.group + v % p.group] += task.kv_end - task.kv_begin;
      }
    }
    for (int r = 0; r < 2; ++r)
      for (int h = 0; h < heads.num_qo_heads; ++h)
        EXPECT_EQ(keys[r * heads.num_qo_heads + h], f.request_tokens(r)) << "blocks " << blocks << " row " << r << "," << h;
  }
}

TEST(Planner, BadOptions) {
  const HeadConfig heads{8, 2, 64};
  const Forest f = random_forest(1, 16, heads);
  PlannerOptions opt;
  EXPECT_THROW(make_plan(f, heads, DType::bf16, roofline(heads), opt), Error);  // num_blocks 0
  opt.num_blocks = 4;
  opt.max_tile_rows = 0;
  EXPECT_THROW(make_plan(f, heads, DType::bf16, roofline(heads), opt), Error);
  opt.max_tile_rows = 64;
  EXPECT_THROW(make_plan(f, HeadConfig{30, 8, 64}, DType::bf16, roofline(heads), opt), Error);
  opt.wide_tile_rows = 32;  // fewer rows than a task's
  EXPECT_TRUE(test::throws_with([&] { make_plan(f, heads, DType::bf16, roofline(heads), opt); },
                                "wide_tile_rows 32 must be 0 or >= max_tile_rows 64"));
  opt.wide_tile_rows = 128;
  opt.wide_span = 3;  // 4 blocks do not make whole wide blocks of 3
  EXPECT_TRUE(test::throws_with([&] { make_plan(f, heads, DType::bf16, roofline(heads), opt); },
                                "wide_span 3 must be >= 1 and divide num_blocks 4"));
  opt.wide_span = 2;
  opt.wide_max_masked_rows = -1;
  EXPECT_TRUE(test::throws_with([&] { make_plan(f, heads, DType::bf16, roofline(heads), opt); },
                                "wide_max_masked_rows -1 must be >= 0"));
  opt.wide_max_masked_rows = 0;
  opt.wide_max_chunk_tokens = -1;
  EXPECT_TRUE(test::throws_with([&] { make_plan(f, heads, DType::bf16, roofline(heads), opt); },
                                "wide_max_chunk_tokens -1 must be >= 0"));
  opt.wide_max_chunk_tokens = 0;
  opt.wide_tile_rows = 0;
  opt.price_tile_tokens = -64;
  EXPECT_TRUE(test::throws_with([&] { make_plan(f, heads, DType::bf16, roofline(heads), opt); },
                                "price_tile_tokens -64 must be >= 0"));
  opt.price_tile_tokens = 0;
  for (const auto& [price, shown] : {std::pair{0.0, "0"}, {-0.5, "-0.5"}, {0.2, "0.2"}, {1.25, "1.25"}}) {
    opt.beside_wide_price = price;
    EXPECT_TRUE(test::throws_with([&] { make_plan(f, heads, DType::bf16, roofline(heads), opt); },
                                  std::string("beside_wide_price ") + shown + " must be in [0.25, 1]"));
  }
}

// A forest of 1-3 roots, each shared by many requests (tens to hundreds of
// rows per kv head), with private tails: wide and narrow tasks in one plan.
Forest many_row_forest(std::uint64_t seed, int page_size, const HeadConfig& heads, int requests) {
  test::RandomBatchSpec spec;
  spec.seed = seed;
  spec.page_size = page_size;
  spec.num_nodes = 1 + int(seed % 3);
  spec.num_requests = requests;
  spec.fork_prob = 0.1;
  spec.max_node_pages = (700 + page_size - 1) / page_size;
  spec.max_tail = 90;
  spec.heads = heads;
  return derive_forest(test::make_random_batch(spec).table());
}

// The predicted time of a task as the planner prices it (chunk_align 1: a
// class's tokens are its nodes'), a wide one on a wide block of span blocks.
double task_price(const CostModel& cost, const Task& t, bool wide, int span) {
  return wide ? cost.wide_cost_us(t.row_end - t.row_begin, t.kv_end - t.kv_begin, span)
              : cost.cost_us(t.row_end - t.row_begin, t.kv_end - t.kv_begin);
}

// Wide tasks: nodes of more than max_tile_rows rows take row tiles of up to
// wide_tile_rows rows, on the wide blocks; the others stay on the blocks. The
// plan's makespan is the kernels' order: every wide block's tasks, then block
// b starting at the (b / span)-th earliest end of a wide block.
TEST(Planner, WideTasksRunFirstOnWideBlocks) {
  struct WideCase {
    HeadConfig heads;
    int blocks, span, tile_rows, wide_rows, requests;
  };
  const WideCase cases[] = {
      {{32, 8, 128}, 264, 2, 64, 128, 60},  // the H200's shape: 4 head slices of 33 SMs
      {{32, 8, 128}, 16, 2, 64, 128, 80},   // few blocks: each walks many tasks
      {{40, 8, 128}, 12, 3, 20, 50, 30},    // GQA 5, odd tiles, three blocks a wide block
      {{32, 1, 64}, 10, 2, 64, 128, 9},     // MQA: 32 rows a request
  };
  int relieved = 0;  // plans whose blocks beside the wide phase are priced below the table
  for (const WideCase& c : cases)
    for (std::uint64_t seed = 1; seed <= 4; ++seed) {
      const Forest f = many_row_forest(seed, seed % 2 ? 16 : 3, c.heads, c.requests);
      PlannerOptions opt;
      opt.num_blocks = c.blocks;
      opt.max_tile_rows = c.tile_rows;
      opt.wide_tile_rows = c.wide_rows;
      opt.wide_span = c.span;
      opt.chunk_align = 1;
      opt.beside_wide_price = seed <= 2 ? 1.0 : 0.6;
      const RooflineCostModel cost = roofline(c.heads);
      const Plan plan = make_plan(f, c.heads, DType::bf16, cost, opt);
      SCOPED_TRACE(testing::Message() << "seed " << seed << " blocks " << c.blocks << " span " << c.span
                                      << " beside_wide_price " << opt.beside_wide_price);
      test::expect_plan_covers_forest(plan, f);
      const PlanView p = plan.view();
      ASSERT_EQ(p.num_wide_blocks, c.blocks / c.span);
      const int narrow = p.block_indptr[p.num_blocks];
      EXPECT_EQ(plan.stats().num_wide_tasks, p.num_tasks - narrow);
      EXPECT_GT(plan.stats().num_wide_tasks, 0);
      EXPECT_GT(narrow, 0);
      for (int t = 0; t < p.num_tasks; ++t) {
        const Task& task = p.tasks[t];
        const int rows = task.row_end - task.row_begin, node_rows = p.node_rows(task.node);
        if (t >= narrow) {
          EXPECT_GT(node_rows, c.tile_rows) << "wide task " << t;
        }
        EXPECT_LE(rows, t >= narrow ? c.wide_rows : c.tile_rows) << "task " << t;
      }
      EXPECT_LE(plan.extent().max_task_rows, c.tile_rows);
      EXPECT_GT(plan.extent().max_wide_rows, c.tile_rows);
      EXPECT_LE(plan.extent().max_wide_rows, c.wide_rows);
      // the makespan, replayed in the kernels' order: a block's task runs at
      // beside_wide_price of its price until the last wide block ends
      std::vector<double> ends(p.num_wide_blocks, 0.0);
      for (int w = 0; w < p.num_wide_blocks; ++w)
        for (int i = p.wide_indptr[w]; i < p.wide_indptr[w + 1]; ++i)
          ends[w] += task_price(cost, p.tasks[i], true, c.span);
      std::sort(ends.begin(), ends.end());
      const double wide_end = ends.back();
      double makespan = wide_end;
      for (int b = 0; b < p.num_blocks; ++b) {
        double end = ends[b / c.span];
        for (int i = p.block_indptr[b]; i < p.block_indptr[b + 1]; ++i) {
          double work = task_price(cost, p.tasks[i], false, c.span);
          if (end < wide_end) {  // the part of the task that runs beside the wide phase
            const double beside = std::min(work * opt.beside_wide_price, wide_end - end);
            relieved += opt.beside_wide_price < 1 && i == p.block_indptr[b] && beside > 0;
            end += beside;
            work -= beside / opt.beside_wide_price;
          }
          end += work;
        }
        makespan = std::max(makespan, end);
      }
      EXPECT_NEAR(plan.stats().makespan_us, makespan, 1e-6 * makespan);
      if (opt.beside_wide_price == 1) {
        EXPECT_GE(plan.stats().makespan_us, plan.stats().lower_bound_us * (1 - 1e-9));
      }
    }
  EXPECT_GT(relieved, 0);  // the relieved replay was exercised
}

// Tasks beside wide ones take beside_wide_price only in batches of one query
// token a request (qo_indptr given or not); with more the plan is the one
// priced at 1, byte for byte.
TEST(Planner, BesidePriceOnlyWhereRequestsBringOneToken) {
  const HeadConfig heads{32, 8, 128};
  int moved = 0;  // one-token plans the beside price changes
  for (std::uint64_t seed = 1; seed <= 3; ++seed) {
    const Forest f = many_row_forest(seed, 16, heads, 60);
    const std::vector<std::int64_t> kv_len = request_lengths(f);
    std::vector<std::int32_t> one{0}, two{0};
    for (int r = 0; r < f.num_requests(); ++r) {
      one.push_back(r + 1);
      two.push_back(two.back() + int(std::min<std::int64_t>(2, kv_len[r])));
    }
    ASSERT_GT(two.back(), f.num_requests());
    PlannerOptions opt;
    opt.num_blocks = 264;
    opt.wide_tile_rows = 128;
    auto plan_at = [&](double price, std::span<const std::int32_t> qo_indptr) {
      opt.beside_wide_price = price;
      return make_plan(f, heads, DType::bf16, roofline(heads), opt, {qo_indptr, QueryMask::causal, {}});
    };
    const Plan decode = plan_at(0.6, {}), given = plan_at(0.6, one), at_one = plan_at(1.0, {});
    ASSERT_GT(decode.stats().num_wide_tasks, 0) << "seed " << seed;
    EXPECT_DOUBLE_EQ(given.stats().makespan_us, decode.stats().makespan_us) << "seed " << seed;
    moved += decode.stats().makespan_us != at_one.stats().makespan_us;
    const Plan verify = plan_at(0.6, two), priced_whole = plan_at(1.0, two);
    ASSERT_GT(verify.stats().num_wide_tasks, 0) << "seed " << seed;
    ASSERT_EQ(verify.bytes().size(), priced_whole.bytes().size()) << "seed " << seed;
    EXPECT_EQ(0, std::memcmp(verify.bytes().data(), priced_whole.bytes().data(), verify.bytes().size()))
        << "seed " << seed;
  }
  EXPECT_GT(moved, 0);
}

// A node takes wide tasks where they cost less block time than its tasks
// would, else tasks: at half the price of two half tasks every node of many
// rows goes wide, at twice none does.
TEST(Planner, NodesGoWideWhereItPays) {
  const HeadConfig heads{32, 8, 128};
  const RooflineCostModel base = roofline(heads);
  int still_wide = 0;
  for (std::uint64_t seed = 1; seed <= 3; ++seed) {
    const Forest f = many_row_forest(seed, 16, heads, 50);
    PlannerOptions opt;
    opt.num_blocks = 264;
    opt.wide_tile_rows = 128;
    bool many_rows = false;
    for (const ForestNode& n : f.nodes) many_rows = many_rows || (n.num_tokens > 0 && n.num_reqs * 4 > 64);
    ASSERT_TRUE(many_rows);
    for (const double factor : {0.5, 2.0}) {
      const Plan plan = make_plan(f, heads, DType::bf16, test::WidePriced(base, factor), opt);
      test::expect_plan_covers_forest(plan, f);
      const PlanView p = plan.view();
      int wide_nodes = 0, many_row_nodes = 0;
      for (int i = 0; i < p.num_nodes; ++i)
        many_row_nodes += p.node_splits[i] > 0 && p.node_rows(i) > opt.max_tile_rows;
      std::vector<bool> is_wide(p.num_nodes, false);
      for (int t = p.num_wide_blocks ? p.wide_indptr[0] : p.num_tasks; t < p.num_tasks; ++t)
        is_wide[p.tasks[t].node] = true;
      for (int i = 0; i < p.num_nodes; ++i) wide_nodes += is_wide[i];
      EXPECT_EQ(wide_nodes, factor <= 1.0 ? many_row_nodes : 0) << "seed " << seed << " wide x" << factor;
    }
    // fewer rows a wide tile than wide_min_rows: the node keeps its tasks
    opt.wide_min_rows = 129;
    EXPECT_EQ(make_plan(f, heads, DType::bf16, test::WidePriced(base, 0.5), opt).stats().num_wide_tasks, 0);
    opt.wide_min_rows = 65;
    opt.wide_min_tokens = 300;  // nor do nodes shorter than this
    const Plan plan = make_plan(f, heads, DType::bf16, test::WidePriced(base, 0.5), opt);
    const PlanView p = plan.view();
    EXPECT_GT(plan.stats().num_wide_tasks, 0);
    for (int t = p.num_wide_blocks ? p.wide_indptr[0] : p.num_tasks; t < p.num_tasks; ++t) {
      const int rows = p.node_rows(p.tasks[t].node), tiles = (rows + 127) / 128;
      EXPECT_GE((rows + tiles - 1) / tiles, 65) << "wide task " << t;
      EXPECT_GE(f.nodes[p.tasks[t].node].num_tokens, 300) << "wide task " << t;
    }
    // nor do masked nodes of more rows than wide_max_masked_rows: under a
    // custom mask that hides each request's first key (its rows' mask bits
    // cover every node), the others still go wide; unmasked, the cap binds none
    std::vector<bool> was_wide(p.num_nodes, false);
    int most_rows = 0;
    for (int t = p.num_wide_blocks ? p.wide_indptr[0] : p.num_tasks; t < p.num_tasks; ++t) {
      was_wide[p.tasks[t].node] = true;
      most_rows = std::max(most_rows, p.node_rows(p.tasks[t].node));
    }
    const std::vector<std::int64_t> kv_len = request_lengths(f);
    std::vector<std::int32_t> qo_indptr{0};
    QueryBatch hide_first{{}, QueryMask::custom, {}};
    const std::vector<std::int64_t> bytes = mask_byte_offsets(kv_len, hide_first);
    std::vector<std::uint8_t> bits(std::size_t(bytes.back()), 0xff);
    for (int r = 0; r < f.num_requests(); ++r) {
      bits[std::size_t(bytes[r])] &= 0xfe;
      qo_indptr.push_back(r + 1);
    }
    hide_first.qo_indptr = qo_indptr;
    hide_first.mask_bits = bits;
    opt.wide_max_masked_rows = most_rows - 1;
    auto wide_nodes = [&](const Plan& plan) {
      const PlanView v = plan.view();
      std::vector<bool> wide(v.num_nodes, false);
      for (int t = v.num_wide_blocks ? v.wide_indptr[0] : v.num_tasks; t < v.num_tasks; ++t)
        wide[v.tasks[t].node] = true;
      return wide;
    };
    EXPECT_EQ(wide_nodes(make_plan(f, heads, DType::bf16, test::WidePriced(base, 0.5), opt)), was_wide)
        << "seed " << seed;
    const Plan capped = make_plan(f, heads, DType::bf16, test::WidePriced(base, 0.5), opt, hide_first);
    ASSERT_TRUE(capped.view().masks);
    const std::vector<bool> is_wide = wide_nodes(capped);
    for (int i = 0; i < p.num_nodes; ++i) {
      EXPECT_EQ(is_wide[i], was_wide[i] && p.node_rows(i) < most_rows) << "seed " << seed << " node " << i;
      still_wide += is_wide[i];
    }
  }
  EXPECT_GT(still_wide, 0);  // some node under the cap went wide beside one over it
}

// After the adaptive and exhaustive searches a wide node longer than
// wide_max_chunk_tokens takes ceil(tokens / max) chunks at least, and every
// other node the count the search chose. batch:64 at 8 query tokens: the
// roofline prices chunk counts of its 120k-token root alike and leaves it
// whole, which ran at half speed (DESIGN_NOTES.md, Planner 13). Fixed and
// unsplit plans keep their counts, and a workspace too small for the chunks
// keeps the search's.
TEST(Planner, LongWideChunksAreCutAfterTheSearch) {
  const Workload w = builtin_workload("batch:64").with_queries(8);
  const Forest f = derive_forest(workload_page_tables(w).view());
  const WorkloadQueries queries = workload_queries(w);
  const HeadConfig& heads = w.heads;
  PlannerOptions opt = cuda_planner_options(heads, 132, 2, /*wide=*/true);  // an H200's (codec plan --target h200)
  opt.wide_max_chunk_tokens = 0;
  const RooflineCostModel cost = roofline(heads);
  auto plan = [&](const PlannerOptions& o) { return make_plan(f, heads, DType::bf16, cost, o, queries.view()); };
  auto longest_wide_chunk = [](const Plan& plan) {
    const PlanView p = plan.view();
    int longest = 0;
    for (int t = p.num_wide_blocks ? p.wide_indptr[0] : p.num_tasks; t < p.num_tasks; ++t)
      longest = std::max(longest, p.tasks[t].kv_end - p.tasks[t].kv_begin);
    return longest;
  };
  const Plan whole = plan(opt);
  ASSERT_GT(whole.stats().num_wide_tasks, 0);
  EXPECT_GT(longest_wide_chunk(whole), 100000);  // the case the option is for
  for (const SplitPolicy policy : {SplitPolicy::adaptive, SplitPolicy::exhaustive}) {
    opt.split = policy;
    opt.wide_max_chunk_tokens = 0;
    const Plan searched = plan(opt);
    opt.wide_max_chunk_tokens = 32768;
    const Plan cut = plan(opt);
    EXPECT_LE(longest_wide_chunk(cut), 32768) << "policy " << int(policy);
    EXPECT_EQ(cut.view().node_splits[0], 4) << "policy " << int(policy);  // the root: ceil(120,000 / 32,768)
    for (int i = 1; i < f.num_nodes(); ++i)
      EXPECT_EQ(cut.view().node_splits[i], searched.view().node_splits[i]) << "policy " << int(policy) << " node " << i;
  }
  // ratio:0.1's draft trees: its 77k-token root cut in 2 would leave the
  // private nodes waiting behind twice the wide tasks, priced far dearer
  const Workload r = builtin_workload("ratio:0.1").with_queries(1, 4, 4);
  const Forest rf = derive_forest(workload_page_tables(r).view());
  const WorkloadQueries rq = workload_queries(r);
  opt.wide_max_chunk_tokens = 0;
  const Plan r_searched = make_plan(rf, heads, DType::bf16, cost, opt, rq.view());
  opt.wide_max_chunk_tokens = 32768;
  const Plan r_kept = make_plan(rf, heads, DType::bf16, cost, opt, rq.view());
  ASSERT_GT(r_searched.stats().num_wide_tasks, 0);
  EXPECT_EQ(r_kept.stats().makespan_us, r_searched.stats().makespan_us);
  EXPECT_GT(longest_wide_chunk(r_kept), 32768);
  opt.split = SplitPolicy::none;
  EXPECT_EQ(plan(opt).stats().max_splits, 1);
  opt.split = SplitPolicy::fixed;
  opt.fixed_splits = 2;
  EXPECT_EQ(plan(opt).stats().max_splits, 2);
  opt.split = SplitPolicy::adaptive;
  opt.max_slots = min_slots(f, heads, queries.view());  // room for the unsplit plan alone
  EXPECT_EQ(plan(opt).stats().max_splits, 1);
}

// A forest without a node past max_tile_rows plans as without wide tasks,
// byte for byte; a capacity with wide blocks keeps their (empty) index.
TEST(Planner, WideOptionsChangeNoPlanWithoutManyRowNodes) {
  const HeadConfig heads{32, 8, 128};
  const Forest f = random_forest(5, 16, heads, 6, 9);  // 9 requests: at most 36 rows a node
  PlannerOptions opt;
  opt.num_blocks = 264;
  const Plan narrow = make_plan(f, heads, DType::bf16, roofline(heads), opt);
  opt.wide_tile_rows = 128;
  const Plan wide = make_plan(f, heads, DType::bf16, roofline(heads), opt);
  EXPECT_EQ(wide.view().num_wide_blocks, 0);
  ASSERT_EQ(narrow.bytes().size(), wide.bytes().size());
  EXPECT_EQ(0, std::memcmp(narrow.bytes().data(), wide.bytes().data(), narrow.bytes().size()));
  opt.capacity = PlanCapacity::for_batches(16, 16 * 64, heads, 64, 264, 1 << 14, opt.wide_blocks());
  const Plan packed = make_plan(f, heads, DType::bf16, roofline(heads), opt);
  const PlanView p = packed.view();
  ASSERT_EQ(p.num_wide_blocks, 132);
  for (int w = 0; w <= p.num_wide_blocks; ++w) EXPECT_EQ(p.wide_indptr[w], p.block_indptr[p.num_blocks]);
  EXPECT_EQ(Plan::empty(heads, DType::bf16, 16, *opt.capacity).view().num_wide_blocks, 132);
  opt.capacity->wide_blocks = 0;  // the options' wide blocks and the capacity's must agree
  EXPECT_TRUE(test::throws_with([&] { make_plan(f, heads, DType::bf16, roofline(heads), opt); },
                                "capacity of 0 wide blocks differs from the options' 132"));
}

// Nodes with wide tasks in a plan (those its wide blocks run).
std::vector<bool> wide_nodes(const PlanView& p) {
  std::vector<bool> wide(p.num_nodes, false);
  for (int t = p.num_wide_blocks ? p.wide_indptr[0] : p.num_tasks; t < p.num_tasks; ++t) wide[p.tasks[t].node] = true;
  return wide;
}

// Tails: a request's last node, its own alone and of at most wide_tail_tokens
// tokens, under a parent with wide tasks, has no tasks; the parent's chunks
// cover it, each a share (expect_plan_covers_forest expands task_tails), and, at the
// same split counts, the request's rows merge that node's partials fewer. Whatever the split
// policy (the parent in one chunk or several), page size and GQA.
TEST(Planner, WideParentsTakeInShortTails) {
  struct TailCase {
    HeadConfig heads;
    int page_size, requests;
  };
  const TailCase cases[] = {{{32, 8, 128}, 16, 60}, {{32, 8, 128}, 1, 40}, {{40, 8, 128}, 3, 50}};
  int tails = 0, split_parents = 0;
  for (const TailCase& c : cases)
    for (std::uint64_t seed = 1; seed <= 3; ++seed)
      for (const SplitPolicy split : {SplitPolicy::adaptive, SplitPolicy::none, SplitPolicy::fixed}) {
        const Forest f = many_row_forest(seed, c.page_size, c.heads, c.requests);
        const RooflineCostModel base = roofline(c.heads);
        const test::WidePriced cost(base, 0.5);  // every node of many rows wide
        PlannerOptions opt;
        opt.num_blocks = 264;
        opt.wide_tile_rows = 128;
        opt.split = split;
        opt.fixed_splits = 3;
        const Plan without = make_plan(f, c.heads, DType::bf16, cost, opt);
        opt.wide_tail_tokens = 40;
        const Plan with = make_plan(f, c.heads, DType::bf16, cost, opt);
        SCOPED_TRACE(testing::Message() << "seed " << seed << " page " << c.page_size << " split " << int(split));
        test::expect_plan_covers_forest(with, f);
        const PlanView a = without.view(), b = with.view();
        const std::vector<bool> wide = wide_nodes(a);
        int expected = 0;
        for (int r = 0; r < f.num_requests(); ++r) {
          const int x = f.request_node[r];
          const ForestNode& n = f.nodes[x];
          const bool tail = n.num_reqs == 1 && n.num_tokens >= 1 && n.num_tokens <= 40 && n.parent >= 0 && wide[n.parent];
          expected += tail;
          if (tail) {
            EXPECT_EQ(b.node_splits[x], 0) << "request " << r;
          }
          if (split != SplitPolicy::adaptive) {  // (the adaptive search may cut the ancestors otherwise)
            EXPECT_EQ(b.num_partials(r), a.num_partials(r) - (tail ? a.node_splits[x] : 0)) << "request " << r;
          }
          if (tail) split_parents += b.node_splits[n.parent] > 1;
        }
        EXPECT_EQ(with.stats().num_tails, expected);
        EXPECT_EQ(b.tails, expected > 0);
        EXPECT_FALSE(a.tails);
        tails += expected;
      }
  EXPECT_GT(tails, 0);
  EXPECT_GT(split_parents, 0);  // tails shared by a parent's chunks, whose rows still merge
}

// At a capacity with tail tokens every plan has tail_indptr, tails or not (a
// captured graph reads it for any plan), and tails that would overflow the
// capacity are not taken in; a capacity without tail tokens takes in none.
TEST(Planner, TailsAtACapacity) {
  const HeadConfig heads{32, 8, 128};
  const Forest f = many_row_forest(1, 16, heads, 60);
  const RooflineCostModel base = roofline(heads);
  const test::WidePriced cost(base, 0.5);
  PlannerOptions opt;
  opt.num_blocks = 264;
  opt.wide_tile_rows = 128;
  opt.wide_tail_tokens = 40;
  const Plan compact = make_plan(f, heads, DType::bf16, cost, opt);
  ASSERT_GT(compact.stats().num_tails, 0);
  opt.capacity = PlanCapacity::for_batches(64, 64 * 64, heads, 64, 264, 1 << 16, opt.wide_blocks(),
                                           opt.max_tail_tokens());
  EXPECT_EQ(opt.capacity->tail_tokens, 64 * 40);
  const Plan packed = make_plan(f, heads, DType::bf16, cost, opt);
  EXPECT_EQ(packed.stats().num_tails, compact.stats().num_tails);
  EXPECT_TRUE(packed.view().tails);
  test::expect_plan_covers_forest(packed, f);
  opt.capacity->tail_tokens = 1;  // fewer than the batch's tails: none taken in, the index still there
  const Plan few = make_plan(f, heads, DType::bf16, cost, opt);
  EXPECT_EQ(few.stats().num_tails, 0);
  EXPECT_TRUE(few.view().tails);
  test::expect_plan_covers_forest(few, f);
  EXPECT_TRUE(Plan::empty(heads, DType::bf16, 16, *opt.capacity).view().tails);
  opt.capacity->tail_tokens = 0;
  const Plan none = make_plan(f, heads, DType::bf16, cost, opt);
  EXPECT_EQ(none.stats().num_tails, 0);
  EXPECT_FALSE(none.view().tails);
  // arrays that disagree with the capacity, or with themselves
  PlanArrays a = PlanArrays::none(264, 132);
  a.tail_indptr = {0};
  EXPECT_TRUE(test::throws_with([&] { Plan(heads, DType::bf16, 16, a, PlanStats{}, &*opt.capacity); },
                                "plan has a tail_indptr, but its capacity holds 0 tail tokens"));
  a.tail_tokens = {{0, 0}};
  EXPECT_TRUE(test::throws_with([&] { Plan(heads, DType::bf16, 16, a, PlanStats{}); },
                                "plan tail_indptr of 1 entries from 0 to 0 does not index 1 tail tokens"));
  opt.wide_tail_tokens = -1;
  opt.capacity.reset();
  EXPECT_TRUE(test::throws_with([&] { make_plan(f, heads, DType::bf16, cost, opt); },
                                "planner wide_tail_tokens -1 must be >= 0"));
}

}  // namespace
}  // namespace codec

namespace codec {
namespace {

// The adaptive search against every split vector within the caps, on the
// built-in workloads small enough to enumerate: the bound must hold for the
// best plan too, and the search must come close to it.
TEST(Planner, AdaptiveSearchComesCloseToExhaustiveSearch) {
  for (const char* name : {"seq:256", "seq:1024", "batch:16", "ratio:0.8", "shape:4", "shape:5", "long"}) {
    const Workload w = builtin_workload(name);
    const Forest forest = derive_forest(workload_page_tables(w).view());
    const RooflineCostModel cost(RooflineParams::h200(), w.heads, w.dtype);
    PlannerOptions opt;
    opt.num_blocks = 264;
    const PlanStats adaptive = make_plan(forest, w.heads, w.dtype, cost, opt).stats();
    opt.split = SplitPolicy::exhaustive;
    const PlanStats best = make_plan(forest, w.heads, w.dtype, cost, opt).stats();
    EXPECT_GE(best.makespan_us, best.lower_bound_us * (1 - 1e-9)) << name;
    EXPECT_LE(best.makespan_us, adaptive.makespan_us * (1 + 1e-9)) << name;
    EXPECT_LE(adaptive.makespan_us, 1.05 * best.makespan_us) << name << ": adaptive " << adaptive.makespan_us
                                                             << " µs, exhaustive " << best.makespan_us << " µs";
  }
}

// depth:6 at 2 query tokens under an H100's measured prices (its table of
// f1be831, to 0.1 µs): the adaptive search's grid and the pattern search from
// its best ended 11% above the exhaustive search's plan, which splits the
// 2-request nodes alone; the second descent, from the unsplit vector over the
// classes of most load, finds that plan.
TEST(Planner, AdaptiveSearchFindsAPlanThatSplitsOneClass) {
  const Workload w = builtin_workload("depth:6").with_queries(2);
  const Forest forest = derive_forest(workload_page_tables(w).view());
  const WorkloadQueries queries = workload_queries(w);
  CostTable table;
  table.device = "test";
  table.head_dim = w.heads.head_dim;
  table.rows = {4, 8, 16, 32, 64};
  table.kv_len = {16, 64, 256, 1024, 4096, 16384};
  table.us = {{4.5, 6.6, 15.1, 49.5, 182.4, 717.2},
              {4.7, 6.7, 15.2, 50.5, 183.2, 716.4},
              {5.2, 7.3, 15.7, 52.0, 184.9, 718.0},
              {9.4, 11.3, 20.1, 52.7, 186.1, 720.4},
              {12.6, 14.4, 23.5, 56.5, 189.8, 721.8}};
  table.merge_rows = {32, 256, 2048, 16384};
  table.merge_partials = {2, 4, 8, 16, 32};
  table.merge_us = {{1.8, 1.6, 2.1, 2.4, 2.6},
                    {2.3, 2.0, 1.7, 4.4, 4.6},
                    {3.3, 4.1, 5.9, 9.1, 16.6},
                    {5.8, 14.3, 27.2, 51.6, 95.6}};
  const TableCostModel cost(table);
  PlannerOptions opt = cuda_planner_options(w.heads, 132, 2, /*wide=*/true);  // an H100's and an H200's
  auto objective = [&](SplitPolicy policy) {
    opt.split = policy;
    const PlanStats s = make_plan(forest, w.heads, w.dtype, cost, opt, queries.view()).stats();
    return s.makespan_us + s.merge_us;
  };
  const double adaptive = objective(SplitPolicy::adaptive), best = objective(SplitPolicy::exhaustive);
  EXPECT_LE(adaptive, best * (1 + 1e-9)) << "adaptive " << adaptive << " µs, exhaustive " << best << " µs";
}

// The roofline's PAC prices with a merge that costs `per_partial` µs for each
// partial of the row that has the most, whatever the rows.
class MergePriced final : public CostModel {
 public:
  MergePriced(const HeadConfig& heads, double per_partial) : pac_(roofline(heads)), per_partial_(per_partial) {}
  double cost_us(int rows, long kv_len) const override { return pac_.cost_us(rows, kv_len); }
  bool prices_merge() const override { return true; }
  double merge_us(std::int64_t rows, int partials) const override {
    EXPECT_GE(rows, 1);
    EXPECT_GE(partials, 2);
    last_rows = rows;
    return per_partial_ * partials;
  }
  std::string describe() const override { return "roofline with a merge price"; }
  mutable std::int64_t last_rows = 0;  // the rows of the last call: the chosen plan's, after make_plan's stats

 private:
  RooflineCostModel pac_;
  double per_partial_;
};

// The most partials any request's rows merge, and how many requests merge at all.
std::pair<int, int> merges(const Plan& plan) {
  const PlanView v = plan.view();
  int most = 0, merged = 0;
  for (int r = 0; r < v.num_requests; ++r) {
    const int n = v.partial_indptr[r + 1] - v.partial_indptr[r];
    most = std::max(most, n);
    merged += n > 1;
  }
  return {most, merged};
}

// depth:2 (a 1,024-token root, two 1,024-token leaves) on 264 blocks: priced
// for PAC alone the search cuts the nodes finely to fill the blocks; with a
// merge that grows with the partials it cuts them less, and its objective,
// makespan plus merge, is no worse than the PAC-only plan's under that price.
TEST(Planner, AMergePriceStopsSplittingSmallTrees) {
  const Workload w = builtin_workload("depth:2");
  const Forest forest = derive_forest(workload_page_tables(w).view());
  PlannerOptions opt;
  opt.num_blocks = 264;
  const Plan pac_only = make_plan(forest, w.heads, w.dtype, roofline(w.heads), opt);
  const MergePriced priced(w.heads, 0.5);
  const Plan aware = make_plan(forest, w.heads, w.dtype, priced, opt);
  const auto [most_pac, merged_pac] = merges(pac_only);
  const auto [most_aware, merged_aware] = merges(aware);
  EXPECT_EQ(pac_only.stats().merge_us, 0);  // the roofline prices no merge
  EXPECT_GE(most_pac, 6) << "the PAC-only plan is expected to split finely";
  EXPECT_LT(most_aware, most_pac);
  EXPECT_DOUBLE_EQ(aware.stats().merge_us, most_aware > 1 ? 0.5 * most_aware : 0.0);
  const double pac_only_objective = pac_only.stats().makespan_us + (most_pac > 1 ? 0.5 * most_pac : 0.0);
  EXPECT_LE(aware.stats().makespan_us + aware.stats().merge_us, pac_only_objective * (1 + 1e-9));
  EXPECT_GT(aware.stats().makespan_us, pac_only.stats().makespan_us);  // PAC alone got slower: the merge paid
  EXPECT_EQ(merged_pac, 2);
  EXPECT_LE(merged_aware, 2);
  EXPECT_EQ(priced.last_rows, std::int64_t(merged_aware) * w.heads.num_qo_heads);  // the rows that merge

  // The same through a measured table's merge grid, and under the exhaustive search.
  CostTable table;
  table.device = "test";
  table.head_dim = w.heads.head_dim;
  table.rows = {1, 64};
  table.kv_len = {16, 4096};
  for (const int r : table.rows)
    table.us.push_back({roofline(w.heads).cost_us(r, 16), roofline(w.heads).cost_us(r, 4096)});
  const Plan table_pac = make_plan(forest, w.heads, w.dtype, TableCostModel(table), opt);
  table.merge_rows = {1, 1 << 20};
  table.merge_partials = {2, 32};
  table.merge_us = {{1, 16}, {1, 16}};  // 0.5 us a partial
  const TableCostModel priced_table(table);
  const Plan table_aware = make_plan(forest, w.heads, w.dtype, priced_table, opt);
  EXPECT_LT(merges(table_aware).first, merges(table_pac).first);
  EXPECT_DOUBLE_EQ(table_aware.stats().merge_us, priced_table.merge_us(2 * w.heads.num_qo_heads,
                                                                       merges(table_aware).first));
  opt.split = SplitPolicy::exhaustive;
  const Plan best = make_plan(forest, w.heads, w.dtype, priced, opt);
  EXPECT_LE(best.stats().makespan_us + best.stats().merge_us,
            (aware.stats().makespan_us + aware.stats().merge_us) * (1 + 1e-9));
  EXPECT_LT(merges(best).first, most_pac);
}

// A task's time steps with each KV tile it streams, where a table's points
// (whole tiles) would interpolate linearly between them: depth:2's 1,024-token
// nodes on 264 blocks, priced linearly, go to chunks of 96 tokens (264 tasks,
// one a block, each priced a sixth of the way from 64 tokens' time to 256's);
// priced by whole tiles, to chunks of whole tiles (a 96-token chunk costs two).
TEST(Planner, PricesTasksByWholeTiles) {
  const Workload w = builtin_workload("depth:2");
  const Forest forest = derive_forest(workload_page_tables(w).view());
  CostTable table;  // the H200's shape at 4-8 rows: a tile's round trip dominates a short task
  table.device = "test";
  table.head_dim = w.heads.head_dim;
  table.rows = {1, 64};
  table.kv_len = {16, 64, 256, 1024};
  table.us = {{7.2, 9.3, 18.0, 42.3}, {15.8, 17.7, 26.0, 50.9}};
  const TableCostModel cost(table);
  PlannerOptions opt;
  opt.num_blocks = 264;
  const Plan linear = make_plan(forest, w.heads, w.dtype, cost, opt);
  opt.price_tile_tokens = 64;
  const Plan tiled = make_plan(forest, w.heads, w.dtype, cost, opt);
  auto longest = [](const Plan& plan) {
    const PlanView v = plan.view();
    int most = 0;
    for (int t = 0; t < v.num_tasks; ++t) most = std::max(most, v.tasks[t].kv_end - v.tasks[t].kv_begin);
    return most;
  };
  EXPECT_GT(longest(linear), 64);
  EXPECT_NE(longest(linear) % 64, 0);
  EXPECT_EQ(longest(tiled) % 64, 0);
  // each priced as the planner says: the tiled plan's makespan is its
  // busiest block's tasks priced at whole tiles, the linear plan's at their lengths
  auto replay = [&](const Plan& plan, int tile) {
    const PlanView v = plan.view();
    double makespan = 0;
    for (int b = 0; b < v.num_blocks; ++b) {
      double end = 0;
      for (int i = v.block_indptr[b]; i < v.block_indptr[b + 1]; ++i) {
        const Task& t = v.tasks[i];
        const int len = t.kv_end - t.kv_begin;
        end += cost.cost_us(t.row_end - t.row_begin, tile > 0 ? (len + tile - 1) / tile * tile : len);
      }
      makespan = std::max(makespan, end);
    }
    return makespan;
  };
  EXPECT_NEAR(tiled.stats().makespan_us, replay(tiled, 64), 1e-6 * tiled.stats().makespan_us);
  EXPECT_NEAR(linear.stats().makespan_us, replay(linear, 0), 1e-6 * linear.stats().makespan_us);
}

// The roofline's prices and a merge of `per_partial` µs a partial (as
// MergePriced), and contention: a task of a plan that keeps busy < m blocks
// busy shares the bandwidth among max(busy, floor) blocks (`floor`: fewer
// cannot pull more), or among m with floor ≥ m (contention priced, and no
// price changed).
class ContentionPriced final : public CostModel {
 public:
  ContentionPriced(const HeadConfig& heads, double per_partial, int floor)
      : heads_(heads), per_partial_(per_partial), floor_(floor) {}
  double cost_us(int rows, long kv_len) const override { return cost_busy_us(rows, kv_len, m); }
  bool prices_merge() const override { return true; }
  double merge_us(std::int64_t, int partials) const override { return per_partial_ * partials; }
  bool prices_contention() const override { return true; }
  double cost_busy_us(int rows, long kv_len, int busy) const override {
    EXPECT_GE(busy, 1);
    EXPECT_LE(busy, m);
    RooflineParams p = RooflineParams::h200();
    p.concurrent_blocks = std::min(m, std::max(busy, floor_));
    return RooflineCostModel(p, heads_, DType::bf16).cost_us(rows, kv_len);
  }
  std::string describe() const override { return "roofline with contention and a merge price"; }
  static constexpr int m = 264;

 private:
  HeadConfig heads_;
  double per_partial_;
  int floor_;
};

// depth:2 on 264 blocks, its merge priced: with every task priced as if all
// blocks were busy, the search cuts the nodes to fill them; priced at the
// blocks a plan keeps busy, the long chunks of a coarse plan get the
// bandwidth an idle GPU gives them, and the search cuts less. Its objective
// is then no worse than the other plan's splits priced the same way. A
// model that prices contention without changing a price changes no plan.
TEST(Planner, ContentionPricingCutsSmallTreesLess) {
  const Workload w = builtin_workload("depth:2");
  const Forest forest = derive_forest(workload_page_tables(w).view());
  PlannerOptions opt;
  opt.num_blocks = ContentionPriced::m;
  const Plan full = make_plan(forest, w.heads, w.dtype, MergePriced(w.heads, 0.5), opt);
  const ContentionPriced contention(w.heads, 0.5, 33);
  const Plan busy = make_plan(forest, w.heads, w.dtype, contention, opt);
  EXPECT_LT(merges(busy).first, merges(full).first);
  EXPECT_LT(busy.stats().num_tasks, ContentionPriced::m);  // a plan of one wave, priced at its busy blocks
  EXPECT_LT(busy.stats().makespan_us, full.stats().makespan_us);
  auto objective = [](const Plan& p) { return p.stats().makespan_us + p.stats().merge_us; };
  auto given = [&](const Plan& p) {  // p's splits, priced under contention
    PlannerOptions o = opt;
    o.split = SplitPolicy::given;
    o.given_splits.assign(p.view().node_splits, p.view().node_splits + p.view().num_nodes);
    return make_plan(forest, w.heads, w.dtype, contention, o);
  };
  EXPECT_LE(objective(busy), objective(given(full)) * (1 + 1e-9));
  // every vector priced at its own busy count: the exhaustive search's best, planned again from its splits,
  // prices the same, and the adaptive search comes within 5% of it
  opt.split = SplitPolicy::exhaustive;
  const Plan best = make_plan(forest, w.heads, w.dtype, contention, opt);
  EXPECT_DOUBLE_EQ(objective(given(best)), objective(best));
  EXPECT_LE(objective(best), objective(busy) * (1 + 1e-9));
  EXPECT_LE(objective(busy), 1.05 * objective(best));

  opt.split = SplitPolicy::adaptive;
  for (const char* name : {"depth:2", "shape:4", "batch:16", "fewshot"}) {
    const Workload x = builtin_workload(name);
    const Forest f = derive_forest(workload_page_tables(x).view());
    const Plan plain = make_plan(f, x.heads, x.dtype, MergePriced(x.heads, 0.5), opt);
    const Plan same = make_plan(f, x.heads, x.dtype, ContentionPriced(x.heads, 0.5, ContentionPriced::m), opt);
    ASSERT_EQ(plain.bytes().size(), same.bytes().size()) << name;
    EXPECT_EQ(0, std::memcmp(plain.bytes().data(), same.bytes().data(), plain.bytes().size())) << name;
  }
}

// A merge that costs nothing leaves every plan as the PAC-only search makes it.
TEST(Planner, AFreeMergeChangesNoPlan) {
  for (const char* name : {"depth:2", "shape:4", "batch:16", "fewshot"}) {
    const Workload w = builtin_workload(name);
    const Forest forest = derive_forest(workload_page_tables(w).view());
    PlannerOptions opt;
    opt.num_blocks = 264;
    const Plan pac_only = make_plan(forest, w.heads, w.dtype, roofline(w.heads), opt);
    const Plan free_merge = make_plan(forest, w.heads, w.dtype, MergePriced(w.heads, 0), opt);
    ASSERT_EQ(pac_only.bytes().size(), free_merge.bytes().size()) << name;
    EXPECT_EQ(0, std::memcmp(pac_only.bytes().data(), free_merge.bytes().data(), pac_only.bytes().size())) << name;
  }
}

TEST(Planner, ExhaustiveSearchRefusesHugeSpaces) {
  const Workload w = builtin_workload("loogle:16");
  const Forest forest = derive_forest(workload_page_tables(w).view());
  const RooflineCostModel cost(RooflineParams::h200(), w.heads, w.dtype);
  PlannerOptions opt;
  opt.num_blocks = 264;
  opt.split = SplitPolicy::exhaustive;
  EXPECT_THROW(make_plan(forest, w.heads, w.dtype, cost, opt), Error);
}

// Decode steps of a LooGLE-like batch as page tables: `docs` documents of
// doc_pages full pages, `questions` requests on each with a tail of
// tail_tokens + (q · 7) tokens, every tail grown by `step` tokens.
PageTableArrays decode_step(int docs, int questions, int doc_pages, int tail_tokens, int step) {
  constexpr int kPage = 16;
  PageTableArrays a;
  a.page_size = kPage;
  std::int32_t next = docs * doc_pages;
  for (int d = 0; d < docs; ++d)
    for (int q = 0; q < questions; ++q) {
      for (int p = 0; p < doc_pages; ++p) a.indices.push_back(d * doc_pages + p);
      const int tail = tail_tokens + 7 * q + step, pages = (tail + kPage - 1) / kPage;
      for (int p = 0; p < pages; ++p) a.indices.push_back(next++);
      a.indptr.push_back(std::int32_t(a.indices.size()));
      a.last_page_len.push_back(tail - (pages - 1) * kPage);
    }
  a.num_pages = next;
  return a;
}

// Across decode steps the forest keeps its shape: a StepPlanner searches once
// and reuses those split counts, with a makespan near a fresh search's; a
// request that joins, or work that drifts past the limit, search again.
TEST(StepPlanner, ReusesSplitsWhileTheForestKeepsItsShape) {
  const HeadConfig heads{32, 8, 128};
  PlannerOptions opt;
  opt.num_blocks = 264;
  auto cost = std::make_shared<RooflineCostModel>(RooflineParams::h200(), heads, DType::bf16);
  StepPlanner steps(heads, DType::bf16, cost, opt);
  std::vector<std::int32_t> first;
  for (int step = 0; step < 24; ++step) {
    const Forest forest = derive_forest(decode_step(3, 5, 400, 60, step).view());
    const Plan plan = steps.plan(forest);
    const Plan fresh = make_plan(forest, heads, DType::bf16, *cost, opt);
    const PlanView v = plan.view();
    if (step == 0) first.assign(v.node_splits, v.node_splits + v.num_nodes);
    EXPECT_EQ(std::vector<std::int32_t>(v.node_splits, v.node_splits + v.num_nodes), first) << "step " << step;
    EXPECT_LE(plan.stats().makespan_us, 1.03 * fresh.stats().makespan_us) << "step " << step;
    EXPECT_EQ(plan.stats().kv_tokens_read, fresh.stats().kv_tokens_read) << "step " << step;
  }
  EXPECT_EQ(steps.plans(), 24);
  EXPECT_EQ(steps.searches(), 1);
  steps.plan(derive_forest(decode_step(3, 6, 400, 60, 24).view()));  // a request more per document
  EXPECT_EQ(steps.searches(), 2);
  steps.plan(derive_forest(decode_step(3, 6, 400, 60, 25).view()));
  EXPECT_EQ(steps.searches(), 2);
  StepPlanner strict(heads, DType::bf16, cost, opt, 0.001);  // tails grown by 35 tokens move 0.5% of the work
  strict.plan(derive_forest(decode_step(3, 6, 400, 60, 25).view()));
  strict.plan(derive_forest(decode_step(3, 6, 400, 60, 26).view()));
  EXPECT_EQ(strict.searches(), 1);
  strict.plan(derive_forest(decode_step(3, 6, 400, 60, 60).view()));
  EXPECT_EQ(strict.searches(), 2);
  PlannerOptions none = opt;
  none.split = SplitPolicy::none;
  StepPlanner unsplit(heads, DType::bf16, cost, none);
  unsplit.plan(derive_forest(decode_step(3, 5, 400, 60, 0).view()));
  EXPECT_EQ(unsplit.searches(), 0);  // other policies plan every batch as make_plan does
  PlannerOptions given = opt;
  given.split = SplitPolicy::given;
  given.given_splits = {1, 2};
  EXPECT_TRUE(test::throws_with([&] { make_plan(derive_forest(decode_step(1, 2, 4, 3, 0).view()), heads, DType::bf16,
                                                *cost, given); },
                                "given_splits has 2 counts for a forest of 3 nodes"));
}

// The bytes a run reads of a plan packed at capacity c, as (offset, length):
// the block indexes (the wide blocks' too) and the reduction schedule whole,
// and of the other arrays the entries in use (what the indexes and the
// schedule reach).
std::vector<std::pair<std::size_t, std::size_t>> read_ranges(const Plan& p, const PlanCapacity& c) {
  const PlanView v = p.view();
  const auto* base = p.bytes().data();
  auto range = [&](const void* at, std::size_t bytes) {
    return std::pair{std::size_t(static_cast<const std::byte*>(at) - base), bytes};
  };
  const std::size_t n = std::size_t(v.num_nodes), i32 = sizeof(std::int32_t);
  std::vector<std::pair<std::size_t, std::size_t>> tails;
  if (v.tails) {
    const std::size_t entries = std::size_t(v.node_req_begin[n]);
    tails = {range(v.tail_indptr, (entries + 1) * i32),
             range(v.tail_tokens, std::size_t(v.tail_indptr[entries]) * sizeof(TokenRef))};
  }
  std::vector<std::pair<std::size_t, std::size_t>> ranges = {range(v.tasks, std::size_t(v.num_tasks) * sizeof(Task)),
          range(v.block_indptr, std::size_t(v.num_blocks + 1) * i32),
          range(v.node_page_begin, (n + 1) * i32),
          range(v.node_pages, std::size_t(v.node_page_begin[n]) * i32),
          range(v.node_req_begin, (n + 1) * i32),
          range(v.node_reqs, std::size_t(v.node_req_begin[n]) * i32),
          range(v.node_splits, n * i32),
          range(v.node_slot_base, n * i32),
          range(v.partial_indptr, std::size_t(c.requests + 1) * i32),
          range(v.partials, std::size_t(v.partial_indptr[c.requests]) * sizeof(PartialRef))};
  ranges.insert(ranges.end(), tails.begin(), tails.end());
  if (v.num_wide_blocks > 0) ranges.push_back(range(v.wide_indptr, std::size_t(v.num_wide_blocks + 1) * i32));
  return ranges;
}

// plan_into packs a plan with tails as plan does, tail index and tokens included.
TEST(StepPlanner, PacksTailsIntoAReusedBuffer) {
  const HeadConfig heads{32, 8, 128};
  const RooflineCostModel base = roofline(heads);
  auto cost = std::make_shared<test::WidePriced>(base, 0.5);
  PlannerOptions opt;
  opt.num_blocks = 264;
  opt.wide_tile_rows = 128;
  opt.wide_tail_tokens = 40;
  opt.capacity = PlanCapacity::for_batches(64, 64 * 64, heads, 64, 264, 1 << 16, opt.wide_blocks(), 40);
  StepPlanner packed(heads, DType::bf16, cost, opt);
  std::vector<std::byte> buffer(Plan::packed_bytes(*opt.capacity), std::byte{0xa5});
  for (std::uint64_t seed = 1; seed <= 3; ++seed) {
    const Forest forest = many_row_forest(seed, 16, heads, 60);
    const Plan want = make_plan(forest, heads, DType::bf16, *cost, opt);
    ASSERT_GT(want.stats().num_tails, 0) << "seed " << seed;
    EXPECT_EQ(packed.plan_into(forest, buffer).num_tails, want.stats().num_tails) << "seed " << seed;
    for (const auto& [offset, bytes] : read_ranges(want, *opt.capacity))
      ASSERT_EQ(std::memcmp(buffer.data() + offset, want.bytes().data() + offset, bytes), 0)
          << "seed " << seed << ": bytes " << offset << " to " << offset + bytes;
  }
}

// plan_into packs into one buffer, step after step, what plan packs into a
// fresh one, in every byte a run reads, though the buffer holds a larger
// plan's bytes or garbage; it writes nothing where the plan does not fit.
TEST(StepPlanner, PacksIntoAReusedBufferWhatARunReads) {
  const HeadConfig heads{32, 8, 128};
  PlannerOptions opt;
  opt.num_blocks = 264;
  opt.capacity = PlanCapacity::for_batches(24, 24 * 64, heads, 64, 264, 1 << 15);
  auto cost = std::make_shared<RooflineCostModel>(RooflineParams::h200(), heads, DType::bf16);
  StepPlanner fresh(heads, DType::bf16, cost, opt), packed(heads, DType::bf16, cost, opt);
  std::vector<std::byte> buffer(Plan::packed_bytes(*opt.capacity), std::byte{0xa5});
  const int shapes[][2] = {{3, 6}, {3, 6}, {1, 2}, {2, 5}, {1, 1}, {3, 7}};  // documents, questions
  for (int step = 0; step < int(std::size(shapes)); ++step) {
    const Forest forest = derive_forest(decode_step(shapes[step][0], shapes[step][1], 40, 30, step).view());
    const Plan want = fresh.plan(forest);
    const PlanStats got = packed.plan_into(forest, buffer);
    EXPECT_EQ(got.num_tasks, want.stats().num_tasks) << "step " << step;
    EXPECT_EQ(got.makespan_us, want.stats().makespan_us) << "step " << step;
    for (const auto& [offset, bytes] : read_ranges(want, *opt.capacity))
      ASSERT_EQ(std::memcmp(buffer.data() + offset, want.bytes().data() + offset, bytes), 0)
          << "step " << step << ": bytes " << offset << " to " << offset + bytes;
    // the rows past the batch, in the buffer itself: no partials (their range empty at the batch's end)
    const PlanView v = want.view(buffer.data());
    const int batch = forest.num_requests();
    for (int r = batch + 1; r <= opt.capacity->requests; ++r)
      ASSERT_EQ(v.partial_indptr[r], v.partial_indptr[batch]) << "step " << step << ", row " << r;
  }
  EXPECT_EQ(packed.searches(), fresh.searches());
  EXPECT_EQ(packed.plans(), std::int64_t(std::size(shapes)));
  const std::vector<std::byte> before = buffer;
  EXPECT_TRUE(test::throws_with([&] { packed.plan_into(derive_forest(decode_step(5, 5, 40, 30, 0).view()), buffer); },
                                "plan has 25 requests, more than its capacity of 24"));
  EXPECT_TRUE(buffer == before);
  EXPECT_EQ(packed.plans(), std::int64_t(std::size(shapes)));  // a plan that does not fit is neither a plan
  EXPECT_EQ(packed.searches(), fresh.searches());              // nor a search to reuse
  EXPECT_TRUE(test::throws_with([&] { Plan::pack_into(PlanArrays::none(264), *opt.capacity,
                                                      std::span(buffer).first(100)); },
                                "Plan::pack_into: 100 bytes, less than the"));
  EXPECT_TRUE(buffer == before);
  PlanArrays uneven = PlanArrays::none(264);
  uneven.node_splits = {1};  // a node without its begin offsets
  EXPECT_TRUE(test::throws_with([&] { Plan::pack_into(uneven, *opt.capacity, buffer); },
                                "plan arrays disagree on their 1 nodes (node_page_begin 1"));
  EXPECT_TRUE(buffer == before);
  PlannerOptions compact = opt;
  compact.capacity.reset();
  StepPlanner no_capacity(heads, DType::bf16, cost, compact);
  EXPECT_TRUE(test::throws_with([&] { no_capacity.plan_into(derive_forest(decode_step(1, 2, 40, 30, 0).view()), buffer); },
                                "StepPlanner::plan_into: the options need a capacity"));
}

}  // namespace
}  // namespace codec
