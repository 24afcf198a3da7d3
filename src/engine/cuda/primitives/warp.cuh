#pragma once
// Register-level helpers shared by the kernels: packing fp32 pairs into one
// 16-bit-pair register, and butterfly reductions across a lane group.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <cstring>
#include <type_traits>

namespace codec::cuda {

// Two fp32 values rounded to the 16-bit device type T (__half or
// __nv_bfloat16: the same bits as codec::f16_t / bf16_t on the host), packed
// into one 32-bit register, lo in the low half: an mma A fragment or a store.
template <typename T>
__device__ __forceinline__ std::uint32_t pack2(float lo, float hi) {
  std::uint32_t u;
  if constexpr (std::is_same_v<T, __half>) {
    const __half2 h = __floats2half2_rn(lo, hi);
    std::memcpy(&u, &h, sizeof u);
  } else {
    const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    std::memcpy(&u, &h, sizeof u);
  }
  return u;
}

// Butterfly reduction over groups of kLanes consecutive lanes (a power of two
// ≤ 32): every lane of a group ends with op over the group's values.
template <int kLanes, typename Op>
__device__ __forceinline__ float butterfly(float x, Op op) {
  static_assert(kLanes >= 2 && kLanes <= 32 && (kLanes & (kLanes - 1)) == 0, "a power-of-two lane group");
#pragma unroll
  for (int offset = 1; offset < kLanes; offset *= 2) x = op(x, __shfl_xor_sync(0xffffffffu, x, offset));
  return x;
}
struct MaxOp {
  __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};
struct SumOp {
  __device__ float operator()(float a, float b) const { return a + b; }
};

}  // namespace codec::cuda
