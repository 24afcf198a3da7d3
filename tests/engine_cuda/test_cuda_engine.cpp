// CUDA engine against the fp64 reference and the CPU engine. Every test that
// needs a GPU skips itself without one; input validation is host code and is
// checked everywhere.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iostream>
#include <memory>
#include <optional>
#include <random>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "codec/core/error.hpp"
#include "codec/cost/cost_model.hpp"
#include "codec/engine/cpu_engine.hpp"
#include "codec/engine/cuda_engine.hpp"
#include "codec/engine/cuda_stream_planner.hpp"
#include "codec/engine/planner_setup.hpp"
#include "codec/engine/reference.hpp"
#include "codec/plan/planner.hpp"
#include "support/fp8_pool.hpp"
#include "support/planning.hpp"
#include "support/random_batch.hpp"
#include "support/random_queries.hpp"
#include "support/throws_with.hpp"

namespace codec {
namespace {

#define SKIP_WITHOUT_GPU() \
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device: GPU test skipped"

void cuda_ok(cudaError_t err, const char* what) {
  if (err != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(err));
}
#define CUDA_OK(call) cuda_ok((call), #call)

// Error bounds. An output is a convex combination of values in [-1, 1]; the
// kernel's only roundings beyond fp32 are P to the input dtype for the P·V mma
// (|error| ≤ u · Σ p|v| / l ≤ u) and the output to the input dtype (≤ u · |o|),
// with u = 2⁻⁸ for bf16 and 2⁻¹¹ for fp16: at most 2u = 7.8e-3 and 9.8e-4.
// The lse is fp32 throughout: 1e-4 relative leaves room for tensor-core
// accumulation yet a single dropped key among a few hundred moves it ~1e-2.
double max_abs_bound(DType dtype) { return dtype == DType::bf16 ? 1e-2 : 1.5e-3; }
constexpr double kLseTolerance = 1e-4;
constexpr double kLseMaxAbs = 1e-3;

class DeviceBuffer {
 public:
  explicit DeviceBuffer(std::size_t bytes) : bytes_(bytes) { CUDA_OK(cudaMalloc(&ptr_, std::max<std::size_t>(bytes, 1))); }
  DeviceBuffer(const void* host, std::size_t bytes) : DeviceBuffer(bytes) {
    CUDA_OK(cudaMemcpy(ptr_, host, bytes, cudaMemcpyHostToDevice));
  }
  ~DeviceBuffer() { cudaFree(ptr_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  std::byte* data() const { return static_cast<std::byte*>(ptr_); }
  std::span<std::byte> span() const { return {data(), bytes_}; }
  // All ones: NaN in fp16, bf16 and fp32. On the stream that runs next, so the fill cannot land late.
  void poison(cudaStream_t stream = nullptr) const { CUDA_OK(cudaMemsetAsync(ptr_, 0xff, bytes_, stream)); }
  template <typename T>
  std::vector<T> download() const {
    std::vector<T> host(bytes_ / sizeof(T));
    CUDA_OK(cudaMemcpy(host.data(), ptr_, host.size() * sizeof(T), cudaMemcpyDeviceToHost));
    return host;
  }

 private:
  void* ptr_ = nullptr;
  std::size_t bytes_ = 0;
};

// padded: NHD with 16 bytes between pages, so that the page stride in bytes
// is an odd multiple of 16, the least the kernels take
enum class Layout { nhd, hnd, interleaved, padded };
const char* to_string(Layout l) {
  return l == Layout::nhd ? "NHD" : l == Layout::hnd ? "HND" : l == Layout::interleaved ? "interleaved" : "padded NHD";
}

// A batch's K/V pool re-laid out on the device, and its queries (in q_dtype:
// the cache's, or an fp8 cache's fp16 or bf16).
struct DeviceBatch {
  std::unique_ptr<DeviceBuffer> k, v, q, k_scale, v_scale;
  PagedKV kv;
  DType q_dtype = DType::bf16;
};

DeviceBatch upload(const test::RandomBatch& b, Layout layout) {
  const test::RandomBatchSpec& s = b.spec;
  const int P = int(b.num_pages), S = s.page_size, H = s.heads.num_kv_heads, D = s.heads.head_dim;
  const PagedKV src = b.kv();
  // Host copies in the target layout (interleaved: K and V in one buffer).
  constexpr int kPad = 8;  // elements between pages of the padded layout
  const std::size_t elems = layout == Layout::padded ? std::size_t(P) * (S * H * D + kPad) : b.k.size() / 2;
  std::vector<std::uint16_t> hk(layout == Layout::interleaved ? 2 * elems : elems), hv(elems);
  PagedKV dst = layout == Layout::hnd           ? PagedKV::hnd(hk.data(), hv.data(), s.dtype, P, S, H, D)
                : layout == Layout::interleaved ? PagedKV::interleaved_nhd(hk.data(), s.dtype, P, S, H, D)
                                                : PagedKV::nhd(hk.data(), hv.data(), s.dtype, P, S, H, D);
  if (layout == Layout::padded) dst.stride_page += kPad;
  auto* dk = const_cast<std::uint16_t*>(static_cast<const std::uint16_t*>(dst.k));
  auto* dv = const_cast<std::uint16_t*>(static_cast<const std::uint16_t*>(dst.v));
  const auto* k = reinterpret_cast<const std::uint16_t*>(b.k.data());
  const auto* v = reinterpret_cast<const std::uint16_t*>(b.v.data());
  for (int p = 0; p < P; ++p)
    for (int t = 0; t < S; ++t)
      for (int h = 0; h < H; ++h)
        for (int d = 0; d < D; ++d) {
          dk[dst.offset(p, t, h) + d] = k[src.offset(p, t, h) + d];
          dv[dst.offset(p, t, h) + d] = v[src.offset(p, t, h) + d];
        }
  DeviceBatch out;
  out.k = std::make_unique<DeviceBuffer>(hk.data(), hk.size() * 2);
  out.q = std::make_unique<DeviceBuffer>(b.q.data(), b.q.size());
  if (layout == Layout::interleaved) {
    dst = PagedKV::interleaved_nhd(out.k->data(), s.dtype, P, S, H, D);
  } else {
    out.v = std::make_unique<DeviceBuffer>(hv.data(), hv.size() * 2);
    dst.k = out.k->data();
    dst.v = out.v->data();
  }
  out.kv = dst;
  out.q_dtype = s.dtype;
  return out;
}

// An fp8 copy of the batch (test::quantise) on the device, NHD, its scales in device memory.
DeviceBatch upload_fp8(const test::RandomBatch& b, const test::Fp8Pool& pool, DType dtype) {
  DeviceBatch out;
  out.k = std::make_unique<DeviceBuffer>(pool.k.data(), pool.k.size());
  out.v = std::make_unique<DeviceBuffer>(pool.v.data(), pool.v.size());
  out.q = std::make_unique<DeviceBuffer>(b.q.data(), b.q.size());
  out.kv = pool.kv(b, dtype);
  out.kv.k = out.k->data();
  out.kv.v = out.v->data();
  if (!pool.k_scale.empty()) {
    out.k_scale = std::make_unique<DeviceBuffer>(pool.k_scale.data(), pool.k_scale.size() * sizeof(float));
    out.v_scale = std::make_unique<DeviceBuffer>(pool.v_scale.data(), pool.v_scale.size() * sizeof(float));
    out.kv.k_scale.data = reinterpret_cast<const float*>(out.k_scale->data());
    out.kv.v_scale.data = reinterpret_cast<const float*>(out.v_scale->data());
  }
  out.q_dtype = b.spec.dtype;
  return out;
}

struct Outputs {
  std::vector<std::uint16_t> bits;  // out as stored, for bit-exact comparisons
  std::vector<float> out, lse;
};

Outputs collect(const DeviceBuffer& out, const DeviceBuffer& lse, DType dtype) {
  Outputs o{out.download<std::uint16_t>(), {}, lse.download<float>()};
  o.out.reserve(o.bits.size());
  for (const std::uint16_t x : o.bits) o.out.push_back(dtype == DType::bf16 ? bf16_to_float(x) : f16_to_float(x));
  return o;
}

// q, out and lse [rows, Hq, D], contiguous on the device; q and out in the
// plan's dtype, or under an fp8 cache in q_dtype.
AttentionIO device_io(const Plan& plan, const void* q, const DeviceBuffer& out, const DeviceBuffer& lse, int rows,
                      DType q_dtype = DType::bf16) {
  const PlanView p = plan.view();
  const DType dtype = is_fp8(plan.dtype()) ? q_dtype : plan.dtype();
  return {QueryRows::contiguous(q, dtype, rows, p.num_qo_heads, p.head_dim),
          OutputRows::contiguous(out.data(), dtype, rows, p.num_qo_heads, p.head_dim),
          LseRows::contiguous(reinterpret_cast<float*>(lse.data()), rows, p.num_qo_heads)};
}

// Upload, run once on poisoned outputs and workspace, synchronise, download.
// sinks: device [Hq] floats (AttentionIO::sinks), or none.
Outputs run_gpu(const Plan& plan, const DeviceBatch& b, const DeviceBuffer* sinks = nullptr) {
  const PlanView p = plan.view();
  const std::size_t rows = std::size_t(plan.num_requests()) * p.num_qo_heads;
  DeviceBuffer ws(cuda_workspace_bytes(plan)), out(rows * p.head_dim * 2), lse(rows * sizeof(float));
  ws.poison();  // a partial read before it is written would poison the row
  out.poison();
  lse.poison();
  cuda_upload_plan(plan, ws.span(), nullptr);
  AttentionIO io = device_io(plan, b.q->data(), out, lse, plan.num_requests(), b.q_dtype);
  if (sinks) io.sinks = reinterpret_cast<const float*>(sinks->data());
  run_cuda(plan, b.kv, io, ws.span(), nullptr);
  CUDA_OK(cudaDeviceSynchronize());
  return collect(out, lse, b.q_dtype);
}

// Compares with a result given as fp64 (the reference, or the CPU engine widened).
void expect_close(const Outputs& o, const std::vector<double>& out, const std::vector<double>& lse, DType dtype,
                  const std::string& what) {
  const ErrorStats e = compare(o.out.data(), out);
  EXPECT_TRUE(e.within(tolerance(dtype))) << what << ": out " << e.describe();
  EXPECT_LE(e.max_abs, max_abs_bound(dtype)) << what << ": out " << e.describe();
  const ErrorStats l = compare(o.lse.data(), lse);
  EXPECT_TRUE(l.within(kLseTolerance)) << what << ": lse " << l.describe();
  EXPECT_LE(l.max_abs, kLseMaxAbs) << what << ": lse " << l.describe();
}
void expect_matches(const Outputs& o, const ReferenceResult& ref, DType dtype, const std::string& what) {
  expect_close(o, ref.out, ref.lse, dtype, what);
}

RooflineCostModel h200_cost(const HeadConfig& heads, DType dtype) { return {RooflineParams::h200(), heads, dtype}; }

struct GpuCase {
  HeadConfig heads;
  DType dtype;
  int page_size;
  Layout layout;
  int nodes = 6, requests = 5;
  double fork_prob = 0.2;
  int max_node_pages = -1;  // −1: up to ~400 tokens, several KV tiles per task even when split
  float key_ramp = 0.f;     // RandomBatchSpec::key_ramp
};

test::RandomBatchSpec spec_of(const GpuCase& c, std::uint64_t seed) {
  test::RandomBatchSpec spec =
      test::engine_spec(seed, c.heads, c.dtype, c.page_size, c.nodes, c.requests, c.fork_prob,
                        c.max_node_pages >= 0 ? c.max_node_pages : (400 + c.page_size - 1) / c.page_size);
  spec.key_ramp = c.key_ramp;
  return spec;
}

// The shared plan on the device's own options, the flat plan, and the split
// ablations (fixed 3 on few blocks with odd chunk boundaries, none), against fp64.
// Checks four plans of one random batch against the reference; returns how
// many of them had a task a block at most (PlanView::single_task_blocks).
int check_case(const GpuCase& c, std::uint64_t seed) {
  const test::RandomBatchSpec spec = spec_of(c, seed);
  const std::string what = spec.describe() + " " + to_string(c.layout);
  const test::RandomBatch b = test::make_random_batch(spec);
  const ReferenceResult ref = reference_attention(b.table(), b.kv(), c.heads, b.q.data());
  const DeviceBatch d = upload(b, c.layout);
  const Forest forest = derive_forest(b.table());
  const RooflineCostModel cost = h200_cost(c.heads, c.dtype);
  PlannerOptions opt = cuda_planner_options(c.heads, c.dtype);
  int single = 0;
  auto check = [&](const Forest& f, const std::string& name) {
    const Plan plan = make_plan(f, c.heads, c.dtype, cost, opt);
    single += plan.view().single_task_blocks;
    expect_matches(run_gpu(plan, d), ref, c.dtype, what + " " + name);
  };
  check(forest, "shared");
  check(flatten(forest), "flat");
  opt.split = SplitPolicy::none;
  check(forest, "split none");
  opt.split = SplitPolicy::fixed;
  opt.fixed_splits = 3;
  // blocks walk many tasks: shared memory reused across tasks (whole wide blocks where there are any)
  opt.num_blocks = opt.wide_tile_rows > 0 ? 4 : 3;
  opt.chunk_align = 1 + int(seed % 16);      // chunk boundaries inside tiles and pages
  check(forest, "fixed 3");
  return single;
}

TEST(CudaEngine, MatchesReferenceAcrossHeadsDtypesPagesAndLayouts) {
  SKIP_WITHOUT_GPU();
  const GpuCase cases[] = {
      {{8, 8, 64}, DType::f16, 1, Layout::nhd},       // MHA, page size 1
      {{32, 1, 64}, DType::bf16, 3, Layout::hnd},     // MQA (GQA 32)
      {{32, 8, 128}, DType::bf16, 16, Layout::nhd},   // GQA 4 (qwen3-4b)
      {{40, 8, 128}, DType::f16, 7, Layout::hnd},     // GQA 5
      {{32, 1, 256}, DType::f16, 64, Layout::nhd},    // MQA, page size 64
      {{8, 2, 256}, DType::bf16, 1, Layout::hnd},     // GQA 4, page size 1
      {{8, 8, 128}, DType::f16, 3, Layout::nhd},      // MHA
      {{40, 8, 256}, DType::bf16, 7, Layout::nhd},    // GQA 5
      {{32, 8, 64}, DType::bf16, 64, Layout::hnd},    // GQA 4
  };
  int plans = 0, single = 0;
  for (const GpuCase& c : cases)
    for (std::uint64_t seed = 1; seed <= 2; ++seed) single += check_case(c, seed), plans += 4;
  // both ways a PAC block finds its tasks ran: by block_indptr, and by its index
  EXPECT_GT(single, 0);
  EXPECT_LT(single, plans);
}

TEST(CudaEngine, LayoutsGiveBitIdenticalResults) {
  SKIP_WITHOUT_GPU();
  // page size 5 (the kernel divides) and 16 (a power of two: shift and mask)
  for (const int page_size : {5, 16}) {
    test::RandomBatchSpec spec = spec_of({{32, 8, 128}, DType::bf16, page_size, Layout::nhd}, 31);
    const test::RandomBatch b = test::make_random_batch(spec);
    const Plan plan = make_plan(derive_forest(b.table()), spec.heads, spec.dtype, h200_cost(spec.heads, spec.dtype),
                                cuda_planner_options(spec.heads, spec.dtype));
    const Outputs nhd = run_gpu(plan, upload(b, Layout::nhd));
    EXPECT_EQ(run_gpu(plan, upload(b, Layout::hnd)).bits, nhd.bits) << spec.describe();
    EXPECT_EQ(run_gpu(plan, upload(b, Layout::interleaved)).bits, nhd.bits) << spec.describe();
    EXPECT_EQ(run_gpu(plan, upload(b, Layout::padded)).bits, nhd.bits) << spec.describe();
    const ReferenceResult ref = reference_attention(b.table(), b.kv(), spec.heads, b.q.data());
    expect_matches(nhd, ref, spec.dtype, spec.describe());
  }
}

TEST(CudaEngine, EdgeCases) {
  SKIP_WITHOUT_GPU();
  const HeadConfig gqa4{32, 8, 128};
  // single request
  check_case({gqa4, DType::bf16, 16, Layout::nhd, 3, 1, 0.0}, 21);
  // nothing shared: no shared pages and no forks, every request its own root
  check_case({gqa4, DType::f16, 7, Layout::nhd, 1, 9, 0.0, 0}, 22);
  // all shared: one request forked into identical ones (the partial last page too)
  check_case({gqa4, DType::bf16, 16, Layout::hnd, 1, 12, 1.0}, 23);
  // 10 requests on one root × GQA 4 = 40 rows: three row tiles, the fourth warp idle
  check_case({gqa4, DType::f16, 16, Layout::nhd, 1, 10, 0.0}, 24);
  // 17 requests = 68 rows: two row tiles of 34, each on wgmma with 30 empty slots
  check_case({gqa4, DType::bf16, 7, Layout::hnd, 1, 17, 0.0}, 28);
  // 32 requests = 128 rows: exactly two full row tiles per chunk
  check_case({gqa4, DType::f16, 16, Layout::nhd, 1, 32, 0.0}, 29);
  // 40 requests on one root × GQA 4 = 160 rows: several 64-row tasks per chunk
  check_case({gqa4, DType::bf16, 16, Layout::nhd, 1, 40, 0.2}, 25);
  // MQA, 8 requests × 32 heads = 256 rows per kv head
  check_case({{32, 1, 64}, DType::f16, 16, Layout::hnd, 2, 8, 0.3}, 26);
}

// The longest run of consecutive tasks within one block that the kernel packs
// (cuda_pac_pack_limits), capped at a pack's size.
int longest_pack(const Plan& plan, int head_dim) {
  const CudaPackLimits limits = cuda_pac_pack_limits(head_dim);
  const PlanView p = plan.view();
  int longest = 0;
  for (int b = 0; b < p.num_blocks; ++b)
    for (int i = p.block_indptr[b], run = 0; i < p.block_indptr[b + 1]; ++i) {
      const Task& t = p.tasks[i];
      const bool fits = t.row_end - t.row_begin <= limits.rows && t.kv_end - t.kv_begin <= limits.tokens;
      run = fits ? run + 1 : 0;
      longest = std::max(longest, std::min(run, limits.tasks));
    }
  return longest;
}

TEST(CudaEngine, SmallTasksRunPacked) {
  SKIP_WITHOUT_GPU();
  // One root (0-200 tokens) under 24 requests with private tails of 0-16 or
  // 0-100 tokens: every tail is a task of G rows, and on as few blocks as KV
  // heads each block runs many in a row, so the kernel packs them a warp each
  // (single-step and multi-step, partial last steps, empty rows of a warp's
  // row tile); the flat plan's whole-path tasks pack too.
  struct Case {
    HeadConfig heads;
    DType dtype;
    int page_size;
  };
  const Case cases[] = {
      {{8, 8, 64}, DType::f16, 1},      // MHA: 1 row per task
      {{32, 8, 128}, DType::bf16, 16},  // GQA 4 (qwen3-4b)
      {{40, 8, 128}, DType::f16, 5},    // GQA 5
      {{16, 1, 256}, DType::bf16, 16},  // GQA 16: a full row tile
      {{32, 8, 256}, DType::f16, 3},    // GQA 4, packs of 2
      {{64, 4, 64}, DType::bf16, 16},   // GQA 16
  };
  for (const Case& c : cases)
    for (const int max_tail : {16, 100}) {
      test::RandomBatchSpec spec;
      spec.seed = std::uint64_t(61 + max_tail + c.page_size);
      spec.heads = c.heads;
      spec.dtype = c.dtype;
      spec.page_size = c.page_size;
      spec.num_nodes = 1;
      spec.num_requests = 24;
      spec.fork_prob = 0;
      spec.max_node_pages = (200 + c.page_size - 1) / c.page_size;
      spec.max_tail = max_tail;
      const test::RandomBatch b = test::make_random_batch(spec);
      const ReferenceResult ref = reference_attention(b.table(), b.kv(), c.heads, b.q.data());
      const DeviceBatch d = upload(b, Layout::nhd);
      const Forest forest = derive_forest(b.table());
      PlannerOptions opt = cuda_planner_options(c.heads, c.dtype);
      opt.num_blocks = c.heads.num_kv_heads;
      const std::string what = spec.describe() + " tails <= " + std::to_string(max_tail);
      for (const bool flat : {false, true}) {
        const Plan plan = make_plan(flat ? flatten(forest) : forest, c.heads, c.dtype, h200_cost(c.heads, c.dtype), opt);
        EXPECT_EQ(longest_pack(plan, c.heads.head_dim), cuda_pac_pack_limits(c.heads.head_dim).tasks)
            << what << (flat ? " flat" : " shared") << ": no full pack in the plan";
        expect_matches(run_gpu(plan, d), ref, c.dtype, what + (flat ? " flat" : " shared"));
      }
    }
}

// Wide tasks (kernels/pac_wide.cuh), head_dim 128 and 64: nodes shared by
// 17 to 70 requests (65 to 350 rows a kv head) over up to ~700 tokens, so
// that row tiles of 65 to 128 rows meet several 128-token tiles and a
// partial last one, beside the narrow tails, or with the tails taken in; on
// the device's blocks, on one or three wide blocks (one walks many tasks: the K,
// V and Q rings wrap across tasks), and split in chunks that end inside
// tiles and pages (each taking a share of the tails); in every layout.
TEST(CudaEngine, WideTasksMatchTheReference) {
  SKIP_WITHOUT_GPU();
  struct WideCase {
    HeadConfig heads;
    DType dtype;
    int page_size;
    Layout layout;
    int roots, requests;
  };
  const WideCase cases[] = {
      {{32, 8, 128}, DType::bf16, 16, Layout::nhd, 1, 40},         // qwen3-4b: 160 rows, tiles of 80
      {{32, 8, 128}, DType::f16, 1, Layout::hnd, 2, 33},           // page size 1
      {{40, 8, 128}, DType::bf16, 3, Layout::interleaved, 1, 70},  // GQA 5: 350 rows, tiles of 117
      {{16, 2, 128}, DType::f16, 64, Layout::nhd, 3, 17},          // GQA 8: 136 rows, tiles of 68
      {{8, 8, 128}, DType::bf16, 7, Layout::nhd, 1, 65},           // MHA: 65 rows, one row past the second warpgroup's
      {{32, 8, 128}, DType::bf16, 32, Layout::hnd, 1, 24},
      {{16, 4, 128}, DType::f16, 16, Layout::interleaved, 2, 31},
      {{32, 8, 128}, DType::bf16, 16, Layout::padded, 1, 36},
      {{64, 8, 64}, DType::bf16, 16, Layout::nhd, 1, 20},          // gpt-oss-20b: 160 rows, tiles of 80
      {{32, 8, 64}, DType::f16, 1, Layout::hnd, 2, 33},            // llama3.2-1b, page size 1
      {{8, 8, 64}, DType::bf16, 7, Layout::interleaved, 1, 65},    // head_dim 64, MHA: 65 rows
  };
  int wide_only_merged = 0;  // plans of wide tasks alone that merge: no PAC kernel (LaunchesFollowThePlan)
  for (const WideCase& c : cases) {
    if (!cuda_device_info(c.heads, c.dtype).wide) GTEST_SKIP() << "this device or build runs no wide tasks";
    test::RandomBatchSpec spec;
    spec.seed = std::uint64_t(c.requests + c.page_size);
    spec.heads = c.heads;
    spec.dtype = c.dtype;
    spec.page_size = c.page_size;
    spec.num_nodes = c.roots;
    spec.num_requests = c.requests;
    spec.fork_prob = 0;
    spec.max_node_pages = (700 + c.page_size - 1) / c.page_size;
    spec.max_tail = 90;
    const test::RandomBatch b = test::make_random_batch(spec);
    const ReferenceResult ref = reference_attention(b.table(), b.kv(), c.heads, b.q.data());
    const DeviceBatch d = upload(b, c.layout);
    const Forest forest = derive_forest(b.table());
    const RooflineCostModel roofline = h200_cost(c.heads, c.dtype);
    const test::WidePriced cost(roofline, 0.5);  // every node of many rows wide
    const std::string what = spec.describe() + " " + to_string(c.layout);
    PlannerOptions opt = cuda_planner_options(c.heads, c.dtype);
    opt.wide_min_rows = 0;  // wide tiles of 65 rows too, of nodes of any length
    opt.wide_min_tokens = 0;
    auto check = [&](const PlannerOptions& o, const std::string& how) {
      const Plan plan = make_plan(forest, c.heads, c.dtype, cost, o);
      ASSERT_GT(plan.stats().num_wide_tasks, 0) << what << " " << how << ": no wide task";
      if (o.wide_tail_tokens >= spec.max_tail) {
        ASSERT_GT(plan.stats().num_tails, 0) << what << " " << how << ": no tail taken in";
      }
      const CudaLaunches launches = cuda_launches(plan);
      wide_only_merged += launches.merge && !launches.pac;
      expect_matches(run_gpu(plan, d), ref, c.dtype, what + " " + how);
    };
    // tails (PlannerOptions::wide_tail_tokens): none, the device's, and every
    // one (several tail tiles a task, rows with empty tails among them)
    for (const int tail_tokens : {0, opt.wide_tail_tokens, spec.max_tail}) {
      opt.wide_tail_tokens = tail_tokens;
      check(opt, "device blocks, tails of up to " + std::to_string(tail_tokens) + " tokens");
    }
    for (const int blocks : {opt.wide_span, 3 * opt.wide_span}) {  // one wide block, three
      opt.num_blocks = blocks;
      check(opt, std::to_string(blocks) + " blocks");
    }
    opt.split = SplitPolicy::fixed;
    opt.fixed_splits = 3;
    opt.chunk_align = 1 + int(spec.seed % 16);
    check(opt, "fixed 3, align " + std::to_string(opt.chunk_align));
    opt.split = SplitPolicy::none;
    check(opt, "split none");
  }
  EXPECT_GT(wide_only_merged, 0) << "no plan ran the merge straight after the wide kernel";
}

// Masked tasks of a plan (or every task) by the kernel path that runs them:
// the wide kernel, the narrow kernel's wgmma path (17 rows or more, sm_90a)
// and its packs of small tasks (the rest run on its mma.sync path).
struct MaskedPaths {
  int masked = 0, wide = 0, wgmma = 0, packed = 0;
  // every_task: count every task by its path, masked or not
  void tally(const Plan& plan, bool every_task = false) {
    const PlanView p = plan.view();
    const CudaPackLimits limits = cuda_pac_pack_limits(p.head_dim);
    for (int w = 0; w < p.num_wide_blocks; ++w)
      for (int i = p.wide_indptr[w]; i < p.wide_indptr[w + 1]; ++i) wide += every_task || p.masked(p.tasks[i]);
    for (int b = 0; b < p.num_blocks; ++b) {
      const int begin = p.single_task_blocks ? std::min(b, p.num_tasks) : p.block_indptr[b];
      const int end = p.single_task_blocks ? std::min(b + 1, p.num_tasks) : p.block_indptr[b + 1];
      for (int i = begin; i < end;) {  // runs of tasks that fit a pack, as the kernel reads them
        int run = 0;
        auto fits = [&](const Task& t) {
          return t.row_end - t.row_begin <= limits.rows && t.kv_end - t.kv_begin <= limits.tokens;
        };
        while (i + run < end && run < limits.tasks && fits(p.tasks[i + run])) ++run;
        const int count = run >= 2 ? run : 1;
        for (int k = i; k < i + count; ++k) {
          const Task& t = p.tasks[k];
          if (!every_task && !p.masked(t)) continue;
          packed += count >= 2;
          wgmma += count == 1 && t.row_end - t.row_begin >= 17;
        }
        i += count;
      }
    }
    masked += plan.extent().masked_tasks;
  }
  // Prints the tally and expects packs, and where the device runs them wide
  // tasks and the wgmma path, to have run some.
  void expect_every_path(bool wide_here) const {
    std::cout << "masked tasks: " << masked << " (wide " << wide << ", wgmma " << wgmma << ", packed " << packed
              << ")\n";
    EXPECT_GT(packed, 0);
    if (wide_here) {
      EXPECT_GT(wide, 0);
      EXPECT_GT(wgmma, 0);
    }
  }
};

// The plans the kernel-path tests run a batch under: the device's own,
// every node of many rows wide where the device runs wide tasks, and flat
// with 3 splits on few blocks (whole wide blocks where there are any) with
// odd chunk boundaries, whose rows merge partials. check(forest, cost,
// options, name) for each; returns whether the wide plan ran.
template <typename Check>
bool check_plans(const Forest& forest, const CostModel& roofline, PlannerOptions opt, bool wide, std::uint64_t seed,
                 Check&& check) {
  check(forest, roofline, opt, "device");
  if (wide) {
    PlannerOptions every = opt;
    every.wide_min_rows = 0;
    every.wide_min_tokens = 0;
    check(forest, test::WidePriced(roofline, 0.5), every, "wide");
  }
  opt.split = SplitPolicy::fixed;
  opt.fixed_splits = 3;
  opt.num_blocks = opt.wide_tile_rows > 0 ? 4 : 3;
  opt.chunk_align = 1 + int(seed % 16);
  check(flatten(forest), roofline, opt, "flat, fixed 3");
  return wide;
}

// Several query tokens a request under each mask (support/random_queries.hpp:
// causal chunks reaching back into shared nodes, draft trees, custom masks
// that hide keys of shared nodes and leave rows nothing), on the device's
// plan, with every node of many rows wide, and flat with 3 splits: masked
// tasks on every kernel path against fp64, and the kernels' rows that see no
// key come out as zeros with lse −inf.
TEST(CudaEngine, QueryTokensUnderEachMaskMatchTheReference) {
  SKIP_WITHOUT_GPU();
  struct Case {
    HeadConfig heads;
    DType dtype;
    int page_size;
    Layout layout;
    int nodes, requests;
    double fork_prob;
    int max_node_pages;
  };
  const Case cases[] = {
      {{8, 2, 64}, DType::f16, 1, Layout::nhd, 5, 5, 0.2, 40},
      {{32, 8, 128}, DType::bf16, 16, Layout::hnd, 4, 6, 0.3, 6},
      {{40, 8, 128}, DType::f16, 7, Layout::padded, 5, 7, 0.3, 9},
      {{16, 1, 256}, DType::bf16, 3, Layout::interleaved, 3, 4, 0.2, 30},
  };
  MaskedPaths paths;
  bool wide_here = false;
  for (const Case& c : cases)
    for (const QueryMask mask : {QueryMask::none, QueryMask::causal, QueryMask::custom, QueryMask::draft})
      for (const int max_q : {4, 16, 64})
        for (std::uint64_t seed = 1; seed <= 2; ++seed) {
          const test::RandomBatchSpec spec = test::engine_spec(seed, c.heads, c.dtype, c.page_size, c.nodes,
                                                               c.requests, c.fork_prob, c.max_node_pages);
          const test::RandomBatch b = test::make_random_batch(spec);
          const test::RandomQueries q = test::make_random_queries(b, mask, max_q, seed);
          const std::string what = spec.describe() + " " + to_string(c.layout) + " mask " +
                                   std::to_string(int(mask)) + " max_q " + std::to_string(max_q);
          const ReferenceResult ref = reference_attention(b.table(), b.kv(), c.heads, q.q.data(), q.view());
          DeviceBatch d = upload(b, c.layout);
          d.q = std::make_unique<DeviceBuffer>(q.q.data(), q.q.size());
          const Forest forest = derive_forest(b.table());
          const RooflineCostModel roofline = h200_cost(c.heads, c.dtype);
          auto check = [&](const Forest& f, const CostModel& cost, const PlannerOptions& o, const std::string& how) {
            const Plan plan = make_plan(f, c.heads, c.dtype, cost, o, q.view());
            ASSERT_EQ(plan.num_requests(), q.num_queries()) << what;
            paths.tally(plan);
            expect_matches(run_gpu(plan, d), ref, c.dtype, what + " " + how);
          };
          wide_here |= check_plans(forest, roofline, cuda_planner_options(c.heads, c.dtype),
                                   cuda_device_info(c.heads, c.dtype).wide, seed, check);
        }
  paths.expect_every_path(wide_here);
}

// Logit soft-cap (Gemma 2's), attention sinks (gpt-oss's) and sliding
// windows against fp64, on every kernel path (mma.sync, the wgmma path,
// packs, the wide kernel, the merge): large logits (sm_scale 1 and rising
// keys) under caps of 5 and 50; sinks from −4 to 12, above every logit too,
// on rows that merge partials, rows PAC writes itself, and rows that see no
// key (custom masks: o = 0, lse = the sink); windows of 1, 6 and 41 keys and
// one past every context, one token a request and several under each mask,
// on pages of 1, 7 and 16 tokens (windows that begin inside shared nodes,
// requests sharing a node that see different parts of it).
TEST(CudaEngine, SoftCapSinksAndWindowsMatchTheReference) {
  SKIP_WITHOUT_GPU();
  struct Case {
    HeadConfig heads;
    DType dtype;
    int page_size;
    Layout layout;
    bool sinks;
    int window_left;
    QueryMask mask;
    int max_q;  // 0: one token a request
  };
  const Case cases[] = {
      {{8, 2, 64, 1.f, 5.f}, DType::f16, 7, Layout::nhd, false, -1, QueryMask::causal, 0},
      {{32, 8, 128, 1.f, 50.f}, DType::bf16, 16, Layout::hnd, true, -1, QueryMask::causal, 0},
      {{40, 8, 128}, DType::f16, 16, Layout::padded, true, -1, QueryMask::custom, 12},
      {{16, 4, 256, 0.5f, 30.f}, DType::bf16, 3, Layout::interleaved, true, -1, QueryMask::draft, 6},
      {{32, 8, 128}, DType::bf16, 1, Layout::nhd, false, 0, QueryMask::causal, 0},
      {{32, 8, 128}, DType::bf16, 7, Layout::nhd, true, 5, QueryMask::causal, 16},
      {{32, 8, 128, 0.f, 20.f}, DType::f16, 16, Layout::hnd, false, 40, QueryMask::draft, 8},
      {{8, 2, 64}, DType::bf16, 7, Layout::padded, true, 40, QueryMask::custom, 24},
      {{16, 16, 64, 1.f, 50.f}, DType::f16, 16, Layout::nhd, true, 100000, QueryMask::causal, 40},
  };
  MaskedPaths paths;
  bool wide_here = false;
  int windowed = 0;
  for (const Case& c : cases)
    for (std::uint64_t seed = 1; seed <= 2; ++seed) {
      test::RandomBatchSpec spec = test::engine_spec(seed, c.heads, c.dtype, c.page_size, 5, 6, 0.3,
                                                     (160 + c.page_size - 1) / c.page_size);
      spec.key_ramp = c.heads.logits_soft_cap > 0 ? 0.4f : 0.f;
      const test::RandomBatch b = test::make_random_batch(spec);
      test::RandomQueries q = test::make_random_queries(b, c.mask, std::max(c.max_q, 1), seed);
      if (c.max_q == 0) q.qo_indptr.clear(), q.mask = QueryMask::causal;
      QueryBatch queries = q.view();
      queries.window_left = c.window_left;
      std::vector<float> sinks;
      for (int h = 0; h < c.heads.num_qo_heads && c.sinks; ++h) sinks.push_back(-4.f + 16.f * float(h % 5) / 4.f);
      const std::string what = spec.describe() + " " + to_string(c.layout) + " cap " +
                               std::to_string(c.heads.logits_soft_cap) + (c.sinks ? " sinks" : "") + " window_left " +
                               std::to_string(c.window_left) + " mask " + std::to_string(int(c.mask)) + " max_q " +
                               std::to_string(c.max_q);
      const ReferenceResult ref = reference_attention(b.table(), b.kv(), c.heads, q.q.data(), queries, c.dtype, sinks);
      DeviceBatch d = upload(b, c.layout);
      d.q = std::make_unique<DeviceBuffer>(q.q.data(), q.q.size());
      const std::unique_ptr<DeviceBuffer> device_sinks =
          sinks.empty() ? nullptr : std::make_unique<DeviceBuffer>(sinks.data(), sinks.size() * sizeof(float));
      const Forest forest = derive_forest(b.table());
      const RooflineCostModel roofline = h200_cost(c.heads, c.dtype);
      auto check = [&](const Forest& f, const CostModel& cost, const PlannerOptions& o, const std::string& how) {
        const Plan plan = make_plan(f, c.heads, c.dtype, cost, o, queries);
        paths.tally(plan);
        windowed += plan.extent().windowed;
        expect_matches(run_gpu(plan, d, device_sinks.get()), ref, c.dtype, what + " " + how);
      };
      wide_here |= check_plans(forest, roofline, cuda_planner_options(c.heads, c.dtype),
                               cuda_device_info(c.heads, c.dtype).wide, seed, check);
    }
  std::cout << "windowed plans " << windowed << "\n";
  EXPECT_GT(windowed, 20);  // the windows did cut
  paths.expect_every_path(wide_here);
}

// fp8 caches (e4m3, e5m2) under fp16 and bf16 queries against the fp64
// reference of the same dequantised values, within the 16-bit bounds: every
// head dim, pages of 1, 3, 7 and 16 tokens, no scale, one for every kv head
// and one a kv head (device memory), one token a request and several under
// each mask, soft-cap and sinks on some; on the device's plan (wide tasks
// where the device runs them) and flat with 3 splits, so that the mma.sync
// path, the wgmma path, packs and the wide kernel all read fp8 stages. The
// tensor cores see fp16, bf16 queries scaled into its range (tile/fp8.cuh,
// half_queries): some cases multiply the queries by 2^q_exp2, far past
// fp16's largest value or below its smallest normal, and sm_scale by
// 2^-q_exp2, so that the logits stay as they were.
TEST(CudaEngine, Fp8CachesMatchTheDequantisedReference) {
  SKIP_WITHOUT_GPU();
  struct Case {
    HeadConfig heads;
    DType kv, q;
    int page_size, scales;  // scales: 0 none, 1 one for every kv head, else one a kv head
    QueryMask mask;
    int max_q;  // 0: one token a request
    bool sinks;
    int q_exp2 = 0;
  };
  const Case cases[] = {
      {{8, 2, 64}, DType::e4m3, DType::bf16, 7, 2, QueryMask::causal, 0, false},
      {{32, 8, 128}, DType::e4m3, DType::bf16, 16, 8, QueryMask::causal, 0, true},
      {{32, 8, 128}, DType::e5m2, DType::f16, 1, 1, QueryMask::causal, 12, false},
      {{40, 8, 128, 0.f, 30.f}, DType::e4m3, DType::f16, 16, 8, QueryMask::draft, 8, true},
      {{16, 4, 256}, DType::e5m2, DType::bf16, 3, 4, QueryMask::causal, 0, false},
      {{16, 16, 64}, DType::e4m3, DType::bf16, 16, 0, QueryMask::custom, 24, false},
      {{32, 8, 128}, DType::e4m3, DType::bf16, 16, 8, QueryMask::causal, 64, false},
      {{32, 8, 128}, DType::e4m3, DType::bf16, 16, 8, QueryMask::causal, 0, false, 24},
      {{32, 4, 128, 0.f, 20.f}, DType::e5m2, DType::bf16, 7, 4, QueryMask::draft, 8, true, 30},
      {{16, 2, 64}, DType::e4m3, DType::bf16, 16, 2, QueryMask::causal, 4, false, -40},
  };
  MaskedPaths paths;
  bool wide_here = false;
  int wide_d64 = 0;  // wide tasks at head_dim 64 (its own ring sizes under fp8)
  for (const Case& c : cases)
    for (std::uint64_t seed = 1; seed <= 2; ++seed) {
      const test::RandomBatchSpec spec = test::engine_spec(seed, c.heads, c.q, c.page_size, 5, 6, 0.3,
                                                           (160 + c.page_size - 1) / c.page_size);
      const test::RandomBatch b = test::make_random_batch(spec);
      const int scales = c.scales <= 1 ? c.scales : c.heads.num_kv_heads;
      const test::Fp8Pool pool = test::quantise(b, c.kv, scales);
      test::RandomQueries q = test::make_random_queries(b, c.mask, std::max(c.max_q, 1), seed);
      if (c.max_q == 0) q.qo_indptr.clear(), q.mask = QueryMask::causal;
      HeadConfig heads = c.heads;
      if (c.q_exp2 != 0) {  // exact: a power of two moves bf16 exponents only, within its range
        auto* bits = reinterpret_cast<std::uint16_t*>(q.q.data());
        for (std::size_t i = 0; i < q.q.size() / 2; ++i)
          bits[i] = float_to_bf16(std::ldexp(bf16_to_float(bits[i]), c.q_exp2));
        heads.sm_scale = std::ldexp(c.heads.scale(), -c.q_exp2);
      }
      std::vector<float> sinks;
      for (int h = 0; h < c.heads.num_qo_heads && c.sinks; ++h) sinks.push_back(-2.f + float(h % 7));
      const std::string what = spec.describe() + " kv " + std::string(to_string(c.kv)) + " scales " + std::to_string(scales) +
                               " mask " + std::to_string(int(c.mask)) + " max_q " + std::to_string(c.max_q) +
                               " q_exp2 " + std::to_string(c.q_exp2);
      const ReferenceResult ref =
          reference_attention(b.table(), pool.kv(b, c.kv), heads, q.q.data(), q.view(), c.q, sinks);
      DeviceBatch d = upload_fp8(b, pool, c.kv);
      d.q = std::make_unique<DeviceBuffer>(q.q.data(), q.q.size());
      const std::unique_ptr<DeviceBuffer> device_sinks =
          sinks.empty() ? nullptr : std::make_unique<DeviceBuffer>(sinks.data(), sinks.size() * sizeof(float));
      const Forest forest = derive_forest(b.table());
      const RooflineCostModel roofline = h200_cost(heads, c.kv);
      const PlannerOptions opt = cuda_planner_options(heads, c.kv);
      auto check = [&](const Forest& f, const CostModel& cost, const PlannerOptions& o, const std::string& how) {
        const Plan plan = make_plan(f, heads, c.kv, cost, o, q.view());
        paths.tally(plan, /*every_task=*/true);
        expect_matches(run_gpu(plan, d, device_sinks.get()), ref, c.q, what + " " + how);
      };
      const int wide_before = paths.wide;
      wide_here |= check_plans(forest, roofline, opt, cuda_device_info(heads, c.kv).wide, seed, check);
      if (c.heads.head_dim == 64) wide_d64 += paths.wide - wide_before;
    }
  std::cout << "fp8 tasks by path: wgmma " << paths.wgmma << ", packed " << paths.packed << ", wide " << paths.wide
            << " (" << wide_d64 << " at head_dim 64)\n";
  EXPECT_GT(paths.packed, 0);
  if (cuda_device_info({32, 8, 128}, DType::e4m3).wide) {  // an sm_90a build on sm_90
    EXPECT_GT(paths.wgmma, 0);
    EXPECT_TRUE(wide_here);
    EXPECT_GT(paths.wide, 0);
  }
  if (cuda_device_info({16, 2, 64}, DType::e4m3).wide) {
    EXPECT_GT(wide_d64, 0);
  }
}

// A prefill chunk of hundreds of tokens a request over cached prefixes: the
// causal mask cuts every KV tile of each request's own last node, whose
// thousand-odd rows also run as wide tasks where the device has them.
TEST(CudaEngine, LongChunksOverCachedPrefixes) {
  SKIP_WITHOUT_GPU();
  for (const DType dtype : {DType::bf16, DType::f16}) {
    const HeadConfig heads{32, 8, 128};
    test::RandomBatchSpec spec = test::engine_spec(4, heads, dtype, 16, 3, 3, 0.0, 40);
    spec.max_tail = 700;
    const test::RandomBatch b = test::make_random_batch(spec);
    const test::RandomQueries q = test::chunk_queries(b, 300, 9);
    const PageTable table = b.table();
    const ReferenceResult ref = reference_attention(table, b.kv(), heads, q.q.data(), q.view());
    DeviceBatch d = upload(b, Layout::nhd);
    d.q = std::make_unique<DeviceBuffer>(q.q.data(), q.q.size());
    const Forest forest = derive_forest(table);
    const RooflineCostModel roofline = h200_cost(heads, dtype);
    PlannerOptions opt = cuda_planner_options(heads, dtype);
    const Plan plan = make_plan(forest, heads, dtype, roofline, opt, q.view());
    EXPECT_GT(plan.extent().masked_tasks, 0);
    expect_matches(run_gpu(plan, d), ref, dtype, spec.describe() + " 300-token chunks");
    if (cuda_device_info(heads, dtype).wide) {  // every node of many rows wide
      opt.wide_min_rows = 0;
      opt.wide_min_tokens = 0;
      const Plan wide = make_plan(forest, heads, dtype, test::WidePriced(roofline, 0.5), opt, q.view());
      MaskedPaths paths;
      paths.tally(wide);
      EXPECT_GT(paths.wide, 0);
      expect_matches(run_gpu(wide, d), ref, dtype, spec.describe() + " 300-token chunks, wide");
    }
  }
}

// Which kernels run_cuda launches, decided on the host (no GPU needed): a
// plan of wide tasks alone runs the merge straight after the wide kernel,
// with no PAC kernel between them; tails as tasks of their own, no wide
// tasks, or a capacity bring the PAC kernel back.
TEST(CudaEngine, LaunchesFollowThePlan) {
  const HeadConfig heads{32, 8, 128};
  test::RandomBatchSpec spec;
  spec.seed = 7;
  spec.heads = heads;
  spec.page_size = 16;
  spec.num_nodes = 1;
  spec.num_requests = 40;  // 160 rows a kv head: wide
  spec.fork_prob = 0;
  spec.max_node_pages = 44;
  spec.max_tail = 90;
  const test::RandomBatch b = test::make_random_batch(spec);
  const Forest forest = derive_forest(b.table());
  const RooflineCostModel roofline = h200_cost(heads, DType::bf16);
  const test::WidePriced cost(roofline, 0.5);
  PlannerOptions opt = cuda_planner_options(heads, 132, 2, /*wide=*/true);
  opt.wide_min_rows = 0;
  opt.wide_min_tokens = 0;
  opt.wide_tail_tokens = spec.max_tail;  // every tail taken in
  opt.split = SplitPolicy::fixed;
  opt.fixed_splits = 3;  // rows merge 3 partials
  auto launches = [&](const PlannerOptions& o, CudaStages stages = CudaStages::all) {
    const Plan plan = make_plan(forest, heads, DType::bf16, cost, o);
    const CudaLaunches l = cuda_launches(plan, stages);
    return std::vector<bool>{l.wide, l.pac, l.merge};
  };
  const Plan wide_only = make_plan(forest, heads, DType::bf16, cost, opt);
  ASSERT_EQ(wide_only.stats().num_wide_tasks, wide_only.stats().num_tasks);
  ASSERT_TRUE(wide_only.extent().needs_merge);
  EXPECT_EQ(launches(opt), (std::vector<bool>{true, false, true}));
  EXPECT_EQ(launches(opt, CudaStages::partial_attention), (std::vector<bool>{true, false, false}));
  PlannerOptions tails = opt;
  tails.wide_tail_tokens = 0;  // each tail a PAC task
  EXPECT_EQ(launches(tails), (std::vector<bool>{true, true, true}));
  PlannerOptions narrow = opt;
  narrow.wide_tile_rows = 0;
  EXPECT_EQ(launches(narrow), (std::vector<bool>{false, true, true}));
  PlannerOptions unsplit = narrow;
  unsplit.split = SplitPolicy::none;
  unsplit.wide_tail_tokens = 0;
  EXPECT_EQ(launches(unsplit, CudaStages::partial_attention), (std::vector<bool>{false, true, false}));
  // at a capacity every kernel runs, for whatever plan a graph replays later
  const PlanCapacity capacity = PlanCapacity::for_batches(64, 4096, heads, opt.max_tile_rows, opt.num_blocks,
                                                          std::int64_t(1) << 16, opt.num_blocks / opt.wide_span,
                                                          opt.wide_tail_tokens);
  const CudaLaunches empty = cuda_launches(Plan::empty(heads, DType::bf16, 16, capacity));
  EXPECT_TRUE(empty.wide && empty.pac && empty.merge);
}

TEST(CudaEngine, ScoresRisingAcrossTiles) {
  SKIP_WITHOUT_GPU();
  // Keys scaled up page after page (RandomBatchSpec::key_ramp): a row's max
  // rises by far more than 8 ln 2 from one tile to the next, so the wgmma
  // path's guess against the running max fails past the first tile and o is
  // rescaled there; random keys alone almost never take that branch.
  // 10 requests × GQA 4 = 40 rows (wgmma, which guesses at every head_dim),
  // and a flat plan's one-request tasks (mma.sync, max first).
  check_case({{32, 8, 128}, DType::bf16, 16, Layout::nhd, 1, 10, 0.0, -1, 2.f}, 41);
  check_case({{40, 8, 256}, DType::f16, 16, Layout::hnd, 2, 8, 0.2, -1, 2.f}, 42);
  check_case({{32, 8, 64}, DType::bf16, 7, Layout::nhd, 1, 10, 0.0, -1, 2.f}, 45);
}

TEST(CudaEngine, ManyPartialsPerRow) {
  SKIP_WITHOUT_GPU();
  // Nodes cut into equal chunks until the longest row merges 9-16 partials (a
  // block of 2 warps per row, one round each, folded through shared memory)
  // and then more than 32 (4 warps, each walking its share in several rounds).
  const GpuCase c{{16, 4, 64}, DType::f16, 16, Layout::nhd, 1, 3, 0.0, 12};
  const test::RandomBatchSpec spec = spec_of(c, 27);
  const test::RandomBatch b = test::make_random_batch(spec);
  const Forest forest = derive_forest(b.table());
  const ReferenceResult ref = reference_attention(b.table(), b.kv(), c.heads, b.q.data());
  PlannerOptions opt = cuda_planner_options(c.heads, c.dtype);
  opt.split = SplitPolicy::fixed;
  opt.chunk_align = 1;
  for (const auto& [low, high] : {std::pair{9, 16}, std::pair{33, 1 << 20}}) {
    bool found = false;
    for (opt.fixed_splits = 1; opt.fixed_splits <= 64 && !found; ++opt.fixed_splits) {
      const Plan plan = make_plan(forest, c.heads, c.dtype, h200_cost(c.heads, c.dtype), opt);
      const PlanView p = plan.view();
      int most = 0;
      for (int r = 0; r < p.num_requests; ++r) most = std::max(most, p.num_partials(r));
      if (most < low || most > high) continue;
      found = true;
      expect_matches(run_gpu(plan, upload(b, c.layout)), ref, c.dtype,
                     spec.describe() + ", " + std::to_string(most) + " partials");
    }
    EXPECT_TRUE(found) << "no split count gives " << low << ".." << high << " partials: " << spec.describe();
  }
}

TEST(CudaEngine, EmptyNodesContributeNothing) {
  SKIP_WITHOUT_GPU();
  // A root with no KV at all above the real nodes: its partials are empty states.
  test::RandomBatchSpec spec;
  spec.seed = 41;
  spec.heads = {32, 8, 128};
  const test::RandomBatch b = test::make_random_batch(spec);
  Forest g = derive_forest(b.table());
  g.nodes.insert(g.nodes.begin(), ForestNode{-1, 0, 0, 0, std::int64_t(g.reqs.size()), g.num_requests()});
  for (std::size_t i = 1; i < g.nodes.size(); ++i) g.nodes[i].parent += 1;  // old roots (−1) now hang under it
  for (int r = 0; r < g.num_requests(); ++r) g.reqs.push_back(r), g.request_node[r] += 1;
  ASSERT_NO_THROW(g.validate());
  const ReferenceResult ref = reference_attention(b.table(), b.kv(), spec.heads, b.q.data());
  const Plan plan = make_plan(g, spec.heads, spec.dtype, h200_cost(spec.heads, spec.dtype),
                              cuda_planner_options(spec.heads, spec.dtype));
  expect_matches(run_gpu(plan, upload(b, Layout::nhd)), ref, spec.dtype, "empty root");
}

TEST(CudaEngine, MatchesCpuEngineOnTheSamePlan) {
  SKIP_WITHOUT_GPU();
  for (const DType dtype : {DType::f16, DType::bf16}) {
    test::RandomBatchSpec spec = spec_of({{40, 8, 128}, dtype, 16, Layout::nhd, 8, 9, 0.3}, 51);
    const test::RandomBatch b = test::make_random_batch(spec);
    const Plan plan = make_plan(derive_forest(b.table()), spec.heads, dtype, h200_cost(spec.heads, dtype),
                                cuda_planner_options(spec.heads, dtype));
    const PlanView p = plan.view();
    const int B = plan.num_requests();
    const std::size_t rows = std::size_t(B) * p.num_qo_heads;
    std::vector<float> cpu_out(rows * p.head_dim), cpu_lse(rows);
    std::vector<std::byte> ws(plan.workspace().bytes + 16);
    auto* aligned = reinterpret_cast<std::byte*>((reinterpret_cast<std::uintptr_t>(ws.data()) + 15) / 16 * 16);
    run_cpu(plan, b.kv(),
            {QueryRows::contiguous(b.q.data(), dtype, B, p.num_qo_heads, p.head_dim),
             OutputRows::contiguous(cpu_out.data(), DType::f32, B, p.num_qo_heads, p.head_dim),
             LseRows::contiguous(cpu_lse.data(), B, p.num_qo_heads)},
            {aligned, plan.workspace().bytes});
    const Outputs gpu = run_gpu(plan, upload(b, Layout::nhd));
    expect_close(gpu, std::vector<double>(cpu_out.begin(), cpu_out.end()),
                 std::vector<double>(cpu_lse.begin(), cpu_lse.end()), dtype, spec.describe() + " vs CPU engine");
  }
}

TEST(CudaEngine, GraphReplayEqualsDirectRunBitForBit) {
  SKIP_WITHOUT_GPU();
  test::RandomBatchSpec spec = spec_of({{32, 8, 128}, DType::bf16, 16, Layout::nhd, 6, 8, 0.3}, 61);
  const test::RandomBatch b = test::make_random_batch(spec);
  const Plan plan = make_plan(derive_forest(b.table()), spec.heads, spec.dtype, h200_cost(spec.heads, spec.dtype),
                              cuda_planner_options(spec.heads, spec.dtype));
  ASSERT_GT(plan.stats().merged_requests, 0) << "the graph should hold both kernels";
  const DeviceBatch d = upload(b, Layout::nhd);
  const PlanView p = plan.view();
  const std::size_t rows = std::size_t(plan.num_requests()) * p.num_qo_heads;
  DeviceBuffer ws(cuda_workspace_bytes(plan)), out(rows * p.head_dim * 2), lse(rows * sizeof(float));
  const AttentionIO io = device_io(plan, d.q->data(), out, lse, plan.num_requests());
  cudaStream_t stream = nullptr;
  CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cuda_upload_plan(plan, ws.span(), stream);
  out.poison(stream);
  run_cuda(plan, d.kv, io, ws.span(), stream);
  CUDA_OK(cudaStreamSynchronize(stream));
  const Outputs direct = collect(out, lse, spec.dtype);

  cudaGraph_t graph = nullptr;
  CUDA_OK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  run_cuda(plan, d.kv, io, ws.span(), stream);
  CUDA_OK(cudaStreamEndCapture(stream, &graph));
  // The merge follows PAC as a programmatic dependent (kernels/merge.cuh)
  // where both the device and the build's code are sm_90's, and only there.
  std::size_t num_edges = 0;
  CUDA_OK(cudaGraphGetEdges(graph, nullptr, nullptr, nullptr, &num_edges));
  std::vector<cudaGraphNode_t> from(num_edges), to(num_edges);
  std::vector<cudaGraphEdgeData> edges(num_edges);
  CUDA_OK(cudaGraphGetEdges(graph, from.data(), to.data(), edges.data(), &num_edges));
  const bool programmatic = std::any_of(edges.begin(), edges.end(), [](const cudaGraphEdgeData& e) {
    return e.type == cudaGraphDependencyTypeProgrammatic;
  });
  const bool sm90_code = std::string(cuda_built_architectures()).find("90") != std::string::npos;
  EXPECT_EQ(programmatic, sm90_code && cuda_device_info(spec.heads, spec.dtype).compute_capability >= 90)
      << "built for " << cuda_built_architectures();
  cudaGraphExec_t exec = nullptr;
  CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
  for (int replay = 0; replay < 2; ++replay) {  // the plan in the workspace serves every replay
    out.poison(stream);
    lse.poison(stream);
    CUDA_OK(cudaGraphLaunch(exec, stream));
    CUDA_OK(cudaStreamSynchronize(stream));
    const Outputs replayed = collect(out, lse, spec.dtype);
    EXPECT_EQ(replayed.bits, direct.bits) << "replay " << replay;
    EXPECT_EQ(0, std::memcmp(replayed.lse.data(), direct.lse.data(), rows * sizeof(float))) << "replay " << replay;
  }
  CUDA_OK(cudaGraphExecDestroy(exec));
  CUDA_OK(cudaGraphDestroy(graph));
  CUDA_OK(cudaStreamDestroy(stream));
  expect_matches(direct, reference_attention(b.table(), b.kv(), spec.heads, b.q.data()), spec.dtype, "graph");
}

TEST(CudaEngine, PlannerOptionsDescribeTheDevice) {
  SKIP_WITHOUT_GPU();
  for (const int dim : {64, 128, 256}) {
    const HeadConfig heads{32, 8, dim};
    const CudaDeviceInfo info = cuda_device_info(heads, DType::bf16);
    const PlannerOptions opt = cuda_planner_options(heads, DType::bf16);
    EXPECT_GE(info.blocks_per_sm, 1) << info.name << " head_dim " << dim;
    EXPECT_EQ(opt.num_blocks, info.sm_count * info.blocks_per_sm);
    EXPECT_EQ(opt.max_tile_rows, kCudaMaxTileRows);
    EXPECT_EQ(opt.chunk_align, 16);
    EXPECT_EQ(opt.wide_tile_rows, info.wide ? kCudaMaxWideRows : 0);
    EXPECT_EQ(opt.wide_span, info.wide ? info.blocks_per_sm : 2);
    EXPECT_EQ(opt.wide_min_rows, info.wide ? kCudaWideMinRows : 0);
    EXPECT_EQ(opt.wide_min_tokens, info.wide ? kCudaWideMinTokens : 0);
    EXPECT_EQ(opt.wide_max_masked_rows, info.wide ? cuda_wide_max_masked_rows(dim) : 0);
    EXPECT_EQ(opt.wide_max_chunk_tokens, info.wide ? kCudaWideMaxChunkTokens : 0);
    EXPECT_EQ(opt.wide_tail_tokens, info.wide ? kCudaWideTailTokens : 0);
    EXPECT_EQ(opt.beside_wide_price, info.wide ? kCudaBesideWidePrice : 1.0);
    std::cout << "[ info     ] " << info.name << ": " << info.sm_count << " SMs, head_dim " << dim << ": "
              << info.blocks_per_sm << " PAC blocks per SM" << (info.wide ? ", wide tasks" : "") << "\n";
  }
}

// Validation is host code that runs before any CUDA call, so this test needs no
// GPU. The pointers are fake and never dereferenced: every case but the
// workspace one also passes a workspace too small for the plan, which is
// checked last, so a check that failed to fire still cannot reach a launch.
TEST(CudaEngine, RejectsBadInputsWithClearMessages) {
  test::RandomBatchSpec spec;
  spec.heads = {32, 8, 128};
  const test::RandomBatch b = test::make_random_batch(spec);
  const RooflineCostModel cost = h200_cost(spec.heads, spec.dtype);
  PlannerOptions opt;
  opt.num_blocks = 4;
  const Forest forest = derive_forest(b.table());
  const Plan plan = make_plan(forest, spec.heads, spec.dtype, cost, opt);
  alignas(256) static std::byte fake[1 << 12];
  const std::span<std::byte> small{fake, 256};
  const PagedKV kv = PagedKV::nhd(fake, fake, spec.dtype, b.num_pages, spec.page_size, 8, 128);
  const int B = plan.num_requests();
  const AttentionIO io{QueryRows::contiguous(fake, spec.dtype, B, 32, 128),
                       OutputRows::contiguous(fake, spec.dtype, B, 32, 128),
                       LseRows::contiguous(reinterpret_cast<float*>(fake), B, 32)};
  auto expect_error = [](auto&& call, const std::string& needle) {
    try {
      call();
      ADD_FAILURE() << "no error; expected one mentioning '" << needle << "'";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  auto run_with = [&](const Plan& p, PagedKV k, AttentionIO i, std::span<std::byte> ws) {
    return [&p, k, i, ws] { run_cuda(p, k, i, ws, nullptr); };
  };
  PagedKV bad = kv;
  bad.dtype = DType::f32;
  expect_error(run_with(plan, bad, io, small), "kv.dtype fp32");
  bad = kv;
  bad.num_kv_heads = 4;
  expect_error(run_with(plan, bad, io, small), "kv.num_kv_heads 4");
  bad = kv;
  bad.head_dim = 64;
  expect_error(run_with(plan, bad, io, small), "kv.head_dim 64");
  bad = kv;
  bad.page_size = 8;
  expect_error(run_with(plan, bad, io, small), "kv.page_size 8");
  AttentionIO bad_io = io;
  bad_io.out.data = nullptr;
  expect_error(run_with(plan, kv, bad_io, small), "out must not be null");
  bad_io = io;
  bad_io.q.data = fake + 8;
  expect_error(run_with(plan, kv, bad_io, small), "q 0x");
  bad_io = io;
  bad_io.out.dtype = DType::f32;  // the CUDA engine writes q's dtype only
  expect_error(run_with(plan, kv, bad_io, small), "out.dtype fp32 but q is bf16");
  bad_io = io;
  bad_io.sinks = reinterpret_cast<const float*>(fake + 2);
  expect_error(run_with(plan, kv, bad_io, small), "sinks 0x");
  bad = kv;
  bad.k_scale = {reinterpret_cast<const float*>(fake), 1};
  expect_error(run_with(plan, bad, io, small), "k_scale and v_scale go with an fp8 cache on CUDA, not a bf16 one");
  bad_io = io;
  bad_io.q.stride_batch = 32 * 128 + 4;  // 8,200 bytes: not a multiple of 16
  expect_error(run_with(plan, kv, bad_io, small), "q.stride_batch 4100 elements");
  bad = kv;
  bad.v = fake + 2;
  expect_error(run_with(plan, bad, io, small), "kv.v");
  bad = kv;
  bad.stride_token = 8 * 128 + 4;  // 2,056 bytes
  expect_error(run_with(plan, bad, io, small), "kv.stride_token 1028 elements");
  bad = kv;
  bad.num_pages = 2;
  expect_error(run_with(plan, bad, io, small), "outside the KV pool of 2 pages");
  {  // a pool the kernels' 32-bit token offsets do not reach: strides of 272 and 16 bytes share no power of two
     // past 16, and its last page starts 2^32 × 16 bytes in; refused before the workspace is touched
    std::vector<std::byte> host(cuda_workspace_bytes(plan) + 256);
    auto* base = reinterpret_cast<std::byte*>((reinterpret_cast<std::uintptr_t>(host.data()) + 255) & ~std::uintptr_t(255));
    bad = kv;
    bad.stride_token = 8;
    bad.stride_page = 8 * 17;
    bad.num_pages = (std::int64_t(1) << 32) / 17 + 2;
    expect_error(run_with(plan, bad, io, {base, cuda_workspace_bytes(plan)}), "spans more than 2^32 units of 16 bytes");
  }
  PlannerOptions wide = opt;
  wide.max_tile_rows = 200;
  test::RandomBatchSpec crowd = spec;  // 30 forks of one request: one node of 30 × G 4 = 120 rows
  crowd.num_requests = 30;
  crowd.fork_prob = 1.0;
  const test::RandomBatch cb = test::make_random_batch(crowd);
  const Plan wide_plan = make_plan(derive_forest(cb.table()), spec.heads, spec.dtype, cost, wide);
  PagedKV ckv = kv;
  ckv.num_pages = cb.num_pages;
  AttentionIO crowd_io = io;
  crowd_io.q.batch = crowd_io.out.batch = crowd_io.lse.batch = 30;
  expect_error(run_with(wide_plan, ckv, crowd_io, small), "more than the kernel's 64");
  expect_error(run_with(plan, kv, io, small), "bytes the plan needs");
  expect_error([&] { cuda_upload_plan(plan, {fake + 16, cuda_workspace_bytes(plan)}, nullptr); }, "not 256-byte aligned");
  expect_error([&] { cuda_planner_options({32, 8, 96}, DType::bf16); }, "head_dim 96");
}

// The capacity that fits a workspace: its plans fit, and one more slot would not.
TEST(CudaEngine, CapacityFillsTheWorkspace) {
  const HeadConfig heads{32, 8, 128};
  PlannerOptions opt;
  opt.num_blocks = 264;
  for (const std::size_t bytes : {std::size_t(1) << 20, std::size_t(128) << 20}) {
    const PlanCapacity c = cuda_plan_capacity(bytes, 64, 20000, heads, opt);
    EXPECT_LE(cuda_workspace_bytes(c, heads.head_dim), bytes);
    const PlanCapacity more = PlanCapacity::for_batches(64, 20000, heads, opt.max_tile_rows, 264, c.slots + 1);
    EXPECT_GT(cuda_workspace_bytes(more, heads.head_dim), bytes);
  }
  EXPECT_THROW(cuda_plan_capacity(4096, 64, 20000, heads, opt), Error);
}

// q heads-major (transformers' view of (1, Hq, B, D)), out with padded rows,
// lse strided in base 2: the same numbers as the contiguous run.
TEST(CudaEngine, StridedQueryOutputAndLse) {
  SKIP_WITHOUT_GPU();
  for (const HeadConfig heads : {HeadConfig{32, 8, 128}, HeadConfig{8, 2, 64}}) {
    test::RandomBatchSpec spec = spec_of({heads, DType::bf16, 16, Layout::nhd, 6, 9, 0.3}, 73);
    const test::RandomBatch b = test::make_random_batch(spec);
    const Plan plan = make_plan(derive_forest(b.table()), heads, spec.dtype, h200_cost(heads, spec.dtype),
                                cuda_planner_options(heads, spec.dtype));
    const DeviceBatch d = upload(b, Layout::nhd);
    const Outputs dense = run_gpu(plan, d);
    const int B = plan.num_requests(), Hq = heads.num_qo_heads, D = heads.head_dim;
    std::vector<std::uint16_t> qt(b.q.size() / 2);  // element (b, h, d) at (h·B + b)·D + d
    const auto* q = reinterpret_cast<const std::uint16_t*>(b.q.data());
    for (int r = 0; r < B; ++r)
      for (int h = 0; h < Hq; ++h) std::memcpy(&qt[(h * B + r) * D], &q[(r * Hq + h) * D], D * 2);
    const DeviceBuffer dq(qt.data(), qt.size() * 2);
    const std::int64_t row = D + 8, batch = Hq * row + 16;  // out rows 16 bytes apart beyond D, batches padded
    DeviceBuffer ws(cuda_workspace_bytes(plan)), out(std::size_t(B) * batch * 2), lse(std::size_t(B) * Hq * 4);
    ws.poison();
    out.poison();
    lse.poison();
    cuda_upload_plan(plan, ws.span(), nullptr);
    const AttentionIO io{{dq.data(), spec.dtype, B, Hq, D, D, std::int64_t(B) * D},
                         {out.data(), spec.dtype, B, Hq, D, batch, row},
                         {reinterpret_cast<float*>(lse.data()), B, Hq, 1, B},
                         LseBase::two};
    run_cuda(plan, d.kv, io, ws.span(), nullptr);
    CUDA_OK(cudaDeviceSynchronize());
    const std::vector<std::uint16_t> bits = out.download<std::uint16_t>();
    const std::vector<float> l2 = lse.download<float>();
    for (int r = 0; r < B; ++r)
      for (int h = 0; h < Hq; ++h) {
        const std::size_t dense_row = std::size_t(r) * Hq + h;
        ASSERT_EQ(0, std::memcmp(&bits[r * batch + h * row], &dense.bits[dense_row * D], D * 2))
            << spec.describe() << " row " << r << ", " << h;
        EXPECT_EQ(bits[r * batch + h * row + D], 0xffff) << "padding after row " << r << ", " << h;
        EXPECT_NEAR(l2[h * B + r], dense.lse[dense_row] * kLog2E, 1e-5 * (1 + std::abs(dense.lse[dense_row])));
      }
  }
}

// Captures run_cuda once, with the first batch's plan at opt's capacity, and
// replays that graph for every batch after staging the batch's own plan: the
// exact result each time (queries[i]: batch i's query tokens, or one token a
// request where there are none), the rows past a batch empty.
void expect_replays_at_capacity(const HeadConfig& heads, const std::vector<test::RandomBatch>& batches,
                                const std::vector<test::RandomQueries>& queries, const PlannerOptions& opt) {
  const int max_rows = opt.capacity->requests, dim = heads.head_dim, hq = heads.num_qo_heads;
  std::int64_t max_pages = 0;
  for (const auto& b : batches) max_pages = std::max(max_pages, b.num_pages);
  const RooflineCostModel cost = h200_cost(heads, DType::bf16);
  // A device pool, q and out large enough for every batch, reloaded per batch
  // outside the graph (the graph holds only their addresses).
  const std::size_t kv_bytes = std::size_t(max_pages) * 16 * heads.num_kv_heads * dim * 2;
  const std::size_t row_bytes = std::size_t(hq) * dim * 2;
  const std::size_t workspace = cuda_workspace_bytes(*opt.capacity, dim);
  DeviceBuffer k(kv_bytes), v(kv_bytes), q(max_rows * row_bytes), out(max_rows * row_bytes);
  DeviceBuffer lse(std::size_t(max_rows) * hq * 4), ws(workspace);
  const PagedKV kv = PagedKV::nhd(k.data(), v.data(), DType::bf16, max_pages, 16, heads.num_kv_heads, dim);
  cudaStream_t stream = nullptr;
  CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  CudaPlanStaging staging;
  cudaGraphExec_t exec = nullptr;
  std::vector<Plan> plans;  // kept alive: the staging copies them asynchronously
  for (std::size_t i = 0; i < batches.size(); ++i) {
    const test::RandomBatch& b = batches[i];
    const QueryBatch batch_queries = queries.empty() ? QueryBatch{} : queries[i].view();
    const std::vector<std::byte>& q_host = queries.empty() ? b.q : queries[i].q;
    plans.push_back(make_plan(derive_forest(b.table()), heads, DType::bf16, cost, opt, batch_queries));
    const Plan& plan = plans.back();
    CUDA_OK(cudaMemcpyAsync(k.data(), b.k.data(), b.k.size(), cudaMemcpyHostToDevice, stream));
    CUDA_OK(cudaMemcpyAsync(v.data(), b.v.data(), b.v.size(), cudaMemcpyHostToDevice, stream));
    CUDA_OK(cudaMemcpyAsync(q.data(), q_host.data(), q_host.size(), cudaMemcpyHostToDevice, stream));
    out.poison(stream);
    lse.poison(stream);
    staging.upload(plan, ws.span(), stream);
    if (i == 0) {  // captured once, with the first plan
      const AttentionIO io = device_io(plan, q.data(), out, lse, max_rows);
      cudaGraph_t graph = nullptr;
      CUDA_OK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
      run_cuda(plan, kv, io, ws.span(), stream);
      CUDA_OK(cudaStreamEndCapture(stream, &graph));
      CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
      CUDA_OK(cudaGraphDestroy(graph));
    }
    CUDA_OK(cudaGraphLaunch(exec, stream));
    CUDA_OK(cudaStreamSynchronize(stream));
    Outputs o = collect(out, lse, DType::bf16);
    const std::size_t rows = std::size_t(plan.num_requests()) * hq;
    for (std::size_t x = rows * dim; x < o.out.size(); ++x) ASSERT_EQ(o.out[x], 0.f) << "padding row, batch " << i;
    for (std::size_t x = rows; x < o.lse.size(); ++x) ASSERT_EQ(o.lse[x], -INFINITY) << "padding row, batch " << i;
    o.out.resize(rows * dim);
    o.lse.resize(rows);
    expect_matches(o, reference_attention(b.table(), b.kv(), heads, q_host.data(), batch_queries), DType::bf16,
                   b.spec.describe() + " replayed after re-planning, batch " + std::to_string(i));
  }
  CUDA_OK(cudaGraphExecDestroy(exec));
  CUDA_OK(cudaStreamDestroy(stream));
}

// One graph captured with a plan at a capacity replays the exact result of
// every later plan staged into its workspace: other trees, other batch sizes.
TEST(CudaEngine, GraphReplaysEveryPlanAtOneCapacity) {
  SKIP_WITHOUT_GPU();
  const HeadConfig heads{32, 8, 128};
  std::vector<test::RandomBatch> batches;
  for (std::uint64_t seed = 101; seed <= 105; ++seed)
    batches.push_back(test::make_random_batch(
        spec_of({heads, DType::bf16, 16, Layout::nhd, 3 + int(seed % 4), 4 + int(seed % 12), 0.3}, seed)));
  std::int64_t max_entries = 0;
  for (const auto& b : batches) max_entries = std::max<std::int64_t>(max_entries, b.indices.size());
  PlannerOptions opt = cuda_planner_options(heads, DType::bf16);
  opt.capacity = cuda_plan_capacity(std::size_t(32) << 20, 16, max_entries, heads, opt);
  expect_replays_at_capacity(heads, batches, {}, opt);
}

// The same with several query tokens a request: captured with a plan of one
// token a request (no masked task: the capacity's masks make it capture the
// masked kernels), replayed for causal tokens, draft trees and custom masks
// of up to 64 tokens a request, each plan of other requests and lengths.
TEST(CudaEngine, GraphReplaysQueryTokensUnderEachMaskAtOneCapacity) {
  SKIP_WITHOUT_GPU();
  const HeadConfig heads{32, 8, 128};
  std::vector<test::RandomBatch> batches;
  std::vector<test::RandomQueries> queries;
  const QueryMask masks[] = {QueryMask::causal, QueryMask::causal, QueryMask::draft, QueryMask::custom,
                             QueryMask::causal, QueryMask::draft, QueryMask::custom};
  int max_tokens = 0;
  std::int64_t max_entries = 0, max_mask_bytes = 0;
  for (std::uint64_t i = 0; i < std::size(masks); ++i) {
    const std::uint64_t seed = 141 + i;
    batches.push_back(test::make_random_batch(
        spec_of({heads, DType::bf16, 16, Layout::nhd, 3 + int(seed % 4), 4 + int(seed % 12), 0.3}, seed)));
    queries.push_back(test::make_random_queries(batches.back(), masks[i], i == 0 ? 1 : 64, seed));
    max_tokens = std::max(max_tokens, queries.back().num_queries());
    max_entries = std::max<std::int64_t>(max_entries, batches.back().indices.size());
    max_mask_bytes = std::max<std::int64_t>(max_mask_bytes, queries.back().bits.size());
  }
  PlannerOptions opt = cuda_planner_options(heads, DType::bf16);
  opt.capacity = cuda_plan_capacity(std::size_t(64) << 20, 16, max_entries, heads, opt, {max_tokens, max_mask_bytes});
  ASSERT_TRUE(opt.capacity->masks);
  expect_replays_at_capacity(heads, batches, queries, opt);
}

// One graph captured around CudaStreamPlanner::enqueue and run_cuda: every
// replay plans what the device block table (and with `mask`, the device
// qo_indptr and mask bits) then holds, with padding rows after the batch.
// With `checks`, a batch it cannot plan runs as the empty plan, its error
// kept, and bad enqueues are refused by name. window_left: every step's
// sliding window (DeviceQueries::window_left).
void expect_stream_replays(std::optional<QueryMask> mask, bool checks, int window_left = -1) {
  const HeadConfig heads{32, 8, 128};
  constexpr int kRows = 16;
  std::vector<test::RandomBatch> batches;
  std::vector<test::RandomQueries> queries;
  int max_tokens = kRows;
  std::int64_t max_mask_bytes = 0;
  for (std::uint64_t seed = 111; seed <= 115; ++seed) {
    batches.push_back(test::make_random_batch(
        spec_of({heads, DType::bf16, 16, Layout::nhd, 3 + int(seed % 4), 4 + int(seed % 12), 0.3}, seed)));
    if (!mask) continue;
    queries.push_back(test::make_random_queries(batches.back(), *mask, 24, seed));
    max_tokens = std::max(max_tokens, queries.back().num_queries());
    max_mask_bytes = std::max<std::int64_t>(max_mask_bytes, queries.back().bits.size());
  }
  std::int64_t max_pages = 0;
  int kCols = 1;  // the longest request's pages
  for (const auto& b : batches) {
    max_pages = std::max(max_pages, b.num_pages);
    for (int r = 0; r < b.table().num_requests(); ++r) kCols = std::max(kCols, b.table().indptr[r + 1] - b.table().indptr[r]);
  }
  PlannerOptions opt = cuda_planner_options(heads, DType::bf16);
  constexpr std::size_t kWorkspace = std::size_t(48) << 20;
  const bool masks = mask || window_left >= 0;  // a window's rows carry masks, one token a request too
  opt.capacity = cuda_plan_capacity(kWorkspace, kRows, std::int64_t(kRows) * kCols, heads, opt,
                                    masks ? QueryCapacity{max_tokens, max_mask_bytes} : QueryCapacity{});
  CudaStreamPlanner planner(heads, DType::bf16, 16, std::make_shared<RooflineCostModel>(h200_cost(heads, DType::bf16)),
                            opt, kRows, kCols, max_mask_bytes);
  const int rows_cap = opt.capacity->requests;  // q's and out's rows: the capacity's
  const std::size_t kv_bytes = std::size_t(max_pages) * 16 * 8 * 128 * 2, row_bytes = 32 * 128 * 2;
  DeviceBuffer k(kv_bytes), v(kv_bytes), q(rows_cap * row_bytes), table(sizeof(std::int32_t) * kRows * kCols);
  DeviceBuffer lens(sizeof(std::int32_t) * kRows), out(rows_cap * row_bytes), lse(std::size_t(rows_cap) * 32 * 4);
  DeviceBuffer qo(sizeof(std::int32_t) * (kRows + 1)), bits(std::max<std::int64_t>(max_mask_bytes, 1));
  DeviceBuffer ws(kWorkspace);
  const PagedKV kv = PagedKV::nhd(k.data(), v.data(), DType::bf16, max_pages, 16, 8, 128);
  const Plan& plan = planner.capacity_plan();
  const AttentionIO io = device_io(plan, q.data(), out, lse, rows_cap);
  const BlockTable device{reinterpret_cast<const std::int32_t*>(table.data()), kRows, kCols, kCols,
                          reinterpret_cast<const std::int32_t*>(lens.data()), false};
  DeviceQueries device_queries;
  if (mask) {
    device_queries = {reinterpret_cast<const std::int32_t*>(qo.data()), *mask,
                      reinterpret_cast<const std::uint8_t*>(bits.data()),
                      *mask == QueryMask::causal ? 0 : max_mask_bytes};
  }
  device_queries.window_left = window_left;
  cudaStream_t stream = nullptr;
  CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  std::vector<std::int32_t> host_table, host_lens, host_qo;
  std::vector<std::uint8_t> host_bits;
  auto load = [&](std::size_t i) {  // the batch as a padded block table, its q, its pool, its query tokens
    const test::RandomBatch& b = batches[i];
    host_table.assign(std::size_t(kRows) * kCols, -1);
    host_lens.assign(kRows, 0);
    const PageTable t = b.table();
    for (int r = 0; r < t.num_requests(); ++r) {
      std::copy(t.indices.begin() + t.indptr[r], t.indices.begin() + t.indptr[r + 1], host_table.begin() + r * kCols);
      host_lens[r] = std::int32_t(t.request_tokens(r));
    }
    const std::vector<std::byte>& q_host = mask ? queries[i].q : b.q;
    CUDA_OK(cudaMemcpyAsync(table.data(), host_table.data(), table.span().size(), cudaMemcpyHostToDevice, stream));
    CUDA_OK(cudaMemcpyAsync(lens.data(), host_lens.data(), lens.span().size(), cudaMemcpyHostToDevice, stream));
    CUDA_OK(cudaMemcpyAsync(k.data(), b.k.data(), b.k.size(), cudaMemcpyHostToDevice, stream));
    CUDA_OK(cudaMemcpyAsync(v.data(), b.v.data(), b.v.size(), cudaMemcpyHostToDevice, stream));
    CUDA_OK(cudaMemcpyAsync(q.data(), q_host.data(), q_host.size(), cudaMemcpyHostToDevice, stream));
    if (mask) {  // padding rows repeat the last offset: no tokens
      host_qo = queries[i].qo_indptr;
      host_qo.resize(kRows + 1, host_qo.back());
      host_bits = queries[i].bits;
      host_bits.resize(std::size_t(bits.span().size()), 0);
      CUDA_OK(cudaMemcpyAsync(qo.data(), host_qo.data(), qo.span().size(), cudaMemcpyHostToDevice, stream));
      CUDA_OK(cudaMemcpyAsync(bits.data(), host_bits.data(), bits.span().size(), cudaMemcpyHostToDevice, stream));
    }
    out.poison(stream);
    lse.poison(stream);
  };
  auto expect_batch = [&](std::size_t i, const std::string& what) {
    const test::RandomBatch& b = batches[i];
    CUDA_OK(cudaStreamSynchronize(stream));
    Outputs o = collect(out, lse, DType::bf16);
    QueryBatch batch_queries = mask ? queries[i].view() : QueryBatch{};
    batch_queries.window_left = window_left;
    const std::size_t rows = std::size_t(batch_queries.num_queries(b.table().num_requests())) * 32;
    for (std::size_t x = rows * 128; x < o.out.size(); ++x) ASSERT_EQ(o.out[x], 0.f) << "padding row, " << what;
    for (std::size_t x = rows; x < o.lse.size(); ++x) ASSERT_EQ(o.lse[x], -INFINITY) << "padding row, " << what;
    o.out.resize(rows * 128);
    o.lse.resize(rows);
    const void* q_host = mask ? queries[i].q.data() : b.q.data();
    expect_matches(o, reference_attention(b.table(), b.kv(), heads, q_host, batch_queries), DType::bf16,
                   b.spec.describe() + what);
  };
  load(0);  // eagerly, in stream order: the host does not wait
  planner.enqueue(device, max_pages, ws.span(), stream, device_queries);
  run_cuda(plan, kv, io, ws.span(), stream);
  expect_batch(0, " eager");
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  CUDA_OK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  planner.enqueue(device, max_pages, ws.span(), stream, device_queries);
  run_cuda(plan, kv, io, ws.span(), stream);
  run_cuda(plan, kv, io, ws.span(), stream);  // a second layer: the same plan
  CUDA_OK(cudaStreamEndCapture(stream, &graph));
  CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
  CUDA_OK(cudaGraphDestroy(graph));
  // Growing batches, then shrinking ones: a plan smaller than the last
  // leaves that one's tail in the staging buffer, which no run may read.
  const std::size_t order[] = {0, 1, 2, 3, 4, 3, 2, 1, 0};
  for (const std::size_t i : order) {
    load(i);
    CUDA_OK(cudaGraphLaunch(exec, stream));
    expect_batch(i, " replayed");
    EXPECT_EQ(planner.last_stats().batch_requests, batches[i].table().num_requests());
  }
  EXPECT_EQ(planner.totals().plans, 1 + std::int64_t(std::size(order)));
  EXPECT_FALSE(planner.take_error().has_value());
  if (!checks) {
    CUDA_OK(cudaGraphExecDestroy(exec));
    CUDA_OK(cudaStreamDestroy(stream));
    return;
  }
  load(1);
  host_table[0] = std::int32_t(max_pages);  // outside the pool: the replay runs as the empty plan
  CUDA_OK(cudaMemcpyAsync(table.data(), host_table.data(), sizeof(std::int32_t), cudaMemcpyHostToDevice, stream));
  CUDA_OK(cudaGraphLaunch(exec, stream));
  CUDA_OK(cudaStreamSynchronize(stream));
  const Outputs o = collect(out, lse, DType::bf16);
  EXPECT_TRUE(std::all_of(o.out.begin(), o.out.end(), [](float x) { return x == 0.f; }));
  EXPECT_TRUE(std::all_of(o.lse.begin(), o.lse.end(), [](float x) { return x == -INFINITY; }));
  const std::optional<std::string> error = planner.take_error();
  ASSERT_TRUE(error.has_value());
  EXPECT_NE(error->find("block table row 0 column 0 holds page " + std::to_string(max_pages)), std::string::npos) << *error;
  EXPECT_FALSE(planner.take_error().has_value());
  EXPECT_TRUE(test::throws_with([&] { planner.enqueue({device.blocks, kRows + 1, kCols, kCols, device.seq_lens, false},
                                                      max_pages, ws.span(), stream); },
                                "17 rows, outside [0, max_rows = 16]"));
  EXPECT_TRUE(test::throws_with([&] { planner.enqueue(device, max_pages, ws.span().first(1024), stream); },
                                "workspace of 1024 bytes is smaller"));
  const DeviceQueries tokens{reinterpret_cast<const std::int32_t*>(qo.data())};
  EXPECT_TRUE(test::throws_with([&] { planner.enqueue(device, max_pages, ws.span(), stream, tokens); },
                                "query tokens need a capacity with masks"));
  CUDA_OK(cudaGraphExecDestroy(exec));
  CUDA_OK(cudaStreamDestroy(stream));
}

TEST(CudaEngine, StreamPlannerReplansEveryGraphReplay) {
  SKIP_WITHOUT_GPU();
  expect_stream_replays(std::nullopt, true);
}

// The same with several query tokens a request, the device qo_indptr and
// mask bits copied in stream order with the block table: a graph per mask
// (the mask's kind is part of what a graph captures).
TEST(CudaEngine, StreamPlannerReplansQueryTokensEveryGraphReplay) {
  SKIP_WITHOUT_GPU();
  for (const QueryMask mask : {QueryMask::causal, QueryMask::draft, QueryMask::custom}) {
    SCOPED_TRACE("mask " + std::to_string(int(mask)));
    expect_stream_replays(mask, false);
  }
}

// And under sliding windows: one token a request (a decode step of a
// sliding layer), and draft trees.
TEST(CudaEngine, StreamPlannerReplansSlidingWindowsEveryGraphReplay) {
  SKIP_WITHOUT_GPU();
  expect_stream_replays(std::nullopt, false, 37);
  expect_stream_replays(QueryMask::draft, false, 5);
  // a CUDA-graph workspace made without masks (no max_query_tokens) refuses a window by name; with them it plans it
  const test::RandomBatch b = test::make_random_batch(spec_of({{32, 8, 128}, DType::bf16, 16, Layout::nhd}, 5));
  const Forest forest = derive_forest(b.table());
  QueryBatch window;
  window.window_left = 20;
  PlannerSetupArgs a;
  a.target = PlanTarget::cuda;
  a.shape = {32, 8, 128, 128, 0.f, DType::bf16, DType::bf16, 16};
  a.workspace = {std::size_t(64) << 20, 8, 8 * 64};
  const std::int64_t entries = std::int64_t(b.indices.size());
  EXPECT_TRUE(test::throws_with([&] { make_planner_setup(a).options_for(forest, entries, window); },
                                "window_left 20: a sliding window's rows carry masks, which this CUDA-graph "
                                "workspace was made without (give max_query_tokens)"));
  a.workspace.max_query_tokens = 8;
  const PlannerSetup graphs = make_planner_setup(a);
  const Plan plan = make_plan(forest, graphs.heads(), graphs.kv_dtype(), *graphs.cost,
                              graphs.options_for(forest, entries, window), window);
  EXPECT_TRUE(plan.masks());
}

// cuda_merge_states and cuda_copy_pages give what their CPU twins give.
TEST(CudaEngine, MergeStatesAndCopyPagesMatchTheCpu) {
  SKIP_WITHOUT_GPU();
  constexpr int N = 7, H = 4, D = 128;
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> value(-1.f, 1.f), log_sum(-20.f, 20.f);
  std::vector<std::uint16_t> a(N * H * D), b(a.size());
  for (std::size_t i = 0; i < a.size(); ++i) a[i] = float_to_bf16(value(rng)), b[i] = float_to_bf16(value(rng));
  std::vector<float> la(N * H), lb(N * H);
  for (int i = 0; i < N * H; ++i) la[i] = log_sum(rng), lb[i] = log_sum(rng);
  la[0] = lb[0] = -INFINITY;
  lb[5] = -INFINITY;
  std::vector<std::uint16_t> cpu_out(a.size());
  std::vector<float> cpu_lse(N * H);
  auto rows = [&](const void* p) { return QueryRows::contiguous(p, DType::bf16, N, H, D); };
  merge_states_cpu(rows(a.data()), LseRows::contiguous(la.data(), N, H), rows(b.data()),
                   LseRows::contiguous(lb.data(), N, H), OutputRows::contiguous(cpu_out.data(), DType::bf16, N, H, D),
                   LseRows::contiguous(cpu_lse.data(), N, H), LseBase::two);
  const DeviceBuffer da(a.data(), a.size() * 2), db(b.data(), b.size() * 2), dla(la.data(), la.size() * 4),
      dlb(lb.data(), lb.size() * 4), dout(a.size() * 2), dlse(la.size() * 4);
  cuda_merge_states(rows(da.data()), LseRows::contiguous(reinterpret_cast<float*>(dla.data()), N, H), rows(db.data()),
                    LseRows::contiguous(reinterpret_cast<float*>(dlb.data()), N, H),
                    OutputRows::contiguous(dout.data(), DType::bf16, N, H, D),
                    LseRows::contiguous(reinterpret_cast<float*>(dlse.data()), N, H), LseBase::two, nullptr);
  CUDA_OK(cudaDeviceSynchronize());
  const std::vector<std::uint16_t> gpu_out = dout.download<std::uint16_t>();
  const std::vector<float> gpu_lse = dlse.download<float>();
  for (std::size_t i = 0; i < a.size(); ++i)
    ASSERT_NEAR(bf16_to_float(gpu_out[i]), bf16_to_float(cpu_out[i]), 8e-3) << i;
  for (int i = 0; i < N * H; ++i)
    if (std::isinf(cpu_lse[i])) EXPECT_EQ(gpu_lse[i], cpu_lse[i]) << i;
    else EXPECT_NEAR(gpu_lse[i], cpu_lse[i], 1e-5 * (1 + std::abs(cpu_lse[i]))) << i;

  // A pool in HND with chained copies (page 4 receives page 1 through page 2), more than one launch's worth.
  constexpr int P = 80, S = 16, Hk = 2;
  std::vector<std::uint16_t> k(P * S * Hk * D), v(k.size());
  for (std::size_t i = 0; i < k.size(); ++i) k[i] = std::uint16_t(i * 7), v[i] = std::uint16_t(i * 13 + 1);
  std::vector<PageCopy> copies = {{1, 2, 16}, {2, 4, 9}};
  for (int i = 10; i < 80; ++i) copies.push_back({i, (i * 7 + 3) % P, 1 + i % S});
  const DeviceBuffer dk(k.data(), k.size() * 2), dv(v.data(), v.size() * 2);
  cuda_copy_pages(PagedKV::hnd(dk.data(), dv.data(), DType::bf16, P, S, Hk, D), copies, nullptr);
  CUDA_OK(cudaDeviceSynchronize());
  copy_pages_cpu(PagedKV::hnd(k.data(), v.data(), DType::bf16, P, S, Hk, D), copies);
  EXPECT_EQ(dk.download<std::uint16_t>(), k);
  EXPECT_EQ(dv.download<std::uint16_t>(), v);
  // The same copies in an fp8 pool: a byte an element
  std::vector<std::uint8_t> k8(k.size()), v8(k.size());
  for (std::size_t i = 0; i < k8.size(); ++i) k8[i] = std::uint8_t(i * 7), v8[i] = std::uint8_t(i * 13 + 1);
  const DeviceBuffer dk8(k8.data(), k8.size()), dv8(v8.data(), v8.size());
  cuda_copy_pages(PagedKV::hnd(dk8.data(), dv8.data(), DType::e4m3, P, S, Hk, D), copies, nullptr);
  CUDA_OK(cudaDeviceSynchronize());
  copy_pages_cpu(PagedKV::hnd(k8.data(), v8.data(), DType::e4m3, P, S, Hk, D), copies);
  EXPECT_EQ(dk8.download<std::uint8_t>(), k8);
  EXPECT_EQ(dv8.download<std::uint8_t>(), v8);
}

}  // namespace
}  // namespace codec
