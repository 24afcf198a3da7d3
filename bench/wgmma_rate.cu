// How fast Hopper's tensor cores run wgmma m64nNk16 (bf16 in, fp32 out) with
// both operands in shared memory, by N: the rate a leaf tile computed
// transposed would get (Sᵀ = K·Qᵀ and Oᵀ = Vᵀ·Pᵀ with the leaf's rows as
// N = 8; docs/DESIGN_NOTES.md, "Leaves inside the wide blocks"), against
// the N = 128 of the wide kernel's tiles. One block per SM, each of its
// warpgroups issuing groups of 8 wgmmas (a head_dim of 128) on its own
// accumulators, two groups in flight; A read K-major or M-major (transposed,
// as Vᵀ would be). Shared memory holds zeros: only the time is of interest.
// Each line: the SM cycles per wgmma over the block's warpgroups, and the
// tensor rate that gives over all SMs at the measured clock.
//
//   cmake --build build-gpu --target bench_wgmma_rate && ./build-gpu/bench/bench_wgmma_rate
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "codec/engine/cuda_check.hpp"
#include "engine/cuda/primitives/wgmma.cuh"

namespace {

constexpr int kSteps = 8;             // k16 steps a group: a head_dim of 128
constexpr int kOperandBytes = 32768;  // A's and B's regions, 1024-byte aligned

#if CODEC_WGMMA
using codec::cuda::wgmma::advance;
using codec::cuda::wgmma::desc;

// d[0 .. N/2) += A · B, both from shared memory; kTransA: A M-major.
template <int N, int kTransA>
__device__ __forceinline__ void mma(float* d, std::uint64_t a, std::uint64_t b) {
  if constexpr (N == 8) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %6, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 {%0, %1, %2, %3}, %4, %5, p, 1, 1, %7, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "l"(a), "l"(b), "r"(1), "n"(kTransA));
  } else if constexpr (N == 16) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %10, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7}, %8, %9, p, 1, 1, "
        "%11, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
        : "l"(a), "l"(b), "r"(1), "n"(kTransA));
  } else {
    static_assert(kTransA == 0, "the library's wrappers read A K-major");
    codec::cuda::wgmma::mma_ss<N, __nv_bfloat16>(d, a, b, 1);
  }
}
#endif

template <int N, int kTransA>
__global__ void __launch_bounds__(256, 1) rate(int groups, long long* cycles, float* sink) {
#if CODEC_WGMMA
  extern __shared__ __align__(1024) unsigned char smem[];
  for (int i = threadIdx.x; i < 2 * kOperandBytes / 16; i += blockDim.x)
    reinterpret_cast<uint4*>(smem)[i] = make_uint4(0, 0, 0, 0);
  codec::cuda::wgmma::proxy_fence();
  __syncthreads();
  const std::uint32_t base = static_cast<std::uint32_t>(__cvta_generic_to_shared(smem));
  const std::uint64_t a = desc(base, kTransA ? 8192 : 16, 1024), b = desc(base + kOperandBytes, 16, 1024);
  float d[N / 2] = {};
  const long long t0 = clock64();
  for (int g = 0; g < groups; ++g) {
    codec::cuda::wgmma::fence();
#pragma unroll
    for (int k = 0; k < kSteps; ++k)  // K-major: 32 bytes a step within a 64-element block; M-major: 16 rows
      mma<N, kTransA>(d, advance(a, kTransA ? 2048 * k : (k / 4) * 8192 + 32 * (k % 4)),
                      advance(b, (k / 4) * 8192 + 32 * (k % 4)));
    codec::cuda::wgmma::commit();
    codec::cuda::wgmma::wait<1>();
  }
  codec::cuda::wgmma::wait<0>();
  const long long t1 = clock64();
  float acc = 0;
#pragma unroll
  for (int i = 0; i < N / 2; ++i) acc += d[i];
  if (acc == 1.f) *sink = acc;  // never: the products are of zeros
  if (threadIdx.x == 0) cycles[blockIdx.x] = t1 - t0;
#else
  (void)groups, (void)cycles, (void)sink;
  __trap();  // main() runs it on sm_90 with an sm_90a build only
#endif
}

// Whether the device code was built with wgmma (an sm_90a image).
__global__ void wgmma_built(int* out) { *out = CODEC_WGMMA; }

template <int N, int kTransA>
void measure(int sms, int warpgroups, long long* cycles, float* sink) {
  constexpr int kGroups = 4096;
  auto kernel = rate<N, kTransA>;
  CODEC_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 2 * kOperandBytes));
  kernel<<<sms, 128 * warpgroups, 2 * kOperandBytes>>>(kGroups, cycles, sink);  // warm-up
  CODEC_CUDA_CHECK_LAUNCH("rate", nullptr);
  cudaEvent_t start, stop;
  CODEC_CUDA_CHECK(cudaEventCreate(&start));
  CODEC_CUDA_CHECK(cudaEventCreate(&stop));
  CODEC_CUDA_CHECK(cudaEventRecord(start));
  kernel<<<sms, 128 * warpgroups, 2 * kOperandBytes>>>(kGroups, cycles, sink);
  CODEC_CUDA_CHECK_LAUNCH("rate", nullptr);
  CODEC_CUDA_CHECK(cudaEventRecord(stop));
  CODEC_CUDA_CHECK(cudaEventSynchronize(stop));
  float ms = 0;
  CODEC_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
  std::vector<long long> host(sms);
  CODEC_CUDA_CHECK(cudaMemcpy(host.data(), cycles, sms * sizeof(long long), cudaMemcpyDeviceToHost));
  const long long most = *std::max_element(host.begin(), host.end());
  const double wgmmas = double(kGroups) * kSteps * warpgroups;  // a block's
  const double per = double(most) / wgmmas, ghz = double(most) / (ms * 1e6);
  const double tflops = 2.0 * 64 * N * 16 * wgmmas * sms / (ms * 1e9);
  std::printf("m64n%-3d A %s  %d warpgroup%s  %7.2f cycles a wgmma  %6.0f FLOP/cycle/SM  %6.1f TFLOP/s  (%.2f GHz)\n", N,
              kTransA ? "M-major" : "K-major", warpgroups, warpgroups > 1 ? "s" : " ", per, 2.0 * 64 * N * 16 / per,
              tflops, ghz);
  CODEC_CUDA_CHECK(cudaEventDestroy(start));
  CODEC_CUDA_CHECK(cudaEventDestroy(stop));
}

}  // namespace

static int run() {
  int devices = 0, device = 0, major = 0, minor = 0, sms = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("bench_wgmma_rate: no CUDA device here (it needs an sm_90 device and a build for sm_90a)\n");
    return 1;
  }
  CODEC_CUDA_CHECK(cudaGetDevice(&device));
  CODEC_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  CODEC_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
  CODEC_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  long long* cycles = nullptr;
  float* sink = nullptr;
  int* built = nullptr;
  CODEC_CUDA_CHECK(cudaMalloc(&cycles, sms * sizeof(long long)));
  CODEC_CUDA_CHECK(cudaMalloc(&sink, sizeof(float)));
  CODEC_CUDA_CHECK(cudaMallocManaged(&built, sizeof(int)));
  *built = 0;
  if (major == 9 && minor == 0) {
    wgmma_built<<<1, 1>>>(built);
    CODEC_CUDA_CHECK_LAUNCH("wgmma_built", nullptr);
    CODEC_CUDA_CHECK(cudaDeviceSynchronize());
  }
  if (*built == 0) {
    std::printf("bench_wgmma_rate: needs an sm_90 device and a build for sm_90a\n");
    return 0;
  }
  for (int wg = 1; wg <= 2; ++wg) {
    measure<8, 0>(sms, wg, cycles, sink);
    measure<8, 1>(sms, wg, cycles, sink);
    measure<16, 0>(sms, wg, cycles, sink);
    measure<16, 1>(sms, wg, cycles, sink);
    measure<32, 0>(sms, wg, cycles, sink);
    measure<64, 0>(sms, wg, cycles, sink);
    measure<128, 0>(sms, wg, cycles, sink);
  }
  CODEC_CUDA_CHECK(cudaFree(cycles));
  CODEC_CUDA_CHECK(cudaFree(sink));
  CODEC_CUDA_CHECK(cudaFree(built));
  return 0;
}

int main() {
  try {
    return run();
  } catch (const codec::Error& e) {
    std::fprintf(stderr, "bench_wgmma_rate: %s\n", e.what());
    return 1;
  }
}
