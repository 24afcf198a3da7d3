// How fast the GPU serves a burst of reads shaped like a small tree's PAC
// launch (docs/DESIGN_NOTES.md, "What bounds the tiny trees"): every block
// brings its share of a buffer into shared memory at once, and the launch is
// timed with CUDA events after an L2 flush by a read, median of 20.
//
// A block's share is `rows` rows of 256 bytes, one KV head's row of a token:
// with --pattern strided they lie 2 KiB apart, as in an NHD page of 8 KV
// heads, block b reading head b % 8; with contiguous they are back to back.
// Three ways to move them:
//   cpasync  128 threads, 16-byte cp.async each, all issued before one wait
//            (PAC's loader);
//   bulk     one 256-byte cp.async.bulk (the TMA unit) per row, issued by
//            the block's first warp onto one mbarrier;
//   ldg      16-byte loads into registers, no shared memory.
// Each line prints the launch's time and the bytes it moved over that time.
//
//   cmake --build build-gpu --target bench_burst_read && ./build-gpu/bench/bench_burst_read
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>

#include "codec/engine/cuda_check.hpp"
#include "flushed_timer.hpp"

namespace {

constexpr int kThreads = 128;
constexpr int kRowBytes = 256;
constexpr int kHeads = 8;
enum Method { kCpAsync, kBulk, kLdg };

struct Burst {
  const char* src;
  int rows;          // rows a block reads
  bool strided;      // rows 2 KiB apart (head b % 8 of an NHD pool) or contiguous
  unsigned* sink;    // written only on an impossible value, so no load can be dropped
};

__device__ const char* row_address(const Burst& p, int r) {
  if (!p.strided) return p.src + (std::size_t(blockIdx.x) * p.rows + r) * kRowBytes;
  const std::size_t token = std::size_t(blockIdx.x / kHeads) * p.rows + r;
  return p.src + (token * kHeads + blockIdx.x % kHeads) * kRowBytes;
}

__device__ std::uint32_t smem_u32(const void* p) { return static_cast<std::uint32_t>(__cvta_generic_to_shared(p)); }

template <Method M>
__global__ void __launch_bounds__(kThreads) burst(const Burst p) {
  extern __shared__ __align__(128) unsigned char smem[];
  if constexpr (M == kCpAsync) {
    constexpr int kChunks = kRowBytes / 16;
    for (int i = threadIdx.x; i < p.rows * kChunks; i += kThreads)
      asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(smem_u32(smem + 16 * i)),
                   "l"(row_address(p, i / kChunks) + 16 * (i % kChunks)));
    asm volatile("cp.async.commit_group;\ncp.async.wait_group 0;\n" ::: "memory");
    __syncthreads();
  } else if constexpr (M == kBulk) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
    __trap();  // main() runs it on sm_90+ only
#else
    __shared__ __align__(8) std::uint64_t bar;
    if (threadIdx.x == 0) {
      asm volatile("mbarrier.init.shared.b64 [%0], 1;\n" ::"r"(smem_u32(&bar)));
      asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
    }
    __syncthreads();
    if (threadIdx.x < 32) {
      if (threadIdx.x == 0)
        asm volatile("mbarrier.arrive.expect_tx.shared.b64 _, [%0], %1;\n" ::"r"(smem_u32(&bar)),
                     "r"(p.rows * kRowBytes));
      __syncwarp();
      for (int r = threadIdx.x; r < p.rows; r += 32)
        asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(
                         smem_u32(smem + r * kRowBytes)),
                     "l"(row_address(p, r)), "r"(kRowBytes), "r"(smem_u32(&bar))
                     : "memory");
    }
    std::uint32_t done = 0;
    while (!done)
      asm volatile(
          "{\n .reg .pred q;\n mbarrier.try_wait.parity.shared.b64 q, [%1], 0;\n selp.u32 %0, 1, 0, q;\n}\n"
          : "=r"(done)
          : "r"(smem_u32(&bar))
          : "memory");
#endif
  } else {
    constexpr int kChunks = kRowBytes / 16;
    unsigned acc = 0;
    for (int i = threadIdx.x; i < p.rows * kChunks; i += kThreads) {
      const uint4 x = *reinterpret_cast<const uint4*>(row_address(p, i / kChunks) + 16 * (i % kChunks));
      acc ^= x.x ^ x.y ^ x.z ^ x.w;
    }
    if (acc == 0x9e3779b9u) *p.sink = acc;
    return;
  }
  if (smem[threadIdx.x] == 0xAB && smem[threadIdx.x + 1] == 0xCD) *p.sink = 1;  // the buffer holds zeros
}

}  // namespace

static int run() {
  codec::bench::FlushedTimer timer;
  const int sms = timer.sms();
  int major = 0;
  CODEC_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0));
  constexpr std::size_t kPoolBytes = std::size_t(512) << 20;
  char* pool = nullptr;
  unsigned* sink = timer.sink();
  CODEC_CUDA_CHECK(cudaMalloc(&pool, kPoolBytes));
  CODEC_CUDA_CHECK(cudaMemset(pool, 0, kPoolBytes));
  for (auto* k : {burst<kCpAsync>, burst<kBulk>, burst<kLdg>})
    CODEC_CUDA_CHECK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, 113 * 1024));
  auto time_us = [&](auto launch) { return timer.median_us(launch, 20, 5); };
  std::printf("empty launch: %.1f us\n", time_us([&] { burst<kLdg><<<sms, kThreads>>>(Burst{pool, 0, false, sink}); }));
  std::printf("%-8s %-10s %7s %9s %10s %9s %8s\n", "method", "pattern", "blocks", "KiB/blk", "total MB", "time us",
              "TB/s");
  struct Shape {
    int blocks, rows;
  };
  // 12.6 MB (depth:2's unique KV) cut four ways, twice and four times that, and a streaming-sized total.
  const Shape shapes[] = {{264, 192}, {528, 96}, {1056, 48}, {132, 384}, {264, 384}, {528, 384}, {2112, 384}};
  for (const bool strided : {true, false})
    for (const Shape s : shapes)
      for (const Method m : {kCpAsync, kBulk, kLdg}) {
        if (m == kBulk && major < 9) continue;  // cp.async.bulk is sm_90's
        const Burst p{pool, s.rows, strided, sink};
        const int smem = m == kLdg ? 0 : s.rows * kRowBytes;
        const float us = time_us([&] {
          if (m == kCpAsync) burst<kCpAsync><<<s.blocks, kThreads, smem>>>(p);
          else if (m == kBulk) burst<kBulk><<<s.blocks, kThreads, smem>>>(p);
          else burst<kLdg><<<s.blocks, kThreads>>>(p);
        });
        const double bytes = double(s.blocks) * s.rows * kRowBytes;
        std::printf("%-8s %-10s %7d %9d %10.1f %9.1f %8.2f\n", m == kCpAsync ? "cpasync" : m == kBulk ? "bulk" : "ldg",
                    strided ? "strided" : "contiguous", s.blocks, s.rows * kRowBytes / 1024, bytes / 1e6, us,
                    bytes / us / 1e6);
      }
  return 0;
}

int main() {
  try {
    return run();
  } catch (const codec::Error& e) {
    std::fprintf(stderr, "bench_burst_read: %s\n", e.what());
    return 1;
  }
}
