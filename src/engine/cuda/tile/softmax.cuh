#pragma once
// The online softmax of one warp's score fragments (docs/DESIGN.md §5), in
// the register layout both tensor-core paths share. Scores are s = sm_scale ·
// q·k in fp32 (the scale is applied to the fp32 accumulator, fused into the
// exponent as one FFMA per score, rather than folded into a half-precision
// copy of Q, which would round every query element by up to 2⁻⁸ relative in
// bf16); m and lse are natural log, exactly as SoftmaxState in state.hpp
// defines them.
#include <cstdint>

#include "codec/core/state.hpp"
#include "engine/cuda/primitives/ptx.cuh"
#include "engine/cuda/primitives/warp.cuh"

namespace codec::cuda {

// Register layout shared by both tensor-core paths. A warp owns 16 query rows;
// lane holds rows lane/4 (h = 0) and lane/4 + 8 (h = 1), columns 2·(lane%4) +
// {0, 1} of every 8-column block n, as acc[4n + 2h + {0, 1}] (the mma.m16n8k16
// accumulator, repeated; wgmma's m64 accumulator gives warp w rows 16w..16w+15
// in the same layout). s[kTileTokens / 2] holds the scores of the warp's
// tokens, o[D / 2] its unnormalised output; state[h] is row h's online softmax.

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

// What a task's raw scores go through right after Q·Kᵀ, before any mask, so
// that the exponent's scale e > 0 (kernels/pac.cuh, TaskScale), the maxima
// and the masks stay as they are. The logit is x = f · s for f = sm_scale ·
// k_scale, e = |f|:
// - kCap, a soft-cap c (HeadConfig::logits_soft_cap): x = c · tanh(f · s / c),
//   kept in raw units: s ← out · tanh(in · s), in = f / c, out = c / e (0
//   where e = 0: every logit 0);
// - else kSigned (an fp8 cache, whose k_scale may be negative): s ← −s where
//   f < 0, one uniform branch a tile;
// - else nothing: the plain instance's code is as if there were no ScoreMod.
// Each is an instance of its own: a run-time cap test in the plain kernels
// cost them up to 9.6% (results/HISTORY.md). tanh(x) = 1 − 2 / (e^2x + 1) on
// ex2 and rcp is within ~6e-7 absolute, i.e. logits within c · 6e-7, where
// tanh.approx (2^-11 relative) would move a logit near a cap of 50 by 0.02.
// Two scores share one reciprocal (1/a = b / ab, 1/b = a / ab): 1.5 SFU ops a
// score instead of 2, 9% off a capped batch:64 on an H100 (results/HISTORY.md).
template <bool kCap, bool kSigned>
struct ScoreMod {
  float in = 0.f, out = 0.f;  // kCap
  bool negate = false;        // kSigned without kCap

  template <int N>
  __device__ __forceinline__ void operator()(float (&s)[N]) const {
    constexpr float k2Log2e = 2.8853900817779268f;  // 2 log2 e
    if constexpr (kCap) {
      static_assert(N % 2 == 0, "scores come in pairs");
      // e^2x stops at 2^26, past which tanh is 1 in fp32, so that a · b stays finite.
#pragma unroll
      for (int i = 0; i < N; i += 2) {
        const float a = exp2_ftz(fminf(k2Log2e * in * s[i], 26.f)) + 1.f;
        const float b = exp2_ftz(fminf(k2Log2e * in * s[i + 1], 26.f)) + 1.f;
        const float r = rcp_ftz(a * b);
        s[i] = fmaf(-2.f * out, r * b, out);
        s[i + 1] = fmaf(-2.f * out, r * a, out);
      }
    } else if constexpr (kSigned) {
      if (negate) {
#pragma unroll
        for (int i = 0; i < N; ++i) s[i] = -s[i];
      }
    }
  }
};

// Row maxima and sums go through kLanes independent partials per row, so that
// their dependency chains are 1/kLanes as long: with two warps per scheduler,
// waiting on the previous FMNMX or FADD is what stalls issue most.
template <int kSteps>
inline constexpr int kSoftmaxLanes = kSteps < 4 ? kSteps : 4;

// Scores of the kSteps steps from tile token token0 at or past tile_tokens
// become −inf. Only a task's last tile has such tokens.
template <int kSteps>
__device__ __forceinline__ void mask_tail(float (&s)[8 * kSteps], int token0, int tile_tokens) {
  const int lane = threadIdx.x % 32;
  if (token0 + 16 * kSteps > tile_tokens) {
#pragma unroll
    for (int i = 0; i < 8 * kSteps; ++i)
      if (token0 + 8 * (i / 4) + 2 * (lane % 4) + (i & 1) >= tile_tokens) s[i] = kNegInf;
  }
}

// Scores of row h outside tile tokens [lo[h], hi[h]) become −inf: in a tile
// of several requests' tails, those of other requests than the row's.
template <int kSteps>
__device__ __forceinline__ void mask_rows(float (&s)[8 * kSteps], const int (&lo)[2], const int (&hi)[2]) {
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int i = 0; i < 8 * kSteps; ++i) {
    const int token = 8 * (i / 4) + 2 * (lane % 4) + (i & 1), h = (i / 2) % 2;
    if (token < lo[h] || token >= hi[h]) s[i] = kNegInf;
  }
}

// Each row's max raw score over kSteps steps, the same in the 4 lanes of a
// row. sm_scale > 0, so the max of raw scores is the max of scaled ones.
template <int kSteps>
__device__ __forceinline__ void row_max(const float (&s)[8 * kSteps], float (&tile_max)[2]) {
  constexpr int kLanes = kSoftmaxLanes<kSteps>;
  float part_max[2][kLanes];
#pragma unroll
  for (int h = 0; h < 2; ++h)
#pragma unroll
    for (int k = 0; k < kLanes; ++k) part_max[h][k] = kNegInf;
#pragma unroll
  for (int i = 0; i < 8 * kSteps; ++i) {
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
// units, as SoftmaxState defines it. While m is −inf (no tile yet) the
// exponent is 0, so that exp gives 0 for −inf scores, not NaN.
__device__ __forceinline__ ExpScale exp_scale(const SoftmaxState (&state)[2], float sm_scale) {
  constexpr float kLog2e = 1.4426950408889634f;
  ExpScale e{sm_scale * kLog2e, {0.f, 0.f}};
#pragma unroll
  for (int h = 0; h < 2; ++h) e.neg_m_log2[h] = state[h].m == kNegInf ? 0.f : -state[h].m * kLog2e;
  return e;
}

// Raises the running max to cover the tile (rescaling l, and o only when some
// row's max rose) and returns the tile's exponent.
template <int D>
__device__ __forceinline__ ExpScale raise_max(const float (&tile_max)[2], float sm_scale, SoftmaxState (&state)[2],
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

// mma.sync path: the kSteps steps of s become P in place and are added to l
// (this lane's columns; the quad is summed in the epilogue). p_fragment then
// packs one step at a time: packing all at once spilled 24 bytes instead of 12
// at D = 64 in the builds without wgmma (sm_80, generic sm_90).
template <int kSteps>
__device__ __forceinline__ void softmax_exp(float (&s)[8 * kSteps], const ExpScale& e, SoftmaxState (&state)[2]) {
  constexpr int kLanes = kSoftmaxLanes<kSteps>;
  float part_l[2][kLanes] = {};
#pragma unroll
  for (int i = 0; i < 8 * kSteps; ++i) {
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
// this lane's columns. s is left as it was, for a redo (attend_wgmma.cuh).
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

}  // namespace codec::cuda
