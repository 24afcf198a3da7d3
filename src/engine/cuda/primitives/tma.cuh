#pragma once
// Tensor memory access (sm_90): one instruction copies a box of a tensor,
// described by a CUtensorMap the host encodes, from global into shared memory
// and counts its bytes on an mbarrier (complete_tx), with no thread issuing
// per-chunk copies. The wide kernel's producer loads K and V this way where
// the pages allow (kernels/pac_wide.cuh, WideKv). The host half
// (encode_paged_map) lives in cuda_engine.cu; the twin of pipeline.cuh's
// barriers.
#include <cuda.h>  // CUtensorMap: a type only; the encoder is found through the runtime

#include <cstdint>

#include "engine/cuda/primitives/ptx.cuh"

namespace codec::cuda {

// The paged K and V pools as TMA sees them: 4-D tensors whose innermost
// dimension is head_dim and whose other three are a page's slot, the kv
// head and the page, in the order of their strides (slot_dim, head_dim_pos,
// page_dim: each 1, 2 or 3). A box is 64 elements (128 bytes, the
// 128-byte swizzle of the stage layout) by 16 slots of one head and page.
// `enabled` is false where the pages do not allow it (a page size that is not
// a multiple of 16, or a map the driver refused): the producer then copies by
// cp.async alone.
struct WideKv {
  CUtensorMap k;
  CUtensorMap v;
  int slot_dim;
  int head_dim_pos;
  int page_dim;
  bool enabled;
};
inline constexpr int kTmaBoxTokens = 16;
inline constexpr int kTmaBoxElems = 64;

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900

// Adds `bytes` to the transactions the barrier's current phase waits for
// (no arrival): the phase completes once its arrivals are in and the bulk
// copies that name it have written that many bytes.
__device__ __forceinline__ void mbarrier_expect_tx(std::uint64_t* bar, std::uint32_t bytes) {
  asm volatile("mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [%0], %1;\n" ::"r"(smem_u32(bar)), "r"(bytes)
               : "memory");
}

// The box at coordinates (c0 .. c3) of `map` into shared memory at dst
// (1024-byte aligned for the 128-byte swizzle to match the stage layout),
// completing its bytes on bar. `map` is the generic address of a kernel
// parameter (__grid_constant__).
__device__ __forceinline__ void tma_load_4d(void* dst, const CUtensorMap* map, int c0, int c1, int c2, int c3,
                                            std::uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, "
      "%5}], [%6];\n" ::"r"(smem_u32(dst)),
      "l"(reinterpret_cast<std::uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(smem_u32(bar))
      : "memory");
}

// One 16-slot box of one head and page: its coordinates in map order.
__device__ __forceinline__ void tma_load_box(void* dst, const CUtensorMap* map, const WideKv& kv, int col, int slot,
                                             int head, int page, std::uint64_t* bar) {
  auto at = [&](int dim) { return kv.slot_dim == dim ? slot : kv.head_dim_pos == dim ? head : page; };
  tma_load_4d(dst, map, col, at(1), at(2), at(3), bar);
}

#endif

}  // namespace codec::cuda
