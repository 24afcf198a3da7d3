#pragma once
// An fp8 cache's stage as the tensor cores' operands: each stage of fp8 K and
// V bytes (PacSmem) becomes one tile of T in the swizzled layout the 16-bit
// stages have (kernel_traits.cuh, tile_offset), so that the mma.sync and
// wgmma paths read it unchanged. Every e4m3 and e5m2 value is exact in fp16
// and in bf16 (3 and 2 mantissa bits; exponents within both ranges), so the
// conversion loses nothing: the scales apply to the scores and the output
// (kernels/pac.cuh, TaskScale), as the fp64 reference dequantises.
#include <cuda_fp8.h>

#include <cstdint>
#include <type_traits>

#include "engine/cuda/kernel_traits.cuh"
#include "engine/cuda/primitives/warp.cuh"

namespace codec::cuda {

// Two fp8 values (the low byte first) as a pair of T, the first in the low half.
template <typename T, __nv_fp8_interpretation_t kFormat>
__device__ __forceinline__ std::uint32_t fp8x2_to(std::uint16_t pair) {
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(pair, kFormat);
  if constexpr (std::is_same_v<T, __half>) {
    return std::uint32_t(h.x) | std::uint32_t(h.y) << 16;
  } else {
    const float2 f = __half22float2(__half2(h));
    return pack2<T>(f.x, f.y);
  }
}

// Rows [row0, row0 + kRows) of a stage's fp8 K and V (raw: [kTileTokens][D]
// bytes each, V after K) into the same rows of the converted tiles (K, then
// V), by kLanes threads from `lane`: 16 bytes in, 32 out, a thread at a time.
// Every size is a constant, so that a thread's chunk column and its rows'
// offsets are too: with the rows a run-time count, the index arithmetic
// (two divisions by it) took about as many instructions as the conversion.
template <int D, typename T, int kRows, int kLanes, __nv_fp8_interpretation_t kFormat>
__device__ __forceinline__ void convert_fp8_rows(const std::uint8_t* raw, T* tile, int row0, int lane) {
  using Tr = PacTraits<D, T>;
  constexpr int kRawChunks = D / 16;                  // 16-byte chunks of a raw row
  constexpr int kRowStep = kLanes / kRawChunks;       // rows the lanes take at once
  static_assert(kLanes % kRawChunks == 0 && kRows % kRowStep == 0, "every lane converts whole chunks of rows");
  const int c = lane % kRawChunks;
#pragma unroll
  for (int side = 0; side < 2; ++side) {
#pragma unroll
    for (int k = 0; k < kRows / kRowStep; ++k) {
      const int r = row0 + lane / kRawChunks + k * kRowStep;
      const uint4 in = *reinterpret_cast<const uint4*>(raw + side * Tr::kTileTokens * D + r * D + 16 * c);
      const std::uint32_t words[4] = {in.x, in.y, in.z, in.w};
      std::uint32_t out[8];
#pragma unroll
      for (int w = 0; w < 4; ++w) {
        out[2 * w] = fp8x2_to<T, kFormat>(std::uint16_t(words[w] & 0xffffu));
        out[2 * w + 1] = fp8x2_to<T, kFormat>(std::uint16_t(words[w] >> 16));
      }
      T* dst = tile + side * Tr::kTileTokens * D;
      *reinterpret_cast<uint4*>(dst + tile_offset<Tr::kTileTokens>(r, 2 * c)) =
          make_uint4(out[0], out[1], out[2], out[3]);
      *reinterpret_cast<uint4*>(dst + tile_offset<Tr::kTileTokens>(r, 2 * c + 1)) =
          make_uint4(out[4], out[5], out[6], out[7]);
    }
  }
}

// The same, the format told at run time (one uniform branch a stage).
template <int D, typename T, int kRows, int kLanes>
__device__ __forceinline__ void convert_fp8_rows(const std::uint8_t* raw, T* tile, int row0, int lane, bool e5m2) {
  if (e5m2) convert_fp8_rows<D, T, kRows, kLanes, __NV_E5M2>(raw, tile, row0, lane);
  else convert_fp8_rows<D, T, kRows, kLanes, __NV_E4M3>(raw, tile, row0, lane);
}

}  // namespace codec::cuda
