#pragma once
// The mma.sync tile step of PAC over an fp8 cache (sm_80 and up): as
// attend_mma.cuh's, on fp16 mma.m16n8k16 (MmaElem), but K and V fragments
// come straight from the stage's bytes (PacSmem, raw_offset) and convert in
// registers (tile/fp8.cuh, fp8_half2): no converted tile, no barrier for it.
//   K (the B operand of Q·Kᵀ): a dot product's terms may come in any order
//   if Q's and K's come in the same one, so lane (g, c) = (lane / 4, lane %
//   4) loads 16 bytes of its token g (and g + 8), bytes 64 kq + 16c .. + 15,
//   whose 4-byte word w holds k-step 4 kq + w's k = 2c, 2c + 1 (its low
//   pair) and 2c + 8, 2c + 9 (its high pair); Q's columns are put in that
//   order when it is converted (convert_queries, query_source).
//   V (the B operand of P·V, k the tokens): ldmatrix.trans of the bytes as
//   16-bit pairs gives lane (g, c) tokens 2c, 2c + 1 at columns 2g, 2g + 1 of
//   a 16-byte chunk; a byte permute regroups them into (2c, 2c + 1) at 2g and
//   at 2g + 1, the B fragments of two n8 blocks: the chunk's even columns
//   and its odd ones. The output's columns are then permuted: block 2m (even)
//   holds d = 16m + 4c + {0, 2} and block 2m + 1 (odd) d = 16m + 4c + {1, 3},
//   i.e. lane c holds d = 16m + 4c .. 16m + 4c + 3 of every row it has, which
//   the epilogues write as four columns (OutLayout::fp8_mma).
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>
#include <type_traits>

#include "codec/core/state.hpp"
#include "engine/cuda/kernel_traits.cuh"
#include "engine/cuda/primitives/ptx.cuh"
#include "engine/cuda/tile/attend_mma.cuh"
#include "engine/cuda/tile/fp8.cuh"
#include "engine/cuda/tile/softmax.cuh"

namespace codec::cuda {

__device__ __forceinline__ std::uint32_t word_of(const uint4& v, int w) {
  return w == 0 ? v.x : w == 1 ? v.y : w == 2 ? v.z : v.w;
}

// One warp's share of one fp8 stage, as attend_tile_mma: its 16 query rows
// (row tile `rtile` of sq, fp16 in query_source<true>'s column order)
// against kSteps 16-token steps from stage token token0; sk and sv are the
// stage's K and V bytes.
template <int D, int kSteps, __nv_fp8_interpretation_t kFormat, typename Mod, typename Mask>
__device__ __forceinline__ void attend_tile_mma_fp8(const __half* sq, const std::uint8_t* sk, const std::uint8_t* sv,
                                                    int rtile, int token0, int tile_tokens, float sm_scale,
                                                    const Mod& mod, const Mask& mask, int tile_first,
                                                    SoftmaxState (&state)[2], float (&o)[D / 2]) {
  using Tr = PacTraits<D, __half>;
  constexpr int kChains = kQkChains<kSteps>;
  const int lane = threadIdx.x % 32, g = lane / 4, c = lane % 4;

  // S = Q Kᵀ, four k-steps (64 columns) a load, one step after another:
  // kSteps > 1 only without wgmma (sm_80), where each step reloads Q's
  // fragments rather than all steps holding their K words at once.
  float s[kChains][8 * kSteps] = {};
#pragma unroll
  for (int j = 0; j < kSteps; ++j)
#pragma unroll
    for (int kq = 0; kq < D / 64; ++kq) {
      uint4 k[2];  // tokens g and g + 8 of the step
#pragma unroll
      for (int nb = 0; nb < 2; ++nb)
        k[nb] = *reinterpret_cast<const uint4*>(sk + raw_offset<D>(token0 + 16 * j + 8 * nb + g, 4 * kq + c));
#pragma unroll
      for (int w = 0; w < 4; ++w) {
        const int kk = 4 * kq + w;
        std::uint32_t a[4];
        ldmatrix_x4(a, sq + tile_offset<Tr::kMaxRows>(rtile * 16 + lane % 16, 2 * kk + lane / 16));
#pragma unroll
        for (int nb = 0; nb < 2; ++nb) {
          const std::uint32_t word = word_of(k[nb], w);
          mma_16816<__half>(s[kk % kChains] + 8 * j + 4 * nb, a, fp8_half2<kFormat, false>(word),
                            fp8_half2<kFormat, true>(word));
        }
      }
    }
  tile_softmax<D, kSteps>(s, token0, tile_tokens, sm_scale, mod, mask, tile_first, state, o);

  // O += P V, two 16-byte chunks of V's columns a load
#pragma unroll
  for (int j = 0; j < kSteps; ++j) {
    std::uint32_t a[4];
    p_fragment<__half>(a, s[0], j);
#pragma unroll
    for (int m2 = 0; m2 < D / 32; ++m2) {
      std::uint32_t r[4];  // tokens 0-7 then 8-15 of chunk 2 m2, then of chunk 2 m2 + 1
      ldmatrix_x4_trans(r, sv + raw_offset<D>(token0 + 16 * j + lane % 8 + ((lane / 8) % 2) * 8, 2 * m2 + lane / 16));
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        // bytes (2c, 2g), (2c, 2g+1), (2c+1, 2g), (2c+1, 2g+1) as (token, column) become
        // (2c, 2g), (2c+1, 2g) | (2c, 2g+1), (2c+1, 2g+1): column 2g's pair, then 2g + 1's
        const std::uint32_t lo = __byte_perm(r[2 * h], 0u, 0x3120u), hi = __byte_perm(r[2 * h + 1], 0u, 0x3120u);
        float* acc = o + 8 * (2 * m2 + h);
        mma_16816<__half>(acc, a, fp8_half2<kFormat, false>(lo), fp8_half2<kFormat, false>(hi));
        mma_16816<__half>(acc + 4, a, fp8_half2<kFormat, true>(lo), fp8_half2<kFormat, true>(hi));
      }
    }
  }
}

// attend_tile_mma_fp8 for a run-time step count (attend_tile_mma_steps) and format.
template <int D, typename Mod, typename Mask>
__device__ __forceinline__ void attend_tile_mma_fp8_steps(int steps, bool e5m2, const __half* sq,
                                                          const std::uint8_t* sk, const std::uint8_t* sv, int rtile,
                                                          int token0, int tile_tokens, float sm_scale, const Mod& mod,
                                                          const Mask& mask, int tile_first, SoftmaxState (&state)[2],
                                                          float (&o)[D / 2]) {
  constexpr int kMax = PacTraits<D, __half>::kMaxSplits;
  static_assert(kMax == 2 || kMax == 4, "a warp takes 1, 2 or 4 steps of a tile");
  auto run = [&](auto format) {
    constexpr __nv_fp8_interpretation_t kFormat = decltype(format)::value;
    if (steps == 1)
      attend_tile_mma_fp8<D, 1, kFormat>(sq, sk, sv, rtile, token0, tile_tokens, sm_scale, mod, mask, tile_first,
                                         state, o);
    else if (kMax == 4 && steps == 2)
      attend_tile_mma_fp8<D, 2, kFormat>(sq, sk, sv, rtile, token0, tile_tokens, sm_scale, mod, mask, tile_first,
                                         state, o);
    else
      attend_tile_mma_fp8<D, kMax, kFormat>(sq, sk, sv, rtile, token0, tile_tokens, sm_scale, mod, mask, tile_first,
                                            state, o);
  };
  if (e5m2) run(std::integral_constant<__nv_fp8_interpretation_t, __NV_E5M2>{});
  else run(std::integral_constant<__nv_fp8_interpretation_t, __NV_E4M3>{});
}

}  // namespace codec::cuda
