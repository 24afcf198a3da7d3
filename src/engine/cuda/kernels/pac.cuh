#pragma once
// Partial attention (PAC, docs/DESIGN.md §5), persistent: block b runs the plan's
// tasks tasks[block_indptr[b] .. block_indptr[b+1]) in order. A task is
// (node chunk [kv_begin, kv_end), kv head, rows [row_begin, row_end) of the
// node's row list); row v is (request node_reqs[node_req_begin[node] + v / G],
// qo head kv_head · G + v % G). Its query rows are loaded into shared memory
// once, the chunk's K and V stream through shared memory in cp.async tiles
// (tile/kv_loader.cuh), and S = Q Kᵀ and O += P V run on tensor cores with an
// online softmax in fp32 (tile/attend_mma.cuh, tile/attend_wgmma.cuh,
// tile/softmax.cuh). Every KV byte of the chunk is read from device memory
// once per task, whatever the number of rows.
//
// Warp layout (FlashAttention-2 decode style). Rows are padded to R = ceil(rows
// / 16) row tiles of 16. The 4 warps take R' = R rounded up to a power of two
// row tiles and split every KV tile's tokens S = min(4 / R', tile / 16) ways:
//   rows 1..16  (e.g. 1 request × GQA 4): R' = 1, S = 4 (S = 2 at D = 256),
//               each warp 16 tokens of a 64-token tile
//   rows 17..32: R' = 2, S = 2;  rows 33..64: R' = 4, S = 1 (rows 33..48 leave
//               warp 3 without rows)
// so small tasks still use every warp. Each warp keeps its own online-softmax
// state; at the end of the task the S states of a row are merged through
// shared memory (store_rows).
//
// Tasks of kWgmmaMinRows rows or more run on Hopper's wgmma instead (sm_90a
// builds): the 4 warps are one warpgroup over 64 row slots, each warp sees
// every token, and K and V leave shared memory once per tile.
//
// Consecutive small tasks of a block (≤ 16 rows, ≤ kPackMaxTokens tokens),
// 2 to kMaxPack of them, run as a pack instead: one task per warp (pac_pack).
//
// A plan's wide blocks (tasks of up to 128 rows) run on their own kernel,
// pac_wide.cuh, launched before this one, which is its programmatic
// dependent.
//
// Under an fp8 cache (Variant::fp8) the stages hold the cache's bytes and
// the tensor cores see fp16 (MmaElem): the mma.sync path converts its K and
// V fragments as it loads them (tile/attend_mma_fp8.cuh), a wgmma task's
// block converts each stage into one fp16 tile (tile/fp8.cuh, PacSmem), and
// the query rows go to fp16 once a task, bf16 ones scaled (convert_queries).
#include <cuda_runtime_api.h>

#include <cstdint>
#include <type_traits>

#include "codec/core/state.hpp"
#include "codec/engine/attention_io.hpp"
#include "codec/engine/cuda_check.hpp"
#include "codec/plan/plan.hpp"
#include "engine/cuda/kernel_traits.cuh"
#include "engine/cuda/kernels/launch.cuh"
#include "engine/cuda/primitives/ptx.cuh"
#include "engine/cuda/primitives/warp.cuh"
#include "engine/cuda/primitives/wgmma.cuh"
#include "engine/cuda/tile/attend_mma.cuh"
#include "engine/cuda/tile/attend_mma_fp8.cuh"
#include "engine/cuda/tile/attend_wgmma.cuh"
#include "engine/cuda/tile/fp8.cuh"
#include "engine/cuda/tile/kv_loader.cuh"
#include "engine/cuda/tile/row_masks.cuh"

namespace codec::cuda {

// The scales of a task's kv head: the exponent's e = |sm_scale · k_scale|
// and the raw scores' ScoreMod (tile/softmax.cuh), and V's scale, which
// multiplies the task's normalised output (each partial's: the merge is
// linear in them). Only an fp8 cache has scales (run_cuda): a 16-bit one's
// plain instances read sm_scale from the parameters, an operand rather than
// a register, and multiply by no v_scale (D = 64 keeps its spills).
template <typename V>
struct TaskScale {
  float sm_scale;
  ScoreMod<V::soft_cap, V::fp8> mod;
  float v_scale;
  // The queries were scaled by 2⁻ᵉ (convert_queries): so are the raw scores,
  // which the soft-cap's input scale or else the exponent's takes back.
  __device__ __forceinline__ void unscale_queries(int e) {
    if constexpr (V::soft_cap) mod.in *= exp2i(e);
    else sm_scale *= exp2i(e);
  }
};
template <typename V>
__device__ __forceinline__ TaskScale<V> task_scale(const PacParams& p, int kv_head) {
  TaskScale<V> scale{p.sm_scale, {}, 1.f};
  if constexpr (V::fp8 || V::soft_cap) {
    float f = p.sm_scale;  // > 0 (HeadConfig::validate)
    if constexpr (V::fp8) {
      f *= p.k_scale.at(kv_head);
      scale.v_scale = p.v_scale.at(kv_head);
    }
    scale.sm_scale = fabsf(f);
    if constexpr (V::soft_cap) {
      scale.mod.in = f / p.soft_cap;
      scale.mod.out = scale.sm_scale > 0.f ? p.soft_cap / scale.sm_scale : 0.f;
    } else {
      scale.mod.negate = f < 0.f;
    }
  } else {
    (void)kv_head;
  }
  return scale;
}

// A row of a single partial, written by PAC itself, takes its sink here
// (the merge kernel takes the others'): the sink is a partial of value 0, so
// o scales by its weight and the lse includes it (state.hpp, merge_weights).
__device__ __forceinline__ float sink_weight(const PacParams& p, int head, float& lse) {
  if (p.sinks == nullptr) return 1.f;
  const MergeWeights w = merge_weights(lse, p.sinks[head]);
  lse = w.lse;
  return w.w1;
}

// ---------------------------------------------------------------- kernel

// Row h's four columns 16m + 4 (lane % 4) .. + 3 of o in attend_tile_mma_fp8's
// order, times f.
template <int D>
__device__ __forceinline__ float4 fp8_o_quad(const float (&o)[D / 2], int m, int h, float f) {
  return make_float4(o[8 * m + 2 * h] * f, o[8 * m + 4 + 2 * h] * f, o[8 * m + 2 * h + 1] * f,
                     o[8 * m + 4 + 2 * h + 1] * f);
}

// The task's epilogue, once its KV tiles are done and shared memory is free:
// each warp normalises its states and stages them as fp32, then every row's
// `splits` warp states are merged (identity when 1) and written, 4 floats per
// thread, coalesced: rows whose request has a single partial straight to the
// output, the others to their workspace slot.
//
// fp8_o: o is in attend_tile_mma_fp8's column order (lane c holds columns 16m
// + 4c .. + 3 of each 16-column chunk m), else in the mma accumulators'.
template <int D, typename T>
__device__ __forceinline__ void store_rows(const PacParams& p, const Task& task, int splits, bool has_rows,
                                           bool single_row, bool fp8_o, float v_scale, SoftmaxState (&state)[2],
                                           const float (&o)[D / 2], unsigned char* smem) {
  using Tr = PacTraits<D, T>;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, G = p.plan.group;
  const int rows = task.row_end - task.row_begin;
  const std::int32_t* reqs = p.plan.node_reqs + task.req_begin;
  // 1: each warp's states, normalised
  float* so = reinterpret_cast<float*>(smem);             // [kMaxRows][kStagingStride], row = warp · 16 + r
  float* slse = so + Tr::kMaxRows * Tr::kStagingStride;   // [kMaxRows]
  bool* ssingle = reinterpret_cast<bool*>(slse + Tr::kMaxRows);  // [kMaxRows]
  if (tid < rows) ssingle[tid] = single_row;
  if (has_rows) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      state[h].l = butterfly<4>(state[h].l, SumOp{});
      const float inv_l = state[h].inv_l();
      const int row = warp * 16 + lane / 4 + 8 * h;
      if (fp8_o) {
#pragma unroll
        for (int m = 0; m < D / 16; ++m)
          *reinterpret_cast<float4*>(so + row * Tr::kStagingStride + 16 * m + 4 * (lane % 4)) =
              fp8_o_quad<D>(o, m, h, inv_l);
      } else {
#pragma unroll
        for (int n = 0; n < D / 8; ++n)
          *reinterpret_cast<float2*>(so + row * Tr::kStagingStride + 8 * n + 2 * (lane % 4)) =
              make_float2(o[4 * n + 2 * h] * inv_l, o[4 * n + 2 * h + 1] * inv_l);
      }
      if (lane % 4 == 0) slse[row] = state[h].lse();
    }
  }
  __syncthreads();

  // 2: each row's merged state, to the output or its slot. A single state
  // (every wgmma task) is copied as it is; `splits` states are weighed at
  // once, one exponential each under their common max, as the merge kernel
  // does. Folding them one by one chains an exponential, a division and a
  // logarithm per state: a 4-row task's epilogue took 1.8 of its 4.3 µs, a
  // 64-row task's up to ~7 µs (bc7d159; docs/DESIGN_NOTES.md, PAC kernel).
  constexpr int kQuads = D / 4;
  for (int i = tid; i < rows * kQuads; i += Tr::kThreads) {
    const int r = i / kQuads, d = 4 * (i % kQuads);
    const int srow0 = (r / 16) * splits * 16 + r % 16;  // the row's state of split w is row srow0 + 16 w
    float4 acc = *reinterpret_cast<const float4*>(so + srow0 * Tr::kStagingStride + d);
    float lse = slse[srow0];
    if (splits > 1) {  // uniform over the block
      SoftmaxState merged;
      for (int w = 0; w < splits; ++w) merged.m = fmaxf(merged.m, slse[srow0 + 16 * w]);
      const float e0 = weight_below(lse, merged.m);
      merged.l = e0;
      acc = make_float4(e0 * acc.x, e0 * acc.y, e0 * acc.z, e0 * acc.w);
      for (int w = 1; w < splits; ++w) {
        const int srow = srow0 + 16 * w;
        const float e = weight_below(slse[srow], merged.m);
        const float4 x = *reinterpret_cast<const float4*>(so + srow * Tr::kStagingStride + d);
        acc = make_float4(acc.x + e * x.x, acc.y + e * x.y, acc.z + e * x.z, acc.w + e * x.w);
        merged.l += e;
      }
      const float inv_l = merged.inv_l();
      acc = make_float4(acc.x * inv_l, acc.y * inv_l, acc.z * inv_l, acc.w * inv_l);
      lse = merged.lse();
    }
    acc = make_float4(v_scale * acc.x, v_scale * acc.y, v_scale * acc.z, v_scale * acc.w);
    const int v = task.row_begin + r;
    if (ssingle[r]) {
      const int req = reqs[v / G], head = task.kv_head * G + v % G;
      const float w = sink_weight(p, head, lse);
      acc = make_float4(w * acc.x, w * acc.y, w * acc.z, w * acc.w);
      const uint2 packed = {pack2<T>(acc.x, acc.y), pack2<T>(acc.z, acc.w)};
      *reinterpret_cast<uint2*>(static_cast<T*>(p.out) + p.out_rows.at(req, head) + d) = packed;
      if (d == 0 && p.lse != nullptr) p.lse[p.lse_rows.at(req, head)] = lse * p.lse_scale;
    } else {
      const std::int64_t slot = task.slot0 + v;
      *reinterpret_cast<float4*>(p.part_o + slot * D + d) = acc;
      if (d == 0) p.part_lse[slot] = lse;
    }
  }
}

// The stages' element: T, or an fp8 cache's bytes.
template <typename T, bool kFp8>
using StageElem = std::conditional_t<kFp8, std::uint8_t, T>;

template <int D, typename T, typename V>
__device__ __forceinline__ void pac_task(const PacParams& p, const Task task, const PageGeometry geo,
                                         unsigned char* smem) {
  using Tr = PacTraits<D, T>;
  using Smem = PacSmem<D, T, V::fp8>;
  using KV = StageElem<T, V::fp8>;
  using M = MmaElem<T, V>;
  const PlanView& plan = p.plan;
  const int tid = threadIdx.x, warp = tid / 32, G = plan.group;
  const int rows = task.row_end - task.row_begin;
  const int kv_len = task.kv_end - task.kv_begin;
  const int num_tiles = (kv_len + Tr::kTileTokens - 1) / Tr::kTileTokens;
  const std::int32_t* reqs = plan.node_reqs + task.req_begin;
  const std::int32_t* pages = plan.node_pages + task.page_begin;
  M* sq = reinterpret_cast<M*>(smem);
  KV* stages = reinterpret_cast<KV*>(smem + Smem::kStagesOffset);
  [[maybe_unused]] M* converted = reinterpret_cast<M*>(smem + Smem::kConvertedOffset);  // V::fp8 (PacSmem)
  TaskScale<V> scale = task_scale<V>(p, task.kv_head);

  // warp layout (see the top of this file). On the wgmma path the 4 warps are
  // one warpgroup over all 64 row slots (rows past the task's are zero queries
  // whose results are never written) and every warp sees the whole tile.
  const bool wg = CODEC_WGMMA && rows >= Tr::kWgmmaMinRows;
  const int rtiles = (rows + 15) / 16;
  const int rtiles_pow2 = wg ? Tr::kWarps : rtiles == 1 ? 1 : rtiles == 2 ? 2 : 4;
  const int splits = min(Tr::kWarps / rtiles_pow2, Tr::kMaxSplits);
  const int rtile = warp / splits;
  const bool has_rows = wg || rtile < rtiles;
  const int steps = Tr::kTileTokens / Tr::kTokenStep / splits;  // 16-token steps of a warp per tile
  const int token0 = (warp % splits) * steps * Tr::kTokenStep;

  // prologue. The first tiles' page ids and the rows' request ids are issued
  // before anything waits; the Q copies, which need the request ids, and the
  // first KV tiles follow, then the single-partial flags.
  using Loader = KvLoader<D, T, Tr::kThreads, Tr::kTileTokens, Tr::kTileTokens, KV>;
  Loader kv(p.kv, task, pages, geo, num_tiles, stages, tid, 0);
  typename Loader::Prologue pro;
  kv.look_up_first(pro);
  // the task's query rows into sq (under an fp8 cache, as they are into the
  // converted tile, for convert_queries); rows up to the last row tile (all
  // 64 on the wgmma path) are zero
  const int q_rows = wg ? Tr::kMaxRows : rtiles * 16;
  [[maybe_unused]] T* copied = reinterpret_cast<T*>(converted);
  {
    const T* q = static_cast<const T*>(p.q);
    for (int i = tid; i < q_rows * Tr::kChunks; i += Tr::kThreads) {
      const int r = i / Tr::kChunks, cq = i % Tr::kChunks, v = task.row_begin + r;
      const T* src = q;
      if (r < rows) src += p.q_rows.at(reqs[v / G], task.kv_head * G + v % G) + 8 * cq;
      if constexpr (V::fp8) cp_async_16(copied + r * D + 8 * cq, src, r < rows);
      else cp_async_16(sq + tile_offset<Tr::kMaxRows>(r, cq), src, r < rows);
    }
  }
  kv.start(pro);  // the first kStages − 1 tiles in flight (Q rides in the first group)
  // Whether row tid's request has a single partial (PAC writes the output
  // itself), for the epilogue. Two dependent loads, the request id and then
  // its partial count, which the compiler waits on where the flag is
  // computed: placed before the copies, they held every copy of a task back
  // by two round trips (bc7d159).
  const bool single_row = tid < rows && plan.num_partials(reqs[(task.row_begin + tid) / G]) == 1;
  const int lane_rows[2] = {rtile * 16 + tid % 32 / 4, rtile * 16 + tid % 32 / 4 + 8};  // softmax.cuh's layout
  const auto mask = task_mask<V::masked>(plan, task, lane_rows);

  // main loop: refill the stage tile t − 1 used as soon as every warp is done
  // with it, then wait for tile t, then attend to it. Refilling before waiting
  // (two barriers per tile instead of one) keeps all kStages tiles in flight
  // while the block waits, kStages − 1 while it computes. Refilling after the
  // wait, as FlashAttention-2's single-barrier loop does, issues tile
  // t + kStages − 1 only once tile t has landed: one tile fewer in flight (at 2
  // stages, 32 KiB per block: a pipeline that empties at every tile). The extra
  // barrier costs ~20–40 cycles against a tile period of ~2 µs, ~4,000 cycles
  // (memory-bound: 32 KiB at ~16 B/ns per block), or ~1,000+ cycles (64 rows).
  // (KvLoader counts the cp.async groups.)
  SoftmaxState state[2];
  float o[D / 2] = {};
  for (int t = 0; t < num_tiles; ++t) {
    __syncthreads();  // every warp is done with tile t − 1: its stage, (t − 1) mod kStages, may be refilled
    kv.refill(t, pro.ahead);
    cp_async_wait<Tr::kStages - 1>();  // this thread's copies of Q and tiles ≤ t have landed
    if constexpr (V::fp8) {
      // ... and every thread's: the queries (tile 0) and a wgmma task's stage convert
      if (t == 0 || wg) __syncthreads();
      if (t == 0) {
        // in the order of the K columns the path reads: as they are (wgmma), or
        // attend_tile_mma_fp8's
        auto* scratch = reinterpret_cast<std::uint32_t*>(smem + Smem::kScratchOffset);
        const auto row_major = [&](int r, int e) { return copied + r * D + e; };
        const auto block_sync = [] { __syncthreads(); };
        scale.unscale_queries(
            wg ? convert_queries<D, T, Tr::kMaxRows, Tr::kThreads, false>(row_major, sq, 0, q_rows, tid, scratch,
                                                                          block_sync)
               : convert_queries<D, T, Tr::kMaxRows, Tr::kThreads, true>(row_major, sq, 0, q_rows, tid, scratch,
                                                                         block_sync));
        if (wg) __syncthreads();  // every warp has read the copied queries: the stage's conversion overwrites them
      }
      if (wg) {
        const KV* stage = kv.stage(t);
        convert_fp8_rows<D, Tr::kTileTokens, Tr::kTileTokens, Tr::kThreads>(stage, converted, 0, tid, p.fp8_e5m2);
        convert_fp8_rows<D, Tr::kTileTokens, Tr::kTileTokens, Tr::kThreads>(stage + Tr::kTileTokens * D,
                                                                            converted + Tr::kTileTokens * D, 0, tid,
                                                                            p.fp8_e5m2);
      }
    }
#if CODEC_WGMMA
    if (wg) wgmma::proxy_fence();  // ... and are visible to the tensor cores' reads
#endif
    __syncthreads();  // ... and every thread's: tile t (and at t = 0 the converted queries) is visible to every warp
    const int tile_tokens = min(Tr::kTileTokens, kv_len - t * Tr::kTileTokens);
    const KV* sk = kv.stage(t);
    const KV* sv = sk + Tr::kTileTokens * D;
#if CODEC_WGMMA
    if (wg) {  // under an fp8 cache wgmma reads the converted tile, else the stage
      const std::uint32_t k_tile = V::fp8 ? smem_u32(converted) : smem_u32(sk);
      const std::uint32_t v_tile = V::fp8 ? smem_u32(converted + Tr::kTileTokens * D) : smem_u32(sv);
      attend_tile_wgmma<D, M>(smem_u32(sq), k_tile, v_tile, tile_tokens, scale.sm_scale, scale.mod, mask,
                              t * Tr::kTileTokens, state, o);
      continue;
    }
#endif
    if (has_rows && token0 < tile_tokens) {
      if constexpr (V::fp8)
        attend_tile_mma_fp8_steps<D>(steps, p.fp8_e5m2, sq, sk, sv, rtile, token0, tile_tokens, scale.sm_scale,
                                     scale.mod, mask, t * Tr::kTileTokens, state, o);
      else
        attend_tile_mma_steps<D, T>(steps, sq, sk, sv, rtile, token0, tile_tokens, scale.sm_scale, scale.mod, mask,
                                    t * Tr::kTileTokens, state, o);
    }
  }
  cp_async_wait<0>();
  __syncthreads();  // Q and KV buffers are free: the epilogue reuses them

  store_rows<D, T>(p, task, splits, has_rows, single_row, V::fp8 && !wg, scale.v_scale, state, o, smem);
  __syncthreads();  // the next task's prologue overwrites the staging
}

// A lane's two rows of an m16 accumulator fragment (rows lane / 4 and lane /
// 4 + 8 of its warp's 16, as rows of the task), with their requests and
// whether each request has a single partial, whose output the task then
// writes itself. Looked up before the task's tiles: two dependent loads.
struct FragmentRows {
  int row[2];      // rows of the task, from row_begin; set by the caller
  int req[2];      // their requests (0 past the task's rows)
  bool single[2];
  __device__ __forceinline__ void look_up(const PlanView& plan, const Task& task) {
    const int rows = task.row_end - task.row_begin;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      req[h] = row[h] < rows ? plan.node_reqs[task.req_begin + (task.row_begin + row[h]) / plan.group] : 0;
      single[h] = row[h] < rows && plan.num_partials(req[h]) == 1;
    }
  }
};

// Writes a fragment's rows from registers (columns 8n + 2 (lane % 4) + {0,
// 1}, or under kFp8O attend_tile_mma_fp8's 16m + 4 (lane % 4) + {0 .. 3}),
// normalised: to the output where the request has a single partial, else to
// the row's workspace slot. state[h].l holds this lane's share of row h's
// sum; the quad's are added here.
template <int D, typename T, bool kFp8O = false>
__device__ __forceinline__ void store_fragment_rows(const PacParams& p, const Task& task, const FragmentRows& fr,
                                                    float v_scale, SoftmaxState (&state)[2], const float (&o)[D / 2]) {
  const int lane = threadIdx.x % 32, G = p.plan.group, rows = task.row_end - task.row_begin;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    state[h].l = butterfly<4>(state[h].l, SumOp{});
    float inv_l = v_scale * state[h].inv_l(), lse = state[h].lse();
    if (fr.row[h] >= rows) continue;
    const int v = task.row_begin + fr.row[h];
    if (fr.single[h]) {
      const int head = task.kv_head * G + v % G;
      inv_l *= sink_weight(p, head, lse);
      T* out = static_cast<T*>(p.out) + p.out_rows.at(fr.req[h], head);
      if constexpr (kFp8O) {
#pragma unroll
        for (int m = 0; m < D / 16; ++m) {
          const float4 x = fp8_o_quad<D>(o, m, h, inv_l);
          *reinterpret_cast<uint2*>(out + 16 * m + 4 * (lane % 4)) = make_uint2(pack2<T>(x.x, x.y), pack2<T>(x.z, x.w));
        }
      } else {
#pragma unroll
        for (int n = 0; n < D / 8; ++n)
          *reinterpret_cast<std::uint32_t*>(out + 8 * n + 2 * (lane % 4)) =
              pack2<T>(o[4 * n + 2 * h] * inv_l, o[4 * n + 2 * h + 1] * inv_l);
      }
      if (lane % 4 == 0 && p.lse != nullptr) p.lse[p.lse_rows.at(fr.req[h], head)] = lse * p.lse_scale;
    } else {
      const std::int64_t slot = task.slot0 + v;
      float* out = p.part_o + slot * D;
      if constexpr (kFp8O) {
#pragma unroll
        for (int m = 0; m < D / 16; ++m)
          *reinterpret_cast<float4*>(out + 16 * m + 4 * (lane % 4)) = fp8_o_quad<D>(o, m, h, inv_l);
      } else {
#pragma unroll
        for (int n = 0; n < D / 8; ++n)
          *reinterpret_cast<float2*>(out + 8 * n + 2 * (lane % 4)) =
              make_float2(o[4 * n + 2 * h] * inv_l, o[4 * n + 2 * h + 1] * inv_l);
      }
      if (lane % 4 == 0) p.part_lse[slot] = lse;
    }
  }
}

// How many of the block's tasks from i on (before end) form a pack: the
// leading run, up to kMaxPack, of tasks of at most kRowsPerWarp rows and
// kPackMaxTokens tokens. The same answer in every warp.
template <int D, typename T>
__device__ __forceinline__ int pack_size(const PlanView& plan, int i, int end) {
  using Tr = PacTraits<D, T>;
  const int lane = threadIdx.x % 32;
  bool fits = false;
  if (lane < Tr::kMaxPack && i + lane < end) {
    const Task& t = plan.tasks[i + lane];
    fits = t.row_end - t.row_begin <= Tr::kRowsPerWarp && t.kv_end - t.kv_begin <= Tr::kPackMaxTokens;
  }
  return __ffs(~__ballot_sync(0xffffffffu, fits)) - 1;  // lanes from kMaxPack on never fit
}

// A pack of `count` small tasks from tasks[i], one per warp (kernel_traits.cuh).
// A task of 1-16 tokens and a few rows costs a block ~3.7 µs, mostly
// dependent round trips (descriptor, page ids, the first tile) and the
// epilogue's barriers, against ~0.5 µs for its bytes (f3f0a40; docs/DESIGN_NOTES.md, PAC kernel);
// side by side, 2-4 tasks pay those latencies once. Warp w keeps row tile w of
// Q and tokens [16w, 16w + 16) of every stage, streams its task 16 tokens a
// step, kStages − 1 steps ahead, synchronising with __syncwarp only, and
// writes its rows from registers: no staging, no barrier until the pack ends.
template <int D, typename T, typename V>
__device__ __forceinline__ void pac_pack(const PacParams& p, int i, int count, const PageGeometry geo,
                                         unsigned char* smem) {
  using Tr = PacTraits<D, T>;
  using Smem = PacSmem<D, T, V::fp8>;
  using KV = StageElem<T, V::fp8>;
  using M = MmaElem<T, V>;
  const PlanView& plan = p.plan;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, G = plan.group;
  if (warp < count) {
    const Task task = plan.tasks[i + warp];
    const int rows = task.row_end - task.row_begin;
    const int kv_len = task.kv_end - task.kv_begin;
    const int num_steps = (kv_len + Tr::kTokenStep - 1) / Tr::kTokenStep;
    const std::int32_t* reqs = plan.node_reqs + task.req_begin;
    M* sq = reinterpret_cast<M*>(smem);
    KV* stages = reinterpret_cast<KV*>(smem + Smem::kStagesOffset);
    [[maybe_unused]] T* copied = reinterpret_cast<T*>(smem + Smem::kConvertedOffset);  // V::fp8: the copied Q (PacSmem)
    const int row0 = warp * Tr::kRowsPerWarp;  // of Q, and of every stage
    TaskScale<V> scale = task_scale<V>(p, task.kv_head);

    using Loader = KvLoader<D, T, 32, Tr::kTokenStep, Tr::kTileTokens, KV>;
    Loader kv(p.kv, task, plan.node_pages + task.page_begin, geo, num_steps, stages, lane, row0);
    typename Loader::Prologue pro;
    kv.look_up_first(pro);
    {
      const T* q = static_cast<const T*>(p.q);
      for (int c = lane; c < Tr::kRowsPerWarp * Tr::kChunks; c += 32) {
        const int r = c / Tr::kChunks, cq = c % Tr::kChunks, v = task.row_begin + r;
        const T* src = q;
        if (r < rows) src += p.q_rows.at(reqs[v / G], task.kv_head * G + v % G) + 8 * cq;
        if constexpr (V::fp8) cp_async_16(copied + (row0 + r) * D + 8 * cq, src, r < rows);
        else cp_async_16(sq + tile_offset<Tr::kMaxRows>(row0 + r, cq), src, r < rows);
      }
    }
    kv.start(pro);
    // this lane's rows lane / 4 + 8h, looked up while the copies fly
    FragmentRows fr;
#pragma unroll
    for (int h = 0; h < 2; ++h) fr.row[h] = lane / 4 + 8 * h;
    fr.look_up(plan, task);
    const auto mask = task_mask<V::masked>(plan, task, fr.row);

    SoftmaxState state[2];
    float o[D / 2] = {};
    for (int t = 0; t < num_steps; ++t) {
      __syncwarp();  // the warp is done with step t − 1: its stage may be refilled
      kv.refill(t, pro.ahead);
      cp_async_wait<Tr::kStages - 1>();
      __syncwarp();  // every lane's copies of Q and steps ≤ t are visible to the warp
      const KV* sk = kv.stage(t);
      const int tile_tokens = row0 + min(Tr::kTokenStep, kv_len - t * Tr::kTokenStep);
      if constexpr (V::fp8) {
        if (t == 0) {
          scale.unscale_queries(
              convert_queries<D, T, Tr::kMaxRows, 32, /*kPermute=*/true>(
                  [&](int r, int e) { return copied + r * D + e; }, sq, row0, Tr::kRowsPerWarp, lane, nullptr, [] {}));
          __syncwarp();  // the warp's queries are converted
        }
        attend_tile_mma_fp8_steps<D>(1, p.fp8_e5m2, sq, sk, sk + Tr::kTileTokens * D, warp, row0, tile_tokens,
                                     scale.sm_scale, scale.mod, mask, t * Tr::kTokenStep - row0, state, o);
      } else {
        attend_tile_mma<D, T, 1>(sq, sk, sk + Tr::kTileTokens * D, warp, row0, tile_tokens, scale.sm_scale,
                                 scale.mod, mask, t * Tr::kTokenStep - row0, state, o);
      }
    }
    cp_async_wait<0>();
    store_fragment_rows<D, T, V::fp8>(p, task, fr, scale.v_scale, state, o);
  }
  __syncthreads();  // the next task's prologue overwrites Q and the stages
}

// Programmatic dependent launch (sm_90): the merge kernel is launched with
// programmatic stream serialisation (merge.cuh), so it may start once every PAC
// block has called launch_dependents (or exited). A block calls it when it
// starts its last task (or pack): by then the merge's launch and its plan-only prologue
// overlap that task, ~2–5 µs of a two-kernel run that small trees spend in
// 30–60 µs, while merge blocks waiting in griddepcontrol.wait never sit beside
// PAC blocks that still have several tasks to run. The trigger carries no
// memory visibility; the merge's griddepcontrol.wait waits for this whole grid
// to complete and flush.
//
// V: the instance's variant (kernel_traits.cuh).
template <int D, typename T, typename V>
__global__ void __launch_bounds__(PacTraits<D, T>::kThreads, PacTraits<D, T>::kMinBlocksPerSM)
    pac_kernel(const __grid_constant__ PacParams p) {
  // wgmma's 128-byte swizzle needs its operand blocks on 1024-byte boundaries
  // (wgmma.cuh); every block offset in PacTraits is a multiple of 1024.
  extern __shared__ __align__(1024) unsigned char smem[];
#if CODEC_WGMMA
  // The compiler takes the declaration at its word and would fold a plain test
  // away; the address goes through an opaque move so that the check survives:
  // a misaligned base would silently permute Q, K and V.
  std::uint32_t base;
  asm volatile("mov.u32 %0, %1;\n" : "=r"(base) : "r"(smem_u32(smem)));
  if (base % 1024 != 0) __trap();
#endif
  const PlanView& plan = p.plan;
  const PageGeometry geo(plan.page_size);
  const int b = blockIdx.x;
  const int begin = plan.single_task_blocks ? min(b, plan.num_tasks) : plan.block_indptr[b];
  const int end = plan.single_task_blocks ? min(b + 1, plan.num_tasks) : plan.block_indptr[b + 1];
  for (int i = begin; i < end;) {
    // the task's descriptor is loaded beside the pack test's, not after it:
    // one round trip before a task starts, as without packs
    const Task task = plan.tasks[i];
    const int pack = pack_size<D, T>(plan, i, end);
    const int count = pack >= 2 ? pack : 1;  // a lone small task keeps all 4 warps
    if (i + count == end) pdl_launch_dependents();
    if (count >= 2) pac_pack<D, T, V>(p, i, count, geo, smem);
    else pac_task<D, T, V>(p, task, geo, smem);
    i += count;
  }
  // After a wide grid (pac_wide.cuh), this grid completes only once that one
  // has: the merge, which waits for this grid, then sees the wide tasks'
  // partials too. Without one it returns at once.
  pdl_wait();
}

// ---------------------------------------------------------------- host launcher

// The dynamic shared-memory limit, and a hint for the largest shared-memory
// carveout of the unified L1: 2 blocks × (112 + 1) KiB at D = 128 and 4 × (56 +
// 1) KiB at D = 64 need the full 228 KiB; L1 keeps the remaining 28 KiB, ample
// for the page lists and plan arrays it caches (~1 KiB of pages per task).
// Both are attributes of the kernel on the current device, set once per device:
// setting them on every launch cost ~1-2 µs of host time per run_cuda call.
// Not a stream operation, so allowed during graph capture.
// (The wide kernel, one block of 224 KiB per SM, sets the same.)
template <auto Kernel>
void set_smem_limit(int bytes) {
  static PerDeviceAnswer done;
  done.get([bytes] {
    CODEC_CUDA_CHECK(cudaFuncSetAttribute(Kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
    CODEC_CUDA_CHECK(cudaFuncSetAttribute(Kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                          int(cudaSharedmemCarveoutMaxShared)));
    return true;
  });
}
template <int D, typename T, typename V>
void set_pac_smem_limit() {
  set_smem_limit<pac_kernel<D, T, V>>(PacSmem<D, T, V::fp8>::kBytes);
}

template <int D, typename T, bool kFp8>
bool PacKernels<D, T, kFp8>::has_image() {
  cudaFuncAttributes attributes{};
  const cudaError_t err = cudaFuncGetAttributes(&attributes, pac_kernel<D, T, Variant<kFp8, false, false>>);
  if (err == cudaErrorNoKernelImageForDevice || err == cudaErrorInvalidDeviceFunction) {
    cudaGetLastError();  // an answer, not a failure: clear it
    return false;
  }
  CODEC_CUDA_CHECK(err);
  return true;
}

template <int D, typename T, bool kFp8>
int PacKernels<D, T, kFp8>::blocks_per_sm() {
  using V = Variant<kFp8, false, false>;
  set_pac_smem_limit<D, T, V>();
  int blocks = 0;
  CODEC_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, pac_kernel<D, T, V>,
                                                                 PacTraits<D, T>::kThreads, PacSmem<D, T, kFp8>::kBytes));
  return blocks;
}

template <int D, typename T, bool kFp8>
void PacKernels<D, T, kFp8>::launch(const PacParams& params, RunVariant variant, bool programmatic,
                                    cudaStream_t stream) {
  with_variant<kFp8>(variant, [&](auto instance) {
    using V = decltype(instance);
    set_pac_smem_limit<D, T, V>();
    cudaLaunchAttribute attribute{};
    attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attribute.val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t config{};
    config.gridDim = dim3(params.plan.num_blocks);
    config.blockDim = dim3(PacTraits<D, T>::kThreads);
    config.dynamicSmemBytes = PacSmem<D, T, kFp8>::kBytes;
    config.stream = stream;
    config.attrs = &attribute;
    config.numAttrs = programmatic ? 1 : 0;
    CODEC_CUDA_CHECK(cudaLaunchKernelEx(&config, pac_kernel<D, T, V>, params));
    CODEC_CUDA_CHECK_LAUNCH("pac_kernel", stream);
  });
}

}  // namespace codec::cuda
