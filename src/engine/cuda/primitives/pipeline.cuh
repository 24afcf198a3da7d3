#pragma once
// The synchronisation of a warp-specialised kernel (sm_90): shared-memory
// mbarriers that a producer's cp.async copies and the consumers' releases
// arrive on, and the register split between producer and consumer
// warpgroups. Used by the wide PAC kernel (kernels/pac_wide.cuh); the twin of
// ptx.cuh's copies and wgmma.cuh's tensor-core instructions.
//
// An mbarrier counts arrivals towards an expected count; when they are all in,
// its phase completes and the next one begins. A waiter names the phase by
// its parity: the k-th use of a barrier (k = 0, 1, ...) completes phase k, so
// a consumer waits for parity k & 1. A producer waiting for a buffer to be
// released waits for parity (k & 1) ^ 1: for k = 0 that names the phase before
// the first, which counts as complete, so its first fill does not wait.
#include <cstdint>

#include "engine/cuda/primitives/ptx.cuh"

namespace codec::cuda {

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900

__device__ __forceinline__ void mbarrier_init(std::uint64_t* bar, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_u32(bar)), "r"(count) : "memory");
}
// Makes the initialisations visible before any thread arrives (then a barrier).
__device__ __forceinline__ void mbarrier_init_fence() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
__device__ __forceinline__ void mbarrier_arrive(std::uint64_t* bar) {
  asm volatile("{\n.reg .b64 state;\nmbarrier.arrive.shared::cta.b64 state, [%0];\n}\n" ::"r"(smem_u32(bar))
               : "memory");
}
// One arrival once every cp.async this thread issued before has landed; the
// barrier's expected count includes it (noinc).
__device__ __forceinline__ void mbarrier_arrive_on_copies(std::uint64_t* bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(smem_u32(bar)) : "memory");
}
// Blocks until the phase of the given parity has completed. Acquire: the
// writes released by its arrivals (the copies, for a producer's barrier) are
// visible to this thread afterwards.
__device__ __forceinline__ void mbarrier_wait(std::uint64_t* bar, std::uint32_t parity) {
  asm volatile(
      "{\n.reg .pred done;\n"
      "wait_%=:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra wait_%=;\n"
      "}\n" ::"r"(smem_u32(bar)),
      "r"(parity)
      : "memory");
}

// A barrier of `count` threads (whole warps) on named barrier `id` (1-15; 0
// is __syncthreads'): a warpgroup's own, beside the block's others.
__device__ __forceinline__ void named_barrier_sync(int id, int count) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(count) : "memory");
}
// This thread's arrival at named barrier `id` of `count` threads, without waiting.
__device__ __forceinline__ void named_barrier_arrive(int id, int count) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(count) : "memory");
}

#endif

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
// Register reallocation between warpgroups (arch-specific sm_90a code only):
// a warpgroup gives registers back (dec) or takes them (inc) from those its
// block was launched with, in multiples of 8. The sum over warpgroups must
// stay within the launch's allocation, or an inc waits forever. ptxas
// allocates the code after an inc up to its new count.
template <int kRegs>
__device__ __forceinline__ void setmaxnreg_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegs));
}
template <int kRegs>
__device__ __forceinline__ void setmaxnreg_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegs));
}

#endif

}  // namespace codec::cuda
