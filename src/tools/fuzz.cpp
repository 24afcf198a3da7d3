// codec fuzz: random forests against the fp64 reference, and random bad
// inputs that must be refused. Case i of a seed is a function of (seed, i)
// alone, so `codec fuzz --seed S --case I` replays it; a failing case's
// workload is also written as a file `codec bench --workload` takes.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "codec/core/error.hpp"
#include "codec/engine/cpu_engine.hpp"
#include "codec/engine/cuda_engine.hpp"
#include "codec/engine/reference.hpp"
#include "codec/plan/planner.hpp"
#include "commands.hpp"

#if CODEC_HAS_CUDA
#include <cuda_runtime_api.h>

#include "codec/engine/cuda_check.hpp"
#endif

namespace codec::tools {

namespace {

constexpr double kCpuTolerance = 2e-5;  // fp32 accumulation of exactly widened inputs (tests/engine)
constexpr double kLseTolerance = 1e-4;

// A KV pool re-laid out from the NHD one materialize makes.
enum class Layout { nhd, hnd, interleaved };
const char* name_of(Layout l) { return l == Layout::nhd ? "NHD" : l == Layout::hnd ? "HND" : "interleaved"; }

struct Case {
  Workload w;
  Layout layout = Layout::nhd;
  PlannerOptions options;
  bool flat = false;     // plan the flattened forest (every request alone)
  bool out_f32 = false;  // CPU: out in fp32 rather than the KV dtype
  LseBase lse_base = LseBase::e;
  bool roofline_cpu = false;  // the cost model's parameters: the CPU's or the H200's
  // With several query tokens a request: a custom mask over every key instead
  // of causal, each key kept with this probability (0: none), one row in ten
  // seeing nothing; its bits drawn from custom_seed.
  double custom_keep = 0;
  std::uint64_t custom_seed = 0;
  // Planned at a capacity (CUDA graphs) of the batch's sizes plus this much
  // slack (-1: none), with maxima of query tokens and mask bytes where it
  // has several tokens a request.
  int capacity_slack = -1;
  int window_left = -1;       // a sliding window (QueryBatch::window_left)
  std::vector<float> sinks;   // attention sinks, one a qo head (AttentionIO::sinks), or none
  bool one_scale = false;     // an fp8 cache's scales as one value for every kv head (KvScale count 1)

  std::string describe() const {
    std::ostringstream os;
    os << "heads " << w.heads.num_qo_heads << "/" << w.heads.num_kv_heads << "/" << w.heads.head_dim << " "
       << to_string(w.dtype) << (one_scale ? " one scale" : "") << " page " << w.page_size << " nodes "
       << w.nodes.size() << " requests "
       << w.requests.size() << " " << name_of(layout) << " blocks " << options.num_blocks << " tile "
       << options.max_tile_rows
       << (options.wide_tile_rows ? " wide " + std::to_string(options.wide_tile_rows) + "/" +
                                        std::to_string(options.wide_span)
                                  : std::string())
       << (options.max_tail_tokens() ? " tails " + std::to_string(options.wide_tail_tokens) : std::string())
       << (options.wide_tile_rows && options.wide_max_masked_rows
               ? " wide masked rows <= " + std::to_string(options.wide_max_masked_rows)
               : std::string())
       << (options.wide_tile_rows && options.wide_max_chunk_tokens
               ? " wide chunks <= " + std::to_string(options.wide_max_chunk_tokens)
               : std::string())
       << (options.wide_tile_rows && options.beside_wide_price < 1 && w.q_len == 1  // the planner's rule
               ? " beside " + std::to_string(options.beside_wide_price).substr(0, 3)
               : std::string())
       << " align " << options.chunk_align << " split "
       << (options.split == SplitPolicy::none    ? "none"
           : options.split == SplitPolicy::fixed ? "fixed:" + std::to_string(options.fixed_splits)
                                                 : std::string("adaptive"))
       << (flat ? " flat" : "") << (out_f32 ? " out fp32" : "") << (lse_base == LseBase::two ? " lse base 2" : "")
       << (w.tree_width > 0 ? " tree " + std::to_string(w.tree_width) + "x" + std::to_string(w.tree_depth)
           : w.q_len > 1    ? " q_len " + std::to_string(w.q_len)
                            : std::string())
       << (custom_keep > 0 ? " custom keep " + std::to_string(custom_keep).substr(0, 3) : std::string())
       << (capacity_slack >= 0 ? " capacity +" + std::to_string(capacity_slack) : std::string())
       << (window_left >= 0 ? " window_left " + std::to_string(window_left) : std::string())
       << (w.heads.logits_soft_cap > 0 ? " soft-cap " + std::to_string(w.heads.logits_soft_cap).substr(0, 4)
                                       : std::string())
       << (sinks.empty() ? "" : " sinks");
    return os.str();
  }
};

std::uint64_t mix(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

class Draw {
 public:
  explicit Draw(std::uint64_t seed) : rng_(seed) {}
  int in(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }
  bool chance(double p) { return std::uniform_real_distribution<double>(0, 1)(rng_) < p; }
  template <typename T>
  T pick(std::initializer_list<T> xs) { return *(xs.begin() + in(0, int(xs.size()) - 1)); }
  std::uint64_t bits() { return rng_(); }

 private:
  std::mt19937_64 rng_;
};

// Heads: MHA, GQA 3/4/5/7 and MQA; head dims 64/128/256.
HeadConfig draw_heads(Draw& d) {
  HeadConfig h;
  h.head_dim = d.pick({64, 128, 256});
  switch (d.in(0, 2)) {
    case 0: h.num_kv_heads = d.pick({1, 2, 4}), h.num_qo_heads = h.num_kv_heads; break;           // MHA
    case 1: h.num_kv_heads = d.pick({1, 2}), h.num_qo_heads = h.num_kv_heads * d.pick({3, 4, 5, 7}); break;  // GQA
    default: h.num_kv_heads = 1, h.num_qo_heads = d.pick({8, 16, 32}); break;                     // MQA
  }
  return h;
}

int draw_tokens(Draw& d) {
  if (d.chance(0.1)) return 0;                   // an empty node
  if (d.chance(0.15)) return d.in(200, 1200);    // several KV tiles
  return d.in(1, 60);
}

// A forest of up to 12 nodes and depth 8, requests at any node (internal ones
// too), some duplicated.
Workload draw_workload(Draw& d, bool cuda) {
  Workload w;
  w.name = "fuzz";
  w.seed = d.bits();
  w.model = "custom";
  w.heads = draw_heads(d);
  w.dtype = cuda ? d.pick({DType::f16, DType::bf16}) : d.pick({DType::f16, DType::bf16, DType::f32});
  w.page_size = d.chance(0.5) ? d.in(1, 16) : d.chance(0.6) ? d.pick({16, 32, 64, 128}) : d.in(17, 128);
  const int nodes = d.in(1, 12);
  std::vector<int> depth;
  for (int i = 0; i < nodes; ++i) {
    int parent = -1;
    if (i > 0 && !d.chance(0.2)) {
      parent = d.in(0, i - 1);
      if (depth[std::size_t(parent)] >= 7) parent = -1;  // depth up to 8
    }
    depth.push_back(parent < 0 ? 0 : depth[std::size_t(parent)] + 1);
    std::string id = "n";
    id += std::to_string(i);  // (not "n" + ...: GCC 12 warns falsely of overlapping copies there)
    w.nodes.push_back({std::move(id), parent, draw_tokens(d)});
  }
  const int requests = d.in(1, 12);
  for (int r = 0; r < requests; ++r) {
    if (r > 0 && d.chance(0.15)) {  // a duplicate of an earlier request
      w.requests.push_back(w.requests[std::size_t(d.in(0, r - 1))]);
      continue;
    }
    w.requests.push_back(d.in(0, nodes - 1));
    if (w.request_tokens(r) == 0) w.nodes[std::size_t(w.requests.back())].tokens = d.in(1, 30);
  }
  return w;
}

// device: the GPU's planner options at head_dim 128 (its blocks, and whether
// it runs wide tasks there), or none on the CPU.
Case draw_case(std::uint64_t seed, int index, bool cuda, const PlannerOptions& device) {
  Draw d(mix(seed ^ mix(std::uint64_t(index) + 1)));
  Case c;
  c.w = draw_workload(d, cuda);
  c.layout = d.pick({Layout::nhd, Layout::hnd, Layout::interleaved});
  c.options.num_blocks = cuda && d.chance(0.5) ? device.num_blocks : d.in(1, cuda ? 600 : 64);
  c.options.max_tile_rows = cuda ? d.in(1, kCudaMaxTileRows) : d.in(1, 300);
  // wide tasks where the engine runs them: on the GPU its kernel's (head_dim
  // 64 or 128, up to 128 rows, a wide block the SM's PAC blocks); on the CPU any
  const int head_dim = c.w.heads.head_dim;
  const bool wide = cuda ? device.wide_tile_rows > 0 && cuda_wide_head_dim(head_dim) : true;
  if (wide && d.chance(0.4)) {
    c.options.wide_tile_rows = cuda ? device.wide_tile_rows : d.in(c.options.max_tile_rows, 300);
    c.options.wide_span = cuda ? cuda_pac_min_blocks_per_sm(head_dim) : d.in(1, 3);
    c.options.num_blocks = (c.options.num_blocks + c.options.wide_span - 1) / c.options.wide_span * c.options.wide_span;
  }
  c.options.chunk_align = d.chance(0.5) ? 16 : d.in(1, 40);
  const int split = d.in(0, 9);
  c.options.split = split < 5 ? SplitPolicy::adaptive : split < 7 ? SplitPolicy::none : SplitPolicy::fixed;
  c.options.fixed_splits = d.in(1, 8);
  c.flat = d.chance(0.2);
  c.out_f32 = !cuda && d.chance(0.5);
  c.lse_base = d.chance(0.2) ? LseBase::two : LseBase::e;
  c.roofline_cpu = d.chance(0.5);
  // tails the wide parents take in (drawn last: the draws above keep their cases)
  if (c.options.wide_tile_rows > 0 && d.chance(0.5)) c.options.wide_tail_tokens = d.in(1, 64);
  // the price of tasks beside wide ones (one-token batches): another schedule, never other results
  if (c.options.wide_tile_rows > 0 && d.chance(0.5)) c.options.beside_wide_price = 0.1 * d.in(3, 10);
  // several query tokens a request, causal, a draft tree or a custom mask
  if (d.chance(0.3)) {
    if (d.chance(0.5)) c.w = c.w.with_queries(d.chance(0.8) ? d.in(2, 16) : d.in(17, 300));
    else c.w = c.w.with_queries(1, d.in(1, 5), d.in(1, 4));
    if (c.w.tree_width == 0 && d.chance(0.3)) c.custom_keep = 0.1 * d.in(1, 10), c.custom_seed = d.bits();
  }
  // a capacity's sizes bound derived forests (a flat one lists a request's path nodes apart)
  if (!c.flat && d.chance(0.25)) c.capacity_slack = d.chance(0.5) ? 0 : d.in(1, 40);
  // an fp8 cache with a scale a kv head, or one for them all, under bf16 queries
  if (d.chance(0.15)) {
    c.w.dtype = d.pick({DType::e4m3, DType::e5m2});
    c.one_scale = d.chance(0.3);
  }
  if (d.chance(0.15)) c.window_left = d.chance(0.3) ? d.in(0, 4) : d.in(5, 400);
  // a soft-cap, from one that flattens most logits to one that touches few, and sinks from far below the
  // logits to far above (each row's lse then mostly the sink's)
  if (d.chance(0.15)) c.w.heads.logits_soft_cap = 0.1f * float(d.in(2, 500));
  if (d.chance(0.15))
    for (int h = 0; h < c.w.heads.num_qo_heads; ++h) c.sinks.push_back(0.1f * float(d.in(-80, 120)));
  // a cap on a wide node's rows (a node of more keeps narrow tasks, and its requests' tails tasks of their own)
  if (c.options.wide_tile_rows > 0 && d.chance(0.25)) c.options.wide_max_masked_rows = d.in(65, 400);
  // wide chunks of a few tiles at most: the searched plans cut their wide nodes finer
  if (c.options.wide_tile_rows > 0 && d.chance(0.25)) c.options.wide_max_chunk_tokens = d.in(16, 600);
  return c;
}

// The options of a case's plan: at a capacity where it has one, of the
// batch's requests, page entries, query tokens, mask bytes and the slots of
// its plan without one, each with the case's slack.
PlannerOptions case_options(const Case& c, const Forest& forest, const HeadConfig& heads, const CostModel& cost,
                            const PageTable& table, const QueryBatch& queries) {
  PlannerOptions options = c.options;
  if (c.capacity_slack < 0) return options;
  const int slack = c.capacity_slack, requests = table.num_requests();
  const bool tokens = !queries.one_token_each() || !queries.mask_bits.empty() || queries.window_left >= 0;  // masks
  const QueryCapacity q = tokens ? QueryCapacity{queries.num_queries(requests) + 2 * slack,
                                                 std::int64_t(queries.mask_bits.size()) + slack}
                                 : QueryCapacity{};
  const auto capacity = [&](std::int64_t slots) {
    return PlanCapacity::for_batches(requests + slack, std::int64_t(table.indices.size()) + slack, heads,
                                     options.max_tile_rows, options.num_blocks, slots, options.wide_blocks(),
                                     options.max_tail_tokens(), q);
  };
  // The slots are those of the plan as the capacity shapes it: a capacity of
  // query tokens always plans masks, and a plan with masks takes in no tails,
  // whose requests then take slots of their own (also where a window hides
  // nothing and the plan without a capacity took them in).
  PlannerOptions probe = options;
  if (capacity(1).tail_tokens == 0) probe.wide_tail_tokens = 0;
  const std::int64_t slots = make_plan(forest, heads, c.w.dtype, cost, probe, queries).stats().num_slots;
  options.capacity = capacity(slots + slack);
  return options;
}

// The batch's pool in `layout`, as host bytes, and its PagedKV over `base` (host or device).
struct Pool {
  std::vector<std::byte> k, v;  // v empty when interleaved (K and V in k)
  PagedKV at(const void* k_base, const void* v_base, const Batch& b, Layout layout) const {
    const int P = int(b.num_pages), S = b.page_size, H = b.heads.num_kv_heads, D = b.heads.head_dim;
    PagedKV kv;
    switch (layout) {
      case Layout::nhd: kv = PagedKV::nhd(k_base, v_base, b.dtype, P, S, H, D); break;
      case Layout::hnd: kv = PagedKV::hnd(k_base, v_base, b.dtype, P, S, H, D); break;
      case Layout::interleaved: kv = PagedKV::interleaved_nhd(k_base, b.dtype, P, S, H, D); break;
    }
    kv.k_scale = b.kv().k_scale, kv.v_scale = b.kv().v_scale;  // host scales: the CPU engine's
    return kv;
  }
};

Pool relayout(const Batch& b, Layout layout) {
  Pool pool;
  if (layout == Layout::nhd) {
    pool.k = b.k, pool.v = b.v;
    return pool;
  }
  const std::size_t e = dtype_size(b.dtype);
  pool.k.resize(layout == Layout::interleaved ? 2 * b.k.size() : b.k.size());
  if (layout != Layout::interleaved) pool.v.resize(b.v.size());
  const PagedKV src = b.kv();
  const PagedKV dst = pool.at(pool.k.data(), pool.v.empty() ? nullptr : pool.v.data(), b, layout);
  // dst views this pool's own buffers: writing through its pointers is writing them
  auto* k = static_cast<std::byte*>(const_cast<void*>(dst.k));
  auto* v = static_cast<std::byte*>(const_cast<void*>(dst.v));
  const std::size_t row = std::size_t(b.heads.head_dim) * e;
  for (std::int64_t p = 0; p < b.num_pages; ++p)
    for (int t = 0; t < b.page_size; ++t)
      for (int h = 0; h < b.heads.num_kv_heads; ++h) {
        std::memcpy(k + dst.offset(p, t, h) * e, b.k.data() + src.offset(p, t, h) * e, row);
        std::memcpy(v + dst.offset(p, t, h) * e, b.v.data() + src.offset(p, t, h) * e, row);
      }
  return pool;
}

struct Outcome {
  std::vector<float> out, lse;  // widened to fp32, lse in natural log
};

Outcome run_cpu_case(const Case& c, const Plan& plan, const Batch& b, const Pool& pool) {
  const int B = b.num_queries(), Hq = b.heads.num_qo_heads, D = b.heads.head_dim;
  const DType out_dtype = c.out_f32 ? DType::f32 : b.q_dtype;
  std::vector<std::byte> out(std::size_t(B) * Hq * D * dtype_size(out_dtype), std::byte{0xff});  // NaN
  std::vector<float> lse(std::size_t(B) * Hq, NAN);
  std::vector<std::byte> ws(plan.workspace().bytes + 16);
  auto* aligned = reinterpret_cast<std::byte*>((reinterpret_cast<std::uintptr_t>(ws.data()) + 15) / 16 * 16);
  const AttentionIO io{QueryRows::contiguous(b.q.data(), b.q_dtype, B, Hq, D),
                       OutputRows::contiguous(out.data(), out_dtype, B, Hq, D), LseRows::contiguous(lse.data(), B, Hq),
                       c.lse_base, c.sinks.empty() ? nullptr : c.sinks.data()};
  run_cpu(plan, pool.at(pool.k.data(), pool.v.empty() ? nullptr : pool.v.data(), b, c.layout), io,
          {aligned, plan.workspace().bytes}, {2});
  return {to_floats(out, out_dtype), lse};
}

#if CODEC_HAS_CUDA
struct DeviceBytes {
  void* p = nullptr;
  explicit DeviceBytes(std::size_t n) { CODEC_CUDA_CHECK(cudaMalloc(&p, std::max<std::size_t>(n, 256))); }
  DeviceBytes(const std::vector<std::byte>& host) : DeviceBytes(host.size()) {
    if (!host.empty()) CODEC_CUDA_CHECK(cudaMemcpy(p, host.data(), host.size(), cudaMemcpyHostToDevice));
  }
  ~DeviceBytes() { cudaFree(p); }
  DeviceBytes(const DeviceBytes&) = delete;
  DeviceBytes& operator=(const DeviceBytes&) = delete;
};

Outcome run_cuda_case(const Case& c, const Plan& plan, const Batch& b, const Pool& pool) {
  const int B = b.num_queries(), Hq = b.heads.num_qo_heads, D = b.heads.head_dim;
  const std::size_t out_bytes = std::size_t(B) * Hq * D * dtype_size(b.q_dtype);
  auto bytes_of = [](const std::vector<float>& x) {
    std::vector<std::byte> bytes(x.size() * sizeof(float));
    if (!x.empty()) std::memcpy(bytes.data(), x.data(), bytes.size());
    return bytes;
  };
  DeviceBytes k(pool.k), v(pool.v), q(b.q), out(out_bytes), lse(std::size_t(B) * Hq * 4),
      ws(cuda_workspace_bytes(plan)), sinks(bytes_of(c.sinks)), k_scale(bytes_of(b.k_scale)),
      v_scale(bytes_of(b.v_scale));
  CODEC_CUDA_CHECK(cudaMemset(out.p, 0xff, out_bytes));  // NaN: a row never written fails
  CODEC_CUDA_CHECK(cudaMemset(lse.p, 0xff, std::size_t(B) * Hq * 4));
  CODEC_CUDA_CHECK(cudaMemset(ws.p, 0xff, cuda_workspace_bytes(plan)));
  const std::span<std::byte> workspace(static_cast<std::byte*>(ws.p), cuda_workspace_bytes(plan));
  cuda_upload_plan(plan, workspace, nullptr);
  const AttentionIO io{QueryRows::contiguous(q.p, b.q_dtype, B, Hq, D), OutputRows::contiguous(out.p, b.q_dtype, B, Hq, D),
                       LseRows::contiguous(static_cast<float*>(lse.p), B, Hq), c.lse_base,
                       c.sinks.empty() ? nullptr : static_cast<const float*>(sinks.p)};
  PagedKV kv = pool.at(k.p, pool.v.empty() ? nullptr : v.p, b, c.layout);
  if (kv.k_scale.count > 0) {  // the device copies
    kv.k_scale.data = static_cast<const float*>(k_scale.p);
    kv.v_scale.data = static_cast<const float*>(v_scale.p);
  }
  run_cuda(plan, kv, io, workspace, nullptr);
  CODEC_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<std::byte> host(out_bytes);
  Outcome o;
  o.lse.resize(std::size_t(B) * Hq);
  CODEC_CUDA_CHECK(cudaMemcpy(host.data(), out.p, out_bytes, cudaMemcpyDeviceToHost));
  CODEC_CUDA_CHECK(cudaMemcpy(o.lse.data(), lse.p, o.lse.size() * 4, cudaMemcpyDeviceToHost));
  o.out = to_floats(host, b.q_dtype);
  return o;
}
#endif

// The batch's query tokens under the case's custom mask, where it has one.
WorkloadQueries case_queries(const Case& c, const Batch& b, const PageTable& table) {
  WorkloadQueries q = b.queries;
  if (c.custom_keep <= 0 || q.qo_indptr.empty()) return q;
  q.mask = QueryMask::custom;
  q.mask_bits.clear();
  std::vector<std::int64_t> kv_len;
  for (int r = 0; r < table.num_requests(); ++r) kv_len.push_back(table.request_tokens(r));
  const std::vector<std::int64_t> bytes = mask_byte_offsets(kv_len, q.view());
  q.mask_bits.assign(std::size_t(bytes.back()), 0);
  std::mt19937_64 rng(c.custom_seed);
  std::bernoulli_distribution keep(c.custom_keep);
  for (int r = 0; r < table.num_requests(); ++r)
    for (int i = 0; i < q.view().q_len(r); ++i) {
      if (rng() % 10 == 0) continue;  // a row that sees no key
      for (std::int64_t j = 0; j < kv_len[std::size_t(r)]; ++j) {
        const std::int64_t bit = bytes[std::size_t(r)] * 8 + i * kv_len[std::size_t(r)] + j;
        if (keep(rng)) q.mask_bits[std::size_t(bit / 8)] |= std::uint8_t(1u << (bit % 8));
      }
    }
  return q;
}

// Runs one case; returns "" when it matches the reference, else what differed.
std::string check_case(const Case& c, bool cuda) {
  Batch b = materialize(c.w);
  if (c.one_scale) b.k_scale.resize(1), b.v_scale.resize(1);  // head 0's for every head: a scalar k_scale
  const PageTable table = b.page_table();
  const WorkloadQueries case_q = case_queries(c, b, table);
  QueryBatch queries = case_q.view();
  queries.window_left = c.window_left;
  const ReferenceResult ref = reference_attention(table, b.kv(), c.w.heads, b.q.data(), queries, b.q_dtype, c.sinks);
  RooflineParams params = c.roofline_cpu ? RooflineParams::cpu(2) : RooflineParams::h200();
  params.concurrent_blocks = c.options.num_blocks;
  const RooflineCostModel cost(params, c.w.heads, c.w.dtype);
  const Forest derived = derive_forest(table);
  const Forest forest = c.flat ? flatten(derived) : derived;
  const PlannerOptions options = case_options(c, forest, c.w.heads, cost, table, queries);
  const Plan plan = make_plan(forest, c.w.heads, c.w.dtype, cost, options, queries);
  const Pool pool = relayout(b, c.layout);
#if CODEC_HAS_CUDA
  Outcome o = cuda ? run_cuda_case(c, plan, b, pool) : run_cpu_case(c, plan, b, pool);
#else
  Outcome o = run_cpu_case(c, plan, b, pool);
#endif
  if (c.lse_base == LseBase::two)
    for (float& x : o.lse) x /= kLog2E;
  const double tol = !cuda && c.out_f32 ? kCpuTolerance : tolerance(c.w.dtype);
  const double lse_tol = cuda ? kLseTolerance : kCpuTolerance;
  const ErrorStats e = compare(o.out.data(), ref.out), l = compare(o.lse.data(), ref.lse);
  std::string why;
  if (!e.within(tol)) why += "out " + e.describe() + " (tolerance " + std::to_string(tol) + ")";
  if (!l.within(lse_tol)) why += std::string(why.empty() ? "" : "; ") + "lse " + l.describe();
  return why;
}

// A random bad input: the call must throw codec::Error; "" when it did.
std::string check_refusal(std::uint64_t seed, int index, bool cuda) {
  Draw d(mix(~seed ^ mix(std::uint64_t(index) + 7)));
  Workload w = draw_workload(d, cuda);
  const Batch b = materialize(w);
  ForestManager::Tables t = b.tables;
  const RooflineCostModel cost(RooflineParams::h200(), w.heads, w.dtype);
  PlannerOptions opt;
  opt.num_blocks = d.in(1, 64);
  opt.max_tile_rows = kCudaMaxTileRows;
  const int B = b.num_requests(), Hq = w.heads.num_qo_heads, D = w.heads.head_dim;
  std::string what;
  std::function<void()> call;
  auto planned = [&](const ForestManager::Tables& tables) {
    return make_plan(derive_forest(tables.view(b.num_pages, b.page_size)), w.heads, w.dtype, cost, opt);
  };
  const int r = d.in(0, B - 1);
  std::vector<std::int32_t> qo_indptr;
  std::vector<std::uint8_t> bits;
  switch (d.in(0, 8)) {
    case 8: {  // query tokens: not increasing, more than a request's KV, or mask bytes of the wrong length
      for (int i = 0; i <= B; ++i) qo_indptr.push_back(i);
      const int kind = d.in(0, 2);
      what = kind == 0 ? "qo_indptr not increasing" : kind == 1 ? "q_len past kv_len" : "mask bytes";
      if (kind == 0) qo_indptr[std::size_t(r + 1)] = qo_indptr[std::size_t(r)];
      if (kind == 1)
        for (int i = r + 1; i <= B; ++i) qo_indptr[std::size_t(i)] += std::int32_t(w.request_tokens(r));
      if (kind == 2) bits.assign(std::size_t(d.in(0, B)), 0xff);  // a draft mask of one token a request takes B bytes
      call = [&, kind] {  // kind by value: the call comes after this block
        make_plan(derive_forest(b.page_table()), w.heads, w.dtype, cost, opt,
                  {qo_indptr, kind == 2 ? QueryMask::draft : QueryMask::causal, bits});
      };
      if (kind == 2 && int(bits.size()) == B) bits.push_back(0);
      break;
    }
    case 0:
      what = "last_page_len out of range";
      t.last_page_len[std::size_t(r)] = d.chance(0.5) ? 0 : b.page_size + d.in(1, 5);
      call = [&] { planned(t); };
      break;
    case 1:
      what = "page index outside the pool";
      t.indices[std::size_t(d.in(0, int(t.indices.size()) - 1))] = std::int32_t(b.num_pages + d.in(0, 3));
      call = [&] { planned(t); };
      break;
    case 2:
      what = "indptr not increasing";
      t.indptr[std::size_t(r + 1)] = t.indptr[std::size_t(r)];
      call = [&] { planned(t); };
      break;
    case 3:
      what = "heads not a multiple";
      call = [&] { make_plan(derive_forest(b.page_table()), {w.heads.num_kv_heads * 2 + 1, w.heads.num_kv_heads * 2, D},
                             w.dtype, cost, opt); };
      break;
    default: {  // run-time mismatches against a good plan
      const Plan plan = planned(t);
      std::vector<std::byte> ws(plan.workspace().bytes + 16);
      std::vector<float> out(std::size_t(B) * Hq * D), lse(std::size_t(B) * Hq);
      auto* aligned = reinterpret_cast<std::byte*>((reinterpret_cast<std::uintptr_t>(ws.data()) + 15) / 16 * 16);
      AttentionIO io{QueryRows::contiguous(b.q.data(), w.dtype, B, Hq, D),
                     OutputRows::contiguous(out.data(), DType::f32, B, Hq, D), LseRows::contiguous(lse.data(), B, Hq)};
      PagedKV kv = b.kv();
      std::span<std::byte> workspace{aligned, plan.workspace().bytes};
      switch (d.in(0, 4)) {
        case 0: what = "kv dtype"; kv.dtype = w.dtype == DType::f16 ? DType::bf16 : DType::f16; break;
        case 1: what = "kv page size"; kv.page_size += 1; break;
        case 2: what = "q batch"; io.q.batch += 1, io.out.batch += 1, io.lse.batch += 1; break;
        case 3: what = "pool too small"; kv.num_pages = plan.extent().max_page; break;  // 0 is refused too
        default: what = "workspace too small"; workspace = workspace.first(plan.workspace().bytes - 16); break;
      }
      try {
        run_cpu(plan, kv, io, workspace);
      } catch (const Error&) {
        return "";
      }
      return "bad input not refused: " + what;
    }
  }
  try {
    call();
  } catch (const Error&) {
    return "";
  }
  return "bad input not refused: " + what;
}

}  // namespace

int run_fuzz(const FuzzArgs& args) {
  const bool cuda = args.backend == "cuda";
  PlannerOptions device;
  if (cuda) {
#if CODEC_HAS_CUDA
    CODEC_CHECK(cuda_device_count() > 0, "--backend cuda: no CUDA device is available");
    device = cuda_planner_options({32, 8, 128}, DType::bf16);
#else
    CODEC_FAIL("--backend cuda: this build has no CUDA engine");
#endif
  }
  const int first = args.case_index >= 0 ? args.case_index : 0;
  const int count = args.case_index >= 0 ? 1 : args.count;
  int passed = 0, failed = 0;
  int causal = 0, trees = 0, custom = 0;  // cases of several query tokens a request, by mask
  int at_capacity = 0;                    // cases planned at a capacity (CUDA graphs)
  int fp8 = 0, one_scale = 0;             // cases of an fp8 cache, of one with a scale for every kv head
  int windows = 0;                        // cases of a sliding window
  int soft_caps = 0, sinks = 0;           // cases of a logit soft-cap, of attention sinks
  for (int i = first; i < first + count; ++i) {
    std::string why, what;
    Case c;
    try {
      if (i % 4 == 3) {  // every fourth case a bad input
        what = "bad input";
        why = check_refusal(args.seed, i, cuda);
      } else {
        c = draw_case(args.seed, i, cuda, device);
        what = c.describe();
        custom += c.custom_keep > 0;
        trees += c.w.tree_width > 0;
        causal += c.w.q_len > 1 && c.w.tree_width == 0 && c.custom_keep <= 0;
        at_capacity += c.capacity_slack >= 0;
        fp8 += is_fp8(c.w.dtype);
        one_scale += c.one_scale;
        windows += c.window_left >= 0;
        soft_caps += c.w.heads.logits_soft_cap > 0;
        sinks += !c.sinks.empty();
        why = check_case(c, cuda);
      }
    } catch (const std::exception& e) {
      why = std::string("threw: ") + e.what();
    }
    if (why.empty()) {
      ++passed;
      continue;
    }
    ++failed;
    std::string file;
    if (!c.w.nodes.empty()) {
      std::filesystem::create_directories(args.failures);
      file = args.failures + "/fuzz_" + std::to_string(args.seed) + "_" + std::to_string(i) + ".json";
      std::ofstream(file) << workload_to_json(c.w);
    }
    std::printf("FAIL case %d (seed %llu): %s: %s\n  replay: codec fuzz --seed %llu --case %d%s%s\n", i,
                static_cast<unsigned long long>(args.seed), what.c_str(), why.c_str(),
                static_cast<unsigned long long>(args.seed), i, cuda ? " --backend cuda" : "",
                file.empty() ? "" : ("\n  workload: " + file).c_str());
    std::fflush(stdout);
  }
  std::printf("%d passed, %d failed (several query tokens a request: %d causal, %d draft trees, %d custom masks; "
              "%d at a capacity; %d fp8 caches, %d of one scale; %d sliding windows, %d soft-caps, %d with sinks)\n",
              passed, failed, causal, trees, custom, at_capacity, fp8, one_scale, windows, soft_caps, sinks);
  return failed == 0 ? 0 : 1;
}

}  // namespace codec::tools
