#pragma once
// An fp8 cache's values and the queries that meet them as the tensor cores'
// fp16 operands (MmaElem). Every e4m3 and e5m2 value is exact in fp16 (3 and
// 2 mantissa bits, exponents within its range), so conversion loses nothing:
// the scales apply to the scores and the output (kernels/pac.cuh, TaskScale),
// as the fp64 reference dequantises. The mma.sync path converts each
// fragment as it loads it (tile/attend_mma_fp8.cuh, fp8_half2); a wgmma task's
// block converts each stage into one fp16 tile in the swizzled layout of the
// 16-bit stages (convert_fp8_rows), which wgmma reads unchanged. The query
// rows go to fp16 once a task (convert_queries): bf16 ones scaled into its
// range, in the column order the path's K fragments take.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "engine/cuda/kernel_traits.cuh"
#include "engine/cuda/primitives/warp.cuh"

namespace codec::cuda {

// Bytes 0, 1 (kHigh false) or 2, 3 (kHigh true) of a word, two fp8 values,
// as an fp16 pair, the lower byte in the low half: e5m2 is the top byte of
// an fp16 (one byte permute), e4m3 one F2FP.UNPACK_B from sm_89 on.
template <__nv_fp8_interpretation_t kFormat, bool kHigh>
__device__ __forceinline__ std::uint32_t fp8_half2(std::uint32_t word) {
  const std::uint32_t top = __byte_perm(word, 0u, kHigh ? 0x3424u : 0x1404u);  // each byte atop its half
  if constexpr (kFormat == __NV_E5M2) {
    return top;
  } else {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 890
    // No conversion instruction: the library's fallback normalises subnormals
    // in a loop, a value at a time (it took ptxas 9 minutes on one sm_80 file
    // of kernels). An e4m3 magnitude moved into fp16's exponent and mantissa
    // fields reads as its value times 2^-8 (biases 7 and 15), subnormals
    // included, so one exact multiply by 2^8 finishes it; 0x7f, the NaN,
    // would read as 480 and is set apart.
    const std::uint32_t magnitude = top & 0x7f007f00u;
    const std::uint32_t bits = (top & 0x80008000u) | magnitude >> 1;
    __half2 value;
    std::memcpy(&value, &bits, sizeof value);
    value = __hmul2(value, __float2half2_rn(256.f));
    std::uint32_t out;
    std::memcpy(&out, &value, sizeof out);
    const std::uint32_t nan = __vcmpeq2(magnitude, 0x7f007f00u);  // 0xffff in each NaN's half
    return (out & ~nan) | (nan & 0x7fff7fffu);
#else
    const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(
        __nv_fp8x2_storage_t(kHigh ? word >> 16 : word & 0xffffu), kFormat);
    return std::uint32_t(h.x) | std::uint32_t(h.y) << 16;
#endif
  }
}

// Rows [row0, row0 + kRows) of one side (K or V) of an fp8 stage (raw:
// [kTileRows][D] bytes in raw_offset's layout) into the same rows of an fp16
// tile ([kTileRows][D] in tile_offset's layout), by kLanes threads from
// `lane`: 16 bytes in, 32 out, a thread at a time. Every size is a constant,
// so that a thread's chunk column and its rows' offsets are too: with the
// rows a run-time count, the index arithmetic (two divisions by it) took
// about as many instructions as the conversion.
template <int D, int kTileRows, int kRows, int kLanes, __nv_fp8_interpretation_t kFormat>
__device__ __forceinline__ void convert_fp8_rows(const std::uint8_t* raw, __half* tile, int row0, int lane) {
  constexpr int kRawChunks = D / 16;                  // 16-byte chunks of a raw row
  constexpr int kRowStep = kLanes / kRawChunks;       // rows the lanes take at once
  static_assert(kLanes % kRawChunks == 0 && kRows % kRowStep == 0, "every lane converts whole chunks of rows");
  const int c = lane % kRawChunks;
#pragma unroll
  for (int k = 0; k < kRows / kRowStep; ++k) {
    const int r = row0 + lane / kRawChunks + k * kRowStep;
    const uint4 in = *reinterpret_cast<const uint4*>(raw + raw_offset<D>(r, c));
    const std::uint32_t words[4] = {in.x, in.y, in.z, in.w};
    std::uint32_t out[8];
#pragma unroll
    for (int w = 0; w < 4; ++w) {
      out[2 * w] = fp8_half2<kFormat, false>(words[w]);
      out[2 * w + 1] = fp8_half2<kFormat, true>(words[w]);
    }
    *reinterpret_cast<uint4*>(tile + tile_offset<kTileRows>(r, 2 * c)) = make_uint4(out[0], out[1], out[2], out[3]);
    *reinterpret_cast<uint4*>(tile + tile_offset<kTileRows>(r, 2 * c + 1)) = make_uint4(out[4], out[5], out[6], out[7]);
  }
}

// The same, the format told at run time (one uniform branch a call).
template <int D, int kTileRows, int kRows, int kLanes>
__device__ __forceinline__ void convert_fp8_rows(const std::uint8_t* raw, __half* tile, int row0, int lane,
                                                 bool e5m2) {
  if (e5m2) convert_fp8_rows<D, kTileRows, kRows, kLanes, __NV_E5M2>(raw, tile, row0, lane);
  else convert_fp8_rows<D, kTileRows, kRows, kLanes, __NV_E4M3>(raw, tile, row0, lane);
}

// The exponent e by which convert_queries scales a task's bf16 queries (q ·
// 2⁻ᵉ), from the bf16 bits of their largest |q|: that one then lies in [2¹⁴,
// 2¹⁵), below fp16's largest (65504), and every bf16 value (8 significant
// bits) down to 2⁻²⁸ of it is an fp16 normal (11 bits): exact. Smaller ones
// round, moving a score by under 2⁻²⁸ of its largest term. e ∈ [−100, 114],
// so 2^±e are fp32 normals (a subnormal or zero maximum takes −100: such
// queries' scores are 0 to within fp32's range); inf and NaN stay so.
__host__ __device__ constexpr int query_exponent(std::uint32_t max_abs_bits) {
  const int e = int(max_abs_bits >> 7) - 127 - 14;  // the bf16 exponent field, unbiased, less 14
  return e < -100 ? -100 : e;
}
static_assert(query_exponent(0x3f80u) == -14 && query_exponent(0x7f7fu) == 113 && query_exponent(0u) == -100,
              "1 and bf16's largest finite value land in [2^14, 2^15); zero takes the floor");

// 2ⁿ as an fp32 normal, n ∈ [−126, 127].
__device__ __forceinline__ float exp2i(int n) { return __int_as_float((127 + n) << 23); }

// The element of a query row, as copied, that word c (elements 2c, 2c + 1)
// of Q's 16-byte chunk `chunk` holds: the same columns (kPermute false: the
// wgmma path, whose K tile is converted in order), or those of the K bytes
// a lane of the mma.sync path loads (tile/attend_mma_fp8.cuh): for k-step kk
// (chunks 2kk, 2kk + 1: h = chunk % 2), lane c's 16-byte load of a token's
// K at byte 64 (kk / 4) + 16c holds d = 64 (kk / 4) + 16c + 4 (kk % 4) +
// {0, 1} (its B fragment's k = 2c, 2c + 1) and + {2, 3} (k = 2c + 8, 2c + 9),
// so Q's columns 2c, 2c + 1 (h = 0) and 2c + 8, 2c + 9 (h = 1) of that k-step
// must hold those.
template <bool kPermute>
__device__ __forceinline__ int query_source(int chunk, int c) {
  if constexpr (kPermute) {
    const int kk = chunk / 2;
    return 64 * (kk / 4) + 16 * c + 4 * (kk % 4) + 2 * (chunk % 2);
  } else {
    return 8 * chunk + 2 * c;
  }
}

// Rows [row0, row0 + rows) of a task's queries, as copied in q's type T
// (`copied(r, e)`: element e of row r, 8 at a time contiguous from e % 8 =
// 0), into Q (sq: [kQRows][D] fp16 in tile_offset's layout), by kLanes
// threads from `lane`, in query_source<kPermute>'s column order. The source
// may be sq itself (kPermute false: each thread rewrites the chunks it
// read). fp16 queries go as they are; bf16 ones are scaled by 2⁻ᵉ for e =
// query_exponent of their largest |q|, which is returned (0 for fp16): raw
// scores are then 2⁻ᵉ of the true ones (TaskScale::unscale_queries). Over
// more than a warp the lanes' maxima meet through `scratch` (a word a warp)
// and `sync`, a barrier of the kLanes threads; the caller's later barriers
// keep the next call's scratch writes after these reads. Rows past the
// task's are zero (the copy's zero fill) and stay so.
template <int D, typename T, int kQRows, int kLanes, bool kPermute, typename Copied, typename Sync>
__device__ __forceinline__ int convert_queries(const Copied& copied, __half* sq, int row0, int rows, int lane,
                                               std::uint32_t* scratch, const Sync& sync) {
  constexpr int kChunks = D / 8;  // 16-byte chunks of a row
  constexpr bool kBf16 = !std::is_same_v<T, __half>;
  static_assert(kLanes % 32 == 0, "whole warps");
  const int chunks = rows * kChunks;
  int e = 0;
  if constexpr (kBf16) {
    std::uint32_t max2 = 0;  // per 16-bit half: the largest |q| bits, ordered as the values are
    for (int i = lane; i < chunks; i += kLanes) {
      const uint4 in = *reinterpret_cast<const uint4*>(copied(row0 + i / kChunks, 8 * (i % kChunks)));
      max2 = __vmaxu2(max2, __vmaxu2(in.x & 0x7fff7fffu, in.y & 0x7fff7fffu));
      max2 = __vmaxu2(max2, __vmaxu2(in.z & 0x7fff7fffu, in.w & 0x7fff7fffu));
    }
    std::uint32_t max_abs = __reduce_max_sync(0xffffffffu, max(max2 & 0xffffu, max2 >> 16));
    if constexpr (kLanes > 32) {
      if (lane % 32 == 0) scratch[lane / 32] = max_abs;
      sync();
#pragma unroll
      for (int w = 0; w < kLanes / 32; ++w) max_abs = max(max_abs, scratch[w]);
    }
    e = query_exponent(max_abs);
  }
  (void)scratch;
  (void)sync;
  const float down = exp2i(-e);
  for (int i = lane; i < chunks; i += kLanes) {
    const int r = row0 + i / kChunks, chunk = i % kChunks;
    std::uint32_t w[4];
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      w[c] = *reinterpret_cast<const std::uint32_t*>(copied(r, query_source<kPermute>(chunk, c)));
      if constexpr (kBf16) {
        __nv_bfloat162 b;
        std::memcpy(&b, &w[c], sizeof b);
        const float2 f = __bfloat1622float2(b);
        w[c] = pack2<__half>(f.x * down, f.y * down);
      }
    }
    *reinterpret_cast<uint4*>(sq + tile_offset<kQRows>(r, chunk)) = make_uint4(w[0], w[1], w[2], w[3]);
  }
  return e;
}

}  // namespace codec::cuda
