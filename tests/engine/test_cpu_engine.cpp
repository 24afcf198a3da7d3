#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "codec/core/error.hpp"
#include "codec/cost/cost_model.hpp"
#include "codec/engine/cpu_engine.hpp"
#include "codec/engine/reference.hpp"
#include "codec/plan/planner.hpp"
#include "support/random_batch.hpp"

namespace codec {
namespace {

// The CPU engine widens the stored values exactly and accumulates in fp32, so
// whatever the storage dtype its error against fp64 is fp32 rounding (~1e-7
// per op): 2e-5 relative L2 leaves room for long sums and catches any real bug.
constexpr double kCpuTolerance = 2e-5;

struct Outputs {
  std::vector<float> out, lse;
};

Outputs run(const Plan& plan, const PagedKV& kv, const void* q, int threads = 2) {
  const PlanView p = plan.view();
  const std::size_t rows = std::size_t(p.num_requests) * p.num_qo_heads;
  Outputs o{std::vector<float>(rows * p.head_dim, NAN), std::vector<float>(rows, NAN)};  // poisoned
  std::vector<std::byte> ws(plan.workspace().bytes + 16);
  auto* aligned = reinterpret_cast<std::byte*>((reinterpret_cast<std::uintptr_t>(ws.data()) + 15) / 16 * 16);
  run_cpu(plan, kv, {q, o.out.data(), o.lse.data()}, {aligned, plan.workspace().bytes}, {threads});
  return o;
}

void expect_matches(const Outputs& o, const ReferenceResult& ref, const std::string& what) {
  const ErrorStats e = compare(o.out.data(), ref.out);
  EXPECT_TRUE(e.within(kCpuTolerance)) << what << ": out " << e.describe();
  EXPECT_LE(e.max_abs, 1e-4) << what;
  const ErrorStats l = compare(o.lse.data(), ref.lse);
  EXPECT_TRUE(l.within(kCpuTolerance)) << what << ": lse " << l.describe();
}

struct EngineCase {
  HeadConfig heads;
  DType dtype;
  int page_size;
  int nodes, requests;
  double fork_prob;
  int max_node_pages;
  float key_ramp = 0.f;  // RandomBatchSpec::key_ramp
};

// Shared plan, flat plan and the ablation policies, against fp64, over random forests.
void check_case(const EngineCase& c, std::uint64_t seed, int tile_rows = 64) {
  test::RandomBatchSpec spec = test::engine_spec(seed, c.heads, c.dtype, c.page_size, c.nodes, c.requests,
                                                 c.fork_prob, c.max_node_pages);
  spec.key_ramp = c.key_ramp;
  const test::RandomBatch b = test::make_random_batch(spec);
  const PageTable table = b.table();
  const ReferenceResult ref = reference_attention(table, b.kv(), c.heads, b.q.data());
  const Forest forest = derive_forest(table);
  const RooflineCostModel cost(RooflineParams::h200(), c.heads, c.dtype);
  PlannerOptions opt;
  opt.num_blocks = 1 + int(seed % 37);
  opt.max_tile_rows = tile_rows;
  opt.chunk_align = 1 + int(seed % 16);
  expect_matches(run(make_plan(forest, c.heads, cost, opt), b.kv(), b.q.data()), ref, spec.describe() + " shared");
  expect_matches(run(make_plan(flatten(forest), c.heads, cost, opt), b.kv(), b.q.data()), ref,
                 spec.describe() + " flat");
  opt.split = SplitPolicy::fixed;
  opt.fixed_splits = 3;
  expect_matches(run(make_plan(forest, c.heads, cost, opt), b.kv(), b.q.data(), 1), ref,
                 spec.describe() + " fixed 3");
}

TEST(CpuEngine, MatchesReferenceAcrossHeadsDtypesAndPageSizes) {
  const EngineCase cases[] = {
      {{4, 4, 64}, DType::bf16, 16, 6, 7, 0.2, 4},     // MHA
      {{32, 8, 128}, DType::bf16, 16, 5, 6, 0.2, 3},   // qwen3-4b, GQA 4
      {{40, 8, 128}, DType::f16, 7, 5, 6, 0.2, 4},     // GQA 5
      {{32, 1, 64}, DType::f16, 3, 4, 5, 0.3, 6},      // MQA, GQA 32
      {{8, 2, 256}, DType::f32, 1, 6, 5, 0.2, 20},     // page size 1
      {{8, 4, 128}, DType::bf16, 64, 4, 6, 0.2, 2},    // page size 64
  };
  for (const EngineCase& c : cases)
    for (std::uint64_t seed = 1; seed <= 3; ++seed) check_case(c, seed);
}

TEST(CpuEngine, EdgeCases) {
  const HeadConfig heads{8, 2, 64};
  // single request
  check_case({heads, DType::bf16, 16, 3, 1, 0.0, 5}, 21);
  // nothing shared: every node a root and no forks
  check_case({heads, DType::bf16, 7, 1, 9, 0.0, 0}, 22);
  // all shared: one request forked into many identical ones
  check_case({heads, DType::bf16, 16, 1, 12, 1.0, 6}, 23);
  // rows exceeding one tile: 12 requests × G 4 = 48 rows in tiles of 5
  check_case({heads, DType::f16, 16, 2, 12, 0.5, 8}, 24, 5);
}

TEST(CpuEngine, ScoresRisingAcrossTiles) {
  // Keys scaled up page after page: scores of large magnitude whose max
  // climbs by several units tile after tile (the data of the CUDA test of
  // the same name, which needs it to reach its rescaling branch).
  check_case({{32, 8, 128}, DType::bf16, 16, 1, 10, 0.0, 25, 2.f}, 41);
  check_case({{8, 2, 64}, DType::f16, 7, 2, 6, 0.2, 40, 2.f}, 42);
}

TEST(CpuEngine, LayoutsGiveTheSameResult) {
  test::RandomBatchSpec spec;
  spec.seed = 31;
  spec.page_size = 5;
  spec.heads = {8, 2, 64};
  const test::RandomBatch b = test::make_random_batch(spec);
  const PageTable table = b.table();
  const Forest forest = derive_forest(table);
  const RooflineCostModel cost(RooflineParams::h200(), spec.heads, spec.dtype);
  PlannerOptions opt;
  opt.num_blocks = 8;
  const Plan plan = make_plan(forest, spec.heads, cost, opt);
  const Outputs nhd = run(plan, b.kv(), b.q.data());
  // Re-lay the same pool as HND and as interleaved [pages, 2, page, Hkv, D].
  const PagedKV src = b.kv();
  const int P = int(b.num_pages), S = spec.page_size, H = spec.heads.num_kv_heads, D = spec.heads.head_dim;
  std::vector<std::uint16_t> hk(b.k.size() / 2), hv(b.v.size() / 2), inter(b.k.size());
  const auto* k = reinterpret_cast<const std::uint16_t*>(b.k.data());
  const auto* v = reinterpret_cast<const std::uint16_t*>(b.v.data());
  const PagedKV hnd = PagedKV::hnd(hk.data(), hv.data(), spec.dtype, P, S, H, D);
  const PagedKV il = PagedKV::interleaved_nhd(inter.data(), spec.dtype, P, S, H, D);
  for (int p = 0; p < P; ++p)
    for (int t = 0; t < S; ++t)
      for (int h = 0; h < H; ++h)
        for (int d = 0; d < D; ++d) {
          hk[hnd.offset(p, t, h) + d] = k[src.offset(p, t, h) + d];
          hv[hnd.offset(p, t, h) + d] = v[src.offset(p, t, h) + d];
          inter[il.offset(p, t, h) + d] = k[src.offset(p, t, h) + d];
          inter[il.offset(p, t, h) + d + std::size_t(S) * H * D] = v[src.offset(p, t, h) + d];
        }
  EXPECT_EQ(run(plan, hnd, b.q.data()).out, nhd.out);
  EXPECT_EQ(run(plan, il, b.q.data()).out, nhd.out);
}

TEST(CpuEngine, EmptyNodesContributeNothing) {
  // A root with no KV at all above real nodes: its partials are empty states.
  test::RandomBatchSpec spec;
  spec.seed = 41;
  const test::RandomBatch b = test::make_random_batch(spec);
  const Forest f = derive_forest(b.table());
  Forest g = f;
  g.nodes.insert(g.nodes.begin(), ForestNode{-1, 0, 0, 0, std::int64_t(g.reqs.size()), g.num_requests()});
  for (std::size_t i = 1; i < g.nodes.size(); ++i) g.nodes[i].parent += 1;  // old roots (−1) now hang under it
  for (int r = 0; r < g.num_requests(); ++r) g.reqs.push_back(r), g.request_node[r] += 1;
  ASSERT_NO_THROW(g.validate());
  const RooflineCostModel cost(RooflineParams::h200(), spec.heads, spec.dtype);
  PlannerOptions opt;
  opt.num_blocks = 5;
  const ReferenceResult ref = reference_attention(b.table(), b.kv(), spec.heads, b.q.data());
  expect_matches(run(make_plan(g, spec.heads, cost, opt), b.kv(), b.q.data()), ref, "empty root");
}

TEST(CpuEngine, RejectsMismatchedInputs) {
  test::RandomBatchSpec spec;
  const test::RandomBatch b = test::make_random_batch(spec);
  const RooflineCostModel cost(RooflineParams::h200(), spec.heads, spec.dtype);
  PlannerOptions opt;
  opt.num_blocks = 4;
  const Plan plan = make_plan(derive_forest(b.table()), spec.heads, cost, opt);
  std::vector<float> out(1 << 16), lse(1 << 12);
  alignas(16) static std::byte ws[1 << 20];
  PagedKV kv = b.kv();
  kv.head_dim = 128;
  EXPECT_THROW(run_cpu(plan, kv, {b.q.data(), out.data(), lse.data()}, ws), Error);
  kv = b.kv();
  kv.num_pages = 2;  // the plan reads pages beyond this pool
  EXPECT_THROW(run_cpu(plan, kv, {b.q.data(), out.data(), lse.data()}, ws), Error);
  EXPECT_THROW(run_cpu(plan, b.kv(), {b.q.data(), out.data(), lse.data()}, {ws, 8}), Error);
}

}  // namespace
}  // namespace codec
