#pragma once
// Wide partial attention (sm_90a, head_dim 64 or 128): the plan's wide tasks, up to
// 128 rows each (the planner gives them 96 or more on the H200: Planner 13 in
// docs/DESIGN_NOTES.md), one block per SM, warp-specialised in
// FlashAttention-3's manner (kernel_traits.cuh, WideTraits, has the sizing).
// Block b runs the tasks tasks[wide_indptr[b] .. wide_indptr[b + 1]) in order:
//   - warpgroup 0, the producer, copies each task's query rows into the Q
//     buffer and its KV tiles into a ring of K and V stages with cp.async,
//     and signals each buffer's mbarrier when its copies land; it runs ahead
//     into the next task while the consumers finish this one;
//   - warpgroups 1 and 2, the consumers, take rows 0-63 and 64-127: S = Q Kᵀ
//     (both operands in shared memory) and O += P V (P in registers) on wgmma
//     with an online softmax in fp32, and write their rows' states.
// A consumer overlaps within itself: Q·Kᵀ of tile t is issued with P·V of
// tile t − 1 still running, and the softmax of tile t runs while P·V does;
// o is rescaled and P repacked once that P·V is done. The two consumers take
// turns to issue their products (ping-pong, through two named barriers), so
// that one's softmax runs while the tensor cores work on the other's. Each K
// buffer is released after its Q·Kᵀ, each V buffer after its P·V, the Q
// buffer after the task's last Q·Kᵀ.
//
// Under an fp8 cache the producer copies each tile's bytes into a raw stage
// and converts the tile before it into the ring (fp16, tile/fp8.cuh), one
// tile behind its copies and none behind at a task's end (the next task's Q
// waits for this one's last Q·Kᵀ, which waits for its last tile); each
// consumer converts its own 64 query rows into fp16 in place.
//
// A task also takes in its share of its rows' tails (PlanView::task_tails):
// after the node's tiles, the tails of its requests, concatenated, stream
// through the same ring, and each row masks every token but its own
// request's.
//
// The narrow kernel (pac.cuh) runs the plan's other tasks after this one, as
// a programmatic dependent launch: its blocks take each SM as its wide block
// leaves, and wait for this grid before they exit, so that the merge, which
// waits for theirs, sees every wide task's partials. A plan without other
// tasks launches no narrow kernel; its merge waits for this grid itself.
#include <cuda_runtime_api.h>

#include <cstdint>
#include <type_traits>

#include "codec/core/state.hpp"
#include "codec/engine/cuda_check.hpp"
#include "codec/plan/plan.hpp"
#include "engine/cuda/kernel_traits.cuh"
#include "engine/cuda/kernels/launch.cuh"
#include "engine/cuda/kernels/pac.cuh"
#include "engine/cuda/primitives/pipeline.cuh"
#include "engine/cuda/primitives/ptx.cuh"
#include "engine/cuda/primitives/warp.cuh"
#include "engine/cuda/primitives/wgmma.cuh"
#include "engine/cuda/tile/fp8.cuh"
#include "engine/cuda/tile/kv_loader.cuh"
#include "engine/cuda/tile/row_masks.cuh"
#include "engine/cuda/tile/softmax.cuh"

namespace codec::cuda {

#if CODEC_WGMMA

// The buffers of WideTraits' layout in the block's shared memory.
template <int D, typename T, bool kFp8>
class WideSmem {
  using Tr = WideTraits<D, T, kFp8>;

 public:
  using Ring = std::conditional_t<kFp8, __half, T>;  // the ring's element (MmaElem)
  __device__ explicit WideSmem(unsigned char* smem) : smem_(smem) {}
  __device__ T* q(int b) const { return reinterpret_cast<T*>(smem_ + Tr::kQOffset + b * Tr::kQBytes); }
  __device__ Ring* k(int s) const { return reinterpret_cast<Ring*>(smem_ + Tr::kKOffset + s * Tr::kTileBytes); }
  __device__ Ring* v(int s) const { return reinterpret_cast<Ring*>(smem_ + Tr::kVOffset + s * Tr::kTileBytes); }
  // kFp8: raw stage s's K bytes, then its V bytes; the reduction's words of consumer wg
  __device__ std::uint8_t* raw_k(int s) const { return smem_ + Tr::kRawOffset + s * 2 * Tr::kRawTileBytes; }
  __device__ std::uint8_t* raw_v(int s) const { return raw_k(s) + Tr::kRawTileBytes; }
  __device__ std::uint32_t* scratch(int wg) const {
    return reinterpret_cast<std::uint32_t*>(smem_ + Tr::kScratchOffset) + 4 * wg;
  }
  __device__ std::uint64_t* q_full(int b) const { return bar(b); }
  __device__ std::uint64_t* q_empty(int b) const { return bar(Tr::kQBuffers + b); }
  __device__ std::uint64_t* k_full(int s) const { return bar(2 * Tr::kQBuffers + s); }
  __device__ std::uint64_t* k_empty(int s) const { return bar(2 * Tr::kQBuffers + Tr::kStages + s); }
  __device__ std::uint64_t* v_full(int s) const { return bar(2 * Tr::kQBuffers + 2 * Tr::kStages + s); }
  __device__ std::uint64_t* v_empty(int s) const { return bar(2 * Tr::kQBuffers + 3 * Tr::kStages + s); }
  __device__ std::uint64_t* raw_full(int s) const { return bar(2 * Tr::kQBuffers + 4 * Tr::kStages + s); }

  // Thread 0 initialises every barrier; the block synchronises after.
  __device__ void init() const {
    for (int b = 0; b < Tr::kQBuffers; ++b) {
      mbarrier_init(q_full(b), Tr::kFullArrivals);
      mbarrier_init(q_empty(b), Tr::kEmptyArrivals);
    }
    for (int s = 0; s < Tr::kStages; ++s) {
      mbarrier_init(k_full(s), Tr::kFullArrivals);
      mbarrier_init(k_empty(s), Tr::kEmptyArrivals);
      mbarrier_init(v_full(s), Tr::kFullArrivals);
      mbarrier_init(v_empty(s), Tr::kEmptyArrivals);
    }
    for (int s = 0; s < Tr::kRawStages; ++s) mbarrier_init(raw_full(s), Tr::kFullArrivals);
    mbarrier_init_fence();
  }

 private:
  __device__ std::uint64_t* bar(int i) const {
    return reinterpret_cast<std::uint64_t*>(smem_ + Tr::kBarrierOffset) + i;
  }
  unsigned char* smem_;
};

// The k-th use (from 0) of a ring buffer of n: its slot, and the parity of the
// phase that use completes (mbarrier_wait; primitives/pipeline.cuh).
struct RingUse {
  int slot;
  std::uint32_t parity;
  __device__ RingUse(int k, int n) : slot(k % n), parity(std::uint32_t(k / n) & 1u) {}
};

// Tiles of kTileTokens a task's tails take.
template <int kTileTokens>
__device__ __forceinline__ int tail_tiles(const PlanView::TailRange& tails) {
  return (tails.end - tails.begin + kTileTokens - 1) / kTileTokens;
}

// Named barriers beside __syncthreads' 0: the consumers' turns (WideTurns),
// each consumer's own, and the producer's.
inline constexpr int kTurnBarrier = 1, kConsumerBarrier = 3, kProducerBarrier = 5;

// Producer (warpgroup 0): the query rows, then every KV tile of each task.
template <int D, typename T, bool kFp8>
__device__ __forceinline__ void wide_produce(const PacParams& p, int begin, int end, const PageGeometry geo,
                                             const WideSmem<D, T, kFp8>& sm) {
  using Tr = WideTraits<D, T, kFp8>;
  using Loader = KvLoader<D, T, 128, Tr::kTileTokens, Tr::kTileTokens, StageElem<T, kFp8>>;
  const PlanView& plan = p.plan;
  // threadIdx.x < 128 here; saying so lets the compiler see that a thread's
  // rows of a tile (tid / 16 + 8k) share their swizzle (row % 8), and keep
  // one address for them instead of spilling sixteen
  const int tid = threadIdx.x % 128, G = plan.group;
  int tile_use = 0;  // KV tiles copied so far, over all tasks: the ring's position
  [[maybe_unused]] int pending = -1;  // kFp8: the tile (its use) copied but not yet converted
  // kFp8: tile u's bytes, landed, into ring stage u, once the consumers are
  // done with what it held; then every producer thread is done reading the
  // raw stage, which tile u + kRawStages may refill
  [[maybe_unused]] auto convert = [&](int u) {
    if constexpr (kFp8) {
      const RingUse rs(u, Tr::kRawStages), st(u, Tr::kStages);
      constexpr int N = Tr::kTileTokens;
      mbarrier_wait(sm.raw_full(rs.slot), rs.parity);
      mbarrier_wait(sm.k_empty(st.slot), st.parity ^ 1u);
      convert_fp8_rows<D, N, N, 128>(sm.raw_k(rs.slot), sm.k(st.slot), 0, tid, p.fp8_e5m2);
      wgmma::proxy_fence();  // the generic writes, before the tensor cores' reads
      mbarrier_arrive(sm.k_full(st.slot));
      mbarrier_wait(sm.v_empty(st.slot), st.parity ^ 1u);
      convert_fp8_rows<D, N, N, 128>(sm.raw_v(rs.slot), sm.v(st.slot), 0, tid, p.fp8_e5m2);
      wgmma::proxy_fence();
      mbarrier_arrive(sm.v_full(st.slot));
      named_barrier_sync(kProducerBarrier, 128);
    } else {
      (void)u;
    }
  };
  for (int i = begin; i < end; ++i) {
    const Task task = plan.tasks[i];
    // How copy moves a tile. A node of more rows than a task holds has other
    // tasks reading the same KV, mostly from L2, where the producer's issue
    // slots tend to bind: K and V go in one pass once both buffers are free,
    // one shuffle of each token's offset serving both (9 instructions a row
    // against 12). Otherwise the KV comes from HBM, and K goes as soon as its
    // buffer frees, a tile ahead of V, to keep more of it in flight
    // (8a64ae9: where each way wins; docs/DESIGN_NOTES.md, Wide kernel). An
    // fp8 cache's tiles go in one pass into a raw stage.
    [[maybe_unused]] const bool one_pass = plan.node_rows(task.node) > Tr::kMaxRows;
    const int rows = task.row_end - task.row_begin;
    const int node_tiles = (task.kv_end - task.kv_begin + Tr::kTileTokens - 1) / Tr::kTileTokens;
    const std::int32_t* reqs = plan.node_reqs + task.req_begin;
    const Loader kv(p.kv, task, plan.node_pages + task.page_begin, geo, node_tiles, nullptr, tid, 0);
    typename Loader::LaneToken next = kv.lookup(0);  // page ids one tile ahead of their copies

    // query rows 0 .. 127; those past the task's are zeros, whose results no one writes
    const RingUse qb(i - begin, Tr::kQBuffers);
    mbarrier_wait(sm.q_empty(qb.slot), qb.parity ^ 1u);
    T* sq = sm.q(qb.slot);
    const T* q = static_cast<const T*>(p.q);
    for (int c = tid; c < Tr::kMaxRows * Tr::kChunks; c += 128) {
      const int r = c / Tr::kChunks, cq = c % Tr::kChunks, v = task.row_begin + r;
      const T* src = q;
      if (r < rows) src += p.q_rows.at(reqs[v / G], task.kv_head * G + v % G) + 8 * cq;
      cp_async_16(sq + tile_offset<Tr::kMaxRows>(r, cq), src, r < rows);
    }
    mbarrier_arrive_on_copies(sm.q_full(qb.slot));

    auto copy = [&](const typename Loader::LaneToken& token) {  // a tile into the ring's next stage
      if constexpr (kFp8) {  // into the next raw stage, then the one before converted
        const RingUse rs(tile_use, Tr::kRawStages);
        kv.template copy_rows<true, true, false>(token, sm.raw_k(rs.slot), sm.raw_v(rs.slot));
        mbarrier_arrive_on_copies(sm.raw_full(rs.slot));
        if (pending >= 0) convert(pending);
        pending = tile_use++;
      } else {
        const RingUse st(tile_use++, Tr::kStages);
        mbarrier_wait(sm.k_empty(st.slot), st.parity ^ 1u);
        if (!one_pass) {
          kv.template copy_rows<true, false, false>(token, sm.k(st.slot), nullptr);
          mbarrier_arrive_on_copies(sm.k_full(st.slot));
        }
        mbarrier_wait(sm.v_empty(st.slot), st.parity ^ 1u);
        if (one_pass) {
          kv.template copy_rows<true, true, false>(token, sm.k(st.slot), sm.v(st.slot));
          mbarrier_arrive_on_copies(sm.k_full(st.slot));
        } else {
          kv.template copy_rows<false, true, false>(token, nullptr, sm.v(st.slot));
        }
        mbarrier_arrive_on_copies(sm.v_full(st.slot));
      }
    };
    for (int t = 0; t < node_tiles; ++t) {
      const typename Loader::LaneToken token = next;
      if (t + 1 < node_tiles) next = kv.lookup(t + 1);
      copy(token);
    }
    // the tails', in a loop of their own as the consumers' are
    const PlanView::TailRange tails = plan.task_tails(task);
    const int num_tails = tail_tiles<Tr::kTileTokens>(tails);
    if (num_tails > 0) next = kv.lookup_listed(plan.tail_tokens, tails.begin, tails.end, 0);
    for (int t = 0; t < num_tails; ++t) {
      const typename Loader::LaneToken token = next;
      if (t + 1 < num_tails) next = kv.lookup_listed(plan.tail_tokens, tails.begin, tails.end, t + 1);
      copy(token);
    }
    if constexpr (kFp8) {  // the task's last tile, before the next task's Q waits for its last Q·Kᵀ
      if (pending >= 0) convert(pending);
      pending = -1;
    }
  }
  asm volatile("cp.async.wait_all;\n" ::: "memory");  // no copy outlives the thread that issued it
}

// Ping-pong: consumer wg issues its products after the other has issued its
// own (named barrier 1 + wg, both consumers' 256 threads), then lets the
// other go. Consumer 0 goes first.
class WideTurns {
 public:
  // `tasks`: whether the block has any (else no turn is taken, nor given)
  __device__ WideTurns(int wg, bool tasks) : wg_(wg) {
    if (wg_ == 1 && tasks) arrive(0);  // consumer 0's first turn
  }
  __device__ void wait() const { named_barrier_sync(kTurnBarrier + wg_, 256); }
  // `last`: consumer 1's last turn of the block lets no one go (no one waits for it)
  __device__ void pass(bool last) const {
    if (!(last && wg_ == 1)) arrive(wg_ ^ 1);
  }

 private:
  __device__ static void arrive(int wg) { named_barrier_arrive(kTurnBarrier + wg, 256); }
  int wg_;
};

// A consumer warp's release of a buffer it has finished reading (one arrival a warp).
__device__ __forceinline__ void wide_release(std::uint64_t* bar) {
  if (threadIdx.x % 32 == 0) mbarrier_arrive(bar);
}

// Waits for a buffer the producer filled, then orders the tensor cores' reads
// (the async proxy) after its cp.async writes (the generic proxy).
__device__ __forceinline__ void wide_acquire(std::uint64_t* bar, std::uint32_t parity) {
  mbarrier_wait(bar, parity);
  wgmma::proxy_fence();
}

template <int N>
__device__ __forceinline__ void fence_fragments(float (&r)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) wgmma::fence_operand(r[i]);
}
// P's registers are read by a P·V in flight: keep them (and their values) until its wait.
template <int kSteps>
__device__ __forceinline__ void fence_fragments(std::uint32_t (&a)[kSteps][4]) {
#pragma unroll
  for (int j = 0; j < kSteps; ++j)
#pragma unroll
    for (int q = 0; q < 4; ++q) asm volatile("" : "+r"(a[j][q])::"memory");
}

// One consumer's S = Q Kᵀ (64 rows × kTileTokens tokens), issued and committed.
template <int D, typename T>
__device__ __forceinline__ void wide_issue_qk(float (&s)[WideTraits<D, T>::kTileTokens / 2], std::uint64_t dq,
                                              std::uint32_t sk) {
  using Tr = WideTraits<D, T>;
  constexpr int N = Tr::kTileTokens;
  const std::uint64_t dk = wgmma::desc(sk, 16, 1024);
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) {  // k16 step kk: column block kk / 4, bytes 32 · (kk % 4) of its rows
    const std::uint32_t k_off = 32 * (kk % 4);
    wgmma::mma_ss<N, T>(s, wgmma::advance(dq, (kk / 4) * (Tr::kMaxRows * 128) + k_off),
                        wgmma::advance(dk, (kk / 4) * (N * 128) + k_off), kk > 0);
  }
  wgmma::commit();
}

// One consumer's O += P V over a tile, issued and committed.
template <int D, typename T>
__device__ __forceinline__ void wide_issue_pv(float (&o)[D / 2],
                                              const std::uint32_t (&a)[WideTraits<D, T>::kTileTokens / 16][4],
                                              std::uint32_t sv) {
  constexpr int N = WideTraits<D, T>::kTileTokens;
  const std::uint64_t dv = wgmma::desc(sv, N * 128, 1024);
#pragma unroll
  for (int j = 0; j < N / 16; ++j) wgmma::mma_rs<D, T>(o, a[j], wgmma::advance(dv, 2048 * j));  // 16 tokens a step
  wgmma::commit();
}

// The online softmax of a tile's scores, in place: s becomes P = exp(scaled
// score − m) in fp32, l takes the tile's sums, and factor[h] is what o must
// be scaled by for row h's new max (applied by the caller once the P·V that
// accumulates into o is done).
// The caller transforms and masks the scores first (wide_consume: TaskScale::mod, node_mask, tail_mask).
template <int kSteps>
__device__ __forceinline__ void wide_softmax(float (&s)[8 * kSteps], float sm_scale, SoftmaxState (&state)[2],
                                             float (&factor)[2]) {
  float tile_max[2];
  row_max<kSteps>(s, tile_max);
#pragma unroll
  for (int h = 0; h < 2; ++h) factor[h] = state[h].rescale(tile_max[h] * sm_scale);
  softmax_exp<kSteps>(s, exp_scale(state, sm_scale), state);
}

template <int kSteps, typename T>
__device__ __forceinline__ void pack_p(std::uint32_t (&a)[kSteps][4], const float (&s)[8 * kSteps]) {
#pragma unroll
  for (int j = 0; j < kSteps; ++j) p_fragment<T>(a[j], s, j);
}

// Consumer warpgroup `wg` (0 or 1: rows 64 · wg ..) over the block's tasks.
template <int D, typename T, typename V>
__device__ __forceinline__ void wide_consume(const PacParams& p, int begin, int end,
                                             const WideSmem<D, T, V::fp8>& sm) {
  using Tr = WideTraits<D, T, V::fp8>;
  using M = MmaElem<T, V>;
  constexpr int N = Tr::kTileTokens, kSteps = N / 16;
  const PlanView& plan = p.plan;
  const int wg = threadIdx.x / 128 - 1, warp = threadIdx.x / 32 % 4, lane = threadIdx.x % 32;
  const WideTurns turns(wg, begin < end);
  int tile_use = 0;
  for (int i = begin; i < end; ++i) {
    const Task task = plan.tasks[i];
    const int kv_len = task.kv_end - task.kv_begin, node_tiles = (kv_len + N - 1) / N;
    const PlanView::TailRange tails = plan.task_tails(task);
    const int num_tiles = node_tiles + tail_tiles<N>(tails);
    // this lane's rows, 64 wg + 16 warp + lane / 4 + 8h: their requests and
    // single-partial flags, loaded while the first tiles land
    FragmentRows fr;
#pragma unroll
    for (int h = 0; h < 2; ++h) fr.row[h] = Tr::kConsumerRows * wg + 16 * warp + lane / 4 + 8 * h;
    fr.look_up(plan, task);
    const auto mask = task_mask<V::masked>(plan, task, fr.row);
    TaskScale<V> scale = task_scale<V>(p, task.kv_head);

    const RingUse qb(i - begin, Tr::kQBuffers);
    wide_acquire(sm.q_full(qb.slot), qb.parity);
    if constexpr (V::fp8) {  // this warpgroup's 64 rows into fp16, in place
      T* q = sm.q(qb.slot);
      const auto in_place = [&](int r, int e) { return q + tile_offset<Tr::kMaxRows>(r, e / 8) + e % 8; };
      const auto wg_sync = [&] { named_barrier_sync(kConsumerBarrier + wg, 128); };
      scale.unscale_queries(convert_queries<D, T, Tr::kMaxRows, 128, false>(
          in_place, reinterpret_cast<__half*>(q), Tr::kConsumerRows * wg, Tr::kConsumerRows, threadIdx.x % 128,
          sm.scratch(wg), wg_sync));
      wgmma::proxy_fence();
      wg_sync();  // every row of the warpgroup is fp16 before its warps' Q·Kᵀ reads them
    }
    const std::uint64_t dq = wgmma::desc(smem_u32(sm.q(qb.slot)) + Tr::kConsumerRows * wg * 128, 16, 1024);

    SoftmaxState state[2];
    float o[D / 2], s[N / 2], factor[2];
    std::uint32_t a[kSteps][4];
#pragma unroll
    for (int k = 0; k < D / 2; ++k) o[k] = 0.f;  // no wgmma of this warpgroup is in flight here
    // a node tile's tokens past the chunk are −inf, and those its rows' masks hide
    auto node_mask = [&](int t) {
      mask_tail<kSteps>(s, 0, min(N, kv_len - t * N));
      mask(s, t * N);
    };

    // tile 0: Q·Kᵀ alone
    const RingUse k0(tile_use, Tr::kStages);
    wide_acquire(sm.k_full(k0.slot), k0.parity);
    fence_fragments(o);
    turns.wait();
    wgmma::fence();
    wide_issue_qk<D, M>(s, dq, smem_u32(sm.k(k0.slot)));
    turns.pass(false);
    wgmma::wait<0>();
    fence_fragments(s);
    wide_release(sm.k_empty(k0.slot));
    if (num_tiles == 1) wide_release(sm.q_empty(qb.slot));
    scale.mod(s);
    node_mask(0);
    wide_softmax<kSteps>(s, scale.sm_scale, state, factor);  // o is 0: no rescale
    pack_p<kSteps, M>(a, s);

    // tiles 1 ..: Q·Kᵀ of t beside P·V of t − 1, masked by mask(t)
    auto step = [&](int t, auto&& mask) {
      const RingUse kt(tile_use + t, Tr::kStages), vp(tile_use + t - 1, Tr::kStages);
      wide_acquire(sm.k_full(kt.slot), kt.parity);
      wide_acquire(sm.v_full(vp.slot), vp.parity);
      fence_fragments(s);
      fence_fragments(a);
      turns.wait();
      wgmma::fence();
      wide_issue_qk<D, M>(s, dq, smem_u32(sm.k(kt.slot)));
      wide_issue_pv<D, M>(o, a, smem_u32(sm.v(vp.slot)));
      turns.pass(false);
      wgmma::wait<1>();  // Q·Kᵀ of t is done, P·V of t − 1 may still run
      fence_fragments(s);
      wide_release(sm.k_empty(kt.slot));
      if (t == num_tiles - 1) wide_release(sm.q_empty(qb.slot));
      scale.mod(s);
      mask(t);
      wide_softmax<kSteps>(s, scale.sm_scale, state, factor);
      // the softmax before the wait in the code ptxas gets; ptxas still moves the wait above most
      // of it (docs/DESIGN_NOTES.md, compiler facts), and the other consumer's turn fills the gap
      fence_fragments(s);
      fence_fragments(factor);
      wgmma::wait<0>();
      fence_fragments(o);
      fence_fragments(a);
      wide_release(sm.v_empty(vp.slot));
      if (__any_sync(0xffffffffu, factor[0] != 1.f || factor[1] != 1.f)) {
#pragma unroll
        for (int k = 0; k < D / 2; ++k) o[k] *= factor[(k / 2) % 2];
      }
      pack_p<kSteps, M>(a, s);
    };
    int t = 1;
    for (; t < node_tiles; ++t) step(t, node_mask);
    if (t < num_tiles) {
      // the tails, in a loop of their own so that the node's keeps its code:
      // each row sees its request's tail alone, [lo, hi) of the task's tail
      // tokens (empty past the task's rows)
      int lo[2] = {0, 0}, hi[2] = {0, 0};
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        if (fr.row[h] < task.row_end - task.row_begin) {
          const int e = task.req_begin + (task.row_begin + fr.row[h]) / plan.group;
          lo[h] = max(plan.tail_indptr[e], tails.begin) - tails.begin;
          hi[h] = min(plan.tail_indptr[e + 1], tails.end) - tails.begin;
        }
      }
      auto tail_mask = [&](int t) {
        const int first = N * (t - node_tiles);
        const int tile_lo[2] = {lo[0] - first, lo[1] - first}, tile_hi[2] = {hi[0] - first, hi[1] - first};
        mask_rows<kSteps>(s, tile_lo, tile_hi);
      };
      for (; t < num_tiles; ++t) step(t, tail_mask);
    }

    // the last tile's P·V
    const RingUse vl(tile_use + num_tiles - 1, Tr::kStages);
    wide_acquire(sm.v_full(vl.slot), vl.parity);
    fence_fragments(o);
    fence_fragments(a);
    turns.wait();
    wgmma::fence();
    wide_issue_pv<D, M>(o, a, smem_u32(sm.v(vl.slot)));
    turns.pass(i + 1 == end);
    wgmma::wait<0>();
    fence_fragments(o);
    wide_release(sm.v_empty(vl.slot));
    tile_use += num_tiles;

    store_fragment_rows<D, T>(p, task, fr, scale.v_scale, state, o);
  }
}

#endif  // CODEC_WGMMA

// V: the instance's variant (kernel_traits.cuh).
template <int D, typename T, typename V>
__global__ void __launch_bounds__(WideTraits<D, T>::kThreads, 1) pac_wide_kernel(const __grid_constant__ PacParams p) {
#if CODEC_WGMMA
  using Tr = WideTraits<D, T, V::fp8>;
  extern __shared__ __align__(1024) unsigned char smem[];
  std::uint32_t base;  // as in pac_kernel: the check must survive the compiler's trust in __align__
  asm volatile("mov.u32 %0, %1;\n" : "=r"(base) : "r"(smem_u32(smem)));
  if (base % 1024 != 0) __trap();
  // The next kernel (PAC, or the merge where there is none) may be launched
  // now: its blocks take the SMs this grid leaves, or wait there in pdl_wait.
  pdl_launch_dependents();
  const WideSmem<D, T, V::fp8> sm(smem);
  if (threadIdx.x == 0) sm.init();
  __syncthreads();
  const PlanView& plan = p.plan;
  const int begin = plan.wide_indptr[blockIdx.x], end = plan.wide_indptr[blockIdx.x + 1];
  if (threadIdx.x < 128) {
    setmaxnreg_dec<Tr::kProducerRegs>();
    wide_produce<D, T, V::fp8>(p, begin, end, PageGeometry(plan.page_size), sm);
  } else {
    setmaxnreg_inc<Tr::kConsumerRegs>();
    wide_consume<D, T, V>(p, begin, end, sm);
  }
#else
  (void)p;
  __trap();  // the host launches it only where the build has sm_90a code (cuda_engine.cu)
#endif
}

// ---------------------------------------------------------------- host launcher

template <int D, typename T, bool kFp8>
void WideKernels<D, T, kFp8>::launch(const PacParams& params, RunVariant variant, cudaStream_t stream) {
  using Tr = WideTraits<D, T, kFp8>;
  with_variant<kFp8>(variant, [&](auto instance) {
    using V = decltype(instance);
    set_smem_limit<pac_wide_kernel<D, T, V>>(Tr::kSmemBytes);
    pac_wide_kernel<D, T, V><<<params.plan.num_wide_blocks, Tr::kThreads, Tr::kSmemBytes, stream>>>(params);
    CODEC_CUDA_CHECK_LAUNCH("pac_wide_kernel", stream);
  });
}

}  // namespace codec::cuda
