#include "codec/engine/cpu_engine.hpp"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <vector>

#include "codec/core/error.hpp"
#include "codec/core/state.hpp"
#include "engine/run_checks.hpp"

namespace codec {

namespace {

constexpr int kTileTokens = 64;  // KV tokens converted to fp32 at once: 2 × 64 × 256 × 4 B = 128 KiB at most
constexpr int kTransposeRows = 8;  // tasks with at least this many rows transpose K (see task())
constexpr int kVecDims = 32;     // output dims accumulated in registers: 4 AVX2 or 2 AVX-512 vectors
constexpr int kRowBlock = 2;     // rows sharing each loaded K/V element: 2 × 64 scores fit 16 AVX2 registers

// Per-thread buffers, sized once per run for the largest task.
struct Scratch {
  std::vector<float> q, o, s, k, v;
  std::vector<SoftmaxState> softmax;
  std::vector<PlanView::Visible> seen;  // a masked task's rows: the node tokens each sees before its bits
  std::vector<int> query;               // and their requests (query tokens)
  Scratch(int rows, int dim)
      : q(std::size_t(rows) * dim), o(std::size_t(rows) * dim), s(std::size_t(rows) * kTileTokens),
        k(std::size_t(kTileTokens) * dim), v(std::size_t(kTileTokens) * dim), softmax(rows), seen(rows),
        query(rows) {}
};

// The keys of a tile that a masked task's rows see (PlanView::masks).
struct TileMask {
  const PlanView* plan = nullptr;  // null: every row sees every key
  int node = 0;
  int t0 = 0;  // the tile's first token of the node
};

// Stores n floats as the output dtype O (fp32 or the KV dtype).
template <typename O>
void store(O* dst, const float* src, int n) {
  for (int d = 0; d < n; ++d) dst[d] = from_float<O>(src[d]);
}

// Q: the queries' dtype; K: the KV cache's (Q, or fp8 under 16- or 32-bit
// queries), dequantised with its scales on load; O: the output's (Q or fp32).
template <typename Q, typename K, typename O>
class CpuRunner {
 public:
  CpuRunner(const PlanView& p, const PagedKV& kv, const AttentionIO& io, std::span<std::byte> ws,
            const WorkspaceLayout& layout, const HeadConfig& heads, int batch)
      : p_(p), kv_(kv), io_(io), sm_scale_(heads.scale()), soft_cap_(heads.logits_soft_cap), batch_(batch),
        lse_scale_(lse_scale(io.lse_base)),
        k_(static_cast<const K*>(kv.k)), v_(static_cast<const K*>(kv.v)), q_(static_cast<const Q*>(io.q.data)),
        out_(static_cast<O*>(io.out.data)), part_o_(reinterpret_cast<float*>(ws.data() + layout.o_offset)),
        part_lse_(reinterpret_cast<float*>(ws.data() + layout.lse_offset)) {}

  // Partial attention of one task: each KV tile is loaded and converted once
  // and applied to all of the task's rows.
  void task(const Task& t, Scratch& sc) const {
    const int D = p_.head_dim, G = p_.group, rows = t.row_end - t.row_begin;
    const std::int32_t* reqs = p_.node_reqs + p_.node_req_begin[t.node];
    const std::int32_t* pages = p_.node_pages + p_.node_page_begin[t.node];
    // prologue: load the rows' queries, pre-scaled, and where the plan masks, what each row sees
    for (int r = 0; r < rows; ++r) {
      const int v = t.row_begin + r;
      const Q* src = q_ + io_.q.offset(reqs[v / G], t.kv_head * G + v % G);
      float* dst = &sc.q[std::size_t(r) * D];
      for (int d = 0; d < D; ++d) dst[d] = to_float(src[d]) * sm_scale_;
      std::fill_n(&sc.o[std::size_t(r) * D], D, 0.f);
      sc.softmax[r] = SoftmaxState{};
      sc.query[r] = reqs[v / G];
      sc.seen[r] = p_.visible(t.node, reqs[v / G], t.kv_begin, t.kv_end);
    }
    TileMask mask;
    if (p_.masks) mask = {&p_, t.node, 0};
    // With many rows, K is stored transposed (kt[d][j]) so scores accumulate
    // across a row of tokens with vector FMAs and no horizontal sums; with few
    // rows (a flat task has G) the strided transpose costs more than it saves.
    const bool transposed = rows >= kTransposeRows;
    const float k_scale = kv_.k_scale.at(t.kv_head), v_scale = kv_.v_scale.at(t.kv_head);
    auto load = [&](int j, std::int32_t page, std::int32_t slot) {  // token j of the tile
      const std::int64_t off = kv_.offset(page, slot, t.kv_head);
      if (transposed)
        for (int d = 0; d < D; ++d) sc.k[std::size_t(d) * kTileTokens + j] = to_float(k_[off + d]) * k_scale;
      else
        for (int d = 0; d < D; ++d) sc.k[std::size_t(j) * D + d] = to_float(k_[off + d]) * k_scale;
      for (int d = 0; d < D; ++d) sc.v[std::size_t(j) * D + d] = to_float(v_[off + d]) * v_scale;
    };
    auto attend = [&](int r, int r_end, int n, const TileMask& m) {  // rows [r, r_end) to the tile's n tokens
      for (; r + kRowBlock <= r_end; r += kRowBlock) tile_rows<kRowBlock>(sc, r, n, transposed, m);
      for (; r < r_end; ++r) tile_rows<1>(sc, r, n, transposed, m);
    };
    for (int t0 = t.kv_begin; t0 < t.kv_end; t0 += kTileTokens) {
      const int n = std::min(kTileTokens, t.kv_end - t0);
      for (int j = 0; j < n; ++j) load(j, pages[(t0 + j) / p_.page_size], (t0 + j) % p_.page_size);
      mask.t0 = t0;
      attend(0, rows, n, mask);
    }
    // each request's rows to its share of the request's tail (PlanView::task_tails)
    if (const PlanView::TailRange tails = p_.task_tails(t); tails.end > tails.begin) {
      for (int r = 0; r < rows;) {
        const int k = (t.row_begin + r) / G, r_end = std::min(rows, (k + 1) * G - t.row_begin);
        const int e = p_.node_req_begin[t.node] + k;
        const int end = std::min(p_.tail_indptr[e + 1], tails.end);
        for (int i = std::max(p_.tail_indptr[e], tails.begin); i < end; i += kTileTokens) {
          const int n = std::min(kTileTokens, end - i);
          for (int j = 0; j < n; ++j) load(j, p_.tail_tokens[i + j].page, p_.tail_tokens[i + j].slot);
          attend(r, r_end, n, TileMask{});  // a plan with masks takes in no tails
        }
        r = r_end;
      }
    }
    // epilogue: normalise; a row with a single partial goes straight to the output
    for (int r = 0; r < rows; ++r) {
      const int v = t.row_begin + r, req = reqs[v / G], head = t.kv_head * G + v % G;
      const float inv_l = sc.softmax[r].inv_l(), lse = sc.softmax[r].lse();
      float* o = &sc.o[std::size_t(r) * D];
      for (int d = 0; d < D; ++d) o[d] *= inv_l;
      if (p_.num_partials(req) == 1) {
        write_row(req, head, o, lse);
      } else {
        const std::int64_t slot = p_.slot_of(t.node, t.chunk, t.kv_head, v);
        std::copy_n(o, D, part_o_ + slot * D);
        part_lse_[slot] = lse;
      }
    }
  }

  // One converted KV tile applied to R consecutive rows: each K and V element
  // loaded from L1 feeds R FMAs (R accumulators per vector lane).
  template <int R>
  void tile_rows(Scratch& sc, int r0, int n, bool transposed, const TileMask& mask) const {
    const int D = p_.head_dim;
    float* s[R];
    for (int i = 0; i < R; ++i) s[i] = &sc.s[std::size_t(r0 + i) * kTileTokens];
    if (transposed) {
      float acc[R][kTileTokens] = {};  // local arrays stay in vector registers
      for (int d = 0; d < D; ++d) {
        const float* kt = &sc.k[std::size_t(d) * kTileTokens];
        for (int i = 0; i < R; ++i) {
          const float qd = sc.q[std::size_t(r0 + i) * D + d];
#pragma omp simd
          for (int j = 0; j < kTileTokens; ++j) acc[i][j] += qd * kt[j];  // lanes j >= n are ignored
        }
      }
      for (int i = 0; i < R; ++i) std::copy_n(acc[i], kTileTokens, s[i]);
    } else {
      for (int i = 0; i < R; ++i) {
        const float* q = &sc.q[std::size_t(r0 + i) * D];
        for (int j = 0; j < n; ++j) {
          const float* k = &sc.k[std::size_t(j) * D];
          float dot = 0.f;
#pragma omp simd reduction(+ : dot)
          for (int d = 0; d < D; ++d) dot += q[d] * k[d];
          s[i][j] = dot;
        }
      }
    }
    if (soft_cap_ > 0.f)  // s = sm_scale·q·k (q came pre-scaled) becomes cap·tanh(s / cap)
      for (int i = 0; i < R; ++i)
        for (int j = 0; j < n; ++j) s[i][j] = soft_cap_ * std::tanh(s[i][j] / soft_cap_);
    // masked keys score −inf: they weigh 0 and move no max
    if (mask.plan)
      for (int i = 0; i < R; ++i) {
        const PlanView::Visible seen = sc.seen[r0 + i];
        for (int j = 0; j < n; ++j) {
          const int t = mask.t0 + j;
          if (t < seen.begin || t >= seen.end || !mask.plan->sees(mask.node, sc.query[r0 + i], t)) s[i][j] = kNegInf;
        }
      }
    float factor[R];
    for (int i = 0; i < R; ++i) {
      SoftmaxState& st = sc.softmax[r0 + i];
      factor[i] = st.rescale(*std::max_element(s[i], s[i] + n));
      if (st.m == kNegInf) {  // every key so far masked: the row stays the empty state
        std::fill_n(s[i], n, 0.f);
        continue;
      }
      float sum = 0.f;
      for (int j = 0; j < n; ++j) sum += (s[i][j] = std::exp(s[i][j] - st.m));  // s becomes p
      st.l += sum;
    }
    // O = factor·O + P·V, kVecDims output dims of R rows at a time in registers.
    for (int d0 = 0; d0 < D; d0 += kVecDims) {
      float acc[R][kVecDims];
      for (int i = 0; i < R; ++i) {
        const float* o = &sc.o[std::size_t(r0 + i) * D + d0];
#pragma omp simd
        for (int e = 0; e < kVecDims; ++e) acc[i][e] = o[e] * factor[i];
      }
      for (int j = 0; j < n; ++j) {
        const float* v = &sc.v[std::size_t(j) * D + d0];
        for (int i = 0; i < R; ++i) {
          const float pj = s[i][j];
#pragma omp simd
          for (int e = 0; e < kVecDims; ++e) acc[i][e] += pj * v[e];
        }
      }
      for (int i = 0; i < R; ++i) std::copy_n(acc[i], kVecDims, &sc.o[std::size_t(r0 + i) * D + d0]);
    }
  }

  // Merges the partials of every row of one request, in the plan's order
  // (a request without partials, past a capacity plan's batch, gets the empty state).
  void merge(int req, std::vector<float>& acc) const {
    if (p_.num_partials(req) == 1) return;  // written by its only task
    const int D = p_.head_dim;
    for (int h = 0; h < p_.num_qo_heads; ++h) {
      std::fill_n(acc.begin(), D, 0.f);
      float lse = kNegInf;  // starts as the empty state
      for (int j = p_.partial_indptr[req]; j < p_.partial_indptr[req + 1]; ++j) {
        const std::int64_t slot = p_.partial_slot(j, h);
        const MergeWeights w = merge_weights(lse, part_lse_[slot]);
        const float* o = part_o_ + slot * D;
#pragma omp simd
        for (int d = 0; d < D; ++d) acc[d] = w.w1 * acc[d] + w.w2 * o[d];
        lse = w.lse;
      }
      write_row(req, h, acc.data(), lse);
    }
  }

 private:
  // A finished row: with a sink (AttentionIO::sinks), its denominator gains
  // exp(sink): o scales by exp(lse − lse'), lse' = log(exp(lse) + exp(sink)).
  // Rows past the plan's batch (a capacity's) stay the empty state.
  void write_row(int req, int head, const float* o, float lse) const {
    float* dst_lse = io_.lse.data ? &io_.lse.data[io_.lse.offset(req, head)] : nullptr;
    if (io_.sinks && req < batch_) {
      const MergeWeights w = merge_weights(lse, io_.sinks[head]);  // the sink: a partial of value 0
      float scaled[kMaxDim];
      for (int d = 0; d < p_.head_dim; ++d) scaled[d] = w.w1 * o[d];
      store(out_ + io_.out.offset(req, head), scaled, p_.head_dim);
      if (dst_lse) *dst_lse = w.lse * lse_scale_;
      return;
    }
    store(out_ + io_.out.offset(req, head), o, p_.head_dim);
    if (dst_lse) *dst_lse = lse * lse_scale_;
  }

  static constexpr int kMaxDim = 256;
  const PlanView& p_;
  const PagedKV& kv_;
  const AttentionIO& io_;
  float sm_scale_;
  float soft_cap_;
  int batch_;
  float lse_scale_;
  const K* k_;
  const K* v_;
  const Q* q_;
  O* out_;
  float* part_o_;
  float* part_lse_;
};

void validate_run(const Plan& plan, const PagedKV& kv, const AttentionIO& io, std::span<std::byte> workspace) {
  check_plan_and_kv(plan, kv, "run_cpu");
  check_host_scales(kv);
  check_io(plan, io, /*out_f32=*/true, "run_cpu");
  if (io.sinks)
    for (int h = 0; h < plan.heads().num_qo_heads; ++h)
      CODEC_CHECK(!std::isnan(io.sinks[h]) && io.sinks[h] < INFINITY, "run_cpu: sinks[", h, "] = ", io.sinks[h],
                  " must be a number below +inf");
  const WorkspaceLayout layout = plan.workspace();
  CODEC_CHECK(workspace.size() >= layout.bytes, "run_cpu: workspace of ", workspace.size(),
              " bytes is smaller than the ", layout.bytes, " bytes the plan needs");
  CODEC_CHECK(reinterpret_cast<std::uintptr_t>(workspace.data()) % 16 == 0,
              "run_cpu: workspace must be 16-byte aligned");
}

template <typename Q, typename K, typename O>
void run_with(const Plan& plan, const PagedKV& kv, const AttentionIO& io, std::span<std::byte> workspace,
              int threads) {
  PlanView p = plan.view();
  p.num_requests = io.out.batch;  // the rows this run writes (AttentionIO)
  const CpuRunner<Q, K, O> runner(p, kv, io, workspace, plan.workspace(), plan.heads(), plan.num_requests());
  const int max_rows = std::max({1, plan.extent().max_task_rows, plan.extent().max_wide_rows});
  // Phase 1 (PAC): blocks, then wide blocks, are the plan's balanced bins; threads take them in turn.
  const int bins = p.num_blocks + p.num_wide_blocks;
#pragma omp parallel num_threads(threads)
  {
    Scratch scratch(max_rows, p.head_dim);
#pragma omp for schedule(dynamic, 1)
    for (int b = 0; b < bins; ++b) {
      const std::int32_t* indptr = b < p.num_blocks ? p.block_indptr + b : p.wide_indptr + (b - p.num_blocks);
      for (int i = indptr[0]; i < indptr[1]; ++i) runner.task(p.tasks[i], scratch);
    }
  }
  // Phase 2 (POR): rows are independent.
#pragma omp parallel num_threads(threads)
  {
    std::vector<float> acc(p.head_dim);
#pragma omp for schedule(dynamic, 16)
    for (int r = 0; r < p.num_requests; ++r) runner.merge(r, acc);
  }
}

}  // namespace

void run_cpu(const Plan& plan, const PagedKV& kv, const AttentionIO& io, std::span<std::byte> workspace,
             const CpuOptions& options) {
  validate_run(plan, kv, io, workspace);
  const int threads = options.num_threads > 0 ? options.num_threads : omp_get_max_threads();
  auto with_q = [&](auto q_tag, auto kv_tag) {
    using Q = decltype(q_tag);
    using K = decltype(kv_tag);
    if (io.out.dtype == DType::f32) run_with<Q, K, float>(plan, kv, io, workspace, threads);
    else run_with<Q, K, Q>(plan, kv, io, workspace, threads);
  };
  dispatch_kv_dtype(kv.dtype, [&](auto kv_tag) {
    using K = decltype(kv_tag);
    if constexpr (std::is_same_v<K, e4m3_t> || std::is_same_v<K, e5m2_t>)  // q of its own dtype (check_io)
      dispatch_dtype(io.q.dtype, [&](auto q_tag) { with_q(q_tag, kv_tag); });
    else
      with_q(kv_tag, kv_tag);
  });
}

PlannerOptions cpu_planner_options(int threads) {
  PlannerOptions options;
  options.num_blocks = threads;
  options.max_tile_rows = kCpuTileRows;
  return options;
}

std::int64_t cpu_workspace_slots(std::size_t bytes, int head_dim) {
  // workspace_for(s) grows by 4·(head_dim + 1) bytes a slot, plus two 16-byte alignments
  std::int64_t slots = std::int64_t(bytes / (4 * (std::size_t(head_dim) + 1)));
  while (slots > 0 && Plan::workspace_for(slots, head_dim).bytes > bytes) --slots;
  return slots;
}

void merge_states_cpu(const QueryRows& o_a, const LseRows& lse_a, const QueryRows& o_b, const LseRows& lse_b,
                      const OutputRows& out, const LseRows& lse_out, LseBase base) {
  check_merge_states(o_a, lse_a, o_b, lse_b, out, lse_out);
  // Inputs in `base`; merge_weights works in natural log.
  const float to_e = base == LseBase::two ? 1.f / kLog2E : 1.f, from_e = lse_scale(base);
  std::vector<float> a(o_a.dim), b(o_a.dim), m(o_a.dim);
  auto load = [](const QueryRows& t, int n, int h, std::vector<float>& dst) {
    dispatch_dtype(t.dtype, [&](auto tag) {
      const auto* src = static_cast<const decltype(tag)*>(t.data) + t.offset(n, h);
      for (int d = 0; d < t.dim; ++d) dst[d] = to_float(src[d]);
    });
  };
  for (int n = 0; n < o_a.batch; ++n)
    for (int h = 0; h < o_a.heads; ++h) {
      load(o_a, n, h, a);
      load(o_b, n, h, b);
      const MergeWeights w =
          merge_weights(lse_a.data[lse_a.offset(n, h)] * to_e, lse_b.data[lse_b.offset(n, h)] * to_e);
      for (int d = 0; d < o_a.dim; ++d) m[d] = w.w1 * a[d] + w.w2 * b[d];
      dispatch_dtype(out.dtype, [&](auto tag) {
        store(static_cast<decltype(tag)*>(out.data) + out.offset(n, h), m.data(), out.dim);
      });
      lse_out.data[lse_out.offset(n, h)] = w.lse * from_e;
    }
}

void copy_pages_cpu(const PagedKV& kv, std::span<const PageCopy> copies) {
  check_page_copies(kv, copies);
  const std::size_t row = std::size_t(kv.head_dim) * dtype_size(kv.dtype);
  for (auto* pool : {kv.k, kv.v}) {
    auto* base = static_cast<std::byte*>(const_cast<void*>(pool));  // the caller's pool, writable by contract
    for (const PageCopy& c : copies)
      for (int t = 0; t < c.num_tokens; ++t)
        for (int h = 0; h < kv.num_kv_heads; ++h)
          std::memmove(base + kv.offset(c.dst, t, h) * dtype_size(kv.dtype),
                       base + kv.offset(c.src, t, h) * dtype_size(kv.dtype), row);
  }
}

}  // namespace codec
