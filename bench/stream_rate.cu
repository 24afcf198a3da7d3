// How fast an SM streams KV into shared memory through a ring of cp.async
// stages, by the bytes it keeps in flight and the number of SMs streaming at
// once: the rate a PAC block's copies allow it (docs/DESIGN_NOTES.md, "A
// small task's tile", "What bounds batch:64").
//
// Each block streams its own 4 MiB: 256-byte rows 2 KiB apart (head b % 8 of
// an NHD pool of 8 KV heads), 128 rows a stage (a 64-token K and V tile of
// PAC at head_dim 128, 32 KiB), with PAC's loop: refill the stage the last
// tile used, then wait until the oldest stage has landed, so that all
// `stages` tiles are in flight while the block waits. No compute: this is the
// copy path alone. One block an SM (its shared memory keeps a second out), or
// two with three stages each on every SM (PAC's occupancy at head_dim 128).
// Timed with CUDA events after an L2 flush by a read, median of 7.
//
//   cmake --build build-gpu --target bench_stream_rate && ./build-gpu/bench/bench_stream_rate
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>

#include "codec/engine/cuda_check.hpp"
#include "engine/cuda/primitives/ptx.cuh"  // PAC's cp.async wrappers
#include "flushed_timer.hpp"

namespace {

constexpr int kThreads = 128;
constexpr int kRowBytes = 256;
constexpr int kHeads = 8;
constexpr int kStageRows = 128;  // 32 KiB
constexpr int kStageBytes = kStageRows * kRowBytes;
constexpr int kChunks = kRowBytes / 16;
constexpr int kBlockRows = (4 << 20) / kRowBytes;
constexpr int kTiles = kBlockRows / kStageRows;

struct Stream {
  const char* src;
  unsigned* sink;  // written only on an impossible value, so no copy can be dropped
};

// Tile t of this block into stage s: thread i copies chunk i % 16 of rows i / 16 + 8k.
__device__ __forceinline__ void copy_tile(const Stream& p, unsigned char* smem, int t, int s) {
  const std::size_t token0 = std::size_t(blockIdx.x / kHeads) * kBlockRows + std::size_t(t) * kStageRows;
  const char* src = p.src + (token0 * kHeads + blockIdx.x % kHeads) * kRowBytes + 16 * (threadIdx.x % kChunks);
  unsigned char* dst = smem + s * kStageBytes + 16 * threadIdx.x;
#pragma unroll
  for (int k = 0; k < kStageRows * kChunks / kThreads; ++k)
    codec::cuda::cp_async_16(dst + k * kThreads * 16,
                             src + std::size_t(threadIdx.x / kChunks + k * (kThreads / kChunks)) * kHeads * kRowBytes,
                             true);
}

template <int kStages>
__global__ void __launch_bounds__(kThreads) stream(const Stream p) {
  extern __shared__ __align__(128) unsigned char smem[];
  unsigned acc = 0;
#pragma unroll
  for (int t = 0; t < kStages - 1; ++t) {
    copy_tile(p, smem, t, t);
    codec::cuda::cp_async_commit();
  }
  for (int t = 0; t < kTiles; ++t) {
    __syncthreads();  // every thread is done with tile t - 1: its stage may be refilled
    if (t + kStages - 1 < kTiles) copy_tile(p, smem, t + kStages - 1, (t + kStages - 1) % kStages);
    codec::cuda::cp_async_commit();
    codec::cuda::cp_async_wait<kStages - 1>();
    __syncthreads();  // tile t has landed for every thread
    acc += smem[(t % kStages) * kStageBytes + threadIdx.x];
  }
  if (acc == 0x9e3779b9u) *p.sink = acc;  // the pool holds zeros
}

}  // namespace

static int run() {
  codec::bench::FlushedTimer timer;
  const int sms = timer.sms();
  const int max_blocks = 2 * sms;
  const std::size_t pool_bytes = std::size_t((max_blocks + kHeads - 1) / kHeads) * kBlockRows * kHeads * kRowBytes;
  char* pool = nullptr;
  CODEC_CUDA_CHECK(cudaMalloc(&pool, pool_bytes));
  CODEC_CUDA_CHECK(cudaMemset(pool, 0, pool_bytes));
  // Shared memory a block asks for: its ring, and past half an SM where one block an SM is meant.
  constexpr int kOneBlockSmem = 120 * 1024;
  auto kernel_of = [](int stages) {
    switch (stages) {
      case 2: return stream<2>;
      case 3: return stream<3>;
      case 4: return stream<4>;
      case 5: return stream<5>;
      case 6: return stream<6>;
      default: return stream<7>;
    }
  };
  for (int stages = 2; stages <= 7; ++stages)
    CODEC_CUDA_CHECK(cudaFuncSetAttribute(kernel_of(stages), cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          std::max(kOneBlockSmem, stages * kStageBytes)));
  auto time_us = [&](auto launch) { return timer.median_us(launch, 7, 2); };
  std::printf("%-4s %-6s %-7s %-12s %9s %9s %12s\n", "SMs", "blk/SM", "stages", "KiB/SM ring", "time us", "TB/s",
              "GB/s per SM");
  const int sm_counts[] = {8, 16, 33, 66, 99, sms};
  struct Config {
    int per_sm, stages;
  };
  // Two blocks an SM only on every SM: on fewer, the scheduler would spread them one an SM.
  const Config configs[] = {{1, 2}, {1, 3}, {1, 4}, {1, 5}, {1, 6}, {1, 7}, {2, 3}};
  for (const int n : sm_counts)
    for (const Config c : configs) {
      if (c.per_sm == 2 && n != sms) continue;
      const int blocks = n * c.per_sm;
      const int smem = c.per_sm == 1 ? std::max(kOneBlockSmem, c.stages * kStageBytes) : c.stages * kStageBytes;
      const Stream p{pool, timer.sink()};
      const float us = time_us([&] {
        kernel_of(c.stages)<<<blocks, kThreads, smem>>>(p);
        CODEC_CUDA_CHECK_LAUNCH("stream", nullptr);
      });
      const double bytes = double(blocks) * kBlockRows * kRowBytes;
      std::printf("%-4d %-6d %-7d %-12d %9.1f %9.2f %12.1f\n", n, c.per_sm, c.stages,
                  c.per_sm * c.stages * kStageBytes / 1024, us, bytes / us / 1e6, bytes / us / 1e3 / n);
    }
  return 0;
}

int main() {
  try {
    return run();
  } catch (const codec::Error& e) {
    std::fprintf(stderr, "bench_stream_rate: %s\n", e.what());
    return 1;
  }
}
