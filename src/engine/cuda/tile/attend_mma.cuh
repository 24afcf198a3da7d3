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

// mma.sync path: one warp's share of one KV tile, its 16 query rows (row tile
// `rtile`) against `steps` 16-token steps from tile token token0. Each warp
// loads its K and V fragments with ldmatrix.
template <int D, typename T>
__device__ __forceinline__ void attend_tile_mma(const T* sq, const T* sk, const T* sv, int rtile, int token0,
                                                int steps, int tile_tokens, float sm_scale,
                                                SoftmaxState (&state)[2], float (&o)[D / 2]) {
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

}  // namespace codec::cuda
