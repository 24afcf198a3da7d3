#pragma once
// The mma.sync tile step of PAC (sm_80 and up): S = Q Kᵀ and O += P V on
// mma.m16n8k16 with fp32 accumulators, operands loaded by every warp with
// ldmatrix from the swizzled shared-memory tiles (kernel_traits.cuh).
#include <cstdint>

#include "codec/core/state.hpp"
#include "engine/cuda/kernel_traits.cuh"
#include "engine/cuda/primitives/ptx.cuh"
#include "engine/cuda/primitives/warp.cuh"
#include "engine/cuda/tile/softmax.cuh"

namespace codec::cuda {

// Q·Kᵀ accumulators a score of kSteps steps (attend_tile_mma says why).
template <int kSteps>
inline constexpr int kQkChains = kSteps <= 2 ? 2 : 1;

// Between the two products of a tile step: the chains of kSteps 16-token
// steps of raw scores from tile token token0 are summed into s[0], which goes
// through the task's ScoreMod and masks, raises the running max (rescaling
// o), and becomes P in place.
template <int D, int kSteps, typename Mod, typename Mask>
__device__ __forceinline__ void tile_softmax(float (&s)[kQkChains<kSteps>][8 * kSteps], int token0, int tile_tokens,
                                             float sm_scale, const Mod& mod, const Mask& mask, int tile_first,
                                             SoftmaxState (&state)[2], float (&o)[D / 2]) {
#pragma unroll
  for (int c = 1; c < kQkChains<kSteps>; ++c)
#pragma unroll
    for (int i = 0; i < 8 * kSteps; ++i) s[0][i] += s[c][i];
  mod(s[0]);
  mask_tail<kSteps>(s[0], token0, tile_tokens);
  mask(s[0], tile_first + token0);
  float tile_max[2];
  row_max<kSteps>(s[0], tile_max);
  const ExpScale e = raise_max<D>(tile_max, sm_scale, state, o);
  softmax_exp<kSteps>(s[0], e, state);
}

// mma.sync path: one warp's share of one KV tile, its 16 query rows (row tile
// `rtile`) against kSteps 16-token steps from tile token token0. Each warp
// loads its K and V fragments with ldmatrix.
//
// kSteps is a compile-time count (attend_tile_mma_steps picks it), so that
// each k16 step's ldmatrix issues ahead of its mma with no branch between
// them; with one or two steps Q·Kᵀ's D / 16 dependent mma per accumulator
// run as two chains of half the length, summed after. A small task's block
// has one warp a scheduler and its tile is a chain of latencies: the shorter
// the chain, the nearer its block streams to the copy path's rate where few
// blocks stream (0d0804c: flat:8 unsplit 0.80×; docs/DESIGN_NOTES.md, A small
// task's tile).
//
// `mod` transforms the raw scores (tile/softmax.cuh, ScoreMod); `mask` (tile/row_masks.cuh)
// hides keys from rows; tile token j is task token tile_first + j.
template <int D, typename T, int kSteps, typename Mod, typename Mask>
__device__ __forceinline__ void attend_tile_mma(const T* sq, const T* sk, const T* sv, int rtile, int token0,
                                                int tile_tokens, float sm_scale, const Mod& mod, const Mask& mask,
                                                int tile_first, SoftmaxState (&state)[2], float (&o)[D / 2]) {
  using Tr = PacTraits<D, T>;
  constexpr int kChains = kQkChains<kSteps>;
  const int lane = threadIdx.x % 32;

  // S = Q Kᵀ: per 16-token step two n8 accumulators, per chain
  float s[kChains][8 * kSteps] = {};
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) {
    std::uint32_t a[4];
    ldmatrix_x4(a, sq + tile_offset<Tr::kMaxRows>(rtile * 16 + lane % 16, 2 * kk + lane / 16));
#pragma unroll
    for (int j = 0; j < kSteps; ++j) {
      std::uint32_t b[4];  // tokens 0-7 then 8-15, each as d 0-7 then 8-15
      ldmatrix_x4(b, sk + tile_offset<Tr::kTileTokens>(token0 + 16 * j + lane % 8 + (lane / 16) * 8,
                                                       2 * kk + (lane / 8) % 2));
      float* acc = s[kk % kChains] + 8 * j;
      mma_16816<T>(acc, a, b[0], b[1]);
      mma_16816<T>(acc + 4, a, b[2], b[3]);
    }
  }
  tile_softmax<D, kSteps>(s, token0, tile_tokens, sm_scale, mod, mask, tile_first, state, o);

  // O += P V
#pragma unroll
  for (int j = 0; j < kSteps; ++j) {
    std::uint32_t a[4];
    p_fragment<T>(a, s[0], j);
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

// attend_tile_mma for a run-time step count: 1, 2 or 4 at head_dim 64 and
// 128, 1 or 2 at 256 (a warp's share of a tile: kTileTokens / 16 / splits,
// kernels/pac.cuh), uniform over the block.
template <int D, typename T, typename Mod, typename Mask>
__device__ __forceinline__ void attend_tile_mma_steps(int steps, const T* sq, const T* sk, const T* sv, int rtile,
                                                      int token0, int tile_tokens, float sm_scale, const Mod& mod,
                                                      const Mask& mask, int tile_first, SoftmaxState (&state)[2],
                                                      float (&o)[D / 2]) {
  constexpr int kMax = PacTraits<D, T>::kMaxSplits;
  static_assert(kMax == 2 || kMax == 4, "a warp takes 1, 2 or 4 steps of a tile");
  if (steps == 1)
    attend_tile_mma<D, T, 1>(sq, sk, sv, rtile, token0, tile_tokens, sm_scale, mod, mask, tile_first, state, o);
  else if (kMax == 4 && steps == 2)
    attend_tile_mma<D, T, 2>(sq, sk, sv, rtile, token0, tile_tokens, sm_scale, mod, mask, tile_first, state, o);
  else
    attend_tile_mma<D, T, kMax>(sq, sk, sv, rtile, token0, tile_tokens, sm_scale, mod, mask, tile_first, state, o);
}

}  // namespace codec::cuda
