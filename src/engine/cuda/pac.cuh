#pragma once
// Partial attention (PAC, docs/DESIGN.md §5), persistent: block b runs the plan's
// tasks tasks[block_indptr[b] .. block_indptr[b+1]) in order. A task is
// (node chunk [kv_begin, kv_end), kv head, rows [row_begin, row_end) of the
// node's row list); row v is (request node_reqs[node_req_begin[node] + v / G],
// qo head kv_head · G + v % G). Its query rows are loaded into shared memory
// once, the chunk's K and V stream through shared memory in cp.async tiles,
// and S = Q Kᵀ and O += P V run on tensor cores (mma.m16n8k16, fp32
// accumulate) with an online softmax in fp32. Every KV byte of the chunk is
// read from device memory once per task, whatever the number of rows.
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
// shared memory with merge_weights (state.hpp).
//
// Tasks of kWgmmaMinRows rows or more run on Hopper's wgmma instead (sm_90a
// builds, wgmma.cuh): the 4 warps are one warpgroup over 64 row slots, each
// warp sees every token, and K and V leave shared memory once per tile.
//
// Softmax units: scores are s = sm_scale · q·k in fp32 (the scale is applied
// to the fp32 accumulator, fused into the exponent as one FFMA per score,
// rather than folded into a half-precision copy of Q, which would round every
// query element by up to 2⁻⁸ relative in bf16); m and lse are natural log,
// exactly as OnlineSoftmax in state.hpp defines them.
#include <cuda_runtime_api.h>

#include <atomic>
#include <cstdint>
#include <type_traits>

#include "codec/core/state.hpp"
#include "codec/engine/attention_io.hpp"
#include "codec/engine/cuda_check.hpp"
#include "codec/plan/plan.hpp"
#include "kernel_traits.cuh"
#include "wgmma.cuh"

namespace codec::cuda {

struct PacParams {
  PlanView plan;               // views the plan copy at the head of the workspace
  const void* k;               // paged pool: element (page, slot, kv head, d) is at
  const void* v;               //   page·stride_page + slot·stride_token + head·stride_head + d
  std::int64_t stride_page;    // strides in elements; each a multiple of 16 bytes
  std::int64_t stride_token;
  std::int64_t stride_head;
  const void* q;               // row (request, qo head) at q_rows.at(request, head), D elements, KV dtype
  RowStrides q_rows;           //   (each row start 16-byte aligned)
  void* out;                   // likewise, KV dtype: rows whose request has a single partial
  RowStrides out_rows;
  float* lse;                  // lse of (request, qo head) at lse_rows.at(request, head), or null
  RowStrides lse_rows;
  float lse_scale;             // 1 (natural log) or log2(e) (base 2)
  float* part_o;               // [slots, D] fp32 normalised partial outputs
  float* part_lse;             // [slots] fp32 natural log
  float sm_scale;
};

// ---------------------------------------------------------------- helpers

__device__ __forceinline__ std::uint32_t smem_u32(const void* p) {
  return static_cast<std::uint32_t>(__cvta_generic_to_shared(p));
}

// 16-byte global → shared copy that skips L1 (KV is streamed once); copies
// nothing and writes zeros when !valid, so masked tokens contribute 0 · V = 0.
__device__ __forceinline__ void cp_async_16(void* dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_u32(dst)), "l"(src),
               "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

__device__ __forceinline__ void ldmatrix_x4(std::uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_u32(p)));
}
__device__ __forceinline__ void ldmatrix_x4_trans(std::uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_u32(p)));
}

// c += a · b for a 16×16 (row) by 16×8 (col) tile, fp32 accumulate.
template <typename T>
__device__ __forceinline__ void mma_16816(float* c, const std::uint32_t (&a)[4], std::uint32_t b0,
                                          std::uint32_t b1) {
  if constexpr (std::is_same_v<T, __half>) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

// Element offset of 16-byte chunk `chunk` of row `row` in a [Rows][D] tile,
// stored as D / 64 column blocks of [Rows][64] (128-byte rows) with each row's
// chunks XOR-swizzled by row % 8. The 8 rows one ldmatrix phase reads then hit
// 8 different 16-byte bank groups, and each column block is the 128-byte
// swizzle layout wgmma reads (wgmma.cuh).
template <int Rows>
__device__ __forceinline__ int tile_offset(int row, int chunk) {
  return (chunk >> 3) * (Rows * 64) + row * 64 + (((chunk & 7) ^ (row & 7)) << 3);
}

// Register layout shared by both tensor-core paths. A warp owns 16 query rows;
// lane holds rows lane/4 (h = 0) and lane/4 + 8 (h = 1), columns 2·(lane%4) +
// {0, 1} of every 8-column block n, as acc[4n + 2h + {0, 1}] (the mma.m16n8k16
// accumulator, repeated; wgmma's m64 accumulator gives warp w rows 16w..16w+15
// in the same layout). s[kTileTokens / 2] holds the scores of the warp's
// tokens, o[D / 2] its unnormalised output; state[h] is row h's online softmax.

// 2^x on the special-function unit. ftz: a result below 2^-126 (a weight under
// 2^-126 of the row's running max) flushes to 0, which is what the fp32
// accumulation would lose anyway; it spares the subnormal fix-up expf's
// approximation path spends 3 instructions on per element.
__device__ __forceinline__ float exp2_ftz(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// Online softmax over 16-token steps of raw scores q·k: mask_tail, row_max,
// raise_max (which moves the running max m and rescales o and l), then the
// exponentials P = exp(sm_scale · s − m), added to l and packed as the A
// fragments of P·V: in place then one step at a time on the mma.sync path
// (softmax_exp, p_fragment), straight into the fragments on the wgmma path
// (exp_pack), which keeps the raw scores for a redo.

// The exponent of a tile: P = exp2(s · scale_log2 + neg_m_log2[h]).
struct ExpScale {
  float scale_log2;     // sm_scale · log2 e
  float neg_m_log2[2];  // −m · log2 e of rows h = 0, 1
};

// Row maxima and sums go through kLanes independent partials per row, so that
// their dependency chains are 1/kLanes as long: with two warps per scheduler,
// waiting on the previous FMNMX or FADD is what stalls issue most.
template <int kMaxSteps>
inline constexpr int kSoftmaxLanes = kMaxSteps < 4 ? kMaxSteps : 4;

// Scores of the `steps` steps from tile token token0 at or past tile_tokens
// become −inf. Only a task's last tile has such tokens.
template <int kMaxSteps>
__device__ __forceinline__ void mask_tail(float (&s)[8 * kMaxSteps], int steps, int token0, int tile_tokens) {
  const int lane = threadIdx.x % 32;
  if (token0 + 16 * steps > tile_tokens) {
#pragma unroll
    for (int i = 0; i < 8 * kMaxSteps; ++i)
      if (token0 + 8 * (i / 4) + 2 * (lane % 4) + (i & 1) >= tile_tokens) s[i] = kNegInf;
  }
}

// Each row's max raw score over `steps` steps, the same in the 4 lanes of a
// row. sm_scale > 0, so the max of raw scores is the max of scaled ones.
template <int kMaxSteps>
__device__ __forceinline__ void row_max(const float (&s)[8 * kMaxSteps], int steps, float (&tile_max)[2]) {
  constexpr int kLanes = kSoftmaxLanes<kMaxSteps>;
  float part_max[2][kLanes];
#pragma unroll
  for (int h = 0; h < 2; ++h)
#pragma unroll
    for (int k = 0; k < kLanes; ++k) part_max[h][k] = kNegInf;
#pragma unroll
  for (int i = 0; i < 8 * kMaxSteps; ++i) {
    if (i >= 8 * steps) break;
    float& m = part_max[(i / 2) % 2][(i / 8) % kLanes];
    m = fmaxf(m, s[i]);
  }
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    tile_max[h] = part_max[h][0];
#pragma unroll
    for (int k = 1; k < kLanes; ++k) tile_max[h] = fmaxf(tile_max[h], part_max[h][k]);
    tile_max[h] = butterfly<4>(tile_max[h], MaxOp{});
  }
}

// The exponent against the running max as it stands; m is kept in natural-log
// units, as OnlineSoftmax defines it. While m is −inf (no tile yet) the
// exponent is 0, so that exp gives 0 for −inf scores, not NaN.
__device__ __forceinline__ ExpScale exp_scale(const OnlineSoftmax (&state)[2], float sm_scale) {
  constexpr float kLog2e = 1.4426950408889634f;
  ExpScale e{sm_scale * kLog2e, {0.f, 0.f}};
#pragma unroll
  for (int h = 0; h < 2; ++h) e.neg_m_log2[h] = state[h].m == kNegInf ? 0.f : -state[h].m * kLog2e;
  return e;
}

// Raises the running max to cover the tile (rescaling l, and o only when some
// row's max rose) and returns the tile's exponent.
template <int D>
__device__ __forceinline__ ExpScale raise_max(const float (&tile_max)[2], float sm_scale, OnlineSoftmax (&state)[2],
                                              float (&o)[D / 2]) {
  float factor[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) factor[h] = state[h].rescale(tile_max[h] * sm_scale);
  if (__any_sync(0xffffffffu, factor[0] != 1.f || factor[1] != 1.f)) {
#pragma unroll
    for (int i = 0; i < D / 2; ++i) o[i] *= factor[(i / 2) % 2];
  }
  return exp_scale(state, sm_scale);
}

// P = exp(sm_scale · s − m) of a score of row h: one FFMA and one ex2.
__device__ __forceinline__ float exp_score(float s, const ExpScale& e, int h) {
  return exp2_ftz(fmaf(s, e.scale_log2, e.neg_m_log2[h]));
}

// mma.sync path: steps [0, steps) of s become P in place and are added to l
// (this lane's columns; the quad is summed in the epilogue). p_fragment then
// packs one step at a time: packing all at once spilled 24 bytes instead of 12
// at D = 64 in the builds without wgmma (sm_80, generic sm_90).
template <int kMaxSteps>
__device__ __forceinline__ void softmax_exp(float (&s)[8 * kMaxSteps], int steps, const ExpScale& e,
                                            OnlineSoftmax (&state)[2]) {
  constexpr int kLanes = kSoftmaxLanes<kMaxSteps>;
  float part_l[2][kLanes] = {};
#pragma unroll
  for (int i = 0; i < 8 * kMaxSteps; ++i) {
    if (i >= 8 * steps) break;  // break, not continue: steps is a run-time count
    s[i] = exp_score(s[i], e, (i / 2) % 2);
    part_l[(i / 2) % 2][(i / 8) % kLanes] += s[i];
  }
#pragma unroll
  for (int h = 0; h < 2; ++h)
#pragma unroll
    for (int k = 0; k < kLanes; ++k) state[h].l += part_l[h][k];
}

// The A fragment of P for 16-token step j: the accumulators of its two 8-column blocks.
template <typename T>
__device__ __forceinline__ void p_fragment(std::uint32_t (&a)[4], const float* s, int j) {
  a[0] = pack2<T>(s[8 * j], s[8 * j + 1]);
  a[1] = pack2<T>(s[8 * j + 2], s[8 * j + 3]);
  a[2] = pack2<T>(s[8 * j + 4], s[8 * j + 5]);
  a[3] = pack2<T>(s[8 * j + 6], s[8 * j + 7]);
}

// wgmma path: steps [j0, j1) of s as P, packed into the A fragments a[j] of
// P·V (a step's two 8-column accumulator blocks); l[h] gets row h's sum over
// this lane's columns. s is left as it was, for a redo (attend_tile_wgmma).
template <typename T, int kSteps>
__device__ __forceinline__ void exp_pack(const float (&s)[8 * kSteps], int j0, int j1, const ExpScale& e,
                                         std::uint32_t (&a)[kSteps][4], float (&l)[2]) {
  constexpr int kLanes = kSoftmaxLanes<kSteps>;
  float part_l[2][kLanes] = {};
#pragma unroll
  for (int j = j0; j < j1; ++j) {
#pragma unroll
    for (int q = 0; q < 4; ++q) {  // scores 8j + 2q, +1: row h = q % 2
      const int h = q % 2;
      const float p0 = exp_score(s[8 * j + 2 * q], e, h);
      const float p1 = exp_score(s[8 * j + 2 * q + 1], e, h);
      part_l[h][j % kLanes] += p0;  // one add per score: adding p0 + p1 spilled at D = 64
      part_l[h][j % kLanes] += p1;
      a[j][q] = pack2<T>(p0, p1);
    }
  }
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    l[h] = part_l[h][0];
#pragma unroll
    for (int k = 1; k < kLanes; ++k) l[h] += part_l[h][k];
  }
}

// mma.sync path: one warp's share of one KV tile, its 16 query rows (row tile
// `rtile`) against `steps` 16-token steps from tile token token0. Each warp
// loads its K and V fragments with ldmatrix.
template <int D, typename T>
__device__ __forceinline__ void attend_tile_mma(const T* sq, const T* sk, const T* sv, int rtile, int token0,
                                                int steps, int tile_tokens, float sm_scale,
                                                OnlineSoftmax (&state)[2], float (&o)[D / 2]) {
  using Tr = PacTraits<D, T>;
  constexpr int kMaxSteps = Tr::kMaxSplits;  // a warp holds at most the whole tile
  const int lane = threadIdx.x % 32;

  // S = Q Kᵀ: per 16-token step two n8 accumulators
  float s[8 * kMaxSteps] = {};
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) {
    std::uint32_t a[4];
    ldmatrix_x4(a, sq + tile_offset<Tr::kMaxRows>(rtile * 16 + lane % 16, 2 * kk + lane / 16));
#pragma unroll
    for (int j = 0; j < kMaxSteps; ++j) {
      if (j >= steps) break;
      std::uint32_t b[4];  // tokens 0-7 then 8-15, each as d 0-7 then 8-15
      ldmatrix_x4(b, sk + tile_offset<Tr::kTileTokens>(token0 + 16 * j + lane % 8 + (lane / 16) * 8,
                                                       2 * kk + (lane / 8) % 2));
      mma_16816<T>(s + 8 * j, a, b[0], b[1]);
      mma_16816<T>(s + 8 * j + 4, a, b[2], b[3]);
    }
  }

  mask_tail<kMaxSteps>(s, steps, token0, tile_tokens);
  float tile_max[2];
  row_max<kMaxSteps>(s, steps, tile_max);
  const ExpScale e = raise_max<D>(tile_max, sm_scale, state, o);
  softmax_exp<kMaxSteps>(s, steps, e, state);

  // O += P V
#pragma unroll
  for (int j = 0; j < kMaxSteps; ++j) {
    if (j >= steps) break;
    std::uint32_t a[4];
    p_fragment<T>(a, s, j);
#pragma unroll
    for (int dd = 0; dd < D / 16; ++dd) {
      std::uint32_t b[4];  // d 0-7 then 8-15, each as tokens 0-7 then 8-15
      ldmatrix_x4_trans(b, sv + tile_offset<Tr::kTileTokens>(token0 + 16 * j + lane % 8 + ((lane / 8) % 2) * 8,
                                                             2 * dd + lane / 16));
      mma_16816<T>(o + 8 * dd, a, b[0], b[1]);
      mma_16816<T>(o + 8 * dd + 4, a, b[2], b[3]);
    }
  }
}

#if CODEC_WGMMA
// wgmma path (sm_90a): the block's 4 warps, one warpgroup, attend all 64 row
// slots to the whole tile; K and V are read by the tensor cores from shared
// memory once per tile (wgmma.cuh has the operand layouts).
template <int D, typename T>
__device__ __forceinline__ void attend_tile_wgmma(std::uint32_t sq, std::uint32_t sk, std::uint32_t sv,
                                                  int tile_tokens, float sm_scale, OnlineSoftmax (&state)[2],
                                                  float (&o)[D / 2]) {
  using Tr = PacTraits<D, T>;
  constexpr int N = Tr::kTileTokens, kSteps = N / 16;
  constexpr int kPV = D < 128 ? D : 128;  // output columns per P·V wgmma

  float s[N / 2] = {};
  // The accumulators' last ordinary writes (zeroing s, rescaling o) must stay
  // before wgmma.fence: fence_operand pins them there.
#pragma unroll
  for (int i = 0; i < N / 2; ++i) wgmma::fence_operand(s[i]);
#pragma unroll
  for (int i = 0; i < D / 2; ++i) wgmma::fence_operand(o[i]);
  wgmma::fence();
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) {  // k16 step kk: column block kk / 4, bytes 32 · (kk % 4) of its rows
    const std::uint32_t k_off = 32 * (kk % 4);
    wgmma::mma_ss<N, T>(s, wgmma::desc(sq + (kk / 4) * (Tr::kMaxRows * 128) + k_off, 16, 1024),
                        wgmma::desc(sk + (kk / 4) * (N * 128) + k_off, 16, 1024));
  }
  wgmma::commit();
  wgmma::wait_all();
#pragma unroll
  for (int i = 0; i < N / 2; ++i) wgmma::fence_operand(s[i]);

  // The first half is exponentiated against the running max as it stands,
  // not the tile's, so that its ex2s issue while the row max is still being
  // reduced. That stands unless some row's tile max exceeds the running max by
  // more than kSlack, which bounds P by 2^8: 16-bit P keeps its relative
  // precision there and the fp32 sums their range. Otherwise (a task's first
  // tile, or a jump) the running max is raised and the half redone. After the
  // first tiles the running max thus rarely moves, and o is rarely rescaled.
  // Raising the max first on a task's first tile, where the guess always
  // fails, was measured and not kept (results/h200/run17): as a select, long
  // and loogle:8 ran 3.1–3.8% slower; as a branch, batch:64 ran 3.6% faster
  // but long and loogle:8 1.8–2.8% slower.
  constexpr float kSlack = 5.5451774f;  // 8 ln 2
  mask_tail<kSteps>(s, kSteps, 0, tile_tokens);
  float tile_max[2];
  row_max<kSteps>(s, kSteps, tile_max);
  ExpScale e = exp_scale(state, sm_scale);
  std::uint32_t a[kSteps][4];
  float l[2];
  exp_pack<T, kSteps>(s, 0, kSteps / 2, e, a, l);
  bool stands = true;
#pragma unroll
  for (int h = 0; h < 2; ++h) stands &= state[h].m != kNegInf && tile_max[h] * sm_scale <= state[h].m + kSlack;
  if (!__all_sync(0xffffffffu, stands)) {
    e = raise_max<D>(tile_max, sm_scale, state, o);
    exp_pack<T, kSteps>(s, 0, kSteps / 2, e, a, l);
  }

  // P·V in two halves: the first half's wgmmas are issued before the second
  // half is exponentiated, so the tensor cores work while the SFU does.
  static_assert(kSteps % 2 == 0, "a tile splits into two halves of whole 16-token steps");
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int j0 = half * kSteps / 2, j1 = j0 + kSteps / 2;
    if (half == 1) exp_pack<T, kSteps>(s, j0, j1, e, a, l);
    state[0].l += l[0];
    state[1].l += l[1];
    if (half == 0) {
#pragma unroll
      for (int i = 0; i < D / 2; ++i) wgmma::fence_operand(o[i]);
    }
    wgmma::fence();  // this half of a was written by ordinary instructions (and, before the first, o rescaled)
#pragma unroll
    for (int j = j0; j < j1; ++j) {  // 16 tokens = 2048 bytes of every column block
#pragma unroll
      for (int nb = 0; nb < D / kPV; ++nb)  // output columns nb · kPV: column block nb · kPV / 64
        wgmma::mma_rs<kPV, T>(o + nb * kPV / 2, a[j],
                              wgmma::desc(sv + 2048 * j + nb * (kPV / 64) * (N * 128), N * 128, 1024));
    }
    wgmma::commit();
  }
  wgmma::wait_all();
#pragma unroll
  for (int i = 0; i < D / 2; ++i) wgmma::fence_operand(o[i]);
}
#endif

// Token t of a node lies in page pages[t / page_size] at slot t % page_size.
// Page sizes are powers of two in practice (16 in every benchmark): a shift and
// a mask then replace the run-time integer division, about 20 dependent
// instructions per token, 8 tokens per thread per tile, on the path from the
// barrier to the copies' issue. Other page sizes (the tests use 3, 5 and 7)
// keep the division; the branch is uniform across the grid.
struct PageGeometry {
  int size;
  int shift;  // log2(size), or −1 when size is not a power of two
  __device__ explicit PageGeometry(int page_size) : size(page_size), shift(-1) {
    if ((page_size & (page_size - 1)) == 0)  // page_size ≥ 1 (validated): a power of two
      for (shift = 0; (1 << shift) < page_size; ++shift) {
      }
  }
  __device__ __forceinline__ int page(int t) const { return shift >= 0 ? t >> shift : t / size; }
};

// ---------------------------------------------------------------- kernel

template <int D, typename T>
__device__ __forceinline__ void pac_task(const PacParams& p, const Task task, const PageGeometry geo,
                                         unsigned char* smem) {
  using Tr = PacTraits<D, T>;
  const PlanView& plan = p.plan;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, G = plan.group;
  const int rows = task.row_end - task.row_begin;
  const int kv_len = task.kv_end - task.kv_begin;
  const int num_tiles = (kv_len + Tr::kTileTokens - 1) / Tr::kTileTokens;
  const std::int32_t* reqs = plan.node_reqs + task.req_begin;
  const std::int32_t* pages = plan.node_pages + task.page_begin;
  T* sq = reinterpret_cast<T*>(smem);
  T* skv = reinterpret_cast<T*>(smem + Tr::kQBytes);

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

  // A KV tile: token t of the node lives in page pages[t / page_size] at slot
  // t % page_size (PageGeometry). kThreads is a multiple of kChunks, so a
  // thread always copies the same 16-byte chunk c of its tokens: rows
  // tid / kChunks + k · kTokenStride of the tile. The kChunks threads of a
  // token share its address, so each warp looks up its (at most 16) tokens
  // once, one per lane (lookup), and hands the offsets out by shuffle (copy):
  // ~35 integer instructions of page arithmetic per warp and tile instead of
  // per token.
  constexpr int kWarpTokens = 32 / Tr::kChunks;  // tokens a warp copies per step k
  static_assert(Tr::kTokensPerThread * kWarpTokens <= 32, "one lane per token a warp copies");
  const int c = tid % Tr::kChunks;
  const std::int64_t head_offset = std::int64_t(task.kv_head) * p.stride_head + 8 * c;
  const char* k_base = reinterpret_cast<const char*>(static_cast<const T*>(p.k) + head_offset);
  const char* v_base = reinterpret_cast<const char*>(static_cast<const T*>(p.v) + head_offset);
  // lookup: this lane's token in tile `tile`: the id of its page, its slot
  // in the page, and whether it exists (t < kv_end). The page id is a load
  // whose result copy consumes; the main loop looks a tile up one iteration
  // before copying it, so that this load's latency (an L1 or L2 round trip
  // per tile) is hidden behind a tile of compute instead of stalling the copy.
  // A missing token keeps page 0 and slot 0, a valid address, and copy has
  // cp.async write zeros for it.
  struct LaneToken {
    std::int32_t page;
    std::int32_t slot;
    bool valid;
  };
  auto lookup = [&](int tile) {
    const int k = lane / kWarpTokens;
    const int t = task.kv_begin + tile * Tr::kTileTokens + warp * kWarpTokens + lane % kWarpTokens +
                  k * Tr::kTokenStride;
    if (tile >= num_tiles || k >= Tr::kTokensPerThread || t >= task.kv_end) return LaneToken{0, 0, false};
    const int page = geo.page(t);
    return LaneToken{pages[page], t - page * geo.size, true};
  };
  auto copy = [&](int tile, LaneToken token) {
    const unsigned valid_lanes = __ballot_sync(0xffffffffu, token.valid);
    const std::int64_t lane_offset =
        (std::int64_t(token.page) * p.stride_page + std::int64_t(token.slot) * p.stride_token) * std::int64_t(sizeof(T));
    T* sk = skv + (tile % Tr::kStages) * 2 * Tr::kTileTokens * D;
    T* sv = sk + Tr::kTileTokens * D;
#pragma unroll
    for (int k = 0; k < Tr::kTokensPerThread; ++k) {
      const int j = tid / Tr::kChunks + k * Tr::kTokenStride;
      const int src_lane = k * kWarpTokens + lane / Tr::kChunks;
      const std::int64_t offset = __shfl_sync(0xffffffffu, lane_offset, src_lane);
      const bool valid = (valid_lanes >> src_lane) & 1u;
      cp_async_16(sk + tile_offset<Tr::kTileTokens>(j, c), k_base + offset, valid);
      cp_async_16(sv + tile_offset<Tr::kTileTokens>(j, c), v_base + offset, valid);
    }
  };

  // prologue. On a cold plan each load here is a DRAM round trip, and a task
  // with few tiles is mostly this chain, so the first tiles' page ids and the
  // rows' request ids are issued before anything waits; the Q copies and the
  // single-partial flags, which need the request ids, follow.
  LaneToken first_tokens[Tr::kStages - 1];
#pragma unroll
  for (int t = 0; t < Tr::kStages - 1; ++t) first_tokens[t] = lookup(t);
  LaneToken ahead = lookup(Tr::kStages - 1);  // the first refill's tokens
  // Whether row tid's request has a single partial (PAC writes the output
  // itself); used by the epilogue, loaded now so that its latency hides.
  const bool single_row = tid < rows && plan.num_partials(reqs[(task.row_begin + tid) / G]) == 1;
  // the task's query rows into sq; rows up to the last row tile (all 64 on the
  // wgmma path) are zero
  {
    const T* q = static_cast<const T*>(p.q);
    const int q_rows = wg ? Tr::kMaxRows : rtiles * 16;
    for (int i = tid; i < q_rows * Tr::kChunks; i += Tr::kThreads) {
      const int r = i / Tr::kChunks, cq = i % Tr::kChunks, v = task.row_begin + r;
      const T* src = q;
      if (r < rows) src += p.q_rows.at(reqs[v / G], task.kv_head * G + v % G) + 8 * cq;
      cp_async_16(sq + tile_offset<Tr::kMaxRows>(r, cq), src, r < rows);
    }
  }
  // the first kStages − 1 tiles in flight (Q rides in the first group)
#pragma unroll
  for (int t = 0; t < Tr::kStages - 1; ++t) {
    if (t < num_tiles) copy(t, first_tokens[t]);
    cp_async_commit();
  }

  // main loop: refill the stage tile t − 1 used as soon as every warp is done
  // with it, then wait for tile t, then attend to it. Refilling before waiting
  // (two barriers per tile instead of one) keeps all kStages tiles in flight
  // while the block waits, kStages − 1 while it computes. Refilling after the
  // wait, as FlashAttention-2's single-barrier loop does, issues tile
  // t + kStages − 1 only once tile t has landed: one tile fewer in flight, which
  // at 2 stages meant 32 KiB per block and a pipeline that emptied at every
  // tile. The extra barrier costs ~20–40 cycles against a tile period of
  // ~2,000 (memory-bound: 32 KiB at ~16 B/ns per block) or ~1,000+ (64 rows).
  // Group accounting: the prologue committed kStages − 1 groups (tiles 0 ..
  // kStages − 2, Q in the first); iteration t commits one more, so
  // kStages + t groups exist after its commit, and waiting until at most
  // kStages − 1 are pending completes groups 0 .. t: Q and tiles 0 .. t.
  OnlineSoftmax state[2];
  float o[D / 2] = {};
  for (int t = 0; t < num_tiles; ++t) {
    __syncthreads();  // every warp is done with tile t − 1: its stage, (t − 1) mod kStages, may be refilled
    if (t + Tr::kStages - 1 < num_tiles) copy(t + Tr::kStages - 1, ahead);
    cp_async_commit();  // possibly empty: keeps the group count in step with t
    ahead = lookup(t + Tr::kStages);  // the next refill's page ids, in flight while tile t is attended
    cp_async_wait<Tr::kStages - 1>();  // this thread's copies of Q and tiles ≤ t have landed
#if CODEC_WGMMA
    if (wg) wgmma::proxy_fence();  // ... and are visible to the tensor cores' reads
#endif
    __syncthreads();                   // ... and every thread's: tile t is visible to every warp
    const int tile_tokens = min(Tr::kTileTokens, kv_len - t * Tr::kTileTokens);
    const T* sk = skv + (t % Tr::kStages) * 2 * Tr::kTileTokens * D;
    const T* sv = sk + Tr::kTileTokens * D;
#if CODEC_WGMMA
    if (wg) {
      attend_tile_wgmma<D, T>(smem_u32(sq), smem_u32(sk), smem_u32(sv), tile_tokens, p.sm_scale, state, o);
      continue;
    }
#endif
    if (has_rows && token0 < tile_tokens)
      attend_tile_mma<D, T>(sq, sk, sv, rtile, token0, steps, tile_tokens, p.sm_scale, state, o);
  }
  cp_async_wait<0>();
  __syncthreads();  // Q and KV buffers are free: the epilogue reuses them

  // epilogue 1: each warp normalises its state and stages it as fp32
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
#pragma unroll
      for (int n = 0; n < D / 8; ++n)
        *reinterpret_cast<float2*>(so + row * Tr::kStagingStride + 8 * n + 2 * (lane % 4)) =
            make_float2(o[4 * n + 2 * h] * inv_l, o[4 * n + 2 * h + 1] * inv_l);
      if (lane % 4 == 0) slse[row] = state[h].lse();
    }
  }
  __syncthreads();

  // epilogue 2: merge each row's `splits` warp states (identity when 1) and
  // write 4 floats per thread, coalesced: rows with a single partial straight
  // to the output, the others to their workspace slot
  constexpr int kQuads = D / 4;
  for (int i = tid; i < rows * kQuads; i += Tr::kThreads) {
    const int r = i / kQuads, d = 4 * (i % kQuads);
    float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
    float lse = kNegInf;  // the empty state
    for (int w = 0; w < splits; ++w) {
      const int srow = ((r / 16) * splits + w) * 16 + r % 16;
      const MergeWeights mw = merge_weights(lse, slse[srow]);
      const float4 x = *reinterpret_cast<const float4*>(so + srow * Tr::kStagingStride + d);
      acc = make_float4(mw.w1 * acc.x + mw.w2 * x.x, mw.w1 * acc.y + mw.w2 * x.y, mw.w1 * acc.z + mw.w2 * x.z,
                        mw.w1 * acc.w + mw.w2 * x.w);
      lse = mw.lse;
    }
    const int v = task.row_begin + r;
    if (ssingle[r]) {
      const int req = reqs[v / G], head = task.kv_head * G + v % G;
      const uint2 packed = {pack2<T>(acc.x, acc.y), pack2<T>(acc.z, acc.w)};
      *reinterpret_cast<uint2*>(static_cast<T*>(p.out) + p.out_rows.at(req, head) + d) = packed;
      if (d == 0 && p.lse != nullptr) p.lse[p.lse_rows.at(req, head)] = lse * p.lse_scale;
    } else {
      const std::int64_t slot = task.slot0 + v;
      *reinterpret_cast<float4*>(p.part_o + slot * D + d) = acc;
      if (d == 0) p.part_lse[slot] = lse;
    }
  }
  __syncthreads();  // the next task's prologue overwrites the staging
}

// Programmatic dependent launch (sm_90): the merge kernel is launched with
// programmatic stream serialisation (merge.cuh), so it may start once every PAC
// block has called launch_dependents (or exited). A block calls it when it
// starts its last task: by then the merge's launch and its plan-only prologue
// overlap that task, ~2–5 µs of a two-kernel run that small trees spend in
// 30–60 µs, while merge blocks waiting in griddepcontrol.wait never sit beside
// PAC blocks that still have several tasks to run. The trigger carries no
// memory visibility; the merge's griddepcontrol.wait waits for this whole grid
// to complete and flush.
template <int D, typename T>
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
  const int begin = plan.block_indptr[blockIdx.x], end = plan.block_indptr[blockIdx.x + 1];
  for (int i = begin; i < end; ++i) {
    if (i == end - 1) pdl_launch_dependents();
    pac_task<D, T>(p, plan.tasks[i], geo, smem);
  }
}

// ---------------------------------------------------------------- host launcher

// The dynamic shared-memory limit, and a hint for the largest shared-memory
// carveout of the unified L1: 2 blocks × (112 + 1) KiB at D = 128 and 4 × (56 +
// 1) KiB at D = 64 need the full 228 KiB; L1 keeps the remaining 28 KiB, ample
// for the page lists and plan arrays it caches (~1 KiB of pages per task).
// Both are attributes of the kernel on the current device, set once per device:
// setting them on every launch cost ~1-2 µs of host time per run_cuda call.
// Not a stream operation, so allowed during graph capture.
template <int D, typename T>
void set_pac_smem_limit() {
  constexpr int kCachedDevices = 64;
  static std::atomic<bool> done[kCachedDevices] = {};
  int device = 0;
  CODEC_CUDA_CHECK(cudaGetDevice(&device));
  if (device < kCachedDevices && done[device].load(std::memory_order_acquire)) return;
  CODEC_CUDA_CHECK(cudaFuncSetAttribute(pac_kernel<D, T>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        PacTraits<D, T>::kSmemBytes));
  CODEC_CUDA_CHECK(cudaFuncSetAttribute(pac_kernel<D, T>, cudaFuncAttributePreferredSharedMemoryCarveout,
                                        int(cudaSharedmemCarveoutMaxShared)));
  if (device < kCachedDevices) done[device].store(true, std::memory_order_release);
}

// Whether this build holds a kernel image the current device can run.
template <int D, typename T>
bool pac_has_image() {
  cudaFuncAttributes attributes{};
  const cudaError_t err = cudaFuncGetAttributes(&attributes, pac_kernel<D, T>);
  if (err == cudaErrorNoKernelImageForDevice || err == cudaErrorInvalidDeviceFunction) {
    cudaGetLastError();  // an answer, not a failure: clear it
    return false;
  }
  CODEC_CUDA_CHECK(err);
  return true;
}

// Resident PAC blocks per SM on the current device (registers and shared memory).
template <int D, typename T>
int pac_blocks_per_sm() {
  set_pac_smem_limit<D, T>();
  int blocks = 0;
  CODEC_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, pac_kernel<D, T>, PacTraits<D, T>::kThreads,
                                                                 PacTraits<D, T>::kSmemBytes));
  return blocks;
}

// One block per plan block.
template <int D, typename T>
void launch_pac(const PacParams& params, cudaStream_t stream) {
  using Tr = PacTraits<D, T>;
  set_pac_smem_limit<D, T>();
  pac_kernel<D, T><<<params.plan.num_blocks, Tr::kThreads, Tr::kSmemBytes, stream>>>(params);
  CODEC_CUDA_CHECK_LAUNCH("pac_kernel", stream);
}

}  // namespace codec::cuda
