#pragma once
// The wgmma tile step of PAC (sm_90a only; CODEC_WGMMA is 0 elsewhere and the
// kernel never takes this path): one warpgroup, 64 row slots, the whole tile.
#include <cstdint>

#include "codec/core/state.hpp"
#include "engine/cuda/kernel_traits.cuh"
#include "engine/cuda/primitives/warp.cuh"
#include "engine/cuda/primitives/wgmma.cuh"
#include "engine/cuda/tile/softmax.cuh"

namespace codec::cuda {

#if CODEC_WGMMA
// wgmma path (sm_90a): the block's 4 warps, one warpgroup, attend all 64 row
// slots to the whole tile; K and V are read by the tensor cores from shared
// memory once per tile (primitives/wgmma.cuh has the operand layouts).
// `mod` transforms the raw scores (tile/softmax.cuh, ScoreMod); `mask` (tile/row_masks.cuh)
// hides keys from rows; tile token j is task token tile_first + j.
template <int D, typename T, typename Mod, typename Mask>
__device__ __forceinline__ void attend_tile_wgmma(std::uint32_t sq, std::uint32_t sk, std::uint32_t sv,
                                                  int tile_tokens, float sm_scale, const Mod& mod,
                                                  const Mask& mask, int tile_first, SoftmaxState (&state)[2],
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
  const std::uint64_t dq = wgmma::desc(sq, 16, 1024), dk = wgmma::desc(sk, 16, 1024);
  const std::uint64_t dv = wgmma::desc(sv, N * 128, 1024);
  wgmma::fence();
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) {  // k16 step kk: column block kk / 4, bytes 32 · (kk % 4) of its rows
    const std::uint32_t k_off = 32 * (kk % 4);
    wgmma::mma_ss<N, T>(s, wgmma::advance(dq, (kk / 4) * (Tr::kMaxRows * 128) + k_off),
                        wgmma::advance(dk, (kk / 4) * (N * 128) + k_off));
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
  // fails, was measured and not kept (5c68e78): as a select, long
  // and loogle:8 ran 3.1–3.8% slower; as a branch, batch:64 ran 3.6% faster
  // but long and loogle:8 1.8–2.8% slower.
  constexpr float kSlack = 5.5451774f;  // 8 ln 2
  mod(s);
  mask_tail<kSteps>(s, 0, tile_tokens);
  mask(s, tile_first);
  float tile_max[2];
  row_max<kSteps>(s, tile_max);
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
        wgmma::mma_rs<kPV, T>(o + nb * kPV / 2, a[j], wgmma::advance(dv, 2048 * j + nb * (kPV / 64) * (N * 128)));
    }
    wgmma::commit();
  }
  wgmma::wait_all();
#pragma unroll
  for (int i = 0; i < D / 2; ++i) wgmma::fence_operand(o[i]);
}
#endif

}  // namespace codec::cuda
