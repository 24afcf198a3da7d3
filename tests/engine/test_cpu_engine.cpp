#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <random>

#include "codec/core/error.hpp"
#include "codec/cost/cost_model.hpp"
#include "codec/engine/cpu_engine.hpp"
#include "codec/engine/reference.hpp"
#include "codec/plan/planner.hpp"
#include "support/fp8_pool.hpp"
#include "support/planning.hpp"
#include "support/random_batch.hpp"
#include "support/random_queries.hpp"
#include "support/throws_with.hpp"

namespace codec {
namespace {

// The CPU engine widens the stored values exactly and accumulates in fp32, so
// whatever the storage dtype its error against fp64 is fp32 rounding (~1e-7
// per op): 2e-5 relative L2 leaves room for long sums and catches any real bug.
constexpr double kCpuTolerance = 2e-5;

struct Outputs {
  std::vector<float> out, lse;
};

// 16-byte aligned storage for a plan's workspace.
struct Workspace {
  std::vector<std::byte> storage;
  std::span<std::byte> bytes;
  explicit Workspace(std::size_t n) : storage(n + 16) {
    auto* aligned = reinterpret_cast<std::byte*>((reinterpret_cast<std::uintptr_t>(storage.data()) + 15) / 16 * 16);
    bytes = {aligned, n};
  }
};

// q [B, Hq, D] contiguous in kv's dtype; out fp32 and lse, contiguous and poisoned.
AttentionIO contiguous_io(const Plan& plan, const void* q, Outputs& o, int batch = -1) {
  const PlanView p = plan.view();
  const int B = batch < 0 ? plan.num_requests() : batch, Hq = p.num_qo_heads, D = p.head_dim;
  o.out.assign(std::size_t(B) * Hq * D, NAN);
  o.lse.assign(std::size_t(B) * Hq, NAN);
  return {QueryRows::contiguous(q, plan.dtype(), B, Hq, D), OutputRows::contiguous(o.out.data(), DType::f32, B, Hq, D),
          LseRows::contiguous(o.lse.data(), B, Hq)};
}

Outputs run(const Plan& plan, const PagedKV& kv, const void* q, int threads = 2) {
  Outputs o;
  const AttentionIO io = contiguous_io(plan, q, o);
  Workspace ws(plan.workspace().bytes);
  run_cpu(plan, kv, io, ws.bytes, {threads});
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
  expect_matches(run(make_plan(forest, c.heads, c.dtype, cost, opt), b.kv(), b.q.data()), ref,
                 spec.describe() + " shared");
  expect_matches(run(make_plan(flatten(forest), c.heads, c.dtype, cost, opt), b.kv(), b.q.data()), ref,
                 spec.describe() + " flat");
  opt.split = SplitPolicy::fixed;
  opt.fixed_splits = 3;
  expect_matches(run(make_plan(forest, c.heads, c.dtype, cost, opt), b.kv(), b.q.data(), 1), ref,
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

// Several query tokens a request under each mask, against fp64: query
// lengths up to 1, 4, 16 and 64 tokens (past a request's own last node into
// shared ones), page sizes 1 to 64, custom masks hiding keys in shared nodes
// and rows that see nothing, random draft trees; shared and flat plans, split
// at random. The plan's requests are then the query tokens: q and out have a
// row per token.
TEST(CpuEngine, QueryTokensUnderEachMaskMatchTheReference) {
  const EngineCase cases[] = {
      {{8, 2, 64}, DType::f32, 1, 5, 5, 0.2, 12},
      {{32, 8, 128}, DType::bf16, 16, 4, 6, 0.3, 3},
      {{12, 4, 64}, DType::f16, 7, 5, 7, 0.3, 4},
      {{16, 1, 256}, DType::bf16, 3, 3, 4, 0.2, 6},
  };
  int masked_plans = 0;
  for (const EngineCase& c : cases)
    for (const QueryMask mask : {QueryMask::none, QueryMask::causal, QueryMask::custom, QueryMask::draft})
      for (const int max_q : {1, 4, 16, 64})
        for (std::uint64_t seed = 1; seed <= 2; ++seed) {
          test::RandomBatchSpec spec = test::engine_spec(seed, c.heads, c.dtype, c.page_size, c.nodes, c.requests,
                                                         c.fork_prob, c.max_node_pages);
          const test::RandomBatch b = test::make_random_batch(spec);
          const test::RandomQueries q = test::make_random_queries(b, mask, max_q, seed);
          const std::string what = spec.describe() + " mask " + std::to_string(int(mask)) + " max_q " +
                                   std::to_string(max_q);
          const ReferenceResult ref = reference_attention(b.table(), b.kv(), c.heads, q.q.data(), q.view());
          const Forest forest = derive_forest(b.table());
          const RooflineCostModel cost(RooflineParams::h200(), c.heads, c.dtype);
          PlannerOptions opt;
          opt.num_blocks = 1 + int(seed * 7 % 29);
          opt.chunk_align = 1 + int(seed % 8);
          opt.max_tile_rows = 16 << (seed % 3);
          const Plan shared = make_plan(forest, c.heads, c.dtype, cost, opt, q.view());
          ASSERT_EQ(shared.num_requests(), q.num_queries()) << what;
          masked_plans += shared.view().masks;
          expect_matches(run(shared, b.kv(), q.q.data()), ref, what + " shared");
          opt.split = SplitPolicy::fixed;
          opt.fixed_splits = 3;
          expect_matches(run(make_plan(flatten(forest), c.heads, c.dtype, cost, opt, q.view()), b.kv(), q.q.data()),
                         ref, what + " flat, 3 splits");
        }
  EXPECT_GE(masked_plans, 70);  // the masks did apply (of 80 plans whose mask can hide a key)
}

// fp8 caches (e4m3, e5m2) under fp16, bf16 and fp32 queries: the engine
// dequantises on load with one scale or one a kv head (or none) and matches
// the fp64 reference of the same dequantised values, at every head dim, page
// sizes 1, 7 and 16, one token a request and several under each mask; its
// outputs in fp32 and in q's dtype. Bad scales and dtypes are refused by name.
TEST(CpuEngine, Fp8CachesMatchTheDequantisedReference) {
  struct Fp8Case {
    HeadConfig heads;
    DType kv, q;
    int page_size, scales;
    QueryMask mask;
    int max_q;  // 0: one token a request, no qo_indptr
  };
  const Fp8Case cases[] = {
      {{8, 2, 64}, DType::e4m3, DType::bf16, 1, 1, QueryMask::causal, 0},
      {{16, 4, 128}, DType::e4m3, DType::f16, 7, 4, QueryMask::causal, 6},
      {{8, 8, 256}, DType::e5m2, DType::bf16, 16, 8, QueryMask::draft, 9},
      {{12, 4, 128}, DType::e5m2, DType::f32, 7, 0, QueryMask::custom, 5},
      {{32, 8, 128}, DType::e4m3, DType::bf16, 16, 8, QueryMask::none, 3},
      {{4, 1, 64}, DType::e5m2, DType::f16, 16, 1, QueryMask::causal, 0},
  };
  for (const Fp8Case& c : cases)
    for (std::uint64_t seed = 1; seed <= 2; ++seed) {
      const test::RandomBatchSpec spec = test::engine_spec(seed, c.heads, c.q, c.page_size, 4, 5, 0.3, 3);
      const test::RandomBatch b = test::make_random_batch(spec);
      const test::Fp8Pool pool = test::quantise(b, c.kv, c.scales == 0 ? 0 : c.scales == 1 ? 1 : c.heads.num_kv_heads);
      const PagedKV kv = pool.kv(b, c.kv);
      test::RandomQueries q = test::make_random_queries(b, c.mask, std::max(c.max_q, 1), seed);
      if (c.max_q == 0) q.qo_indptr.clear(), q.mask = QueryMask::causal;
      const int rows = q.qo_indptr.empty() ? b.table().num_requests() : q.num_queries();
      const std::string what = spec.describe() + " kv " + std::string(to_string(c.kv)) + " scales " +
                               std::to_string(c.scales);
      const ReferenceResult ref = reference_attention(b.table(), kv, c.heads, q.q.data(), q.view(), c.q);
      PlannerOptions opt;
      opt.num_blocks = 3 + int(seed);
      const Plan plan = make_plan(derive_forest(b.table()), c.heads, c.kv,
                                  RooflineCostModel(RooflineParams::cpu(2), c.heads, c.kv), opt, q.view());
      const int Hq = c.heads.num_qo_heads, D = c.heads.head_dim;
      for (const DType out_dtype : {DType::f32, c.q}) {
        std::vector<std::byte> out(std::size_t(rows) * Hq * D * dtype_size(out_dtype), std::byte{0xff});
        Outputs o;
        o.lse.assign(std::size_t(rows) * Hq, NAN);
        const AttentionIO io{QueryRows::contiguous(q.q.data(), c.q, rows, Hq, D),
                             OutputRows::contiguous(out.data(), out_dtype, rows, Hq, D),
                             LseRows::contiguous(o.lse.data(), rows, Hq)};
        Workspace ws(plan.workspace().bytes);
        run_cpu(plan, kv, io, ws.bytes, {2});
        o.out = to_floats(out, out_dtype);
        if (out_dtype == DType::f32) {
          expect_matches(o, ref, what);
        } else {  // rounded to q's dtype
          const ErrorStats e = compare(o.out.data(), ref.out);
          EXPECT_TRUE(e.within(tolerance(c.q))) << what << ": out in " << to_string(out_dtype) << " " << e.describe();
        }
      }
    }
  // Refusals: fp8 queries, a scale count that is neither one nor one a kv head, a scale that is not finite.
  const test::RandomBatch b = test::make_random_batch(test::engine_spec(3, {8, 4, 64}, DType::bf16, 7, 3, 3, 0.0, 2));
  test::Fp8Pool pool = test::quantise(b, DType::e4m3, 4);
  const Plan plan = make_plan(derive_forest(b.table()), {8, 4, 64}, DType::e4m3,
                              RooflineCostModel(RooflineParams::cpu(2), {8, 4, 64}, DType::e4m3), cpu_planner_options(2));
  const int B = plan.num_requests();
  std::vector<float> out(std::size_t(B) * 8 * 64), lse(std::size_t(B) * 8);
  Workspace ws(plan.workspace().bytes);
  auto run_with = [&](const PagedKV& kv, DType q_dtype) {
    return [&, kv, q_dtype] {
      run_cpu(plan, kv, {QueryRows::contiguous(b.q.data(), q_dtype, B, 8, 64),
                         OutputRows::contiguous(out.data(), DType::f32, B, 8, 64), LseRows::contiguous(lse.data(), B, 8)},
              ws.bytes);
    };
  };
  EXPECT_NO_THROW(run_with(pool.kv(b, DType::e4m3), DType::bf16)());
  EXPECT_TRUE(test::throws_with(run_with(pool.kv(b, DType::e4m3), DType::e4m3),
                                "q.dtype fp8_e4m3 under the plan's fp8_e4m3 cache: q is fp16 or bf16 (or fp32)"));
  PagedKV three = pool.kv(b, DType::e4m3);
  three.k_scale.count = 3;
  EXPECT_TRUE(test::throws_with(run_with(three, DType::bf16),
                                "k_scale has 3 values: expected none, one, or one per kv head (4)"));
  pool.v_scale[1] = INFINITY;
  EXPECT_TRUE(test::throws_with(run_with(pool.kv(b, DType::e4m3), DType::bf16), "v_scale[1] = inf is not finite"));
}

// Logit soft-cap (Gemma 2's) and attention sinks (gpt-oss's) against fp64:
// large logits (a large sm_scale and rising keys) under caps of 5 and 50,
// sinks from −4 to 12 (above every logit too), one token a request and
// several under causal and custom masks (rows that see nothing: o = 0, lse =
// the sink), bf16 and fp8 caches, plans whose rows merge partials and plans
// whose rows have one.
TEST(CpuEngine, SoftCapAndSinksMatchTheReference) {
  struct Case {
    HeadConfig heads;
    DType kv;
    float cap;
    bool sinks;
    QueryMask mask;
    int max_q;
  };
  const Case cases[] = {
      {{8, 2, 64, 2.f, 5.f}, DType::f32, 5.f, false, QueryMask::causal, 0},
      {{8, 2, 128, 1.f, 50.f}, DType::bf16, 50.f, true, QueryMask::causal, 0},
      {{12, 4, 64}, DType::f16, 0.f, true, QueryMask::custom, 6},
      {{16, 4, 128, 0.5f, 30.f}, DType::e4m3, 30.f, true, QueryMask::causal, 5},
      {{4, 4, 256, 0.f, 20.f}, DType::bf16, 20.f, true, QueryMask::draft, 4},
  };
  for (const Case& c : cases)
    for (std::uint64_t seed = 1; seed <= 2; ++seed) {
      const DType q_dtype = is_fp8(c.kv) ? DType::bf16 : c.kv;
      test::RandomBatchSpec spec = test::engine_spec(seed, c.heads, q_dtype, 7, 4, 5, 0.3, 3);
      spec.key_ramp = 0.4f;
      const test::RandomBatch b = test::make_random_batch(spec);
      const test::Fp8Pool pool = is_fp8(c.kv) ? test::quantise(b, c.kv, c.heads.num_kv_heads) : test::Fp8Pool{};
      const PagedKV kv = is_fp8(c.kv) ? pool.kv(b, c.kv) : b.kv();
      test::RandomQueries q = test::make_random_queries(b, c.mask, std::max(c.max_q, 1), seed);
      if (c.max_q == 0) q.qo_indptr.clear(), q.mask = QueryMask::causal;
      const int rows = q.qo_indptr.empty() ? b.table().num_requests() : q.num_queries();
      std::vector<float> sinks;
      for (int h = 0; h < c.heads.num_qo_heads && c.sinks; ++h) sinks.push_back(-4.f + 16.f * float(h % 5) / 4.f);
      const std::string what = spec.describe() + " cap " + std::to_string(c.cap) + (c.sinks ? " sinks" : "");
      const ReferenceResult ref = reference_attention(b.table(), kv, c.heads, q.q.data(), q.view(), q_dtype, sinks);
      const RooflineCostModel cost(RooflineParams::cpu(2), c.heads, c.kv);
      for (const bool split : {false, true}) {
        PlannerOptions opt = cpu_planner_options(3);
        if (split) opt.split = SplitPolicy::fixed, opt.fixed_splits = 3;  // partials merged before the sink
        const Plan plan = make_plan(derive_forest(b.table()), c.heads, c.kv, cost, opt, q.view());
        const int Hq = c.heads.num_qo_heads, D = c.heads.head_dim;
        Outputs o;
        o.out.assign(std::size_t(rows) * Hq * D, NAN);
        o.lse.assign(std::size_t(rows) * Hq, NAN);
        AttentionIO io{QueryRows::contiguous(q.q.data(), q_dtype, rows, Hq, D),
                       OutputRows::contiguous(o.out.data(), DType::f32, rows, Hq, D),
                       LseRows::contiguous(o.lse.data(), rows, Hq)};
        io.sinks = sinks.empty() ? nullptr : sinks.data();
        Workspace ws(plan.workspace().bytes);
        run_cpu(plan, kv, io, ws.bytes, {2});
        expect_matches(o, ref, what + (split ? " split" : ""));
      }
    }
  // A sink that is NaN is refused by name.
  const test::RandomBatch b = test::make_random_batch(test::engine_spec(3, {8, 2, 64}, DType::f32, 7, 3, 3, 0.0, 2));
  const Plan plan = make_plan(derive_forest(b.table()), {8, 2, 64}, DType::f32,
                              RooflineCostModel(RooflineParams::cpu(2), {8, 2, 64}, DType::f32), cpu_planner_options(2));
  Outputs o;
  AttentionIO io = contiguous_io(plan, b.q.data(), o);
  std::vector<float> sinks(8, 0.f);
  sinks[3] = NAN;
  io.sinks = sinks.data();
  Workspace ws(plan.workspace().bytes);
  EXPECT_TRUE(test::throws_with([&] { run_cpu(plan, b.kv(), io, ws.bytes); }, "run_cpu: sinks[3] = nan"));
  EXPECT_TRUE(test::throws_with([] { HeadConfig{8, 2, 64, 0.f, -1.f}.validate(); },
                                "logits_soft_cap -1 must be finite and >= 0"));
}

// Sliding windows (QueryBatch::window_left) against fp64: windows of 1, 6,
// 41 keys and one longer than every context, one token a request and several
// under causal, custom and draft masks, page sizes 1, 7 and 16 (a window
// often begins inside a shared node, and requests sharing a node see
// different parts of it), with soft-cap and sinks on some; plans that merge
// and plans that do not. window_left below −1 is refused by name.
TEST(CpuEngine, SlidingWindowsMatchTheReference) {
  const HeadConfig plain{8, 2, 64}, capped{8, 2, 64, 0.f, 20.f};
  int windowed = 0;
  for (const int page_size : {1, 7, 16})
    for (const QueryMask mask : {QueryMask::causal, QueryMask::custom, QueryMask::draft})
      for (const int window_left : {0, 5, 40, 100000})
        for (const int max_q : {0, 8}) {
          if (max_q == 0 && mask != QueryMask::causal) continue;
          const std::uint64_t seed = std::uint64_t(page_size * 31 + window_left % 97 + max_q);
          const HeadConfig& heads = window_left == 40 ? capped : plain;
          const test::RandomBatch b =
              test::make_random_batch(test::engine_spec(seed, heads, DType::f32, page_size, 4, 5, 0.3, 4));
          test::RandomQueries q = test::make_random_queries(b, mask, std::max(max_q, 1), seed);
          if (max_q == 0) q.qo_indptr.clear(), q.mask = QueryMask::causal;
          QueryBatch queries = q.view();
          queries.window_left = window_left;
          const int rows = q.qo_indptr.empty() ? b.table().num_requests() : q.num_queries();
          std::vector<float> sinks;
          if (window_left == 5) sinks.assign(std::size_t(heads.num_qo_heads), 1.5f);
          const std::string what = b.spec.describe() + " window_left " + std::to_string(window_left) + " mask " +
                                   std::to_string(int(mask)) + " max_q " + std::to_string(max_q);
          const ReferenceResult ref = reference_attention(b.table(), b.kv(), heads, q.q.data(), queries, DType::f32, sinks);
          for (const bool split : {false, true}) {
            PlannerOptions opt = cpu_planner_options(3);
            if (split) opt.split = SplitPolicy::fixed, opt.fixed_splits = 3;
            const Plan plan = make_plan(derive_forest(b.table()), heads, DType::f32,
                                        RooflineCostModel(RooflineParams::cpu(2), heads, DType::f32), opt, queries);
            windowed += plan.extent().windowed;
            Outputs o;
            AttentionIO io = contiguous_io(plan, q.q.data(), o, rows);
            io.sinks = sinks.empty() ? nullptr : sinks.data();
            Workspace ws(plan.workspace().bytes);
            run_cpu(plan, b.kv(), io, ws.bytes, {2});
            expect_matches(o, ref, what + (split ? " split" : ""));
          }
        }
  EXPECT_GT(windowed, 40);  // the windows did cut
  const test::RandomBatch b = test::make_random_batch(test::engine_spec(2, plain, DType::f32, 7, 3, 3, 0.0, 2));
  QueryBatch bad;
  bad.window_left = -2;
  const RooflineCostModel cost(RooflineParams::cpu(2), plain, DType::f32);
  EXPECT_TRUE(test::throws_with(
      [&] { make_plan(derive_forest(b.table()), plain, DType::f32, cost, cpu_planner_options(2), bad); },
      "window_left -2 must be >= -1 (-1: no window)"));
}

// A window costs a window: a 1,600-token document shared by 4 requests of
// 10 own tokens each, window 32: the plan reads the document's last pages
// (at most a window and a page before each row) rather than all of it, and
// stays exact.
TEST(CpuEngine, AWindowReadsItsWindowNotTheDocument) {
  const HeadConfig heads{8, 2, 64};
  std::vector<std::int32_t> indptr{0}, indices, last;
  for (int r = 0; r < 4; ++r) {  // pages 0..99 shared, then one page of 10 tokens each
    for (int p = 0; p < 100; ++p) indices.push_back(p);
    indices.push_back(100 + r);
    indptr.push_back(std::int32_t(indices.size()));
    last.push_back(10);
  }
  test::RandomBatchSpec spec = test::engine_spec(9, heads, DType::f32, 16, 1, 1, 0.0, 1);
  test::RandomBatch b = test::make_random_batch(spec);  // its pool and q, resized to this table
  b.num_pages = 104;
  b.k.assign(std::size_t(104) * 16 * 2 * 64 * 4, std::byte{0});
  b.v = b.k;
  b.q.resize(std::size_t(4) * 8 * 64 * 4);
  std::mt19937 rng(3);
  for (auto* values : {&b.k, &b.v, &b.q})
    for (std::size_t i = 0; i < values->size(); i += 4) {
      const float x = std::uniform_real_distribution<float>(-2, 2)(rng);
      std::memcpy(values->data() + i, &x, 4);
    }
  const PageTable table{indptr, indices, last, 16, 104};
  const PagedKV kv = PagedKV::nhd(b.k.data(), b.v.data(), DType::f32, 104, 16, 2, 64);
  QueryBatch window;
  window.window_left = 31;
  const ReferenceResult ref = reference_attention(table, kv, heads, b.q.data(), window);
  const RooflineCostModel cost(RooflineParams::cpu(2), heads, DType::f32);
  const Plan whole = make_plan(derive_forest(table), heads, DType::f32, cost, cpu_planner_options(2));
  const Plan windowed = make_plan(derive_forest(table), heads, DType::f32, cost, cpu_planner_options(2), window);
  EXPECT_EQ(whole.stats().kv_tokens_read, (1600 + 4 * 10) * 2);
  // each request's window reaches 22 tokens into the document: its last two pages, and the own pages
  EXPECT_EQ(windowed.stats().kv_tokens_read, (2 * 16 + 4 * 10) * 2);
  Outputs o;
  const AttentionIO io = contiguous_io(windowed, b.q.data(), o);
  Workspace ws(windowed.workspace().bytes);
  run_cpu(windowed, kv, io, ws.bytes, {2});
  expect_matches(o, ref, "a window over a shared document");
}

// merge_state of two outputs is exact when exactly one side carries the sink:
// attention over a request's first pages with the sink, over the rest
// without, merged, is attention over all of them with the sink.
TEST(CpuEngine, MergingAStateWithTheSinkAndOneWithoutIsExact) {
  const HeadConfig heads{8, 2, 64};
  const test::RandomBatch b = test::make_random_batch(test::engine_spec(5, heads, DType::f32, 8, 3, 4, 0.0, 3));
  const PageTable all = b.table();
  std::vector<std::int32_t> first_indptr{0}, first_indices, first_last, rest_indptr{0}, rest_indices, rest_last;
  for (int r = 0; r < all.num_requests(); ++r) {
    const int n = all.indptr[r + 1] - all.indptr[r], cut = std::max(1, n / 2);
    ASSERT_GE(n, 2) << "request " << r << " needs two pages to split";
    first_indices.insert(first_indices.end(), all.indices.begin() + all.indptr[r], all.indices.begin() + all.indptr[r] + cut);
    rest_indices.insert(rest_indices.end(), all.indices.begin() + all.indptr[r] + cut, all.indices.begin() + all.indptr[r + 1]);
    first_indptr.push_back(std::int32_t(first_indices.size()));
    rest_indptr.push_back(std::int32_t(rest_indices.size()));
    first_last.push_back(all.page_size);
    rest_last.push_back(all.last_page_len[r]);
  }
  const PageTable first{first_indptr, first_indices, first_last, all.page_size, all.num_pages};
  const PageTable rest{rest_indptr, rest_indices, rest_last, all.page_size, all.num_pages};
  const std::vector<float> sinks{-2.f, 0.f, 1.f, 3.f, 5.f, 8.f, -1.f, 2.f};
  const ReferenceResult a = reference_attention(first, b.kv(), heads, b.q.data(), {}, std::nullopt, sinks);
  const ReferenceResult c = reference_attention(rest, b.kv(), heads, b.q.data());
  const ReferenceResult whole = reference_attention(all, b.kv(), heads, b.q.data(), {}, std::nullopt, sinks);
  const int B = all.num_requests(), Hq = 8, D = 64;
  auto floats = [](const std::vector<double>& x) { return std::vector<float>(x.begin(), x.end()); };
  std::vector<float> oa = floats(a.out), la = floats(a.lse), oc = floats(c.out), lc = floats(c.lse);
  std::vector<float> out(oa.size()), lse(la.size());
  merge_states_cpu(QueryRows::contiguous(oa.data(), DType::f32, B, Hq, D), LseRows::contiguous(la.data(), B, Hq),
                   QueryRows::contiguous(oc.data(), DType::f32, B, Hq, D), LseRows::contiguous(lc.data(), B, Hq),
                   OutputRows::contiguous(out.data(), DType::f32, B, Hq, D), LseRows::contiguous(lse.data(), B, Hq),
                   LseBase::e);
  expect_matches({out, lse}, whole, "merged");
}

// CUDA graphs of several query tokens a request: at a capacity with maxima
// of query tokens and mask bytes, plans of every mask (and of one token a
// request, which sees all its keys) share one layout, all carry masks (a
// graph captured with one runs the masked kernels for the next), cover the
// capacity's rows and match fp64; a plan past the capacity's mask words or
// with masks at a capacity of one token a request is refused by name.
TEST(CpuEngine, QueryTokensAtOneCapacityShareTheirLayout) {
  const HeadConfig heads{12, 4, 64};
  const RooflineCostModel cost(RooflineParams::h200(), heads, DType::f16);
  constexpr int kMaxRequests = 8, kMaxTokens = 160;
  constexpr std::int64_t kMaxPages = 300, kMaxMaskBytes = 12000;
  PlannerOptions opt;
  opt.num_blocks = 5;
  opt.capacity = PlanCapacity::for_batches(kMaxRequests, kMaxPages, heads, opt.max_tile_rows, opt.num_blocks, 20000, 0,
                                           0, {kMaxTokens, kMaxMaskBytes});
  ASSERT_TRUE(opt.capacity->masks);
  EXPECT_EQ(opt.capacity->requests, kMaxTokens);
  StepPlanner steps(heads, DType::f16, std::make_shared<RooflineCostModel>(cost), opt);
  int plans = 0, masked_tasks = 0;
  for (const QueryMask mask : {QueryMask::none, QueryMask::causal, QueryMask::custom, QueryMask::draft})
    for (std::uint64_t seed = 1; seed <= 3; ++seed) {
      const test::RandomBatchSpec spec = test::engine_spec(seed + 40, heads, DType::f16, 5, 4, 3 + int(seed), 0.3, 4);
      const test::RandomBatch b = test::make_random_batch(spec);
      ASSERT_LE(std::int64_t(b.indices.size()), kMaxPages);
      // seed 1 of QueryMask::none: one token a request, no qo_indptr
      test::RandomQueries q = test::make_random_queries(b, mask, seed == 1 && mask == QueryMask::none ? 1 : 16, seed);
      if (seed == 1 && mask == QueryMask::none) q.qo_indptr.clear(), q.mask = QueryMask::causal;
      const int tokens = q.qo_indptr.empty() ? b.table().num_requests() : q.num_queries();
      ASSERT_LE(tokens, kMaxTokens);
      const std::string what = spec.describe() + " mask " + std::to_string(int(mask));
      const Forest forest = derive_forest(b.table());
      const Plan plan = seed == 2 ? steps.plan(forest, q.view()) : make_plan(forest, heads, DType::f16, cost, opt, q.view());
      ASSERT_TRUE(plan.has_capacity()) << what;
      EXPECT_EQ(plan.bytes().size(), Plan::packed_bytes(*opt.capacity)) << what;
      EXPECT_TRUE(plan.view().masks) << what;
      EXPECT_EQ(plan.view().num_requests, kMaxTokens) << what;
      masked_tasks += plan.extent().masked_tasks;
      ++plans;
      // a run over all the capacity's rows: those past the batch come out empty
      const std::size_t row_bytes = std::size_t(heads.num_qo_heads) * heads.head_dim * 2;
      std::vector<std::byte> qs(kMaxTokens * row_bytes, std::byte{0xff});
      std::memcpy(qs.data(), q.q.empty() ? b.q.data() : q.q.data(), std::size_t(tokens) * row_bytes);
      Outputs o;
      Workspace ws(plan.workspace().bytes);
      run_cpu(plan, b.kv(), contiguous_io(plan, qs.data(), o, kMaxTokens), ws.bytes);
      const ReferenceResult ref = reference_attention(b.table(), b.kv(), heads, qs.data(), q.view());
      const std::size_t rows = std::size_t(tokens) * heads.num_qo_heads;
      Outputs real{{o.out.begin(), o.out.begin() + rows * heads.head_dim}, {o.lse.begin(), o.lse.begin() + rows}};
      expect_matches(real, ref, what + " at capacity");
      for (std::size_t i = rows * heads.head_dim; i < o.out.size(); ++i) ASSERT_EQ(o.out[i], 0.f) << "padding row";
      for (std::size_t i = rows; i < o.lse.size(); ++i) ASSERT_EQ(o.lse[i], -INFINITY) << "padding row";
    }
  EXPECT_EQ(plans, 12);
  EXPECT_GT(masked_tasks, 0);
  const Plan empty = Plan::empty(heads, DType::f16, 5, *opt.capacity);
  EXPECT_EQ(empty.bytes().size(), Plan::packed_bytes(*opt.capacity));
  EXPECT_TRUE(empty.view().masks);

  const test::RandomBatch b = test::make_random_batch(test::engine_spec(50, heads, DType::f16, 16, 4, 5, 0.3, 8));
  const Forest forest = derive_forest(b.table());
  const test::RandomQueries custom = test::make_random_queries(b, QueryMask::custom, 16, 3);
  PlannerOptions small = opt;
  const int tokens = custom.num_queries();  // a mask of 4 bytes at most: a word a token, and one more
  small.capacity = PlanCapacity::for_batches(kMaxRequests, kMaxPages, heads, opt.max_tile_rows, opt.num_blocks, 20000,
                                             0, 0, {tokens, 4});
  EXPECT_TRUE(test::throws_with([&] { make_plan(forest, heads, DType::f16, cost, small, custom.view()); },
                                "mask words, more than its capacity of " + std::to_string(tokens + 1)));
  small.capacity = PlanCapacity::for_batches(kMaxRequests, kMaxPages, heads, opt.max_tile_rows, opt.num_blocks, 20000);
  EXPECT_TRUE(test::throws_with([&] { make_plan(forest, heads, DType::f16, cost, small, custom.view()); },
                                "its capacity was made for one query token a request"));
  EXPECT_TRUE(test::throws_with(
      [&] { PlanCapacity::for_batches(kMaxRequests, kMaxPages, heads, 64, 5, 20000, 0, 0, {kMaxRequests - 1, 0}); },
      "max_query_tokens 7 must be 0 (one a request) or >= max_requests 8"));
  EXPECT_TRUE(test::throws_with(
      [&] { PlanCapacity::for_batches(kMaxRequests, kMaxPages, heads, 64, 5, 20000, 0, 0, {0, 16}); },
      "max_mask_bytes 16 must be >= 0, and 0 without a maximum of query tokens"));
}

// Prefill chunks of hundreds and of 4,096 tokens over a cached prefix: a
// request's own last node holds most of its chunk, whose causal mask cuts
// every KV tile there; where its own tokens are fewer than the chunk, the
// chunk reaches back into the shared nodes.
TEST(CpuEngine, LongChunksOverACachedPrefix) {
  struct Case {
    HeadConfig heads;
    int chunk, requests, max_node_pages, max_tail;
  };
  for (const Case c : {Case{{8, 2, 128}, 300, 3, 20, 700}, Case{{1, 1, 64}, 4096, 2, 60, 4500}}) {
    test::RandomBatchSpec spec = test::engine_spec(4, c.heads, DType::bf16, 16, 3, c.requests, 0.0, c.max_node_pages);
    spec.max_tail = c.max_tail;
    const test::RandomBatch b = test::make_random_batch(spec);
    const test::RandomQueries q = test::chunk_queries(b, c.chunk, 9);
    const std::string what = std::to_string(c.chunk) + "-token chunks";
    int longest = 0;
    for (std::size_t r = 1; r < q.qo_indptr.size(); ++r)
      longest = std::max(longest, q.qo_indptr[r] - q.qo_indptr[r - 1]);
    ASSERT_EQ(longest, c.chunk) << what;
    const PageTable table = b.table();
    const ReferenceResult ref = reference_attention(table, b.kv(), spec.heads, q.q.data(), q.view());
    PlannerOptions opt;
    opt.num_blocks = 5;
    const Plan plan = make_plan(derive_forest(table), spec.heads, spec.dtype,
                                RooflineCostModel(RooflineParams::cpu(2), spec.heads, spec.dtype), opt, q.view());
    EXPECT_GT(plan.extent().masked_tasks, 0) << what;
    expect_matches(run(plan, b.kv(), q.q.data()), ref, what);
  }
}

TEST(CpuEngine, BadQueryBatchesAreRefusedByName) {
  const test::RandomBatch b = test::make_random_batch(test::engine_spec(2, {8, 2, 64}, DType::bf16, 16, 3, 3, 0.0, 2));
  const Forest forest = derive_forest(b.table());
  const RooflineCostModel cost(RooflineParams::cpu(2), {8, 2, 64}, DType::bf16);
  PlannerOptions opt;
  opt.num_blocks = 2;
  auto plan = [&](std::vector<std::int32_t> qo_indptr, QueryMask mask = QueryMask::causal,
                  std::vector<std::uint8_t> bits = {}) {
    return [=, &forest, &cost] { make_plan(forest, {8, 2, 64}, DType::bf16, cost, opt, {qo_indptr, mask, bits}); };
  };
  const std::int64_t kv0 = forest.request_tokens(0);
  EXPECT_TRUE(test::throws_with(plan({0, 1, 2}), "qo_indptr has 3 entries, expected 4"));
  EXPECT_TRUE(test::throws_with(plan({1, 2, 3, 4}), "qo_indptr[0] = 1 must be 0"));
  EXPECT_TRUE(test::throws_with(plan({0, 2, 2, 3}), "qo_indptr[2] = 2 must be greater than qo_indptr[1] = 2"));
  EXPECT_TRUE(test::throws_with(plan({0, std::int32_t(kv0) + 1, std::int32_t(kv0) + 2, std::int32_t(kv0) + 3}),
                                "request 0 has " + std::to_string(kv0 + 1) + " query tokens but " +
                                    std::to_string(kv0) + " KV tokens"));
  EXPECT_TRUE(test::throws_with(plan({0, 1, 2, 3}, QueryMask::draft, {1, 1}), "mask has 2 bytes, expected 3"));
  EXPECT_TRUE(test::throws_with(plan({0, 1, 2, 3}, QueryMask::causal, {1}), "mask has 1 bytes, expected 0"));
}

// Plans with wide tasks (PlannerOptions::wide_tile_rows, the CUDA engine's
// wide kernel): the CPU engine runs the wide blocks' tasks as it runs the
// blocks', compact and packed at a capacity, and with the wide parents'
// chunks taking in their requests' tails (wide_tail_tokens).
TEST(CpuEngine, WidePlansMatchReference) {
  const EngineCase cases[] = {
      {{32, 8, 128}, DType::bf16, 16, 2, 40, 0.1, 8},  // 160 rows on the shared nodes
      {{40, 8, 128}, DType::f16, 3, 3, 27, 0.2, 30},   // GQA 5
      {{32, 1, 64}, DType::f32, 1, 2, 7, 0.3, 60},     // MQA: 32 rows a request
  };
  int tails = 0;
  for (const EngineCase& c : cases)
    for (std::uint64_t seed = 1; seed <= 2; ++seed) {
      const test::RandomBatchSpec spec = test::engine_spec(seed, c.heads, c.dtype, c.page_size, c.nodes, c.requests,
                                                           c.fork_prob, c.max_node_pages);
      const test::RandomBatch b = test::make_random_batch(spec);
      const ReferenceResult ref = reference_attention(b.table(), b.kv(), c.heads, b.q.data());
      const Forest forest = derive_forest(b.table());
      const RooflineCostModel roofline(RooflineParams::h200(), c.heads, c.dtype);
      const test::WidePriced cost(roofline, 0.5);  // every node of many rows wide
      PlannerOptions opt;
      opt.num_blocks = 2 * int(1 + seed * 5);
      opt.max_tile_rows = 64;
      opt.wide_tile_rows = 128;
      const Plan plan = make_plan(forest, c.heads, c.dtype, cost, opt);
      EXPECT_GT(plan.stats().num_wide_tasks, 0) << spec.describe();
      expect_matches(run(plan, b.kv(), b.q.data()), ref, spec.describe() + " wide");
      opt.capacity = PlanCapacity::for_batches(64, 4096, c.heads, opt.max_tile_rows, opt.num_blocks, 1 << 16,
                                               opt.wide_blocks());
      expect_matches(run(make_plan(forest, c.heads, c.dtype, cost, opt), b.kv(), b.q.data()), ref,
                     spec.describe() + " wide at a capacity");
      opt.wide_tail_tokens = 1000;
      opt.capacity->tail_tokens = 64 * 1000;
      const Plan tailed = make_plan(forest, c.heads, c.dtype, cost, opt);
      tails += tailed.stats().num_tails;
      expect_matches(run(tailed, b.kv(), b.q.data()), ref, spec.describe() + " wide with tails at a capacity");
      opt.capacity.reset();
      expect_matches(run(make_plan(forest, c.heads, c.dtype, cost, opt), b.kv(), b.q.data()), ref,
                     spec.describe() + " wide with tails");
    }
  EXPECT_GT(tails, 0);
}

// Σ over a plan's tasks of query rows × KV tokens: the attention's work.
std::int64_t query_token_pairs(const Plan& plan) {
  const PlanView p = plan.view();
  std::int64_t n = 0;
  for (int i = 0; i < p.num_tasks; ++i)
    n += std::int64_t(p.tasks[i].row_end - p.tasks[i].row_begin) * (p.tasks[i].kv_end - p.tasks[i].kv_begin);
  return n;
}

// Tensor parallelism without a second device: each rank's head slice runs on
// views of the whole batch's q, KV and output (what a rank holds, and where an
// all-gather over heads puts its rows). Every rank plans the same plan; the
// ranks together do the whole plan's work (query rows × KV tokens) and write
// every row, equal to the reference.
TEST(CpuEngine, TensorParallelSlicesMakeTheWholeRun) {
  struct TpCase {
    HeadConfig heads;
    DType dtype;
    int tp;
  };
  const TpCase cases[] = {{{32, 8, 128}, DType::bf16, 2}, {{32, 8, 128}, DType::bf16, 8},
                          {{40, 8, 64}, DType::f16, 4},   {{32, 1, 64}, DType::f16, 4},  // MQA: one kv head on 4 ranks
                          {{8, 2, 128}, DType::f32, 8}};
  for (const TpCase& c : cases) {
    const test::RandomBatchSpec spec = test::engine_spec(7, c.heads, c.dtype, 16, 6, 7, 0.3, 4);
    const test::RandomBatch b = test::make_random_batch(spec);
    const ReferenceResult ref = reference_attention(b.table(), b.kv(), c.heads, b.q.data());
    const Forest forest = derive_forest(b.table());
    PlannerOptions opt;
    opt.num_blocks = 6;
    const Plan whole = make_plan(forest, c.heads, c.dtype, RooflineCostModel(RooflineParams::h200(), c.heads, c.dtype),
                                 opt);
    const int D = c.heads.head_dim;
    const std::int64_t elem = std::int64_t(dtype_size(c.dtype));
    Outputs o;
    const AttentionIO all = contiguous_io(whole, b.q.data(), o);
    std::int64_t kv_tokens = 0, work = 0;
    std::vector<std::byte> first_plan;
    for (int rank = 0; rank < c.tp; ++rank) {
      const HeadSlice slice = tensor_parallel_slice(c.heads, c.tp, rank);
      const Plan plan = make_plan(forest, slice.heads, c.dtype,
                                  RooflineCostModel(RooflineParams::h200(), slice.heads, c.dtype), opt);
      const std::span<const std::byte> bytes = plan.bytes();
      if (rank == 0) first_plan.assign(bytes.begin(), bytes.end());
      EXPECT_TRUE(std::equal(bytes.begin(), bytes.end(), first_plan.begin(), first_plan.end()))
          << "rank " << rank << " planned differently";
      kv_tokens += plan.stats().kv_tokens_read;
      work += query_token_pairs(plan);
      PagedKV kv = b.kv();
      kv.k = static_cast<const std::byte*>(kv.k) + slice.kv_begin * kv.stride_head * elem;
      kv.v = static_cast<const std::byte*>(kv.v) + slice.kv_begin * kv.stride_head * elem;
      kv.num_kv_heads = slice.heads.num_kv_heads;
      AttentionIO io = all;
      io.q.data = b.q.data() + slice.qo_begin * D * elem;
      io.q.heads = io.out.heads = io.lse.heads = slice.heads.num_qo_heads;
      io.out.data = o.out.data() + std::size_t(slice.qo_begin) * D;
      io.lse.data = o.lse.data() + slice.qo_begin;
      Workspace ws(plan.workspace().bytes);
      run_cpu(plan, kv, io, ws.bytes, {2});
    }
    const std::string what = spec.describe() + " tp " + std::to_string(c.tp);
    EXPECT_EQ(work, query_token_pairs(whole)) << what;
    // Without replicated kv heads the ranks read the whole plan's KV. A kv head
    // on several ranks is read by each, in fewer row tiles (G / copies rows per
    // request), so that sum is not the whole plan's.
    if (c.tp <= c.heads.num_kv_heads) {
      EXPECT_EQ(kv_tokens, whole.stats().kv_tokens_read) << what;
    }
    expect_matches(o, ref, what);
  }
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
  const Plan plan = make_plan(forest, spec.heads, spec.dtype, cost, opt);
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
  expect_matches(run(make_plan(g, spec.heads, spec.dtype, cost, opt), b.kv(), b.q.data()), ref, "empty root");
}

TEST(CpuEngine, RejectsMismatchedInputs) {
  test::RandomBatchSpec spec;
  const test::RandomBatch b = test::make_random_batch(spec);
  const RooflineCostModel cost(RooflineParams::h200(), spec.heads, spec.dtype);
  PlannerOptions opt;
  opt.num_blocks = 4;
  const Plan plan = make_plan(derive_forest(b.table()), spec.heads, spec.dtype, cost, opt);
  Outputs o;
  const AttentionIO io = contiguous_io(plan, b.q.data(), o);
  Workspace ws(plan.workspace().bytes);
  auto expect_error = [&](const PagedKV& kv, const AttentionIO& i, std::span<std::byte> w, const std::string& needle) {
    EXPECT_TRUE(test::throws_with([&] { run_cpu(plan, kv, i, w); }, needle)) << needle;
  };
  PagedKV kv = b.kv();
  kv.head_dim = 128;
  expect_error(kv, io, ws.bytes, "kv.head_dim 128 but the plan was made for 64");
  kv = b.kv();
  kv.num_pages = 2;  // the plan reads pages beyond this pool
  expect_error(kv, io, ws.bytes, "outside the KV pool of 2 pages");
  kv = b.kv();
  kv.dtype = DType::f16;  // the plan keeps the dtype it was made for
  expect_error(kv, io, ws.bytes, "kv.dtype fp16 but the plan was made for bf16");
  expect_error(b.kv(), io, {ws.bytes.data(), 8}, "bytes the plan needs");
  std::vector<std::byte> spare(ws.bytes.size() + 16);
  std::byte* off = spare.data();  // 8 bytes past a 16-byte boundary
  while (reinterpret_cast<std::uintptr_t>(off) % 16 != 8) ++off;
  expect_error(b.kv(), io, {off, ws.bytes.size()}, "workspace must be 16-byte aligned");
  EXPECT_TRUE(test::throws_with([&] { run_cpu(Plan{}, b.kv(), io, ws.bytes); }, "the plan is empty"));

  AttentionIO bad = io;
  bad.q.dtype = DType::f16;
  expect_error(b.kv(), bad, ws.bytes, "q.dtype fp16 but the plan was made for bf16");
  bad = io;
  bad.out.dtype = DType::f16;
  expect_error(b.kv(), bad, ws.bytes, "out.dtype fp16");
  bad = io;
  bad.q.batch = bad.out.batch = plan.num_requests() + 1;
  expect_error(b.kv(), bad, ws.bytes, "out.batch 6 but the plan was made for a batch of 5");
  bad = io;
  bad.q.batch -= 1;
  expect_error(b.kv(), bad, ws.bytes, "q.batch 4 differs from out.batch 5");
  bad = io;
  bad.q.heads = 4;
  expect_error(b.kv(), bad, ws.bytes, "q.heads 4 but the plan was made for 8 qo heads");
  bad = io;
  bad.out.dim = 128;
  expect_error(b.kv(), bad, ws.bytes, "out.dim 128 but the plan was made for head_dim 64");
  bad = io;
  bad.out.stride_head = 32;  // rows of 64 dims 32 apart overlap
  expect_error(b.kv(), bad, ws.bytes, "out rows overlap");
  bad = io;
  bad.lse.heads = 2;
  expect_error(b.kv(), bad, ws.bytes, "lse is 5 x 2, expected 5 x 8");
  bad = io;
  bad.q.data = nullptr;
  expect_error(b.kv(), bad, ws.bytes, "q must not be null");
  bad = io;
  bad.out.data = nullptr;
  expect_error(b.kv(), bad, ws.bytes, "out must not be null");
  bad = io;
  bad.q.stride_head = -bad.q.stride_head;
  expect_error(b.kv(), bad, ws.bytes, "q strides (");
  bad = io;
  bad.lse.stride_head = 0;  // every head of a row on one float
  expect_error(b.kv(), bad, ws.bytes, "lse strides (");
}

// q as transformers passes it (a view of (1, Hq, B, D): heads outermost), out
// with padded rows in fp32 and in the KV dtype, lse strided and in base 2. The
// fp32 output is checked against fp64; a 16-bit output must be that fp32
// output rounded to nearest, element by element (no tolerance to hide a
// truncation or a scale).
TEST(CpuEngine, StridedQueryOutputAndLse) {
  for (const DType dtype : {DType::bf16, DType::f16, DType::f32}) {
    test::RandomBatchSpec spec = test::engine_spec(71, {32, 8, 128}, dtype, 16, 5, 6, 0.2, 4);
    const test::RandomBatch b = test::make_random_batch(spec);
    const ReferenceResult ref = reference_attention(b.table(), b.kv(), spec.heads, b.q.data());
    const RooflineCostModel cost(RooflineParams::h200(), spec.heads, dtype);
    PlannerOptions opt;
    opt.num_blocks = 7;
    const Plan plan = make_plan(derive_forest(b.table()), spec.heads, dtype, cost, opt);
    const int B = plan.num_requests(), Hq = 32, D = 128;
    // q re-laid out heads-major: element (b, h, d) at h·B·D + b·D + d
    const std::size_t elem = dtype_size(dtype);
    std::vector<std::byte> q(b.q.size());
    for (int r = 0; r < B; ++r)
      for (int h = 0; h < Hq; ++h)
        std::memcpy(&q[(std::size_t(h) * B + r) * D * elem], &b.q[(std::size_t(r) * Hq + h) * D * elem], D * elem);
    const QueryRows q_rows{q.data(), dtype, B, Hq, D, D, std::int64_t(B) * D};
    std::vector<float> out32;  // the fp32 run's output, dense
    for (const DType out_dtype : {DType::f32, dtype}) {
      const std::int64_t row_stride = D + 8, batch_stride = Hq * row_stride + 24;  // padding stays untouched
      std::vector<std::byte> out(std::size_t(B) * batch_stride * dtype_size(out_dtype), std::byte{0x7f});
      std::vector<float> lse(std::size_t(B) * Hq * 2, NAN);
      const AttentionIO io{q_rows, {out.data(), out_dtype, B, Hq, D, batch_stride, row_stride},
                           {lse.data(), B, Hq, 1, B}, LseBase::two};  // lse (b, h) at h·B + b
      Workspace ws(plan.workspace().bytes);
      run_cpu(plan, b.kv(), io, ws.bytes);
      std::vector<float> dense(std::size_t(B) * Hq * D), dense_lse(std::size_t(B) * Hq);
      for (int r = 0; r < B; ++r)
        for (int h = 0; h < Hq; ++h) {
          const std::byte* row = &out[(r * batch_stride + h * row_stride) * dtype_size(out_dtype)];
          for (int d = 0; d < D; ++d)
            dense[(std::size_t(r) * Hq + h) * D + d] = dispatch_dtype(out_dtype, [&](auto tag) {
              return to_float(reinterpret_cast<const decltype(tag)*>(row)[d]);
            });
          dense_lse[std::size_t(r) * Hq + h] = lse[std::size_t(h) * B + r] / kLog2E;
          EXPECT_EQ(row[D * dtype_size(out_dtype)], std::byte{0x7f}) << "padding after row " << r << ", " << h;
        }
      if (out_dtype == DType::f32) {
        const ErrorStats e = compare(dense.data(), ref.out);
        EXPECT_TRUE(e.within(kCpuTolerance)) << to_string(dtype) << " out f32: " << e.describe();
        out32 = dense;
      } else {
        for (std::size_t i = 0; i < dense.size(); ++i) {
          const float rounded = dispatch_dtype(out_dtype, [&](auto tag) {
            return to_float(from_float<decltype(tag)>(out32[i]));
          });
          ASSERT_EQ(dense[i], rounded) << to_string(dtype) << " out element " << i << " is not the fp32 "
                                       << out32[i] << " rounded to nearest";
        }
      }
      const ErrorStats l = compare(dense_lse.data(), ref.lse);
      EXPECT_TRUE(l.within(kCpuTolerance)) << to_string(dtype) << " lse: " << l.describe();
    }
  }
}

// Plans a StepPlanner makes with an earlier search's split counts stay exact:
// the same batch over four decode steps (every request's last page filling
// up a token a step), one search, each step against fp64.
TEST(CpuEngine, StepPlannerReusedPlansAreExact) {
  const HeadConfig heads{16, 4, 64};
  PlannerOptions opt;
  opt.num_blocks = 6;
  auto cost = std::make_shared<RooflineCostModel>(RooflineParams::h200(), heads, DType::bf16);
  for (std::uint64_t seed = 91; seed <= 93; ++seed) {
    const test::RandomBatch b = test::make_random_batch(test::engine_spec(seed, heads, DType::bf16, 8, 5, 7, 0.3, 6));
    StepPlanner steps(heads, DType::bf16, cost, opt, 1.0);
    for (int step = 0; step < 4; ++step) {
      std::vector<std::int32_t> last = b.last_page_len;  // 3 − step tokens short of the batch's own
      for (std::int32_t& l : last) l = std::max(1, l - 3 + step);
      const PageTable table{b.indptr, b.indices, last, b.spec.page_size, b.num_pages};
      const Plan plan = steps.plan(derive_forest(table));
      expect_matches(run(plan, b.kv(), b.q.data()), reference_attention(table, b.kv(), heads, b.q.data()),
                     b.spec.describe() + " step " + std::to_string(step));
    }
    EXPECT_EQ(steps.searches(), 1) << b.spec.describe();
  }
}

// Plans of different batches packed at one capacity share one layout (what a
// CUDA graph needs to replay any of them), cover the capacity's rows (those
// past a batch come out as the empty state), and stay within its slots.
TEST(CpuEngine, PlansAtOneCapacityShareTheirLayout) {
  const HeadConfig heads{16, 4, 64};
  PlannerOptions opt;
  opt.num_blocks = 6;
  const RooflineCostModel cost(RooflineParams::h200(), heads, DType::bf16);
  constexpr int kMaxRequests = 12;
  constexpr std::int64_t kMaxPages = 400;
  opt.capacity = PlanCapacity::for_batches(kMaxRequests, kMaxPages, heads, opt.max_tile_rows, opt.num_blocks, 3000);
  std::size_t layout_bytes = 0;
  std::ptrdiff_t partials_offset = -1;
  for (std::uint64_t seed = 81; seed <= 86; ++seed) {
    test::RandomBatchSpec spec = test::engine_spec(seed, heads, DType::bf16, 8, 5, 3 + int(seed % 9), 0.3, 6);
    const test::RandomBatch b = test::make_random_batch(spec);
    ASSERT_LE(std::int64_t(b.indices.size()), kMaxPages);
    const Plan plan = make_plan(derive_forest(b.table()), heads, DType::bf16, cost, opt);
    ASSERT_TRUE(plan.has_capacity());
    EXPECT_LE(plan.stats().num_slots, opt.capacity->slots) << spec.describe();
    // one layout: the same byte size and array offsets for every batch
    const PlanView v = plan.view(nullptr);
    if (layout_bytes == 0) layout_bytes = plan.bytes().size(), partials_offset = reinterpret_cast<std::intptr_t>(v.partials);
    EXPECT_EQ(plan.bytes().size(), layout_bytes) << spec.describe();
    EXPECT_EQ(plan.bytes().size(), Plan::packed_bytes(*opt.capacity)) << spec.describe();
    EXPECT_EQ(reinterpret_cast<std::intptr_t>(v.partials), partials_offset) << spec.describe();
    EXPECT_EQ(plan.workspace().bytes, Plan::workspace_for(opt.capacity->slots, heads.head_dim).bytes);
    EXPECT_EQ(v.num_requests, kMaxRequests);
    // a run over all the capacity's rows: q rows past the batch are never read
    std::vector<std::byte> q(std::size_t(kMaxRequests) * heads.num_qo_heads * heads.head_dim * 2, std::byte{0xff});
    std::memcpy(q.data(), b.q.data(), b.q.size());
    Outputs o;
    const AttentionIO io = contiguous_io(plan, q.data(), o, kMaxRequests);
    Workspace ws(plan.workspace().bytes);
    run_cpu(plan, b.kv(), io, ws.bytes);
    const ReferenceResult ref = reference_attention(b.table(), b.kv(), heads, b.q.data());
    const std::size_t rows = std::size_t(plan.num_requests()) * heads.num_qo_heads;
    Outputs real{{o.out.begin(), o.out.begin() + rows * heads.head_dim}, {o.lse.begin(), o.lse.begin() + rows}};
    expect_matches(real, ref, spec.describe() + " at capacity");
    for (std::size_t i = rows * heads.head_dim; i < o.out.size(); ++i) ASSERT_EQ(o.out[i], 0.f) << "padding row";
    for (std::size_t i = rows; i < o.lse.size(); ++i) ASSERT_EQ(o.lse[i], -INFINITY) << "padding row";
  }
  // The empty plan at the capacity (the host side of in-stream plans): the
  // same layout, and every row it covers the empty state.
  const Plan empty = Plan::empty(heads, DType::bf16, 8, *opt.capacity);
  EXPECT_EQ(empty.bytes().size(), layout_bytes);
  EXPECT_EQ(reinterpret_cast<std::intptr_t>(empty.view(nullptr).partials), partials_offset);
  EXPECT_EQ(empty.num_requests(), 0);
  EXPECT_EQ(empty.view().num_requests, kMaxRequests);
  EXPECT_EQ(empty.view().num_blocks, opt.num_blocks);
  EXPECT_TRUE(empty.extent().needs_merge);
  {
    const test::RandomBatch b = test::make_random_batch(test::engine_spec(87, heads, DType::bf16, 8, 3, 4, 0.0, 2));
    std::vector<std::byte> q(std::size_t(kMaxRequests) * heads.num_qo_heads * heads.head_dim * 2, std::byte{0});
    Outputs o;
    Workspace ws(empty.workspace().bytes);
    run_cpu(empty, b.kv(), contiguous_io(empty, q.data(), o, kMaxRequests), ws.bytes);
    for (const float x : o.out) ASSERT_EQ(x, 0.f);
    for (const float x : o.lse) ASSERT_EQ(x, -INFINITY);
  }
  // A batch past the capacity, and a workspace too small even unsplit, are refused.
  test::RandomBatchSpec big = test::engine_spec(90, heads, DType::bf16, 8, 5, kMaxRequests + 1, 0.0, 2);
  const test::RandomBatch b = test::make_random_batch(big);
  EXPECT_TRUE(test::throws_with([&] { make_plan(derive_forest(b.table()), heads, DType::bf16, cost, opt); },
                                "13 requests, more than its capacity of 12"));
  PlannerOptions tight;
  tight.num_blocks = 6;
  tight.max_slots = 10;
  EXPECT_TRUE(test::throws_with([&] { make_plan(derive_forest(b.table()), heads, DType::bf16, cost, tight); },
                                "more than the 10 the workspace holds"));
}

// A workspace bounds the partial slots: the planner splits only as far as they fit.
TEST(CpuEngine, PlannerKeepsWithinTheWorkspace) {
  test::RandomBatchSpec spec = test::engine_spec(95, {32, 8, 128}, DType::bf16, 16, 3, 8, 0.0, 40);
  const test::RandomBatch b = test::make_random_batch(spec);
  const Forest forest = derive_forest(b.table());
  const RooflineCostModel cost(RooflineParams::h200(), spec.heads, spec.dtype);
  PlannerOptions opt;
  opt.num_blocks = 264;
  const Plan free = make_plan(forest, spec.heads, spec.dtype, cost, opt);
  const std::int64_t unsplit = min_slots(forest, spec.heads);
  ASSERT_GT(free.stats().num_slots, 2 * unsplit) << "the test needs a plan that splits";
  opt.max_slots = cpu_workspace_slots(Plan::workspace_for(2 * unsplit, 128).bytes, 128);
  EXPECT_EQ(opt.max_slots, 2 * unsplit);
  const Plan bounded = make_plan(forest, spec.heads, spec.dtype, cost, opt);
  EXPECT_LE(bounded.stats().num_slots, opt.max_slots);
  expect_matches(run(bounded, b.kv(), b.q.data()), reference_attention(b.table(), b.kv(), spec.heads, b.q.data()),
                 "bounded by the workspace");
}

// merge_states_cpu against the merge in fp64, with empty states on either side and both.
TEST(CpuEngine, MergeStatesMatchesFp64) {
  constexpr int N = 5, H = 3, D = 40;
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> value(-1.f, 1.f), log_sum(-30.f, 30.f);
  for (const DType dtype : {DType::f16, DType::bf16, DType::f32})
    for (const LseBase base : {LseBase::e, LseBase::two}) {
      const std::size_t elem = dtype_size(dtype);
      // out and its lse laid out otherwise than the inputs (padded rows, heads
      // outermost), poisoned: every element must be written, where it belongs
      constexpr std::int64_t kRowStride = D + 4, kBatchStride = H * kRowStride + 8;
      std::vector<std::byte> a(N * H * D * elem), b(N * H * D * elem), out(N * kBatchStride * elem, std::byte{0xff});
      std::vector<float> la(N * H), lb(N * H), lo(N * H, NAN);
      const OutputRows out_rows{out.data(), dtype, N, H, D, kBatchStride, kRowStride};
      const LseRows lo_rows{lo.data(), N, H, 1, N};  // (n, h) at h·N + n
      dispatch_dtype(dtype, [&](auto tag) {
        using T = decltype(tag);
        for (int i = 0; i < N * H * D; ++i) {
          reinterpret_cast<T*>(a.data())[i] = from_float<T>(value(rng));
          reinterpret_cast<T*>(b.data())[i] = from_float<T>(value(rng));
        }
      });
      for (int i = 0; i < N * H; ++i) la[i] = log_sum(rng), lb[i] = log_sum(rng);
      la[1] = -INFINITY;                        // row 1: a empty
      lb[2] = -INFINITY;                        // row 2: b empty
      la[3] = lb[3] = -INFINITY;                // row 3: both empty
      const QueryRows ra = QueryRows::contiguous(a.data(), dtype, N, H, D), rb = QueryRows::contiguous(b.data(), dtype, N, H, D);
      merge_states_cpu(ra, LseRows::contiguous(la.data(), N, H), rb, LseRows::contiguous(lb.data(), N, H),
                       out_rows, lo_rows, base);
      const double ln_base = base == LseBase::two ? std::log(2.0) : 1.0;
      // the fp32 merge rounded once to 16 bits: within the format's unit roundoff
      const double u = dtype == DType::f32 ? 0 : dtype == DType::f16 ? 0x1p-11 : 0x1p-8;
      for (int i = 0; i < N * H; ++i) {
        const int n = i / H, h = i % H;
        const float merged_lse = lo[lo_rows.offset(n, h)];
        const double x = la[i] * ln_base, y = lb[i] * ln_base, m = std::max(x, y);
        const double lse = m == -INFINITY ? -INFINITY : m + std::log(std::exp(x - m) + std::exp(y - m));
        if (m == -INFINITY) {
          EXPECT_EQ(merged_lse, -INFINITY) << "two empty states stay empty";
        } else {
          EXPECT_NEAR(merged_lse, lse / ln_base, 1e-5 * (1 + std::abs(lse))) << i;
        }
        for (int d = 0; d < D; ++d) {
          const double wa = m == -INFINITY ? 0 : std::exp(x - lse), wb = m == -INFINITY ? 0 : std::exp(y - lse);
          auto at = [&](const std::vector<std::byte>& t, std::int64_t offset) {
            return dispatch_dtype(dtype, [&](auto tag) {
              return double(to_float(reinterpret_cast<const decltype(tag)*>(t.data())[offset + d]));
            });
          };
          const double expect = wa * at(a, i * D) + wb * at(b, i * D);
          EXPECT_NEAR(at(out, out_rows.offset(n, h)), expect, u * std::abs(expect) + 1e-6)
              << to_string(dtype) << " row " << i << " dim " << d;
        }
        const std::size_t row = std::size_t(out_rows.offset(n, h));
        for (std::size_t byte = (row + D) * elem; byte < (row + kRowStride) * elem; ++byte)
          ASSERT_EQ(out[byte], std::byte{0xff}) << "padding after row " << i;
      }
    }
}

// merge_states_cpu refuses inputs that do not match o_a, naming which, before
// writing anything.
TEST(CpuEngine, MergeStatesRejectsMismatchedInputs) {
  constexpr int N = 3, H = 2, D = 16;
  std::vector<std::uint16_t> a(N * H * D), b(N * H * D), out(N * H * D, 0x7fffu);
  std::vector<float> la(N * H), lb(N * H), lo(N * H, NAN);
  const QueryRows ra = QueryRows::contiguous(a.data(), DType::bf16, N, H, D);
  const QueryRows rb = QueryRows::contiguous(b.data(), DType::bf16, N, H, D);
  const OutputRows ro = OutputRows::contiguous(out.data(), DType::bf16, N, H, D);
  const LseRows lra = LseRows::contiguous(la.data(), N, H), lrb = LseRows::contiguous(lb.data(), N, H),
                lro = LseRows::contiguous(lo.data(), N, H);
  auto refuses = [&](const QueryRows& qa, const QueryRows& qb, const OutputRows& o, const LseRows& l_out,
                     const std::string& needle) {
    EXPECT_TRUE(test::throws_with([&] { merge_states_cpu(qa, lra, qb, lrb, o, l_out, LseBase::e); }, needle)) << needle;
  };
  QueryRows bad_b = rb;
  bad_b.heads = 1;
  refuses(ra, bad_b, ro, lro, "merge_states: o_b is 3 x 1 x 16, o_a is 3 x 2 x 16");
  OutputRows bad_out = ro;
  bad_out.dtype = DType::f16;
  refuses(ra, rb, bad_out, lro, "merge_states: out.dtype fp16 differs from o_a's bf16");
  bad_out = ro;
  bad_out.data = nullptr;
  refuses(ra, rb, bad_out, lro, "o_a, o_b and out must not be null");
  LseRows bad_lse = lro;
  bad_lse.batch = 2;
  refuses(ra, rb, ro, bad_lse, "merge_states: lse_out is 2 x 2, expected 3 x 2");
  EXPECT_TRUE(std::all_of(out.begin(), out.end(), [](std::uint16_t x) { return x == 0x7fffu; })) << "out written";
  EXPECT_TRUE(std::all_of(lo.begin(), lo.end(), [](float x) { return std::isnan(x); })) << "lse_out written";
}

// copy_pages_cpu applies a forest manager's copies in order, chains included.
TEST(CpuEngine, CopyPagesAppliesCopiesInOrder) {
  constexpr int P = 6, S = 4, H = 2, D = 64;
  std::vector<std::uint16_t> k(P * S * H * D), v(k.size());
  for (std::size_t i = 0; i < k.size(); ++i) k[i] = std::uint16_t(i), v[i] = std::uint16_t(i + 7);
  const std::vector<std::uint16_t> k0 = k, v0 = v;
  const PagedKV kv = PagedKV::hnd(k.data(), v.data(), DType::bf16, P, S, H, D);
  const PageCopy copies[] = {{1, 2, 3}, {2, 4, 2}};  // page 4 receives page 1's first 2 tokens through page 2
  copy_pages_cpu(kv, copies);
  for (int t = 0; t < S; ++t)
    for (int h = 0; h < H; ++h)
      for (int d = 0; d < D; ++d) {
        auto at = [&](int page) { return kv.offset(page, t, h) + d; };
        EXPECT_EQ(k[at(2)], t < 3 ? k0[at(1)] : k0[at(2)]);
        EXPECT_EQ(v[at(4)], t < 2 ? v0[at(1)] : v0[at(4)]);
        EXPECT_EQ(k[at(1)], k0[at(1)]);
      }
  // every bound, each alone: dst, src, and the token count (the pool has 6 pages of 4)
  const PageCopy bad_dst[] = {{0, 6, 1}}, bad_src[] = {{0, 1, 1}, {6, 0, 1}}, bad_tokens[] = {{0, 1, 5}};
  EXPECT_TRUE(test::throws_with([&] { copy_pages_cpu(kv, bad_dst); }, "copies[0] = {src 0, dst 6, num_tokens 1}"));
  EXPECT_TRUE(test::throws_with([&] { copy_pages_cpu(kv, bad_src); }, "copies[1] = {src 6, dst 0, num_tokens 1}"));
  EXPECT_TRUE(test::throws_with([&] { copy_pages_cpu(kv, bad_tokens); }, "copies[0] = {src 0, dst 1, num_tokens 5}"));
  const std::vector<std::uint16_t> k1 = k;
  EXPECT_TRUE(test::throws_with([&] { copy_pages_cpu(kv, bad_src); }, "outside the pool"));
  EXPECT_EQ(k, k1) << "a refused list copies nothing, not even its valid first entry";
}

}  // namespace
}  // namespace codec
