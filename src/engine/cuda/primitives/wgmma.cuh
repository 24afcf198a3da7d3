#pragma once
// Hopper warpgroup MMA (wgmma.mma_async) for the PAC kernel's many-row tasks
// and the wide kernel's. One warpgroup (4 warps) multiplies a 64-row tile: S =
// Q Kᵀ with both operands read by the tensor cores straight from shared
// memory (64-token tiles in the PAC kernel, 32 at D = 256, 128 in the wide
// one), then O += P
// V with P in registers (the S accumulators, rounded to 16 bits) and V from
// shared memory, transposed by the hardware. Compared with mma.sync, whose
// B fragments every warp loads with ldmatrix, each K and V byte leaves shared
// memory once per tile instead of once per warp: at 64 rows the ldmatrix
// traffic (~147 KB per 64-token tile at D = 128) bound the mma.sync path to
// ~160 TFLOP/s, below the tensor cores and the HBM it overlaps with.
//
// wgmma exists only in arch-specific sm_90a code (PTX ISA 8.0); every other
// target (sm_80, the generic sm_90) compiles CODEC_WGMMA = 0 and runs all tasks
// on the mma.sync path, with the same results up to fp32 summation order.
//
// Operand layout (kernel_traits.cuh, tile_offset): a [rows][D] tile is stored as D / 64
// column blocks of [rows][64] elements, each row 128 bytes with its 16-byte
// chunks XOR-swizzled by row % 8. That is exactly the 128-byte swizzle mode
// when a block starts on a 1024-byte boundary: the hardware XORs address bits
// [4:7) with bits [7:10), which for 128-byte rows are row % 8.
//   K-major operands (Q as A, K as B: the reduction dim d is contiguous): 8-row
//     core-matrix groups 1024 bytes apart (SBO); a k16 step is the 32 bytes at
//     (k % 64) · 2 of column block k / 64 (start address advanced inside the
//     swizzle atom, the hardware applies the XOR); LBO is unused.
//   MN-major operand (V as B: the output dim d is contiguous, the reduction dim
//     is tokens): 64-element column blocks LBO = tile tokens · 128 bytes apart,
//     8-token groups SBO = 1024 bytes apart; a k16 step is 16 tokens = 2048 bytes.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define CODEC_WGMMA 1
#else
#define CODEC_WGMMA 0
#endif

namespace codec::cuda::wgmma {

#if CODEC_WGMMA

// Shared-memory matrix descriptor, 128-byte swizzle: start address, leading and
// stride byte offsets, each in 16-byte units; base offset 0 (1024-byte aligned atoms).
__device__ __forceinline__ std::uint64_t desc(std::uint32_t smem_addr, std::uint32_t lbo, std::uint32_t sbo) {
  return std::uint64_t((smem_addr & 0x3FFFF) >> 4) | std::uint64_t(lbo >> 4) << 16 | std::uint64_t(sbo >> 4) << 32 |
         std::uint64_t(1) << 62;
}

// The descriptor of the operand `bytes` (a multiple of 16) past d's. Only the
// start-address field moves, so only the low word is added to: the field holds
// address / 16 in 14 bits and shared memory ends below 2^18 bytes, so it never
// carries into the leading byte offset. One integer add per wgmma, where
// rebuilding the descriptor from an address takes about ten.
__device__ __forceinline__ std::uint64_t advance(std::uint64_t d, std::uint32_t bytes) {
  return (d & 0xFFFFFFFF00000000ull) | std::uint32_t(std::uint32_t(d) + (bytes >> 4));
}

// Orders this warpgroup's register accesses before the wgmmas that follow.
__device__ __forceinline__ void fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wait_all() { asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory"); }
// Waits until at most N committed groups of this warpgroup are in flight
// (groups complete in order: the older ones are done).
template <int N>
__device__ __forceinline__ void wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// Shared-memory writes of the generic proxy (cp.async included) become visible
// to the async proxy that wgmma reads through; each writer fences, then a barrier.
__device__ __forceinline__ void proxy_fence() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
// The compiler sees an accumulator as written when the wgmma is issued, not when
// wait_all returns: this empty asm, ordered after the wait, keeps reads of r after it.
__device__ __forceinline__ void fence_operand(float& r) { asm volatile("" : "+f"(r)::"memory"); }

// Sixteen accumulator operands from d[b]: the output lists are built from these.
#define CODEC_WGMMA_OUT16(b) \
    "+f"(d[(b) + 0]), "+f"(d[(b) + 1]), "+f"(d[(b) + 2]), "+f"(d[(b) + 3]), "+f"(d[(b) + 4]), "+f"(d[(b) + 5]), \
    "+f"(d[(b) + 6]), "+f"(d[(b) + 7]), "+f"(d[(b) + 8]), "+f"(d[(b) + 9]), "+f"(d[(b) + 10]), "+f"(d[(b) + 11]), \
    "+f"(d[(b) + 12]), "+f"(d[(b) + 13]), "+f"(d[(b) + 14]), "+f"(d[(b) + 15])

// Per accumulator count R = N / 2: the register list, the output operands, the
// rest of the instruction (the scale-d predicate p is set from an input:
// mma_ss's scale_d, 0 to start a product; 1 for mma_rs, which always
// accumulates), and setp.
#define CODEC_WGMMA_D16 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}"
#define CODEC_WGMMA_D16_OUT CODEC_WGMMA_OUT16(0)
#define CODEC_WGMMA_D16_SS "%16, %17, p, 1, 1, 0, 0;\n"  // a-desc, b-desc, scale-d (%18)
#define CODEC_WGMMA_D16_P "setp.ne.b32 p, %18, 0;\n"

#define CODEC_WGMMA_D32 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}"
#define CODEC_WGMMA_D32_OUT CODEC_WGMMA_OUT16(0), CODEC_WGMMA_OUT16(16)
#define CODEC_WGMMA_D32_SS "%32, %33, p, 1, 1, 0, 0;\n"  // a-desc, b-desc, scale-d (%34)
#define CODEC_WGMMA_D32_RS "{%32, %33, %34, %35}, %36, p, 1, 1, 1;\n"  // a, b-desc (MN-major), scale-d (%37)
#define CODEC_WGMMA_D32_P "setp.ne.b32 p, %34, 0;\n"
#define CODEC_WGMMA_D32_PR "setp.ne.b32 p, %37, 0;\n"

#define CODEC_WGMMA_D64 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}"
#define CODEC_WGMMA_D64_OUT CODEC_WGMMA_OUT16(0), CODEC_WGMMA_OUT16(16), CODEC_WGMMA_OUT16(32), CODEC_WGMMA_OUT16(48)
#define CODEC_WGMMA_D64_SS "%64, %65, p, 1, 1, 0, 0;\n"  // a-desc, b-desc, scale-d (%66)
#define CODEC_WGMMA_D64_P "setp.ne.b32 p, %66, 0;\n"
#define CODEC_WGMMA_D64_RS "{%64, %65, %66, %67}, %68, p, 1, 1, 1;\n"  // a, b-desc (MN-major), scale-d (%69)
#define CODEC_WGMMA_D64_PR "setp.ne.b32 p, %69, 0;\n"

#define CODEC_WGMMA_SS(N, R, TY)                                                                        \
  asm volatile("{\n.reg .pred p;\n" CODEC_WGMMA_D##R##_P "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." TY \
               "." TY " " CODEC_WGMMA_D##R ", " CODEC_WGMMA_D##R##_SS "}\n"                              \
               : CODEC_WGMMA_D##R##_OUT                                                                 \
               : "l"(a), "l"(b), "r"(scale_d))
#define CODEC_WGMMA_RS(N, R, TY)                                                                        \
  asm volatile("{\n.reg .pred p;\n" CODEC_WGMMA_D##R##_PR "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." TY \
               "." TY " " CODEC_WGMMA_D##R ", " CODEC_WGMMA_D##R##_RS "}\n"                              \
               : CODEC_WGMMA_D##R##_OUT                                                                 \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(1))

// d[0 .. N/2) = A · B + (scale_d ? d : 0) for a 64×16 A (K-major, descriptor
// a) and a 16×N B (K-major, descriptor b). N = 32, 64 or 128 (the tile
// tokens). scale_d = 0 starts a product without zeroing d by ordinary writes,
// which ptxas would order after every wgmma still in flight.
template <int N, typename T>
__device__ __forceinline__ void mma_ss(float* d, std::uint64_t a, std::uint64_t b, int scale_d = 1) {
  static_assert(N == 32 || N == 64 || N == 128, "S tiles are 32, 64 or 128 tokens wide");
  constexpr bool f16 = std::is_same_v<T, __half>;
  if constexpr (N == 32) {
    if constexpr (f16) CODEC_WGMMA_SS(32, 16, "f16"); else CODEC_WGMMA_SS(32, 16, "bf16");
  } else if constexpr (N == 64) {
    if constexpr (f16) CODEC_WGMMA_SS(64, 32, "f16"); else CODEC_WGMMA_SS(64, 32, "bf16");
  } else {
    if constexpr (f16) CODEC_WGMMA_SS(128, 64, "f16"); else CODEC_WGMMA_SS(128, 64, "bf16");
  }
}

// d[0 .. N/2) += A · B for a 64×16 A in registers (the mma.m16n8k16 A-fragment
// layout, per warp 16 rows) and a 16×N B (MN-major, descriptor b). N = 64 or 128.
template <int N, typename T>
__device__ __forceinline__ void mma_rs(float* d, const std::uint32_t (&a)[4], std::uint64_t b) {
  static_assert(N == 64 || N == 128, "P·V steps are 64 or 128 output columns wide");
  constexpr bool f16 = std::is_same_v<T, __half>;
  if constexpr (N == 64) {
    if constexpr (f16) CODEC_WGMMA_RS(64, 32, "f16"); else CODEC_WGMMA_RS(64, 32, "bf16");
  } else {
    if constexpr (f16) CODEC_WGMMA_RS(128, 64, "f16"); else CODEC_WGMMA_RS(128, 64, "bf16");
  }
}

#undef CODEC_WGMMA_D16
#undef CODEC_WGMMA_D16_OUT
#undef CODEC_WGMMA_D16_P
#undef CODEC_WGMMA_D16_SS
#undef CODEC_WGMMA_D32
#undef CODEC_WGMMA_D32_OUT
#undef CODEC_WGMMA_D32_P
#undef CODEC_WGMMA_D32_PR
#undef CODEC_WGMMA_D32_RS
#undef CODEC_WGMMA_D32_SS
#undef CODEC_WGMMA_D64
#undef CODEC_WGMMA_D64_OUT
#undef CODEC_WGMMA_D64_P
#undef CODEC_WGMMA_D64_PR
#undef CODEC_WGMMA_D64_RS
#undef CODEC_WGMMA_D64_SS
#undef CODEC_WGMMA_OUT16
#undef CODEC_WGMMA_RS
#undef CODEC_WGMMA_SS

#endif  // CODEC_WGMMA

}  // namespace codec::cuda::wgmma
