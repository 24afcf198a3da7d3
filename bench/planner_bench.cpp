// Host planning speed: page tables → forest (derive_forest) → plan
// (make_plan), for a three-level tree like a shared system prompt over
// documents over questions: 1 root of 2,048 tokens, B/16 documents of
// 1,024–8,192 tokens, and B questions of 30–456 tokens (a prompt plus tokens
// generated so far), all lengths different; B = 1,024 gives 1,089 nodes.
// Plans target the H200 (264 blocks) under its roofline cost model and, as
// .../measured, under the table measured on it (data/cost_tables), whose merge
// grid the search prices as well. BM_PlanFromBlockTable times what a graph
// replay's in-stream plan does on the host (CudaStreamPlanner): an engine's
// padded block table of LooGLE-like requests (D documents of 12k-30k tokens,
// 8 questions each, 64 decode tokens in) to a plan packed at a capacity into
// a staging buffer, searching every step or (…/reuse) as StepPlanner does.
#include <benchmark/benchmark.h>

#include <exception>
#include <memory>
#include <random>
#include <vector>

#include "codec/cost/cost_model.hpp"
#include "codec/engine/cuda_engine.hpp"
#include "codec/plan/planner.hpp"

namespace {

constexpr int kPageSize = 16;

struct Tables {
  std::vector<std::int32_t> indptr{0}, indices, last;
  std::int64_t num_pages = 0;
  codec::PageTable view() const { return {indptr, indices, last, kPageSize, num_pages}; }
};

Tables three_level_tree(int batch) {
  auto pages = [](std::int32_t& next, int tokens) {
    std::vector<std::int32_t> p;
    for (int t = 0; t < tokens; t += kPageSize) p.push_back(next++);
    return p;
  };
  std::mt19937 rng(42);
  auto length = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  Tables t;
  std::int32_t next = 0;
  const std::vector<std::int32_t> root = pages(next, 2048);
  for (int doc = 0; doc < batch / 16; ++doc) {
    const std::vector<std::int32_t> body = pages(next, 1024 * length(1, 8));
    for (int q = 0; q < 16; ++q) {
      const int own_tokens = length(30, 456);
      const std::vector<std::int32_t> own = pages(next, own_tokens);
      t.indices.insert(t.indices.end(), root.begin(), root.end());
      t.indices.insert(t.indices.end(), body.begin(), body.end());
      t.indices.insert(t.indices.end(), own.begin(), own.end());
      t.indptr.push_back(std::int32_t(t.indices.size()));
      t.last.push_back((own_tokens - 1) % kPageSize + 1);
    }
  }
  t.num_pages = next;
  return t;
}

const codec::HeadConfig kHeads{32, 8, 128};

// The engine's options on an H200, without wide tasks: the search the planner's speed targets time.
codec::PlannerOptions h200_options() {
  return codec::cuda_planner_options(kHeads, codec::h200::kSms, codec::h200::kBlocksPerSm, /*wide=*/false);
}

// The cost model of a benchmark: the roofline, or (measured = true) the H200's
// table, read from the source tree this binary was built from; null, with the
// benchmark skipped naming why, where that file cannot be read.
std::unique_ptr<codec::CostModel> cost_model(benchmark::State& state, bool measured) {
  if (!measured) return std::make_unique<codec::RooflineCostModel>(codec::RooflineParams::h200(), kHeads, codec::DType::bf16);
  try {
    return std::make_unique<codec::TableCostModel>(codec::CostTable::load(CODEC_H200_COST_TABLE));
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
    return nullptr;
  }
}

void BM_DeriveForest(benchmark::State& state) {
  const Tables t = three_level_tree(int(state.range(0)));
  for (auto _ : state) benchmark::DoNotOptimize(codec::derive_forest(t.view()));
  state.counters["pages"] = double(t.indices.size());
}

void BM_MakePlan(benchmark::State& state, bool measured) {
  const Tables t = three_level_tree(int(state.range(0)));
  const codec::Forest forest = codec::derive_forest(t.view());
  const std::unique_ptr<codec::CostModel> cost = cost_model(state, measured);
  if (!cost) return;
  codec::PlanStats stats;
  for (auto _ : state) stats = codec::make_plan(forest, kHeads, codec::DType::bf16, *cost, h200_options()).stats();
  state.counters["nodes"] = forest.num_nodes();
  state.counters["tasks"] = stats.num_tasks;
  state.counters["makespan/bound"] = stats.quality();
}

void BM_DeriveAndPlan(benchmark::State& state, bool measured) {
  const Tables t = three_level_tree(int(state.range(0)));
  const std::unique_ptr<codec::CostModel> cost = cost_model(state, measured);
  if (!cost) return;
  for (auto _ : state)
    benchmark::DoNotOptimize(codec::make_plan(codec::derive_forest(t.view()), kHeads, codec::DType::bf16, *cost, h200_options()));
}

// The engine's block table of `docs` documents × 8 questions, as
// bench/e2e_decode.py's loogle workload has it after 64 decode steps: each
// request's row lists its document's full pages, then its own.
struct BlockTableBatch {
  int rows = 0, cols = 0;
  std::vector<std::int32_t> blocks, lens;
  std::int64_t num_pages = 0;
};

BlockTableBatch loogle_block_table(int docs) {
  std::mt19937 rng(7);
  auto length = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  BlockTableBatch b;
  b.rows = 8 * docs;
  b.cols = (30000 + 200 + 64) / kPageSize + 2;
  b.blocks.assign(std::size_t(b.rows) * b.cols, -1);
  b.lens.resize(b.rows);
  std::int32_t next = 0;
  for (int d = 0; d < docs; ++d) {
    const int full = length(12000, 30000) / kPageSize;
    const std::int32_t first = next;
    next += full;
    for (int q = 0; q < 8; ++q) {
      const int r = 8 * d + q, tokens = full * kPageSize + length(20, 200) + 64;
      b.lens[r] = tokens;
      std::int32_t* row = b.blocks.data() + std::size_t(r) * b.cols;
      for (int j = 0; j < full; ++j) row[j] = first + j;
      for (int j = full; j < (tokens + kPageSize - 1) / kPageSize; ++j) row[j] = next++;
    }
  }
  b.num_pages = next;
  return b;
}

// With reuse, a StepPlanner across the iterations, each a decode step later
// (every request a token longer): the split counts of one search serve them.
void BM_PlanFromBlockTable(benchmark::State& state, bool reuse) {
  BlockTableBatch b = loogle_block_table(int(state.range(0)));
  const std::unique_ptr<codec::CostModel> owned = cost_model(state, true);
  if (!owned) return;
  const std::shared_ptr<const codec::CostModel> cost(owned.get(), [](const codec::CostModel*) {});
  codec::PlannerOptions opt = h200_options();
  opt.max_tile_rows = 64;
  // about what the integration's 64 MiB graph workspace holds
  opt.capacity = codec::PlanCapacity::for_batches(b.rows, std::int64_t(b.rows) * b.cols, kHeads, opt.max_tile_rows,
                                                  opt.num_blocks, 120000);
  // drift 0: every step's longer tails move the work, so each step searches, as a changed batch does
  codec::StepPlanner steps(kHeads, codec::DType::bf16, cost, opt, reuse ? 0.05 : 0.0);
  const codec::BlockTable table{b.blocks.data(), b.rows, b.cols, b.cols, b.lens.data(), false};
  const std::vector<std::int32_t> lens = b.lens;
  std::vector<std::byte> staging(codec::Plan::packed_bytes(*opt.capacity));  // the stream's pinned copy
  codec::PageTableArrays pages;  // the host function's scratch
  codec::PlanStats stats;
  int step = 0;
  for (auto _ : state) {
    for (std::size_t r = 0; r < lens.size(); ++r) b.lens[r] = lens[r] - 63 + step % 64;  // within the rows' pages
    ++step;
    codec::page_table_from_block_table(table, kPageSize, b.num_pages, pages);
    const codec::Forest forest = codec::derive_forest(pages.view());
    stats = steps.plan_into(forest, staging);
  }
  state.counters["requests"] = b.rows;
  state.counters["tasks"] = stats.num_tasks;
  state.counters["plan_MB"] = double(codec::Plan::packed_bytes(*opt.capacity)) / 1e6;
  state.counters["searches"] = double(steps.searches());
}

// Query tokens with causal masks, as prefill chunks and verification bring
// them: each row tile is priced at the keys it sees (planning.cpp,
// NodeClass::seen), so a plan walks a masked node's tiles per chunk. (1) One
// request's prompt chunk of range(0) tokens after 2,048 cached ones, on the
// engine's options (wide tasks allowed); (2) range(0) query tokens on each of
// the 64 requests of loogle_block_table(8).
void BM_PlanCausalChunk(benchmark::State& state) {
  const int q_len = int(state.range(0)), tokens = 2048 + q_len;
  Tables t;
  for (int p = 0; p < (tokens + kPageSize - 1) / kPageSize; ++p) t.indices.push_back(p);
  t.indptr.push_back(std::int32_t(t.indices.size()));
  t.last.push_back((tokens - 1) % kPageSize + 1);
  t.num_pages = std::int64_t(t.indices.size());
  const codec::Forest forest = codec::derive_forest(t.view());
  const std::unique_ptr<codec::CostModel> cost = cost_model(state, true);
  if (!cost) return;
  const std::vector<std::int32_t> qo_indptr{0, q_len};
  codec::QueryBatch queries;  // causal
  queries.qo_indptr = qo_indptr;
  const codec::PlannerOptions opt =
      codec::cuda_planner_options(kHeads, codec::h200::kSms, codec::h200::kBlocksPerSm, /*wide=*/true);
  codec::PlanStats stats;
  for (auto _ : state) stats = codec::make_plan(forest, kHeads, codec::DType::bf16, *cost, opt, queries).stats();
  state.counters["tasks"] = stats.num_tasks;
  state.counters["makespan/bound"] = stats.quality();
}

void BM_PlanVerification(benchmark::State& state) {
  const BlockTableBatch b = loogle_block_table(8);
  codec::PageTableArrays pages;
  codec::page_table_from_block_table({b.blocks.data(), b.rows, b.cols, b.cols, b.lens.data(), false}, kPageSize,
                                     b.num_pages, pages);
  const codec::Forest forest = codec::derive_forest(pages.view());
  const std::unique_ptr<codec::CostModel> cost = cost_model(state, true);
  if (!cost) return;
  std::vector<std::int32_t> qo_indptr(b.rows + 1);
  for (int r = 0; r <= b.rows; ++r) qo_indptr[r] = r * int(state.range(0));
  codec::QueryBatch queries;  // causal
  queries.qo_indptr = qo_indptr;
  codec::PlanStats stats;
  for (auto _ : state) stats = codec::make_plan(forest, kHeads, codec::DType::bf16, *cost, h200_options(), queries).stats();
  state.counters["tasks"] = stats.num_tasks;
  state.counters["makespan/bound"] = stats.quality();
}

}  // namespace

BENCHMARK(BM_PlanCausalChunk)->Arg(1024)->Arg(4096)->Arg(8192)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_PlanVerification)->Arg(4)->Arg(16)->Arg(64)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_PlanFromBlockTable, search, false)->Arg(2)->Arg(8)->Arg(16)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_PlanFromBlockTable, reuse, true)->Arg(2)->Arg(8)->Arg(16)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_DeriveForest)->Arg(64)->Arg(256)->Arg(1024)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_MakePlan, roofline, false)->Arg(64)->Arg(256)->Arg(1024)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_MakePlan, measured, true)->Arg(64)->Arg(256)->Arg(1024)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_DeriveAndPlan, roofline, false)->Arg(64)->Arg(256)->Arg(1024)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_DeriveAndPlan, measured, true)->Arg(64)->Arg(256)->Arg(1024)->Unit(benchmark::kMicrosecond);
BENCHMARK_MAIN();
